"""`rcb export --run RUN --out MODEL_DIR`: a training run's best policy as ONNX + model card (SPEC 5)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rcb.commands.common import console, fail, print_json, progress, user_errors


def export_command(
    run: Annotated[Path, typer.Option("--run", help="Training run directory (rcb train --out RUN).")],
    out: Annotated[Path, typer.Option("--out", help="Model directory to write.")],
    force: Annotated[bool, typer.Option("--force", help="Overwrite a model artifact already in OUT.")] = False,
    json: Annotated[bool, typer.Option("--json", help="Print the export summary as JSON.")] = False,
) -> None:
    """Export the run's best actor (and CBRL's posterior encoder) to ONNX, checked against torch."""
    from training.export import ExportError, export_run
    from training.train import RunError

    with user_errors():
        try:
            with progress(quiet=json) as bar:
                task = bar.add_task(f"exporting {run}", total=None)
                card = export_run(
                    run, out, force=force, progress=lambda step: bar.update(task, description=f"exporting: {step}")
                )
        except (RunError, ExportError) as exc:
            raise fail(str(exc)) from None
    files = sorted(p.name for p in out.iterdir())
    summary = {
        "out": str(out),
        "algorithm": card.algorithm,
        "setting": str(card.setting),
        "latent_dim": card.latent_dim,
        "files": files,
        "bytes": sum((out / name).stat().st_size for name in files),
        "opset": card.opset,
        "parity": card.parity,
        "best_validation_score": card.evaluation.best_validation_score,
    }
    if json:
        print_json(summary)
    else:
        worst = max(card.parity.values())
        size = summary["bytes"] / 1024
        console.print(
            f"exported {card.algorithm} ({card.setting}) to {out}: {', '.join(files)} ({size:.0f} KiB), opset"
            f" {card.opset}, max |torch - onnxruntime| {worst:.1e}"
        )
