"""`rcb train`: train a bidding policy on a market's train days into a run directory.

The command's options are :class:`~training.rl.config.SACConfig`'s fields, as CleanRL builds its command lines from
a dataclass: field ``n_step`` is ``--n-step``, of the field's type, the field's docstring its help text, the field's
metadata its choices, range and metavar; a boolean field is an on/off pair, a tuple a comma-separated list. The
fields marked ``option: False`` (the reference controller, the curriculum) are filled by training, not given. A
config option not given leaves its field to the config's default in a new run, and to the value it was started with
in a resumed one. The options that are not config fields (the data, the setting, the run directory, resuming, the
output) are written out below. Torch is imported only to train, so ``rcb train --help`` reads no torch.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
from dataclasses import Field, fields
from itertools import pairwise
from pathlib import Path
from typing import Annotated, Any, Literal, get_type_hints

import typer
from rich.markup import escape

from model.contract import Setting
from rcb.commands.common import check_output_dir, plural, print_json, progress, user_errors
from training.rl.config import SACConfig
from training.rl.run_schema import RUN_FILE, finished_run_differences, read_record

COMMAND_DEFAULTS: dict[str, Any] = {"algo": "cbrl"}
"""Where ``rcb train``'s default is not :class:`SACConfig`'s: the command trains CBRL unless told otherwise."""


def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of dataclass ``cls`` (the string literal that follows its annotation)."""
    tree = ast.parse(inspect.getsource(cls))
    body = next(node for node in tree.body if isinstance(node, ast.ClassDef)).body
    docs = {}
    for item, following in pairwise(body):
        if (
            isinstance(item, ast.AnnAssign)
            and isinstance(item.target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docs[item.target.id] = following.value.value
    return docs


_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`|``([^`]+)``")


def help_text(doc: str) -> str:
    """A field docstring as one line of plain help, escaped for rich: a Sphinx role or literal as its text, the last
    part of a dotted name, and a field that is an option as the option (``n_step`` as ``--n-step``)."""
    names = {f.name for f in fields(SACConfig) if f.metadata.get("option", True)}

    def plain(match: re.Match[str]) -> str:
        text = match.group(1) or match.group(2)
        if text in names:
            return flag(text)
        return text.rsplit(".", 1)[-1] if match.group(1) else text

    return escape(" ".join(_ROLE.sub(plain, doc).split()))


def flag(name: str) -> str:
    """The option of config field ``name``: ``n_step`` is ``--n-step``."""
    return "--" + name.replace("_", "-")


def _optional(hint: Any) -> Any:
    """``X`` of ``X | None`` (or ``hint`` itself)."""
    args = [a for a in getattr(hint, "__args__", ()) if a is not type(None)]
    return args[0] if len(args) == 1 and type(None) in getattr(hint, "__args__", ()) else hint


def config_option(spec: Field[Any], hint: Any, doc: str) -> inspect.Parameter:
    """The ``rcb train`` option of one :class:`SACConfig` field (see the module docstring)."""
    kind = _optional(hint)
    default = COMMAND_DEFAULTS.get(spec.name, spec.default)
    settings: dict[str, Any] = {"help": help_text(doc), "show_default": default is not None}
    annotation: Any
    if kind is bool:
        decls, annotation = [f"{flag(spec.name)}/--no-{flag(spec.name)[2:]}"], bool | None
    elif getattr(kind, "__origin__", None) is tuple:  # a comma-separated list
        decls, annotation, default = [flag(spec.name)], str, ",".join(str(x) for x in default)
    else:
        choices = spec.metadata.get("choices")
        decls, annotation = [flag(spec.name)], (kind if choices is None else Literal[tuple(choices)]) | None
        low, high = spec.metadata.get("range", (None, None))
        settings.update(min=low, max=high)
    if "metavar" in spec.metadata:
        settings["metavar"] = spec.metadata["metavar"]
    option = typer.Option(*decls, **settings)
    return inspect.Parameter(
        spec.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=Annotated[annotation, option]
    )


def config_options() -> list[inspect.Parameter]:
    """The options of :class:`SACConfig`'s fields, in the fields' order."""
    hints, docs = get_type_hints(SACConfig), field_docs(SACConfig)
    return [config_option(f, hints[f.name], docs[f.name]) for f in fields(SACConfig) if f.metadata.get("option", True)]


