"""`rcb train`: train a bidding policy on a market's train days into a run directory."""

from __future__ import annotations

import ast
import json
from enum import StrEnum
from functools import cache
from importlib.util import find_spec
from itertools import pairwise
from pathlib import Path
from typing import Annotated, Any

import typer

from model.contract import Setting
from rcb.commands.common import check_output_dir, fail, plural, print_json, progress, user_errors
from training.rl.resume_choices import BEFORE_THE_OPTIONS

RUN_FILE = "run.json"


class Algo(StrEnum):
    """``--algo``: the SAC variants :data:`training.rl.sac.CURRICULA` trains (torch-free here, for ``--help``)."""

    hard = "hard"
    crl = "crl"
    cbrl = "cbrl"
    uscb = "uscb"
    rcpo = "rcpo"


class ReferenceChoice(StrEnum):
    """``--reference``: :data:`training.rl.sac.REFERENCES`."""

    pid = "pid"
    plan = "plan"


class BootstrapBeliefChoice(StrEnum):
    """``--bootstrap-belief``: :data:`training.rl.sac.BOOTSTRAP_BELIEFS`."""

    shared = "shared"
    ahead = "ahead"


class SelectionDaysChoice(StrEnum):
    """``--selection-days``: :data:`training.rl.sac.SELECTION_DAYS`."""

    all = "all"
    home = "home"


class SelectionEpochChoice(StrEnum):
    """``--selection-epoch``: :data:`training.rl.sac.SELECTION_EPOCHS`."""

    best = "best"
    last = "last"


@cache
def sac_defaults() -> dict[str, Any]:
    """``SACConfig``'s field defaults, read from its source so that ``rcb train --help`` does not import torch."""
    spec = find_spec("training.rl.sac")
    if spec is None or spec.origin is None:
        return {}
    tree = ast.parse(Path(spec.origin).read_text())
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "SACConfig":
            out = {}
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and item.value is not None:
                    try:
                        out[item.target.id] = ast.literal_eval(item.value)
                    except ValueError:
                        continue
            return out
    return {}


def _default(name: str) -> Any:
    """The option's default: SACConfig's own (None, meaning "SACConfig's", if its source cannot be read)."""
    return sac_defaults().get(name)


RESUMED_CHOICES: dict[str, Any] = {
    **BEFORE_THE_OPTIONS,
    "n_step": _default("n_step"),
    "correction_penalty": _default("correction_penalty"),
    "lr_milestones": _default("lr_milestones"),
}
"""The options a resumed run keeps from its run.json when they are not given, with the value a run recorded
before the option existed had (the behaviour of that time)."""


def _default_select_from_when_started(run: dict[str, Any]) -> bool:
    """Whether a finished run's recorded ``select_from`` is the default's (:meth:`SACConfig.resolve`) for some epoch
    count it passed through (a run started shorter and grown by ``--resume``), not a choice of its own."""
    from training.rl.sac import SACConfig

    config = run.get("config", {})
    recorded = config.get("select_from", 0)
    epochs = range(1, len(run.get("history", [])) + 1)
    return bool(recorded) and any(
        SACConfig(algo=config["algo"], epochs=e).resolve(run["setting"]).select_from == recorded for e in epochs
    )


def parse_milestones(text: str) -> tuple[int, ...]:
    """``--lr-milestones``: positive, strictly increasing gradient steps (may be empty: a constant rate)."""
    try:
        steps = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ValueError(f"--lr-milestones: {text!r} is not a comma-separated list of gradient steps") from None
    if any(step <= 0 for step in steps) or any(b <= a for a, b in pairwise(steps)):
        raise ValueError(f"--lr-milestones: {text!r} must be positive and strictly increasing")
    return steps


