"""`rcb calibrate`: a model's bid scale chosen on the train days of the market it will serve (a calibrated copy)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from rcb.commands.common import check_output_dir, console, fail, print_json, progress, stdout_console, user_errors

# training/ (pandas, torch, matplotlib, the solvers) is imported inside the functions, so `rcb --help` loads none
# of it (rcb/cli.py).


def calibrate_command(
    model: Annotated[Path, typer.Argument(help="An exported model directory (rcb export), e.g. models/default.")],
    market: Annotated[
        Path, typer.Argument(help="The market it will serve (its train days are played; not the model's own).")
    ],
    out: Annotated[Path, typer.Option("--out", help="New model directory: the calibrated copy.")],
    seeds: Annotated[int, typer.Option(min=1, help="Evaluation seeds of a stochastic model.")] = 5,
    force: Annotated[bool, typer.Option("--force", help="Overwrite a model already at --out.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the choice and its rows as JSON.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress bar.")] = False,
) -> None:
    """Play MODEL on MARKET's train days behind its shield with its ratios times each factor 0.8-1.5, keep the
    factor with the highest median ANS among those whose CSR is at least the market's PID's (ties to the factor
    nearest 1), and write MODEL's copy to OUT with that factor on its card (bid_scale); the service and
    onnx:OUT apply it before the shield."""
    from training.export.calibrate import (
        LADDER,
        check_destination,
        play_ladder,
        prepare,
        row_name,
        write_calibrated,
    )
    from training.files import built_in

    def warn(message: str) -> None:
        console.print(f"[yellow]warning:[/] {escape(message)}")

    with user_errors():
        try:
            check_output_dir(out)
            check_output_dir(built_in(out), "--out's directory")  # where the copy is built, --out there or not
            check_destination(model, out, force)
            inputs = prepare(model, market, warn=warn)  # every refusal before the bar is drawn
            with progress(quiet) as bar:
                task = bar.add_task("factors", total=len(LADDER))
                chosen, _ = play_ladder(inputs, seeds, progress=lambda _: bar.advance(task))
            write_calibrated(model, out, chosen, force)
        except PermissionError as exc:  # a directory the copy cannot be written to: said, not a traceback
            raise fail(f"{out}: {exc.strerror}: {exc.filename}") from None
    if as_json:
        print_json({"out": str(out), "model": str(model), **chosen.record()})
        return
    out_console = stdout_console()
    out_console.print(f"{market}: {chosen.days} train days behind the model's shield; median ANS (mean CSR)")
    for name, row in chosen.rows.items():
        mark = "  <- chosen" if name == row_name(chosen.scale) else ""
        out_console.print(f"  {name:>6}  {row['ans']:.3f} ({row['csr']:.2f}){mark}", highlight=False)
    out_console.print(f"{out}: {model} with bid scale {chosen.scale:g}", highlight=False)