CONFIG_OPTIONS = tuple(parameter.name for parameter in config_options())
"""The :class:`SACConfig` fields that are ``rcb train`` options."""
FOR_ALGOS: dict[str, tuple[str, ...]] = {
    f.name: f.metadata["algos"] for f in fields(SACConfig) if "algos" in f.metadata
}
"""The options that only some algorithms have (the field's ``algos`` metadata): given for another, they are refused."""


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
    source = ctx.get_parameter_source(name)  # typer's own click enum (vendored): compared by name
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def _own_options(
    ctx: typer.Context,
    *,
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
    keep_epochs: Annotated[
        bool,
        typer.Option(
            "--keep-epochs",
            help="Also save every epoch's model in OUT/epochs/epoch-NNN.pt (best.pt's format, about 0.2 MB each),"
            " to keep another epoch afterwards (rcb reselect). A resumed run that kept them keeps doing so.",
        ),
    ] = False,
    resume: Annotated[
        bool,
        typer.Option("--resume", help="Continue the run already in OUT, with the options it was started with."),
    ] = False,
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
    """The options of ``rcb train`` that are not config fields: :func:`train_command`'s signature is these, with the
    config's options (:func:`config_options`) after ``out``."""


def _signature() -> inspect.Signature:
    own = list(inspect.signature(_own_options, eval_str=True).parameters.values())
    at = [p.name for p in own].index("out") + 1
    return inspect.Signature([*own[:at], *config_options(), *own[at:]])


def train_command(ctx: typer.Context, **given: Any) -> None:
    """Train SAC (CBRL or a rival) on the train days; resumable, with a progress bar and learning curves."""
    data, setting, out, as_json = given["data"], given["setting"], given["out"], given["as_json"]
    with user_errors():
        check_output_dir(out)
        # SACConfig's keywords where given; a resumed run's others come from its run.json
        options = {name: given[name] for name in CONFIG_OPTIONS if _given(ctx, name)}
        if "lr_milestones" in options:
            options["lr_milestones"] = parse_milestones(options["lr_milestones"])
        finished = _finished_run(out) if given["skip_done"] and not given["resume"] else None
        resumed = None if finished else _resumed_config(out, setting, options.get("algo"), given["resume"])
        algo = options.get("algo") or (resumed or {}).get("algo") or COMMAND_DEFAULTS["algo"]
        for name, algos in FOR_ALGOS.items():
            if name in options and algo not in algos:
                raise ValueError(f"{flag(name)} is for {' and '.join(algos)}; {algo} has none")
        if len({path.resolve() for path in data}) != len(data):
            raise ValueError("--data names the same market twice")
        from training.rl.runs import run_training, training_markets  # torch: only once a run is to be trained

        training_markets(data)  # a missing, malformed or untrainable market is reported before any work
        if resumed is not None:  # a resumed run keeps the choices it started with, unless they are given
            options = {**{name: resumed[name] for name in CONFIG_OPTIONS}, **options}
            options["lr_milestones"] = tuple(options["lr_milestones"])  # run.json holds a list
        if finished and "select_from" not in options and _default_select_from_when_started(finished):
            # the default depends on the epochs a run started with: a run grown by --resume keeps its own
            options["select_from"] = finished["config"]["select_from"]
        config = SACConfig(**{"algo": COMMAND_DEFAULTS["algo"], **options})
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
        task = bar.add_task(f"training {config.algo} on {setting.value}", total=config.epochs, start=False)
        started: list[bool] = []

        def start(done: int) -> None:
            started.append(True)
            bar.start()
            bar.start_task(task)
            bar.update(task, completed=min(done, config.epochs))

        def tick(log: Any) -> None:
            bar.update(task, completed=log.epoch + 1)
            bar.console.print(
                f"epoch {log.epoch:3d} ({log.stage}) train {log.train_score:.3f} validation {log.validation_score:.3f}"
            )

        try:
            body = run_training(
                data,
                setting,
                config,
                out,
                resume=given["resume"],
                on_epoch=tick,
                keep_epochs=given["keep_epochs"],
                on_start=start,
            )
        finally:
            if started:  # a bar never started prints nothing (stop() would write a blank line)
                bar.stop()
    _print_summary(body, out, as_json)


train_command.__signature__ = _signature()  # type: ignore[attr-defined]


def _resumed_config(out: Path, setting: Setting, algo: str | None, resume: bool) -> dict[str, Any] | None:
    """What a run directory allows, checked before the bar and the work start (training.rl.runs checks it again);
    the resumed run's migrated config, or None for a new run."""
    if not (out / RUN_FILE).exists():
        if resume:
            raise ValueError(f"--resume: {out} holds no run ({RUN_FILE}) to continue; drop --resume to start one")
        return None
    if not resume:
        raise ValueError(f"{out} already holds a run; pass --resume to continue it or choose another --out")
    try:
        previous = read_record(out)
        trained_setting, config = previous["setting"], previous["config"]
        trained_algo = config["algo"]
    except (OSError, KeyError, TypeError) as exc:
        raise ValueError(f"{out / RUN_FILE}: unreadable run record ({exc}); it cannot be resumed") from None
    if trained_setting != str(setting):
        raise ValueError(f"{out} was trained on other data or another setting; it cannot be resumed here")
    if algo is not None and trained_algo != algo:
        raise ValueError(f"{out} trains {trained_algo}, not {algo}")
    return config


def _finished_run(out: Path) -> dict[str, Any] | None:
    """The migrated run.json body of a run in ``out`` whose record says it is done; None for none (or one that
    cannot be read)."""
    try:
        body = read_record(out)  # a record this version cannot read says why (RunError)
    except (OSError, json.JSONDecodeError):
        return None
    return body if body.get("status") == "done" else None


def _default_select_from_when_started(run: dict[str, Any]) -> bool:
    """Whether a finished run's recorded ``select_from`` is the default's (:meth:`SACConfig.resolve`) for some epoch
    count it passed through (a run started shorter and grown by ``--resume``), not a choice of its own."""
    config = run["config"]
    recorded = config["select_from"]
    epochs = range(1, len(run.get("history", [])) + 1)
    return bool(recorded) and any(
        SACConfig(algo=config["algo"], epochs=e).resolve(run["setting"]).select_from == recorded for e in epochs
    )


def _print_summary(body: dict[str, Any], out: Path, as_json: bool, already: bool = False) -> None:
    summary = {
        "out": str(out),
        "best_validation_score": body["best_validation_score"],
        "kept_epoch": body.get("kept_epoch"),  # None for a run recorded before it was
        "epochs": len(body["history"]),
    }
    if as_json:
        print_json({**summary, "already_done": already})
        return
    select_from = body.get("config", {}).get("select_from")
    kept = f"best validation score from epoch {select_from} on" if select_from else "best validation score"
    typer.echo(
        f"run in {out}{' (already done, nothing trained)' if already else ''}: {kept}"
        f" {summary['best_validation_score']:.3f} after {plural(summary['epochs'], 'epoch')};"
        f" curves {out}/curves.png"
    )
