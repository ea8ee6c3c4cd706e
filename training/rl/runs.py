"""`rcb train`: a training run directory — config, checkpoints, learning curves — resumable.

Layout of ``RUN/``:

* ``run.json``: what was trained (market, setting, algo, config, data fingerprint, status);
* ``validation-best.pt``: under ``--selection-epoch last`` or ``--select-from N`` only, the model the default choice
  would have kept (the best validation score), in ``best.pt``'s format;
* ``epochs/epoch-NNN.pt``: under ``--keep-epochs`` only, every epoch's model in ``best.pt``'s format (about 0.2 MB
  each for CBRL), and ``epochs/controller.pt`` the untrained controller's under ``start_at_controller``, so
  several selection rules can be read off one run (``rcb reselect``, :mod:`training.rl.epoch_selection`);
* ``checkpoint.pt``: the latest state (networks, optimizers, replay-free: collection restarts cleanly) and the
  run's record, written first each epoch so an interrupted write is recovered on resume;
* ``best.pt``: the actor with the best validation score so far (model selection on held-out train days; from
  epoch N on under ``--select-from N``), or the latest epoch's under ``--selection-epoch last``;
* ``curves.csv`` and ``curves.png``: train and validation score per epoch.

A run directory is a method for ``rcb evaluate`` (its best actor, deterministic).
"""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import json
import pickle
from collections.abc import Callable
from dataclasses import MISSING, asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import torch

from model.contract import Setting
from model.features import obs_dim
from training.files import atomic_write, atomic_write_text
from training.market.dataset import Market
from training.replay.dayset import DaySet
from training.rl.encoder import PosteriorEncoder
from training.rl.epoch_selection import CONTROLLER_EPOCH, EPOCHS_DIR, kept_epoch, run_scores, snapshot_name, start_of
from training.rl.networks import TanhGaussianPolicy
from training.rl.resume_choices import BEFORE_THE_OPTIONS, SELECTION_CHOICES
from training.rl.sac import (
    CURRICULA,
    NETWORKS,
    EpochLog,
    PolicyBidder,
    SACAgent,
    SACConfig,
    check_networks_fit,
    reference_of,
    train,
    training_band,
    transition_dim,
)

RUN_FILE = "run.json"
VALIDATION_BEST_FILE = "validation-best.pt"
"""Under ``--selection-epoch last`` or ``--select-from N``: the validation argmax's model beside ``best.pt``."""
ALGOS = tuple(CURRICULA)
"""Every method of issue 4 on one trainer: ``hard``, ``crl``, ``cbrl``, ``uscb``, ``rcpo``."""


class RunError(ValueError):
    """A run directory that cannot be created, resumed or loaded."""


def _atomic_save(obj: Any, path: Path) -> None:
    atomic_write(path, lambda tmp: torch.save(obj, tmp))


def _write_json(body: dict[str, Any], path: Path) -> None:
    atomic_write_text(path, json.dumps(body, indent=1, default=str))


