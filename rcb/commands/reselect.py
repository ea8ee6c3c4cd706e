"""`rcb reselect`: keep another epoch of a finished `--keep-epochs` run, without training again."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rcb.commands.common import check_output_dir, fail, print_json, user_errors
from training.rl.epoch_selection import SelectionError, reselect, snapshot_members, start_of


def reselect_command(
    run: Annotated[Path, typer.Argument(help="A finished run directory trained with rcb train --keep-epochs.")],
    out: Annotated[Path, typer.Option("--out", help="New (or empty) run directory to write.")],
    select_from: Annotated[
        int | None,
        typer.Option(
            "--select-from",
            min=0,
            help="The first epoch that may be kept, the best validation score from there on; earlier epochs and the"
            " untrained controller are not candidates (6: the original problem's first epoch under the default"
            " curriculum; default 0). With --snapshots: the first member (default: the run's own select_from).",
        ),
    ] = None,
    epoch: Annotated[
        int | None,
        typer.Option(
            "--epoch",
            min=-1,
            help="Keep this epoch (-1: the untrained controller), whatever the validation days say; replaces"
            " --select-from (a snapshot ensemble's members: one run's epochs, each reselected into its own"
            " directory, then rcb export --run A --run B ...).",
        ),
    ] = None,
    snapshots: Annotated[
        bool,
        typer.Option(
            "--snapshots",
            help="Write a snapshot ensemble's members instead: every epoch from --select-from (default: the run's"
            " own, the last quarter for the SC default) to the last, each reselected into OUT/epoch-NNN; play several"
            " runs' members as ensemble:LABEL='OUT*/epoch-*' or export them with rcb export --run.",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the choice as JSON.")] = False,
) -> None:
    """Write OUT as RUN with the epoch a selection rule keeps as its model (best.pt), read off RUN's recorded
    validation scores and its epochs/ snapshots; OUT is a run directory for rcb evaluate and rcb export."""
    with user_errors():
        check_output_dir(out)
        if snapshots:
            if epoch is not None:
                raise fail("--snapshots keeps every epoch from --select-from on; it takes no --epoch")
            try:
                members = snapshot_members(run, out, select_from)
            except SelectionError as exc:
                raise fail(str(exc)) from None
            said = {"out": str(out), "run": str(run), "epochs": [m["kept_epoch"] for m in members]}
            if as_json:
                print_json(said)
            else:
                typer.echo(f"{out}: {len(members)} members of {run}, epochs {said['epochs'][0]}-{said['epochs'][-1]}")
            return
        try:
            body = reselect(run, out, select_from or 0, epoch)
        except SelectionError as exc:
            raise fail(str(exc)) from None
    summary = {
        "out": str(out),
        "run": str(run),
        "epoch": body["kept_epoch"],
        "validation_score": body["best_validation_score"],
    }
    if as_json:
        print_json(summary)
        return
    epoch = summary["epoch"]
    typer.echo(
        f"{out}: {run} keeping {start_of(body) if epoch == -1 else f'epoch {epoch}'}"
        f" (validation {summary['validation_score']:.3f})"
    )
