"""`rcb export --run RUN --out MODEL_DIR`: a training run's best policy as ONNX + model card (docs/model-artifact.md).

`rcb export --plan MARKET --setting mc --out MODEL_DIR`: the planner (model/planner.py) on the market's train days,
its parameters tuned there, as a model the service and `rcb evaluate onnx:MODEL_DIR` run like any other.

`rcb export --controller pid|rm MARKET --setting mc --out MODEL_DIR`: the PID (or RM's constant ratio) tuned on the
market's train days as a controller model (no file but its card), what `rcb evaluate` plays as `pid` (or `rm`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from model.contract import Setting
from rcb.commands.common import check_output_dir, fail, print_json, progress, user_errors

if TYPE_CHECKING:
    from model.artifact import ModelCard

Progress = Callable[[str], None]

# training/ (pandas, torch, matplotlib, the solvers) is imported inside the functions, so `rcb --help` loads none
# of it (rcb/cli.py).


class ControllerLaw(StrEnum):
    """The controllers ``--controller`` exports (:data:`model.artifact.CONTROLLER_LAWS`)."""

    pid = "pid"
    rm = "rm"


def _steps(run: Path) -> int:
    """Export steps reported by training.export.onnx: policy.onnx, encoder.onnx (CBRL only), parity."""
    try:
        algo = json.loads((run / "run.json").read_text())["config"]["algo"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{run / 'run.json'}: unreadable run record ({exc})") from None
    return 3 if algo == "cbrl" else 2


def expand_runs(runs: list[Path]) -> list[Path]:
    """Each ``--run`` as given, or, for a glob that is no path itself (a snapshot ensemble's members,
    ``DIR/cbrl-s*/epoch-*``), the sorted run directories it matches, as ``ensemble:LABEL=GLOB`` reads them in
    ``rcb evaluate`` (:func:`training.evaluation.evaluate.runs_matching`, shared); a glob that matches none is a
    clear error."""
    from training.evaluation.methods import runs_matching

    expanded: list[Path] = []
    for run in runs:
        text = str(run)
        if run.exists() or not any(c in text for c in "*?["):
            expanded.append(run)
            continue
        matches = runs_matching(text)
        if not matches:
            raise fail(f"--run {text}: matches no training run directory (with a run.json)")
        expanded.extend(matches)
    return expanded


def export_command(
    out: Annotated[Path, typer.Option("--out", help="Model directory to write.")],
    runs: Annotated[
        list[Path] | None,
        typer.Option(
            "--run",
            help="Training run directory (rcb train --out RUN). Repeat it to export several runs of one market and"
            " setting as one ensemble model (the median of their log-ratios); a quoted glob names every run it"
            " matches ('DIR/cbrl-s*/epoch-*': a snapshot ensemble's members).",
        ),
    ] = None,
    plan: Annotated[
        Path | None,
        typer.Option(
            "--plan",
            help="A market directory: export the planner (model/planner.py) on its train days instead of a run,"
            " tuned there as rcb evaluate tunes 'plan' (needs --setting).",
        ),
    ] = None,
    controller: Annotated[
        tuple[ControllerLaw, Path] | None,
        typer.Option(
            "--controller",
            metavar="pid|rm MARKET",
            help="A controller and a market directory: export the PID (pid) or the constant ratio (rm) tuned on the"
            " market's train days as a controller model, as rcb evaluate tunes 'pid' or 'rm' (needs --setting).",
        ),
    ] = None,
    setting: Annotated[
        Setting | None,
        typer.Option("--setting", help="sc or mc: the setting the planner or the controller is tuned for."),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite a model artifact already in OUT.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the export summary as JSON.")] = False,
) -> None:
    """Export the run's best actor (and CBRL's posterior encoder) to ONNX, checked against torch; or, with --plan,
    the planner on a market's train days; or, with --controller, a controller tuned on a market's train days."""
    from training.export.destination import ExportError, check_destination
    from training.export.onnx import export_ensemble, export_run
    from training.files import built_in
    from training.rl.runs import RunError, run_body

    if sum((bool(runs), plan is not None, controller is not None)) != 1:
        raise fail("give --run RUN (repeatable), --plan MARKET or --controller pid|rm MARKET, one of the three")
    if plan is not None and setting is None:
        raise fail("--plan needs --setting sc or mc (the planner is tuned for one)")
    if controller is not None and setting is None:
        raise fail("--controller needs --setting sc or mc (the controller is tuned for one)")
    if plan is None and controller is None and setting is not None:
        raise fail("--setting is the planner's (--plan) or the controller's (--controller); a run's setting is its own")
    if controller is not None:
        assert setting is not None
        _export_controller(str(controller[0]), controller[1], setting, out, force, as_json)
        return
    if plan is not None:
        assert setting is not None
        _export_plan(plan, setting, out, force, as_json)
        return
    assert runs
    runs = expand_runs(runs)
    with user_errors():
        try:
            check_output_dir(out)
            check_output_dir(built_in(out), "--out's directory")  # the artifact is built there, --out there or not
            check_destination(out, force)
            for run in runs:  # before the bar: what export_run / export_ensemble check again when they load it
                run_body(run)
            total = _steps(runs[0])
            with progress(quiet=as_json) as bar:
                task = bar.add_task("exporting: loading the run", total=total)

                def step(name: str) -> None:
                    done = {"policy.onnx": 0, "encoder.onnx": 1, "parity": total - 1}.get(name)
                    bar.update(task, description=f"exporting: {name}", completed=done)

                if len(runs) == 1:
                    card = export_run(runs[0], out, force=force, progress=step)
                else:
                    card = export_ensemble(runs, out, force=force, progress=step)
                bar.update(task, description="exporting: done", completed=total)
        except (RunError, ExportError) as exc:
            raise fail(str(exc)) from None
    files = sorted(p.name for p in out.iterdir())
    size = sum((out / name).stat().st_size for name in files)
    summary = {
        "out": str(out),
        "algorithm": card.algorithm,
        "setting": str(card.setting),
        "latent_dim": card.latent_dim,
        "files": files,
        "bytes": size,
        "opset": card.opset,
        "parity": card.parity,
        "best_validation_score": card.evaluation.best_validation_score,
        "members": card.training.members,
        "reference_controller": card.training.controller is not None,
    }
    if card.training.controller is None and not card.residual:
        typer.echo(
            f"warning: no reference controller on the card: the run's market ({card.training.market or 'unknown'}) "
            "is not here, or its train days are not the ones the run trained on; the shield and the fallback will "
            "use default gains (export where the training market is, as it was)",
            err=True,
        )
    if as_json:
        print_json(summary)
    else:
        worst = max(card.parity.values())
        typer.echo(
            f"exported {card.algorithm} ({card.setting}) to {out}: {', '.join(files)} ({size / 1024:.0f} KiB), opset"
            f" {card.opset}, max |torch - onnxruntime| {worst:.1e}"
        )


def _stepped_export(
    what: str,
    steps: list[str],
    out: Path,
    check: Callable[[], object],
    export: Callable[[Progress], ModelCard],
    quiet: bool,
) -> ModelCard:
    """An export fitted on a market's train days under a progress bar of its ``steps``: ``out`` and ``check`` (the
    export's own refusals) are checked before the bar is drawn; a refusal is one line, exit 2."""
    from training.export.destination import ExportError
    from training.files import built_in
    from training.market.dataset import MarketError

    with user_errors():
        try:
            check_output_dir(out)
            check_output_dir(built_in(out), "--out's directory")
            check()
            with progress(quiet=quiet) as bar:
                task = bar.add_task(f"exporting {what}: tuning on the train days", total=len(steps))

                def step(name: str) -> None:
                    bar.update(task, description=f"exporting {what}: {name}", completed=steps.index(name))

                card = export(step)
                bar.update(task, description=f"exporting {what}: done", completed=len(steps))
        except (ExportError, MarketError) as exc:
            raise fail(str(exc)) from None
    return card