def _given(ctx: typer.Context, name: str) -> bool:
    """Whether option ``name`` was given on the command line (or in the environment), not left at its default."""
    source = ctx.get_parameter_source(name)  # typer's own click enum (vendored since typer 0.20): compared by name
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def _check_resumable(out: Path, setting: Setting, algo: str, resume: bool) -> dict[str, Any] | None:
    """What a run directory allows, checked before the bar and the work start (training.rl.runs checks it again);
    the resumed run's config, or None for a new run."""
    run_file = out / RUN_FILE
    if not run_file.exists():
        if resume:
            raise ValueError(f"--resume: {out} holds no run ({RUN_FILE}) to continue; drop --resume to start one")
        return None
    if not resume:
        raise ValueError(f"{out} already holds a run; pass --resume to continue it or choose another --out")
    try:
        previous = json.loads(run_file.read_text())
        trained_setting, trained_algo = previous["setting"], previous["config"]["algo"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{run_file}: unreadable run record ({exc}); it cannot be resumed") from None
    if trained_setting != str(setting):
        raise ValueError(f"{out} was trained on other data or another setting; it cannot be resumed here")
    if trained_algo != algo:
        raise ValueError(f"{out} trains {trained_algo}, not {algo}")
    return previous["config"]


def train_command(
    ctx: typer.Context,
    data: Annotated[
        list[Path],
        typer.Option(
            "--data",
            help="Market directory (trains on its train split only). Repeat it to pool several markets' train days:"
            " the first is the home market, whose tuned PID a residual run corrects; model selection holds out"
            " each market's own validation days.",
        ),
    ],
    setting: Annotated[Setting, typer.Option("--setting", help="sc (L=1, no budget) or mc (per-day L, B).")],
    out: Annotated[Path, typer.Option("--out", help="Run directory to write.")],
    algo: Annotated[
        Algo,
        typer.Option(
            "--algo",
            help="hard (sparse indicator reward), crl (curriculum), cbrl (curriculum + posterior encoder),"
            " uscb (gamma^violation penalty) or rcpo (Lagrangian).",
        ),
    ] = Algo.cbrl,
    epochs: Annotated[int | None, typer.Option("--epochs", min=1, help="Training epochs.")] = _default("epochs"),
    seed: Annotated[
        int,
        typer.Option("--seed", min=0, help="Seeds networks, collection and sampling (a resumed run keeps its own)."),
    ] = 0,
    uscb_gamma: Annotated[
        float | None,
        typer.Option("--uscb-gamma", min=1.0, help="uscb: penalty base gamma."),
    ] = _default("uscb_gamma"),
    rcpo_learning_rate: Annotated[
        float | None,
        typer.Option(
            "--rcpo-learning-rate",
            min=0.0,
            help="rcpo: dual-ascent step.",
        ),
    ] = _default("rcpo_learning_rate"),
    updates_per_epoch: Annotated[
        int | None,
        typer.Option(
            "--updates-per-epoch",
            min=1,
            help="Gradient steps per epoch.",
        ),
    ] = _default("updates_per_epoch"),
    lr_milestones: Annotated[
        str | None,
        typer.Option(
            "--lr-milestones",
            help="Gradient steps at which every learning rate halves, comma-separated and increasing (with a larger"
            " --updates-per-epoch, scale them alike to keep the schedule's epochs). Default: "
            + ",".join(str(step) for step in _default("lr_milestones") or ())
            + ".",
            show_default=False,
        ),
    ] = None,
    auto_curriculum: Annotated[
        bool,
        typer.Option(
            "--auto-curriculum", help="crl/cbrl: learn each stage's ROI relaxation b_k (regret minimization)."
        ),
    ] = False,
    train_shielded: Annotated[
        bool,
        typer.Option(
            "--train-shielded",
            help="Residual runs around the PID: train (and select the epoch) behind the safety shield the service"
            " bids through, its default band around the run's controller; the critics value the shielded policy.",
        ),
    ] = False,
    residual: Annotated[
        bool | None,
        typer.Option(
            "--residual/--no-residual",
            help="Learn a correction of the PID tuned on the train days (ratio = PID's x exp(step x action)),"
            " not the control law itself. Default: residual for cbrl, not for the rivals.",
            show_default=False,
        ),
    ] = None,
    reference: Annotated[
        ReferenceChoice | None,
        typer.Option(
            "--reference",
            help="What a residual run corrects: pid (the PID tuned on the train days) or plan (the Bayesian planner"
            " tuned on them, each train day planned without its own scenario). Default: pid.",
            show_default=False,
        ),
    ] = None,
    action_step: Annotated[
        float | None,
        typer.Option("--action-step", min=0.01, max=2.0, help="Largest log-ratio move of one action."),
    ] = _default("action_step"),
    n_step: Annotated[
        int | None,
        typer.Option(
            "--n-step",
            min=1,
            max=48,
            help="Critic targets from n-step returns in the stages rewarded at the day's end (48: the whole day)."
            f" Default: {_default('n_step')}.",
            show_default=False,
        ),
    ] = None,
    buffer_episodes: Annotated[
        int | None,
        typer.Option(
            "--buffer-episodes",
            min=1,
            help="Replay capacity in whole episodes, the oldest let go first (a day's train days times"
            f" episodes per day are collected each epoch). Default: {_default('buffer_episodes')}.",
            show_default=False,
        ),
    ] = None,
    bootstrap_belief: Annotated[
        BootstrapBeliefChoice | None,
        typer.Option(
            "--bootstrap-belief",
            help="CBRL: the belief the critic's target reads at its bootstrap slot t+n: 'shared', the z drawn for"
            " slot t (the paper's Eq. 8); 'ahead', a z of the posterior at t+n, the belief the policy acts on there."
            f" Default: {_default('bootstrap_belief')}.",
            show_default=False,
        ),
    ] = None,
    correction_penalty: Annotated[
        float | None,
        typer.Option(
            "--correction-penalty",
            min=0.0,
            max=10.0,
            help="Residual runs: weight of the actor's pull toward its controller (w x mean|Q| x tanh(mean)^2)."
            f" Default: {_default('correction_penalty')}.",
            show_default=False,
        ),
    ] = None,
    relaxed_stages: Annotated[
        bool | None,
        typer.Option(
            "--relaxed-stages/--no-relaxed-stages",
            help="crl/cbrl: open with the paper's relaxed curriculum stages (b = 0.1, then 0.2); off: the original"
            " problem from the first epoch. Default: on.",
        ),
    ] = None,
    start_at_controller: Annotated[
        bool | None,
        typer.Option(
            "--start-at-controller/--no-start-at-controller",
            help="Residual runs: start the policy as its controller exactly and keep a trained epoch only where it"
            " beats the controller on the validation days. Default: on for a residual SC run, else off.",
        ),
    ] = None,
    roi_margin: Annotated[
        float | None,
        typer.Option(
            "--roi-margin",
            min=0.0,
            max=0.5,
            help="Rewards hold episodes to L x (1 + margin); L elsewhere. Default: 0.05 for a residual MC run, else 0.",
            show_default=False,
        ),
    ] = None,
    regime_spread: Annotated[
        float | None,
        typer.Option(
            "--regime-spread",
            min=0.0,
            max=1.0,
            help="Domain randomization: each training episode's prices and delivery are each scaled by"
            " exp(U(-spread, spread)); model selection plays the days unscaled. Default 0 (off).",
            show_default=False,
        ),
    ] = None,
    reference_spread: Annotated[
        float | None,
        typer.Option(
            "--reference-spread",
            min=0.0,
            max=1.0,
            help="A residual run's reference, randomized: each training episode corrects the PID's ratio times"
            " exp(U(-spread, spread)); model selection plays the PID as it is. Default 0 (off).",
            show_default=False,
        ),
    ] = None,
    bootstrap_days: Annotated[
        bool | None,
        typer.Option(
            "--bootstrap-days/--no-bootstrap-days",
            help="Each epoch, replay every train day as a Poisson(1) resample of its impressions (new luck in the"
            " day's regime); model selection plays the logged days. Default: on for cbrl in SC, else off.",
            show_default=False,
        ),
    ] = None,
    validation_fold: Annotated[
        int | None,
        typer.Option(
            "--validation-fold",
            min=0,
            help="Which fold of the train days model selection holds out: every fifth day from day K (K in 0..4)."
            " An ensemble's runs trained on folds 0..4 learn from and are selected on all train days. Default 0"
            " (the days `rcb evaluate --split validation` reads).",
            show_default=False,
        ),
    ] = None,
    selection_days: Annotated[
        SelectionDaysChoice | None,
        typer.Option(
            "--selection-days",
            help="With several --data: the validation days model selection reads, 'all' (each market's own fold)"
            " or 'home' (the first market's fold alone: the days a run on that market alone is selected on, so"
            " the two compare on equal terms there; the other markets' folds are then left unused). Default all.",
            show_default=False,
        ),
    ] = None,
    selection_seeds: Annotated[
        int | None,
        typer.Option(
            "--selection-seeds",
            min=1,
            help="How many noise streams (play seeds 0..K-1, the posterior samples of `rcb evaluate --seeds K`)"
            " model selection plays each validation day with; an epoch scores their mean. Default: 5 for cbrl in SC,"
            " else 1 (seed 0).",
            show_default=False,
        ),
    ] = None,
    selection_epoch: Annotated[
        SelectionEpochChoice | None,
        typer.Option(
            "--selection-epoch",
            help="Which epoch the run keeps as its model (best.pt): 'best' (the best validation score) or 'last'"
            " (the last epoch; validation scores still recorded). Default best.",
            show_default=False,
        ),
    ] = None,
    select_from: Annotated[
        int | None,
        typer.Option(
            "--select-from",
            min=0,
            help="With --selection-epoch best: the first epoch the run may keep; earlier epochs and the untrained"
            " controller are not candidates (6: the original problem's first epoch under the default curriculum)."
            " Default: for cbrl in SC the last quarter of the epochs (18 of 24), else 0 (every epoch).",
            show_default=False,
        ),
    ] = None,
    init_from: Annotated[
        Path | None,
        typer.Option(
            "--init-from",
            help="Fine-tune: start from the last epoch's networks of RUN (a finished rcb train run of the same"
            " setting and algorithm, e.g. one trained on a richer market), with fresh optimizers and curriculum;"
            " a residual run corrects this market's own controller. Default: fresh networks.",
            metavar="RUN",
            show_default=False,
        ),
    ] = None,
    keep_epochs: Annotated[
        bool,
        typer.Option(
            "--keep-epochs",
            help="Also save every epoch's model in OUT/epochs/epoch-NNN.pt (best.pt's format, about 0.2 MB each),"
            " to read several selection rules off one run. A resumed run that kept them keeps doing so.",
        ),
    ] = False,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the run already in OUT.")] = False,
    skip_done: Annotated[
        bool,
        typer.Option(
            "--skip-done",
            help="If OUT holds a finished run of this very config on these train days, report it and train nothing;"
            " a finished run of another config is refused, naming what differs (for scripts that rerun).",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print run.json's summary as JSON.")] = False,
) -> None:
    """Train SAC (CBRL or a rival) on the train days; resumable, with a progress bar and learning curves."""
    from training.rl.runs import RunError, finished_run_differences, run_training, training_markets
    from training.rl.sac import SACConfig

    with user_errors():
        try:
            check_output_dir(out)
            # --resume: the run's own choices, as usual
            finished = _finished_run(out) if skip_done and not resume else None
            resumed = None if finished else _check_resumable(out, setting, algo.value, resume)
            if len({path.resolve() for path in data}) != len(data):
                raise ValueError("--data names the same market twice")
            training_markets(data)  # a missing, malformed or untrainable market is reported before any work
            # SACConfig's keywords, None where not given; a resumed run's come from its run.json (untyped JSON).
            overrides: dict[str, Any] = {
                "epochs": epochs,
                "seed": seed,
                "auto_curriculum": auto_curriculum,
                "updates_per_epoch": updates_per_epoch,
                "lr_milestones": None if lr_milestones is None else parse_milestones(lr_milestones),
                "uscb_gamma": uscb_gamma,
                "rcpo_learning_rate": rcpo_learning_rate,
                "action_step": action_step,
                "residual": residual,
                "reference": None if reference is None else reference.value,
                "n_step": n_step,
                "buffer_episodes": buffer_episodes,
                "bootstrap_belief": None if bootstrap_belief is None else bootstrap_belief.value,
                "correction_penalty": correction_penalty,
                "roi_margin": roi_margin,
                "regime_spread": regime_spread,
                "reference_spread": reference_spread,
                "bootstrap_days": bootstrap_days,
                "relaxed_stages": relaxed_stages,
                "start_at_controller": start_at_controller,
                "validation_fold": validation_fold,
                "selection_days": None if selection_days is None else selection_days.value,
                "selection_seeds": selection_seeds,
                "selection_epoch": None if selection_epoch is None else selection_epoch.value,
                "select_from": select_from,
                "init_from": None if init_from is None else str(init_from),
                "train_shielded": train_shielded,
                "train_shield": None,  # not an option: a run records the band it starts behind (SACConfig.resolve)
            }
            for option, name in (
                ("--relaxed-stages/--no-relaxed-stages", "relaxed_stages"),
                ("--auto-curriculum", "auto_curriculum"),
            ):
                if _given(ctx, name) and algo.value not in ("crl", "cbrl"):
                    raise ValueError(f"{option} is for crl and cbrl (the curriculum); {algo.value} has none")
            if _given(ctx, "bootstrap_belief") and algo.value != "cbrl":
                raise ValueError(f"--bootstrap-belief is for cbrl (its posterior encoder); {algo.value} has none")
            if resumed is not None:  # a resumed run keeps the choices it started with, unless they are given
                for key in overrides:  # --epochs too: a run resumed without it continues to the epochs it planned
                    if not _given(ctx, key):  # train_shield is no option: always the run's own
                        overrides[key] = resumed.get(key, RESUMED_CHOICES.get(key))
                if not overrides["train_shielded"]:  # trained alone from here on: no band to keep
                    overrides["train_shield"] = None
            if finished and select_from is None and _default_select_from_when_started(finished):
                # the default depends on the epochs a run started with: a run grown by --resume keeps its own
                overrides["select_from"] = finished["config"]["select_from"]
            if overrides["lr_milestones"] is not None:  # run.json holds a list
                overrides["lr_milestones"] = tuple(overrides["lr_milestones"])
            config = SACConfig(
                algo=algo.value,
                **{k: v for k, v in overrides.items() if v is not None},
            )
            if finished and finished.get("reselected_from"):
                raise ValueError(
                    f"{out} is a reselection of {finished['reselected_from']} (rcb reselect), not a run to train;"
                    " choose another --out"
                )
            if finished:  # nothing to train, if it is this run
                differences = finished_run_differences(finished, data, setting, config)
                if differences:
                    grown = all(d.startswith("epochs ") for d in differences)
                    raise ValueError(
                        f"{out} holds a finished run of another config ({'; '.join(differences)});"
                        + (" resume it with --resume to train the epochs added," if grown else "")
                        + " remove it or choose another --out"
                    )
                _print_summary(finished, out, as_json, already=True)
                return
            # the bar is drawn once run_training has made every refusal (on_start), so an error never follows it
            bar = progress(quiet=as_json)
            task = bar.add_task(f"training {algo.value} on {setting.value}", total=config.epochs, start=False)
            started: list[bool] = []

            def start(done: int) -> None:
                started.append(True)
                bar.start()
                bar.start_task(task)
                bar.update(task, completed=min(done, config.epochs))

            def tick(log) -> None:
                bar.update(task, completed=log.epoch + 1)
                bar.console.print(
                    f"epoch {log.epoch:3d} ({log.stage}) train {log.train_score:.3f}"
                    f" validation {log.validation_score:.3f}"
                )

            try:
                body = run_training(
                    data, setting, config, out, resume=resume, on_epoch=tick, keep_epochs=keep_epochs, on_start=start
                )
            finally:
                if started:  # a bar never started prints nothing (stop() would write a blank line)
                    bar.stop()
        except RunError as exc:
            raise fail(str(exc)) from None
    _print_summary(body, out, as_json)


def _finished_run(out: Path) -> dict[str, Any] | None:
    """The run.json body of a run in ``out`` whose record says it is done; None for none (or an unreadable one)."""
    try:
        body = json.loads((out / RUN_FILE).read_text())
    except (OSError, ValueError):
        return None
    return body if isinstance(body, dict) and body.get("status") == "done" else None


def _print_summary(body: dict[str, Any], out: Path, as_json: bool, already: bool = False) -> None:
    summary = {
        "out": str(out),
        "best_validation_score": body["best_validation_score"],
        "kept_epoch": body.get("kept_epoch"),  # None for a run recorded before it was
        "epochs": len(body["history"]),
    }
    if as_json:
        print_json({**summary, "already_done": already})
    else:
        config = body.get("config", {})
        kept = (
            "the last epoch's validation score (--selection-epoch last)"
            if config.get("selection_epoch") == "last"
            else f"best validation score from epoch {config['select_from']} on"
            if config.get("select_from")
            else "best validation score"
        )
        typer.echo(
            f"run in {out}{' (already done, nothing trained)' if already else ''}: {kept}"
            f" {summary['best_validation_score']:.3f} after {plural(summary['epochs'], 'epoch')};"
            f" curves {out}/curves.png"
        )
