"""`rcb market import`: convert impression logs (the project's own schema, the CBRL reference's dumps, AuctionNet)
into a market directory."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from rcb.commands.common import (
    CONSTRAINTS_HELP,
    ConstraintRecipeName,
    check_output_dir,
    console,
    print_json,
    progress,
    stdout_console,
    user_errors,
)

# training/ (pandas, torch, matplotlib, the solvers) is imported inside the functions, so `rcb --help` loads none
# of it (rcb/cli.py).


class LogFormat(StrEnum):
    """The log formats `rcb market import` reads (training/market/importers/; a test keeps the two equal)."""

    rcb = "rcb"
    cbrl_syn = "cbrl-syn"
    auctionnet = "auctionnet"


class Delivery(StrEnum):
    """What an imported impression delivers when won (training.market.importers.DELIVERY_MODES)."""

    realized = "realized"
    expected = "expected"


DELIVERY_HELP = (
    "realized = the logged outcome (rcb: delivery; cbrl-syn: rev; auctionnet: conversionAction * V, seen only where"
    " the logged advertiser won); expected = the impression's predicted value (rcb: expected_delivery, else the"
    " utility; cbrl-syn: pctr * pppc; auctionnet: pValue * V)."
)

CONSTRAINTS_FILE_HELP = (
    "rcb, cbrl-syn: each day's MC constraints from a CSV or Parquet file with columns day, roi_target, budget"
    " (every imported day needs a row; rows for other days are left out and reported), instead of drawing them."
)


MAX_RANGE = 100_000
"""The most days one ``A-B`` range names (a typo such as ``1-20210901`` is refused, not expanded)."""


def parse_days(text: str) -> set[int]:
    """``"3,5,10-12"`` -> ``{3, 5, 10, 11, 12}``; raises ValueError naming the bad item."""
    days: set[int] = set()
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        low, dash, high = item.partition("-")
        try:
            if dash and low:
                first, last = int(low), int(high)
                if last < first or last - first >= MAX_RANGE:
                    raise ValueError
                days.update(range(first, last + 1))
            else:
                days.add(int(item))
        except ValueError:
            raise ValueError(
                f"bad day {item!r} in {text!r}: expected integers or ranges like 3,5,10-12 (at most {MAX_RANGE:,} days)"
            ) from None
    return days


def summary_table(summary: dict[str, Any]) -> Table:
    """The import at a glance: days per split, rows kept, invalid rows by reason, notes, constraints-file rows."""
    delivery = summary.get("delivery", "realized")
    table = Table(title=f"{summary['format']} import ({delivery} delivery) -> {summary['out']}", show_header=True)
    table.add_column("what")
    table.add_column("count", justify="right")
    for split, count in summary["days_per_split"].items():
        table.add_row(f"days: {split}", f"{count:,}")
    table.add_row("rows read", f"{summary['n_rows']:,}")
    table.add_row("rows kept", f"{summary['n_kept']:,}")
    table.add_row("rows left out", f"{summary['n_invalid']:,}")
    for reason, count in sorted(summary["invalid_rows"].items(), key=lambda item: -item[1]):
        table.add_row(f"  invalid: {reason}", f"{count:,}")
    for note, count in summary["notes"].items():
        table.add_row(f"  note: {note}", f"{count:,}")
    given = summary.get("constraints_file")
    if given:
        table.add_row("constraints-file rows used", f"{given['n_used']:,}")
        for reason, count in given["left_out"].items():
            table.add_row(f"  constraints file, left out: {reason}", f"{count:,}")
    return table


def import_command(
    fmt: Annotated[LogFormat, typer.Option("--format", help="Format of the source logs.", case_sensitive=False)],
    src: Annotated[
        Path, typer.Argument(help="A log file, or a directory of log files (per day, per period, or any days each).")
    ],
    out: Annotated[Path, typer.Option("--out", help="Market directory to write (one Parquet per day + manifest).")],
    seed: Annotated[int, typer.Option("--seed", min=0, help="Seeds the train/test split and drawn constraints.")] = 0,
    test_fraction: Annotated[
        float, typer.Option("--test-fraction", min=0.0, max=1.0, help="Chance that a non-OOD day goes to test.")
    ] = 0.5,
    ood_days: Annotated[
        str, typer.Option("--ood-days", help="Day ids for the OOD split, e.g. 3,5,10-12 (default: none).")
    ] = "",
    value_per_conversion: Annotated[
        float | None,
        typer.Option(
            "--value-per-conversion",
            help="auctionnet: value V of a conversion (utility = pValue * V); default: the period's CPA, so L = 1.",
        ),
    ] = None,
    advertiser: Annotated[
        int | None, typer.Option("--advertiser", help="auctionnet: advertiserNumber to import (needed if several).")
    ] = None,
    constraints: Annotated[
        ConstraintRecipeName | None,
        typer.Option(
            "--constraints",
            help=f"rcb, cbrl-syn (default prior). {CONSTRAINTS_HELP}",
            case_sensitive=False,
        ),
    ] = None,
    constraints_file: Annotated[
        Path | None, typer.Option("--constraints-file", help=CONSTRAINTS_FILE_HELP, metavar="FILE")
    ] = None,
    delivery: Annotated[
        Delivery, typer.Option("--delivery", help=DELIVERY_HELP, case_sensitive=False)
    ] = Delivery.realized,
    force: Annotated[bool, typer.Option("--force", help="Replace a market already in OUT.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Import impression logs into a market directory (docs/data-schema.md); invalid rows are left out and
    reported by reason."""
    from training.market.importers import check_source, import_market, read_constraints_file

    with user_errors():
        check_output_dir(out)
        if not src.exists():
            raise FileNotFoundError(f"{src}: no such file or directory")
        ood = parse_days(ood_days)
        # Headers and the constraints file are small: a source without files or columns is refused before the bar.
        check_source(fmt.value, src, delivery.value)
        if constraints_file is not None:
            read_constraints_file(constraints_file)
        with progress(quiet=as_json) as bar:
            tasks: dict[str, Any] = {}

            def report(stage: str, done: int, total: int) -> None:
                if stage not in tasks:
                    tasks[stage] = bar.add_task(stage, total=total)
                bar.update(tasks[stage], completed=done, total=total)

            summary = import_market(
                fmt.value,
                src,
                out,
                seed=seed,
                test_fraction=test_fraction,
                ood_days=ood,
                value_per_conversion=value_per_conversion,
                advertiser=advertiser,
                progress=report,
                overwrite=force,
                constraints=constraints.value if constraints is not None else None,
                constraints_file=constraints_file,
                delivery=delivery.value,
            )
    result = summary.to_dict()
    if as_json:
        print_json(result)
        return
    stdout_console().print(summary_table(result))
    counts = result["days_per_split"]
    if (counts["train"] == 0 and test_fraction < 1) or (counts["test"] == 0 and test_fraction > 0):
        # An i.i.d. split of a few days can leave a split empty; say so rather than let training find out.
        console.print("[yellow]warning:[/] the train or test split is empty; try another --seed or --test-fraction")
