"""`rcb calibrate`: a model fitted to the market it will serve, on that market's train days (a calibrated copy): its
bid scale, and the market's PID as the controller its shield and fallback run around; or a refusal, exit 1, where
no bid scale holds the PID's CSR there."""

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
    force_unsafe: Annotated[
        bool,
        typer.Option(
            "--force-unsafe",
            help="Write the copy even where no factor holds the PID's CSR (with the factor whose CSR comes nearest);"
            " without it that model is refused, exit 1, and nothing is written.",
        ),
    ] = False,
    keep_controller: Annotated[
        bool,
        typer.Option(
            "--keep-controller",
            help="Keep the shield and the fallback around the model's own controller (its training market's PID)"
            " instead of MARKET's PID: the ladder is played there and no safety_controller is written.",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the choice and its rows as JSON.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress bar.")] = False,
) -> None:
    """Play MODEL on MARKET's train days behind its shield, centred on MARKET's own PID, with its ratios times each
    factor 0.8-1.5; keep the factor with the highest median ANS among those whose CSR is at least the PID's (ties to
    the factor nearest 1), and write MODEL's copy to OUT with that factor on its card (bid_scale) and the PID as the
    controller its shield and fallback run around (safety_controller). Where no factor holds the PID's CSR, exit 1
    with one line naming the controller model to serve instead, and write nothing (unless --force-unsafe)."""
    from training.export.calibrate import (
        LADDER,
        ModelUnfit,
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
                chosen, _ = play_ladder(inputs, seeds, lambda _: bar.advance(task), keep_controller)
            write_calibrated(model, out, chosen, force, force_unsafe=force_unsafe)
        except PermissionError as exc:  # a directory the copy cannot be written to: said, not a traceback
            raise fail(f"{out}: {exc.strerror}: {exc.filename}") from None
        except ModelUnfit as exc:  # the input is fine; the model does not fit the market: exit 1, nothing written
            if as_json:
                print_json({"out": None, "model": str(model), "refused": str(exc), **chosen.record()})
            raise fail(str(exc), code=1) from None
    safety = chosen.safety_controller
    if as_json:
        print_json(
            {
                "out": str(out),
                "model": str(model),
                **chosen.record(),
                "safety_controller": None if safety is None else safety.where(),
            }
        )
        return
    out_console = stdout_console()
    around = "the model's own controller" if safety is None else "the market's PID"
    out_console.print(
        f"{market}: {chosen.days} train days behind the model's shield around {around}; median ANS (mean CSR)"
    )
    for name, row in chosen.rows.items():
        mark = "  <- chosen" if name == row_name(chosen.scale) else ""
        out_console.print(f"  {name:>6}  {row['ans']:.3f} ({row['csr']:.2f}){mark}", highlight=False)
    around = "its own controller" if safety is None else f"{market}'s PID"
    out_console.print(
        f"{out}: {model} with bid scale {chosen.scale:g}, its shield and fallback around {around}", highlight=False
    )
    if not chosen.holds:
        console.print(
            f"[yellow]warning:[/] {escape(chosen.refusal(model, str(inputs.artifact.card.setting)))}"
            " (written anyway: --force-unsafe)"
        )