def run_training(
    data: Path | list[Path],
    setting: Setting,
    config: SACConfig,
    out: Path,
    resume: bool = False,
    on_epoch: Callable[[EpochLog], None] | None = None,
    keep_epochs: bool = False,
    on_start: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Train (or resume) a run into ``out``; return the final ``run.json`` body.

    ``data``: one market, or several whose train days are pooled (:meth:`DaySet.pool`). The first is the run's
    home market: a residual run corrects the PID tuned on its train days, and ``run.json``'s ``market`` names it.
    ``keep_epochs``: also save every epoch's model in ``epochs/`` (:data:`EPOCHS_DIR`); a resumed run that did
    keeps doing so. ``on_start(epochs_done)``: called once every refusal has been made (before anything is written,
    the train days loaded or the controller tuned), so a caller draws its progress bar only for a run that will
    train."""
    paths = [data] if isinstance(data, Path) else list(data)
    if config.reference == "plan" and len(paths) > 1:
        raise RunError("--reference plan trains on one market (its train days are the planner's scenarios)")
    markets = training_markets(paths)
    market = markets[0]
    fingerprint = pooled_fingerprint([m.split_fingerprint("train") for m in markets])  # what the policy is fitted to
    config.resolve(setting)  # the setting's defaults, before a resume compares them with the run's choices
    run_file = out / RUN_FILE
    history: list[dict[str, Any]] = []
    start_epoch = 0
    state = None
    if run_file.exists():
        if not resume:
            raise RunError(f"{out} already holds a run; pass --resume to continue it or choose another --out")
        previous = json.loads(run_file.read_text())
        if previous.get("reselected_from"):
            raise RunError(
                f"{out} is a reselection of {previous['reselected_from']} (rcb reselect) and holds no checkpoint;"
                " resume that run, then reselect again"
            )
        if previous.get("data_fingerprint") != fingerprint or previous.get("setting") != str(setting):
            raise RunError(f"{out} was trained on other data or another setting; it cannot be resumed here")
        if previous["config"]["algo"] != config.algo:
            raise RunError(f"{out} trains {previous['config']['algo']}, not {config.algo}")
        if bool(recorded_choice(previous["config"], "residual")) != config.residual:
            kind = "a residual" if config.residual else "a non-residual"
            raise RunError(f"{out} is not {kind} run; resume it with the --residual choice it was started with")
        corrected = recorded_choice(previous["config"], "reference")
        if corrected != config.reference:
            raise RunError(f"{out} corrects {corrected}; resume it with --reference {corrected}")
        # a default that depends on the setting (SC CBRL's since session 32) must not switch mid-run
        resampled = bool(recorded_choice(previous["config"], "bootstrap_days"))
        if resampled != config.bootstrap_days:
            option = "--bootstrap-days" if resampled else "--no-bootstrap-days"
            raise RunError(
                f"{out} was trained {'on' if resampled else 'without'} bootstrap days; resume it with {option}"
            )
        for choice in SELECTION_CHOICES.values():
            kept = choice.recorded(previous["config"])
            if kept != getattr(config, choice.field):
                raise RunError(f"{out} {choice.refusal.format(kept)}; resume it with {choice.option} {kept}")
        state = torch.load(out / "checkpoint.pt", weights_only=False)
        history = previous.get("history", [])
        if len(state.get("history") or []) > len(history):  # cut short between checkpoint.pt and run.json
            history = state["history"]
            previous["controller_validation_score"] = state.get("controller_validation_score")
        start_epoch = len(history)
        if config.epochs < start_epoch:
            raise RunError(
                f"{out} has trained {start_epoch} epochs; resume it with --epochs {start_epoch} or more, not"
                f" {config.epochs}"
            )
        # the record must not take a config the run was not trained with: its epochs so far used the recorded one
        changed = config_differences(previous["config"], config, setting, ignore=("controller", "epochs"))
        if changed and config.epochs == start_epoch:
            raise RunError(
                f"{out} is finished; resuming it trains nothing, yet its config differs ({'; '.join(changed)})"
            )
        if changed:
            raise RunError(
                f"{out} was trained with another config so far ({'; '.join(changed)}); resume it with the options it"
                " was started with (rcb train --resume keeps those not given)"
            )
    elif resume:
        raise RunError(f"{out}: nothing to resume (no {RUN_FILE}); drop --resume to start a new run")
    if state is not None and config.residual:  # resume with the reference controller the run started with
        config.controller = previous["config"].get("controller")
    # fine-tuning: the source is read and checked before anything is written (a resumed run has its own networks)
    init = initial_networks(Path(config.init_from), setting, config) if config.init_from and state is None else None
    if on_start:
        on_start(start_epoch)
    out.mkdir(parents=True, exist_ok=True)
    days = DaySet.load(market, "train", setting)
    if config.residual and config.controller is None:  # the home market's PID (or planner), tuned on its train days
        if config.reference == "plan":
            config.controller = reference_planner(market, paths[0], setting, days)
        else:
            config.controller = reference_controller(market, setting, days)
    days = DaySet.pool([days, *(DaySet.load(other, "train", setting) for other in markets[1:])])
    # start_at_controller: the untrained policy (the controller) is the first candidate of model selection
    scores = run_scores({**previous, "history": history}) if state is not None else {}
    assert config.select_from is not None  # resolve() filled it
    rule = (config.selection_epoch, config.select_from)
    # validation-best.pt: the plain validation argmax, kept beside a run whose rule may keep another epoch
    beside = rule != ("best", 0)
    body: dict[str, Any] = {
        "format": "rcb-run/1",
        "market": str(paths[0]),
        **({"pooled_markets": [str(path) for path in paths]} if len(paths) > 1 else {}),
        "setting": str(setting),
        "config": config.to_dict(),
        "data_fingerprint": fingerprint,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "status": "training",
        "history": history,
    }
    if init is not None:  # what the run started from, as it was then (the source may be retrained later)
        body["initialized_from"] = init.source
    elif state is not None and previous.get("initialized_from"):
        body["initialized_from"] = previous["initialized_from"]
    if CONTROLLER_EPOCH in scores:
        body["controller_validation_score"] = scores[CONTROLLER_EPOCH]
    if state is not None and previous.get("keep_epochs"):  # a resumed run keeps its snapshots going
        keep_epochs = True
    if keep_epochs:
        body["keep_epochs"] = True

    def keep_best(epoch: int, score: float, model: dict[str, Any]) -> None:
        """best.pt: this epoch's model (:func:`model_of`) if the run's selection rule now keeps it
        (:func:`training.rl.epoch_selection.kept_epoch`); validation-best.pt likewise for the plain argmax; the
        epoch's snapshot under ``keep_epochs``."""
        scores[epoch] = score
        if kept_epoch(scores, *rule) == epoch:
            _atomic_save(model, out / "best.pt")
        if beside and kept_epoch(scores) == epoch:  # what "best" would have kept, so the rules compare on one run
            _atomic_save(model, out / VALIDATION_BEST_FILE)
        if keep_epochs:
            (out / EPOCHS_DIR).mkdir(exist_ok=True)
            _atomic_save(model, out / EPOCHS_DIR / snapshot_name(epoch))

    def model_of(agent: SACAgent, epoch: int) -> dict[str, Any]:
        """The agent's actor and encoder at ``epoch`` as a model file (:func:`model_file`)."""
        encoder = agent.encoder.state_dict() if agent.encoder is not None else None
        return model_file(agent.actor.state_dict(), encoder, config.to_dict(), epoch)

    def controller_start(score: float, agent: SACAgent) -> None:
        """The untrained policy bids the controller: epoch -1 of model selection."""
        body["controller_validation_score"] = score  # run.json is first written after epoch 0's checkpoint
        keep_best(CONTROLLER_EPOCH, score, model_of(agent, CONTROLLER_EPOCH))

    def checkpoint(log: EpochLog, agent: SACAgent) -> None:
        """The epoch's record and models, in the order a crash can be recovered from: checkpoint.pt (which holds
        the record too), then run.json, then the model files, which a resume rewrites from the checkpoint's
        networks."""
        history.append(asdict(log))
        record = {"history": history, "controller_validation_score": body.get("controller_validation_score")}
        _atomic_save({**agent_state(agent, log.epoch + 1), **record}, out / "checkpoint.pt")
        scores[log.epoch] = log.validation_score
        body["kept_epoch"] = kept_epoch(scores, *rule)  # what best.pt holds once keep_best below has run
        _write_json(body, run_file)
        keep_best(log.epoch, log.validation_score, model_of(agent, log.epoch))
        write_curves(history, out, body.get("controller_validation_score"), start_of(body))
        if on_epoch:
            on_epoch(log)

    # A crash after the checkpoint may have cut the last epoch's model files and curves short: rewrite them from
    # the checkpoint, whose networks are that epoch's, stamped with the config it was trained with (idempotent).
    # Only a checkpoint that holds the record is known to hold that epoch's networks (an older one may be an epoch
    # ahead of run.json).
    if state is not None and history and "history" in state and state.get("next_epoch") == len(history):
        last_epoch = int(history[-1]["epoch"])
        healed = model_file(state["actor"], state["encoder"], previous["config"], last_epoch)
        keep_best(last_epoch, scores[last_epoch], healed)
        write_curves(history, out, body.get("controller_validation_score"), start_of(body))
    remaining = config.epochs - start_epoch
    if remaining > 0:
        train(
            config,
            days,
            on_epoch=checkpoint,
            start_epoch=start_epoch,
            state=state,
            on_start=controller_start,
            init=None if init is None else init.networks,
        )
    body["status"] = "done"
    body["train_seconds"] = sum(h.get("seconds", 0.0) for h in history)
    kept = kept_epoch(scores, *rule)
    # the kept model's (the last epoch's under selection_epoch "last")
    body["best_validation_score"] = float("-inf") if kept is None else scores[kept]
    body["kept_epoch"] = kept
    _write_json(body, run_file)
    return body


NETWORK_MEANING = ("hidden", "latent_dim", "action_step", "start_ratio")
"""The :class:`SACConfig` fields, beside the algorithm and the residual choice, that size the networks or give
their outputs their meaning (a step is not a saved weight: the same actor moves the ratio by another amount)."""


@dataclass(frozen=True)
class InitialNetworks:
    """A fine-tuned run's starting point (:attr:`SACConfig.init_from`): the source run's last epoch's networks
    (:data:`training.rl.sac.NETWORKS`) and what run.json records of it."""

    networks: dict[str, Any]
    source: dict[str, Any]
    """``run`` (its directory), ``market``, ``data_fingerprint`` (its train days), ``epochs`` trained and, if the
    source was fine-tuned too, its own ``initialized_from``."""


def initial_networks(source: Path, setting: Setting, config: SACConfig) -> InitialNetworks:
    """Read and check the run a new run is fine-tuned from: a finished ``rcb train`` run (not a reselection) of
    the same setting, algorithm and kind (residual or not, with the same reference) and :data:`NETWORK_MEANING`,
    whose checkpoint holds its last epoch's networks, every tensor of which fits this run's
    (:func:`training.rl.sac.check_networks_fit`). :class:`RunError` says what is wrong."""
    run_file = source / RUN_FILE
    if not run_file.is_file():
        raise RunError(f"--init-from {source}: not a run directory (no {RUN_FILE})")
    try:
        recorded = json.loads(run_file.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise RunError(f"--init-from {source}: unreadable run record ({exc})") from None
    if recorded.get("reselected_from"):
        raise RunError(f"--init-from {source}: a reselection (rcb reselect) holds no networks to start from")
    if recorded.get("status") != "done":
        raise RunError(f"--init-from {source}: the run is not finished (resume it first)")
    if recorded.get("setting") != str(setting):
        raise RunError(f"--init-from {source}: trained for {recorded.get('setting')}, not {setting}")
    kept = recorded.get("config", {})
    if kept.get("algo") != config.algo:
        raise RunError(f"--init-from {source}: trains {kept.get('algo')}, not {config.algo}")
    residual, reference = bool(recorded_choice(kept, "residual")), recorded_choice(kept, "reference")
    if residual != config.residual or (residual and reference != config.reference):

        def kind(is_residual: bool, reference: str) -> str:
            return f"a correction of its {reference}" if is_residual else "not a residual policy"

        raise RunError(
            f"--init-from {source}: its policy is {kind(residual, reference)},"
            f" this run's is {kind(bool(config.residual), config.reference)}"
        )
    for name in NETWORK_MEANING:
        trained_with = recorded_choice(kept, name)
        if trained_with != getattr(config, name):
            raise RunError(
                f"--init-from {source}: its networks were trained with {name} {trained_with},"
                f" this run's is {getattr(config, name)}"
            )
    try:
        state = torch.load(source / "checkpoint.pt", weights_only=False)
        if not isinstance(state, dict):
            raise ValueError("not a checkpoint")
    except Exception as exc:  # whatever unpickling a damaged file raises, it is one message
        raise RunError(f"--init-from {source}: unreadable checkpoint.pt ({exc})") from None
    networks = {key: state.get(key) for key in NETWORKS}
    try:  # every tensor, now: before the train days are loaded, the controller tuned or the run directory made
        check_networks_fit(config, networks)
    except ValueError as exc:
        raise RunError(f"--init-from {source}: {exc}") from None
    source_record = {
        "run": str(source),
        "market": recorded.get("market"),
        "data_fingerprint": recorded.get("data_fingerprint"),
        "epochs": len(recorded.get("history", [])),
        "validation_fold": int(recorded_choice(kept, "validation_fold")),
        **({"initialized_from": recorded["initialized_from"]} if recorded.get("initialized_from") else {}),
    }
    return InitialNetworks(networks=networks, source=source_record)


def training_markets(paths: list[Path]) -> list[Market]:
    """The markets a run trains on, opened and checked: at least one, each with train days, no train days twice
    (a copy elsewhere is the same days twice). Raises :class:`RunError` or what opening a market raises."""
    if not paths:
        raise RunError("training needs at least one market")
    markets = [Market.open(path) for path in paths]
    seen: dict[str, Path] = {}
    for path, market in zip(paths, markets, strict=True):
        if not market.split("train"):
            raise RunError(f"{path} has no train days: a run learns from the train split")
        train_days = market.split_fingerprint("train")
        if train_days in seen:
            raise RunError(f"{seen[train_days]} and {path} hold the same train days: name each market once")
        seen[train_days] = path
    return markets


_BEFORE_RECORDED: dict[str, Any] = json.loads(
    json.dumps(
        {**{f.name: f.default for f in fields(SACConfig) if f.default is not MISSING}, **BEFORE_THE_OPTIONS},
        default=list,
    )
)
"""What a run that recorded no value for a :class:`SACConfig` field did (:func:`recorded_choice`), as JSON holds it
(tuples read back as lists)."""


def recorded_choice(recorded: dict[str, Any], key: str) -> Any:
    """Field ``key`` of a run's recorded config (run.json's ``config``); for a field the run recorded before it
    existed, what runs did then: the value of :mod:`training.rl.resume_choices` where it names one, else the field's
    default (``"(not recorded)"`` for a field without one)."""
    return recorded.get(key, _BEFORE_RECORDED.get(key, "(not recorded)"))


def config_differences(
    recorded: dict[str, Any], config: SACConfig, setting: Setting, ignore: tuple[str, ...] = ("controller",)
) -> list[str]:
    """Where a run's recorded config (run.json's ``config``) differs from ``config`` resolved for ``setting``, as
    ``"n_step 8, not 4"`` lines; ``ignore`` names fields left out (by default the reference controller, tuned from
    the train days). A field a run recorded before it existed reads as :func:`recorded_choice` says."""
    # through JSON, as run.json holds it (tuples read back as lists)
    wanted = json.loads(json.dumps(replace(config, controller=None).resolve(setting).to_dict()))
    differences = []
    for key, value in wanted.items():
        if key in ignore:
            continue
        kept = recorded_choice(recorded, key)
        if key == "train_shield":  # a shielded run from before the record trained behind the defaults: compare bands
            if training_band(recorded) != training_band(wanted):
                differences.append(f"{key} {kept!r}, not {value!r}")
            continue
        if kept != value and not (key == "init_from" and same_run_dir(kept, value)):
            differences.append(f"{key} {kept!r}, not {value!r}")
    return differences


def same_run_dir(kept: Any, given: Any) -> bool:
    """Whether two spellings of a run directory (``--init-from``: relative or absolute, through a link) name the
    same directory as it stands now; one that no longer exists is only the same as its own spelling."""
    if not isinstance(kept, str) or not isinstance(given, str):
        return False
    try:
        return Path(kept).resolve(strict=True) == Path(given).resolve(strict=True)
    except OSError:
        return False


def finished_run_differences(
    previous: dict[str, Any], data: list[Path], setting: Setting, config: SACConfig
) -> list[str]:
    """What a finished run (its run.json body) was trained with that a new run of ``config`` on ``data`` would not
    be; empty when it is this very run (same train days, setting and resolved config but the reference controller:
    :func:`config_differences`)."""
    differences = []
    fingerprint = pooled_fingerprint([Market.open(path).split_fingerprint("train") for path in data])
    if previous.get("data_fingerprint") != fingerprint:
        differences.append("other train days")
    if previous.get("setting") != str(setting):
        differences.append(f"setting {previous.get('setting')}")
    return differences + config_differences(previous.get("config", {}), config, setting)


def pooled_fingerprint(fingerprints: list[str]) -> str:
    """One market's train-split fingerprint as it is; several pooled markets' folded into one, in order."""
    if len(fingerprints) == 1:
        return fingerprints[0]
    return "pooled:" + hashlib.sha256("\n".join(fingerprints).encode()).hexdigest()


def reference_controller(market: Market, setting: Setting, days: DaySet | None = None) -> dict[str, Any]:
    """The controller a run is measured against and corrects: the PID tuned on ``market``'s train days (``rcb
    evaluate``'s tuning, cached beside the market) and those days' traffic profile, as :attr:`SACConfig.controller`
    and a model card hold them. ``days``: the train days if already loaded (else their logs are read, and the
    oracles solved only when the tuning is not cached). Raises what opening the market or tuning raises."""
    from model.controller import ControllerGains
    from training.evaluation.evaluate import tuned_baseline
    from training.replay.dayset import traffic_profile

    loaded: list[DaySet] = [] if days is None else [days]

    def train_days() -> DaySet:  # loaded at most once, and only when the tuning is not cached
        if not loaded:
            loaded.append(DaySet.load(market, "train", setting))
        return loaded[0]

    pid, _ = tuned_baseline(market, "pid", setting, train_days)
    logs = loaded[0].logs if loaded else [market.load(entry.day) for entry in market.split("train")]
    gains = ControllerGains.with_profile(None, pid.params()).tuned()
    return {**gains, "traffic_profile": [round(float(x), 8) for x in traffic_profile(logs)]}


def reference_planner(market: Market, path: Path, setting: Setting, days: DaySet) -> dict[str, Any]:
    """The planner a ``--reference plan`` run corrects, as :attr:`SACConfig.controller` holds it: ``rcb evaluate``'s
    ``plan`` tuning on ``market``'s train days (cached beside the market) and the market whose train days are its
    scenarios (:func:`training.rl.sac.reference_of` rebuilds them)."""
    from training.evaluation.evaluate import tuned_baseline

    planner, _ = tuned_baseline(market, "plan", setting, lambda: days)
    params = planner.params()
    return {
        "kind": "plan",
        "market": str(path.resolve()),
        "setting": str(setting),
        "fingerprint": market.split_fingerprint("train"),
        "margin": float(params["margin"]),
        "cost_sd": float(params["cost_sd"]),
        "noise_aware": bool(params.get("noise_aware", False)),
    }


def model_file(
    actor: dict[str, Any], encoder: dict[str, Any] | None, config: dict[str, Any], epoch: int
) -> dict[str, Any]:
    """What best.pt, validation-best.pt and every epoch snapshot hold: the actor's and encoder's weights, the config
    they were trained with and their epoch (-1: the untrained controller)."""
    return {"actor": actor, "encoder": encoder, "config": config, "epoch": epoch}


def agent_state(agent: SACAgent, next_epoch: int) -> dict[str, Any]:
    """A resumable checkpoint: :meth:`SACAgent.state_dict` and the epoch to resume at."""
    return {"next_epoch": next_epoch, **agent.state_dict()}


def write_curves(
    history: list[dict[str, Any]], out: Path, controller_score: float | None = None, start: str = "the controller"
) -> None:
    """``curves.csv`` and ``curves.png``: train and validation score per epoch, curriculum stages marked;
    ``controller_score``: the untrained policy's validation score, a dashed line labelled ``start`` (what that
    policy is: the controller, or a fine-tuned run's carried policy, :func:`start_of`)."""
    columns = list(dict.fromkeys(key for h in history for key in h))  # a resumed older run's first epochs lack some
    with (out / "curves.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns, restval="")
        writer.writeheader()
        writer.writerows(history)
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    epochs = [h["epoch"] for h in history]
    ax.plot(epochs, [h["train_score"] for h in history], "o-", label="train days")
    ax.plot(epochs, [h["validation_score"] for h in history], "s-", label="validation days")
    by_seed = [h.get("validation_scores") or [h["validation_score"]] for h in history]
    if any(len(scores) > 1 for scores in by_seed):  # --selection-seeds K: the spread the mean is taken over
        low, high = [min(scores) for scores in by_seed], [max(scores) for scores in by_seed]
        ax.fill_between(epochs, low, high, color="C1", alpha=0.2, lw=0, label="validation, seeds' range")
    if controller_score is not None:
        ax.axhline(controller_score, color="C1", ls="--", lw=1, label=f"{start.removeprefix('the ')}, validation days")
    for epoch, h in enumerate(history):
        if epoch == 0 or h["stage"] != history[epoch - 1]["stage"]:
            ax.axvline(h["epoch"] - 0.5, color="grey", lw=0.8, ls=":")
            ax.text(h["epoch"] - 0.4, 0.02, h["stage"], fontsize=7, rotation=90, va="bottom", color="grey")
    ax.set_xlabel("epoch")
    ax.set_ylabel("score = mean D/D* x 1[feasible]")
    ax.set_ylim(0, 1)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "curves.png", dpi=110)


def run_body(run: Path, finished: bool = True) -> dict[str, Any]:
    """A run directory's ``run.json`` body, refused where the run has no ``best.pt``. ``finished``: refuse a run
    still training or interrupted too (its best.pt is the best of the epochs so far, not the run's model: what
    export, evaluation and ensembles must not take for it)."""
    run_file = run / RUN_FILE
    if not run_file.exists() or not (run / "best.pt").exists():
        raise RunError(f"{run}: not a finished training run (no {RUN_FILE} or best.pt)")
    body = json.loads(run_file.read_text())
    if finished and body.get("status") != "done":
        raise RunError(
            f"{run}: not a finished training run (status {body.get('status')!r}); finish it with rcb train --resume"
        )
    return body


def load_best(run: Path, finished: bool = True) -> tuple[dict[str, Any], dict[str, Any]]:
    """A run directory's ``best.pt`` (actor, encoder, config, epoch; on the CPU) and its ``run.json`` body
    (:func:`run_body`, ``finished`` as there)."""
    body = run_body(run, finished)
    try:
        saved = torch.load(run / "best.pt", weights_only=False, map_location="cpu")
    except (RuntimeError, EOFError, pickle.UnpicklingError) as exc:  # a truncated or foreign file
        raise RunError(f"{run}: cannot load its best actor from best.pt ({exc})") from None
    return saved, body


def load_run_bidder(run: Path) -> tuple[PolicyBidder, dict[str, Any]]:
    """The best actor of a run directory, deterministic, behind the Bidder interface."""
    saved, body = load_best(run)
    return best_bidder(saved), body


def load_ensemble_bidder(
    runs: list[Path], loaded: list[tuple[dict[str, Any], dict[str, Any]]] | None = None
) -> tuple[PolicyBidder, list[dict[str, Any]]]:
    """The runs' best actors as one deterministic bidder (:mod:`training.rl.ensemble`) and their run bodies.

    The runs must share the setting and the train data (the same market's train split). ``loaded``: their
    :func:`load_best` answers, when the caller has read them already."""
    from training.rl.ensemble import ensemble_of

    if not runs:
        raise RunError("an ensemble needs at least one run")
    loaded = loaded if loaded is not None else [load_best(Path(run)) for run in runs]
    members = [(best_bidder(saved), body) for saved, body in loaded]
    bodies = [body for _, body in members]
    for what in ("setting", "data_fingerprint"):
        if len({str(body.get(what)) for body in bodies}) != 1:
            raise RunError(f"the ensemble's runs differ in {what}: {', '.join(str(r) for r in runs)}")
    if len({repr(m.controller) for m, _ in members}) != 1:
        raise RunError(f"the ensemble's runs have different reference controllers: {', '.join(str(r) for r in runs)}")
    try:
        actor, encoder = ensemble_of([m.policy for m, _ in members], [m.encoder for m, _ in members])
    except ValueError as exc:
        raise RunError(f"{', '.join(str(r) for r in runs)}: {exc}") from None
    if len({repr(m.shield_band) for m, _ in members}) != 1:
        raise RunError(
            f"the ensemble's runs were trained behind different shield bands: {', '.join(str(r) for r in runs)}"
        )
    first = members[0][0]
    bidder = PolicyBidder(
        actor,  # type: ignore[arg-type]
        stochastic=False,
        encoder=encoder,  # type: ignore[arg-type]
        controller=first.controller,
        shield_band=first.shield_band,
    )
    return bidder, bodies


def best_bidder(saved: dict[str, Any]) -> PolicyBidder:
    """The deterministic bidder of a loaded ``best.pt``."""
    config = saved["config"]
    residual = bool(recorded_choice(config, "residual"))
    latent = config["latent_dim"] if saved["encoder"] is not None else 0
    policy = TanhGaussianPolicy(
        obs_dim(residual) + latent,
        config["hidden"],
        config.get("action_step", 0.0),
        config.get("start_ratio", 1.0),
        residual=residual,
    )
    policy.load_state_dict(saved["actor"])
    encoder = None
    if saved["encoder"] is not None:
        encoder = PosteriorEncoder(transition_dim(residual), config["latent_dim"])
        encoder.load_state_dict(saved["encoder"])
        encoder.eval()
    policy.eval()
    return PolicyBidder(
        policy,
        stochastic=False,
        encoder=encoder,
        controller=reference_of(residual, config.get("controller")),
        shield_band=training_band(config),
    )