def _export_plan(market: Path, setting: Setting, out: Path, force: bool, as_json: bool) -> None:
    from training.export.planner import check_planner_export, export_planner

    card = _stepped_export(
        "the planner",
        ["tuning", "alerts", "scenarios.npz", "parity"],
        out,
        lambda: check_planner_export(market, out, force),
        lambda step: export_planner(market, setting, out, force=force, progress=step),
        as_json,
    )
    assert card.planner is not None
    files = sorted(p.name for p in out.iterdir())
    size = sum((out / name).stat().st_size for name in files)
    summary = {
        "out": str(out),
        "algorithm": card.algorithm,
        "kind": card.kind,
        "setting": str(card.setting),
        "files": files,
        "bytes": size,
        "planner": card.planner.model_dump(),
        "parity": card.parity,
    }
    if as_json:
        print_json(summary)
    else:
        typer.echo(
            f"exported the planner ({card.setting}) on {card.planner.train_days} train days of {market} to {out}:"
            f" {', '.join(files)} ({size / 1024:.0f} KiB), margin {card.planner.margin:g}, cost sd"
            f" {card.planner.cost_sd:g} (train score {card.planner.train_score:.3f})"
        )


def _export_controller(law: str, market: Path, setting: Setting, out: Path, force: bool, as_json: bool) -> None:
    from training.export.controller import check_controller_export, export_controller

    card = _stepped_export(
        f"the {law}",
        ["tuning", "parity"],
        out,
        lambda: check_controller_export(market, out, force),
        lambda step: export_controller(market, law, setting, out, force=force, progress=step),
        as_json,
    )
    assert card.controller is not None
    info = card.controller
    summary = {
        "out": str(out),
        "algorithm": card.algorithm,
        "kind": card.kind,
        "setting": str(card.setting),
        "files": sorted(p.name for p in out.iterdir()),
        "controller": info.model_dump(mode="json", exclude={"traffic_profile"}),
        "parity": card.parity,
    }
    if as_json:
        print_json(summary)
    else:
        params = ", ".join(f"{k} {v:.4g}" for k, v in info.gains.items())
        typer.echo(
            f"exported the {law} ({card.setting}) tuned on the train days of {market} to {out}: {params} (train score"
            f" {info.train_score:.3f})"
        )
