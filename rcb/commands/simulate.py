"""`rcb simulate`: replay one logged day under 48 given bid ratios (docs/cli.md).

SC replays without a budget against ROI target L = 1; MC uses the day's manifest constraints, and the
budget ends the campaign's bidding at the first win that would overspend it (early termination, as in
the paper's evaluation protocol). Output: ``{day, setting, roi_target, budget, delivery, cost, roi,
feasible, budget_exhausted, slots: [{slot, ratio, delivery, cost, wins, auctions}]}`` where
``roi`` is ``null`` when nothing was spent and ``budget`` is ``null`` for none.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import typer

from model.contract import Setting
from rcb.commands.common import print_json, stdout_console, user_errors

# training/ (pandas, torch, matplotlib, the solvers) is imported inside the functions, so `rcb --help` loads none
# of it (rcb/cli.py).


def parse_ratios(text: str, slots: int) -> list[float]:
    """``"r0,...,r{slots-1}"`` (or a single value for every slot) as a list of bid ratios in [0, 4].

    Every value is checked (a number, finite, in range) before the count, so ``a,b,c`` says "not a
    number" rather than "expected 48". Raises ValueError with a one-line message naming the offending slot.
    """
    from model.contract import RATIO_MAX, RATIO_MIN

    parts = [p.strip() for p in text.split(",")]
    ratios = []
    for slot, part in enumerate(parts):
        try:
            value = float(part)
        except ValueError:
            raise ValueError(f"--ratios: value for slot {slot} is not a number: {part!r}") from None
        if not math.isfinite(value):
            raise ValueError(f"--ratios: ratio for slot {slot} must be finite, got {part!r}")
        if not RATIO_MIN <= value <= RATIO_MAX:
            raise ValueError(
                f"--ratios: ratio for slot {slot} is {part}, outside the bid-ratio range [{RATIO_MIN:g}, {RATIO_MAX:g}]"
            )
        ratios.append(value)
    if len(ratios) not in (1, slots):
        raise ValueError(f"--ratios: expected {slots} comma-separated values (or one for every slot), got {len(parts)}")
    return ratios * slots if len(ratios) == 1 else ratios


def simulate_day(data_dir: Path, day: int, setting: Setting, ratios: list[float]) -> dict[str, Any]:
    """Replay ``day`` of the market at ``data_dir`` with per-slot ``ratios``; what ``--json`` prints, as a dict."""
    import numpy as np

    from training.market.dataset import Market
    from training.replay.metrics import is_feasible
    from training.replay.oracle import setting_constraints
    from training.replay.simulator import BatchedReplay, DayIndex

    market = Market.open(data_dir)
    roi_target, budget = setting_constraints(market.entry(day), setting)
    env = BatchedReplay([DayIndex(market.load(day))], np.zeros(1, dtype=np.int64), np.array([budget]))
    slots = []
    for t, ratio in enumerate(ratios):
        step = env.step(np.array([ratio]))
        slots.append(
            {
                "slot": t,
                "ratio": ratio,
                "delivery": float(step.delivery[0]),
                "cost": float(step.cost[0]),
                "wins": int(step.wins[0]),
                "auctions": int(step.auctions[0]),
            }
        )
    delivery, cost = float(env.delivery[0]), float(env.cost[0])
    return {
        "day": day,
        "setting": setting.value,
        "roi_target": roi_target,
        "budget": None if math.isinf(budget) else budget,
        "delivery": delivery,
        "cost": cost,
        "roi": delivery / cost if cost > 0 else None,
        "feasible": bool(is_feasible(delivery, cost, roi_target, budget)[0]),
        "budget_exhausted": bool(env.exhausted[0]),
        "slots": slots,
    }


def _render(result: dict[str, Any]) -> None:
    """The result as a per-slot rich table plus a totals line, on stdout."""
    from rich.table import Table

    table = Table(title=f"day {result['day']} ({result['setting'].upper()})", show_footer=True)
    table.add_column("slot", justify="right", footer="total")
    table.add_column("time")
    table.add_column("ratio", justify="right")
    table.add_column("auctions", justify="right", footer=str(sum(s["auctions"] for s in result["slots"])))
    table.add_column("wins", justify="right", footer=str(sum(s["wins"] for s in result["slots"])))
    table.add_column("delivery", justify="right", footer=f"{result['delivery']:.4f}")
    table.add_column("cost", justify="right", footer=f"{result['cost']:.4f}")
    for s in result["slots"]:
        hour, half = divmod(s["slot"], 2)
        table.add_row(
            str(s["slot"]),
            f"{hour:02d}:{30 * half:02d}",
            f"{s['ratio']:.4g}",
            str(s["auctions"]),
            str(s["wins"]),
            f"{s['delivery']:.4f}",
            f"{s['cost']:.4f}",
        )
    out = stdout_console()
    out.print(table)
    roi = "inf (nothing spent)" if result["roi"] is None else f"{result['roi']:.4f}"
    budget = "none" if result["budget"] is None else f"{result['budget']:.4f}"
    verdict = "[green]feasible[/]" if result["feasible"] else "[red]infeasible[/]"
    stopped = " (budget exhausted: bidding stopped early)" if result["budget_exhausted"] else ""
    out.print(
        f"delivery {result['delivery']:.4f}  cost {result['cost']:.4f}  ROI {roi}  "
        f"(target {result['roi_target']:g}, budget {budget}): {verdict}{stopped}"
    )


def simulate_command(
    data_dir: Annotated[Path, typer.Argument(help="Market directory (manifest.json plus one file per day).")],
    day: Annotated[int, typer.Option("--day", help="The day (episode id) to replay.")],
    setting: Annotated[
        Setting, typer.Option("--setting", help="sc: L = 1, no budget; mc: the day's manifest L and B.")
    ],
    ratios: Annotated[
        str,
        typer.Option(
            "--ratios", help="48 comma-separated bid ratios r0,...,r47 in [0, 4] (or one ratio for every slot)."
        ),
    ],
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as one JSON object on stdout.")] = False,
) -> None:
    """Replay one day with the given per-slot bid ratios and report delivery, cost, ROI and feasibility."""
    from model.contract import SLOTS_PER_DAY

    with user_errors():
        parsed = parse_ratios(ratios, SLOTS_PER_DAY)  # before the market is opened: a typo costs nothing
        result = simulate_day(data_dir, day, setting, parsed)
    if as_json:
        print_json(result)
    else:
        _render(result)
