"""`rcb export --run RUN --out MODEL_DIR`: a training run's best policy as ONNX + model card (SPEC 5)."""

from __future__ import annotations

import json as jsonlib
from pathlib import Path
from typing import Annotated

import typer

from rcb.commands.common import check_output_dir, fail, print_json, progress, user_errors


def _steps(run: Path) -> int:
    """Export steps reported by training.export: policy.onnx, encoder.onnx (CBRL only), parity."""
    try:
        algo = jsonlib.loads((run / "run.json").read_text())["config"]["algo"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{run / 'run.json'}: unreadable run record ({exc})") from None
    return 3 if algo == "cbrl" else 2


def export_command(
    runs: Annotated[
        list[Path],
        typer.Option(
            "--run",
            help="Training run directory (rcb train --out RUN). Repeat it to export several runs of one market and"
            " setting as one ensemble model (the median of their log-ratios).",
        ),
    ],
    out: Annotated[Path, typer.Option("--out", help="Model directory to write.")],
    force: Annotated[bool, typer.Option("--force", help="Overwrite a model artifact already in OUT.")] = False,
    json: Annotated[bool, typer.Option("--json", help="Print the export summary as JSON.")] = False,
) -> None:
    """Export the run's best actor (and CBRL's posterior encoder) to ONNX, checked against torch."""
    from training.export import ExportError, check_destination, export_ensemble, export_run
    from training.train import RunError

    with user_errors():
        try:
            check_output_dir(out)
            check_destination(out, force)
            for run in runs:
                if not (run / "run.json").is_file() or not (run / "best.pt").is_file():
                    raise RunError(f"{run}: not a finished training run (no run.json or best.pt)")
            total = _steps(runs[0])
            with progress(quiet=json) as bar:
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
    }
    if json:
        print_json(summary)
    else:
        worst = max(card.parity.values())
        typer.echo(
            f"exported {card.algorithm} ({card.setting}) to {out}: {', '.join(files)} ({size / 1024:.0f} KiB), opset"
            f" {card.opset}, max |torch - onnxruntime| {worst:.1e}"
        )
