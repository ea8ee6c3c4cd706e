"""`rcb curves`: learning curves of several methods' runs on one plot (the paper's Fig. 6) and the speed table."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer

from rcb.commands.common import check_output_file, console, fail, print_json, user_errors

# training/ (pandas, torch, matplotlib, the solvers) is imported inside the functions, so `rcb --help` loads none
# of it (rcb/cli.py).


def curves_command(
    groups: Annotated[
        list[str],
        typer.Argument(help="LABEL=GLOB per method, e.g. 'hard=runs/sc/hard-s*' (one run directory per seed)."),
    ],
    out: Annotated[Path, typer.Option("--out", help="PNG to write.")] = Path("out/curves.png"),
    reference: Annotated[
        str, typer.Option("--reference", help="Label whose final score the speed table measures against.")
    ] = "hard",
    title: Annotated[str, typer.Option("--title", help="Plot title.")] = "",
    as_json: Annotated[bool, typer.Option("--json", help="Print the speed table as JSON.")] = False,
) -> None:
    """Plot validation score per gradient update (mean over seeds, min-max band) and time-to-reference."""
    from training.evaluation.curves import CurveError, expand_runs, load_group, plot, speed_table, split_group

    with user_errors():
        check_output_file(out)
        try:
            loaded = []
            for spec in groups:
                group = split_group(spec)
                if group is None:
                    raise CurveError(f"{spec!r}: expected LABEL=GLOB, e.g. crl=runs/sc/crl-s*")
                label, pattern = group
                loaded.append(load_group(label, expand_runs(pattern)))
            table = speed_table(loaded, reference)
            path = plot(loaded, out, title)
        except CurveError as exc:
            raise fail(str(exc)) from None
    if as_json:
        print_json(table)
        return
    typer.echo(
        f"| method | final score (last 3 epochs) | updates to reach {reference}'s final | share of {reference}'s |"
    )
    typer.echo("|:---|---:|---:|---:|")
    for row in table:
        steps = row["updates_to_reference_final"]
        share = row["share_of_reference_updates"]
        reached = "never" if math.isinf(steps) else f"{steps:,.0f}"
        shared = "—" if math.isinf(share) else f"{share:.2f}"
        typer.echo(f"| {row['method']} | {row['final']:.3f} | {reached} | {shared} |")
    console.print(f"wrote {path}", markup=False)
