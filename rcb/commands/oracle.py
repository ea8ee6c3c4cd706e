"""`rcb oracle DIR --setting sc|mc [--kind slot|day] [--split S] [--json]`: hindsight oracles per day (docs/cli.md).

With ``--json``, one object per line on stdout: ``{day, split, setting, roi_target, budget, delivery, cost,
ratios: [48 floats]}``; without it, a table on stdout. Progress and messages go to stderr. Answers are cached in
``DIR/.rcb-cache/oracle/`` (see :mod:`training.replay.oracle`), so a second run is fast.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from model.contract import Setting
from rcb.commands.common import console, fail, print_json, progress, stdout_console, user_errors
from training.replay.oracle import OracleKind

# Past OracleKind (for the option's choices), training/ is imported inside the functions, and the solver only when an
# oracle is solved, so `rcb --help` stays light (rcb/cli.py).


class SplitChoice(StrEnum):
    train = "train"
    test = "test"
    ood = "ood"


def oracle_command(
    data_dir: Annotated[Path, typer.Argument(metavar="DIR", help="Market directory (manifest + day files).")],
    setting: Annotated[
        Setting, typer.Option("--setting", help="sc: ROI >= 1, no budget; mc: each day's manifest constraints.")
    ],
    kind: Annotated[
        OracleKind,
        typer.Option("--kind", help="slot: one ratio per slot (the paper's D*, a MILP); day: one ratio all day."),
    ] = OracleKind.SLOT,
    split: Annotated[SplitChoice | None, typer.Option("--split", help="Only the days of this split.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per day on stdout.")] = False,
) -> None:
    """Hindsight oracle per day: the best ratios knowing the whole day (paper appendix, "Slot-wise Oracle")."""
    from training.market.dataset import Market
    from training.replay.oracle import market_oracle

    with user_errors():
        if not data_dir.is_dir():
            raise fail(f"{data_dir}: no such directory")
        market = Market.open(data_dir)
        entries = market.days if split is None else market.split(split.value)
        if not entries:
            where = f"split {split.value!r} of {data_dir}" if split is not None else str(data_dir)
            raise fail(f"{where}: no days")
        with progress() as bar:
            task = bar.add_task(f"{kind.value}-wise oracle, {setting.value.upper()}", total=len(entries))
            results = market_oracle(
                market,
                setting.value,
                kind.value,
                days=[e.day for e in entries],
                progress=lambda _: bar.advance(task),
                on_warning=lambda message: console.print(f"[yellow]warning:[/] {escape(message)}"),
            )
    if as_json:
        for result in results:
            print_json(result.to_dict())
        return

    from rich.table import Table

    table = Table(title=f"{kind.value}-wise oracle, {setting.value.upper()}, {data_dir}")
    for column in ("day", "split", "L", "B", "delivery", "cost", "ROI", "ratios (min / mean / max)"):
        table.add_column(column, justify="left" if column == "split" else "right")
    for r in results:
        roi = r.delivery / r.cost if r.cost > 0 else float("inf")
        ratios = f"{min(r.ratios):.2f} / {sum(r.ratios) / len(r.ratios):.2f} / {max(r.ratios):.2f}"
        budget = "-" if r.budget is None else f"{r.budget:,.2f}"
        table.add_row(
            str(r.day),
            r.split,
            f"{r.roi_target:.4g}",
            budget,
            f"{r.delivery:,.2f}",
            f"{r.cost:,.2f}",
            f"{roi:.4f}",
            ratios,
        )
    stdout_console().print(table)
