"""How non-stationary is a market? A Fig.-4-style PNG and a text summary (``rcb market report``).

The paper's Fig. 4 shows (left) the spread of the slot-wise optimal ratios around each day's
optimal ratio and (right) the distribution of the day-wise optimal ratio per split. Both come from
the hindsight oracles of the SC setting (L = 1, no budget); we add the traffic profile per split and
every day's slot-wise optimal ratios (a heat map, one row per day), and for MC how often each constraint binds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from model.contract import RATIO_MAX, SLOTS_PER_DAY
from training.market.constraints import day_curve
from training.market.dataset import SPLITS, Market
from training.replay.oracle import OracleResult, market_oracle
from training.replay.simulator import DayIndex

SPLIT_COLORS = {"train": "tab:blue", "test": "tab:green", "ood": "tab:red"}


@dataclass
class DayFacts:
    """What the report needs of one day."""

    day: int
    split: str
    impressions_per_slot: np.ndarray
    delivery_share: float
    roi_at_top_ratio: float
    slot_ratios: np.ndarray
    slot_wins: np.ndarray
    day_ratio: float
    slot_delivery: float
    day_delivery: float
    mc_budget_binds: bool = False
    mc_roi_binds: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def collect_facts(market: Market, progress: Callable[[OracleResult], None] | None = None) -> list[DayFacts]:
    """Solve (or read cached) SC slot/day oracles and MC slot oracles; gather per-day facts."""
    slot_sc = {r.day: r for r in market_oracle(market, "sc", kind="slot", progress=progress)}
    day_sc = {r.day: r for r in market_oracle(market, "sc", kind="day", progress=progress)}
    slot_mc = {r.day: r for r in market_oracle(market, "mc", kind="slot", progress=progress)}
    facts = []
    for entry in market.days:
        index = DayIndex(market.load(entry.day))
        top_delivery, top_cost = day_curve(index, np.array([RATIO_MAX]))
        oracle = slot_sc[entry.day]
        wins = np.array([index.slot_outcome(t, np.array([oracle.ratios[t]])).wins[0] for t in range(SLOTS_PER_DAY)])
        mc = slot_mc[entry.day]
        facts.append(
            DayFacts(
                day=entry.day,
                split=entry.split,
                impressions_per_slot=index.auctions.astype(float),
                delivery_share=float(np.mean(index.log.delivery > 0)),
                roi_at_top_ratio=float(top_delivery[0] / top_cost[0]) if top_cost[0] > 0 else float("inf"),
                slot_ratios=np.asarray(oracle.ratios),
                slot_wins=wins,
                day_ratio=float(day_sc[entry.day].ratios[0]),
                slot_delivery=oracle.delivery,
                day_delivery=day_sc[entry.day].delivery,
                mc_budget_binds=mc.cost >= 0.99 * entry.mc.budget,
                mc_roi_binds=mc.cost > 0 and mc.delivery / mc.cost <= 1.01 * entry.mc.roi_target,
            )
        )
    return facts


def slot_deviations(fact: DayFacts) -> np.ndarray:
    """log(slot-wise optimal ratio / day-wise optimal ratio) over the slots where the oracle wins something.

    Slots with no win say nothing about the ratio (every low ratio ties there), so they are left out.
    """
    used = fact.slot_wins > 0
    return np.log(fact.slot_ratios[used] / fact.day_ratio)


def summarize(facts: list[DayFacts]) -> dict[str, dict[str, float]]:
    """Per split: size, sparsity, how binding the ROI is, how much slot-wise control gains."""
    out: dict[str, dict[str, float]] = {}
    for split in SPLITS:
        days = [f for f in facts if f.split == split]
        if not days:
            continue
        devs = np.concatenate([slot_deviations(f) for f in days])
        day_ratios = np.array([f.day_ratio for f in days])
        gain = [f.slot_delivery / f.day_delivery - 1 for f in days if f.day_delivery > 0]
        out[split] = {
            "days": len(days),
            "impressions_per_day": float(np.mean([f.impressions_per_slot.sum() for f in days])),
            "delivery_share": float(np.mean([f.delivery_share for f in days])),
            "sc_roi_binds_share": float(np.mean([f.roi_at_top_ratio < 1.0 for f in days])),
            "sc_oracle_positive_share": float(np.mean([f.slot_delivery > 0 for f in days])),
            "day_ratio_mean": float(day_ratios.mean()),
            "day_ratio_std": float(day_ratios.std()),
            "slot_log_deviation_std": float(devs.std()) if devs.size else float("nan"),
            "slot_over_day_oracle_gain": float(np.mean(gain)) if gain else float("nan"),
            "mc_budget_binds_share": float(np.mean([f.mc_budget_binds for f in days])),
            "mc_roi_binds_share": float(np.mean([f.mc_roi_binds for f in days])),
        }
    return out


def plot(facts: list[DayFacts], path: Path, title: str) -> None:
    """The 2x2 figure: slot deviations, day-wise ratios, traffic profile, every day's slot-wise ratios."""
    import matplotlib  # here, not at the top: the facts and the summary need no matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(2, 2, figsize=(12, 8.5))
    splits = [s for s in SPLITS if any(f.split == s for f in facts)]

    ax = axes[0, 0]
    bins = np.linspace(-1.5, 1.5, 61)
    for split in splits:
        devs = np.concatenate([slot_deviations(f) for f in facts if f.split == split])
        ax.hist(devs, bins=bins, density=True, histtype="step", lw=2, color=SPLIT_COLORS[split], label=split)
    ax.set_xlabel("log(slot-wise optimal ratio / day-wise optimal ratio)")
    ax.set_ylabel("density")
    ax.set_title("Slot-wise optimal-ratio deviations (SC)")
    ax.legend()

    ax = axes[0, 1]
    bins = np.linspace(0, RATIO_MAX, 41)
    for split in splits:
        ratios = [f.day_ratio for f in facts if f.split == split]
        ax.hist(ratios, bins=bins, alpha=0.45, color=SPLIT_COLORS[split], label=f"{split} ({len(ratios)} days)")
    ax.set_xlabel("day-wise optimal bid ratio")
    ax.set_ylabel("days")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title("Day-wise optimal ratio per split (SC)")
    ax.legend()

    ax = axes[1, 0]
    hours = (np.arange(SLOTS_PER_DAY) + 0.5) / 2
    for split in splits:
        traffic = np.array([f.impressions_per_slot for f in facts if f.split == split])
        mean = traffic.mean(axis=0)
        ax.plot(hours, mean, color=SPLIT_COLORS[split], lw=2, label=f"{split} mean")
        ax.fill_between(hours, traffic.min(axis=0), traffic.max(axis=0), color=SPLIT_COLORS[split], alpha=0.12)
    ax.set_xlabel("hour of day")
    ax.set_ylabel("impressions per slot")
    ax.set_title("Traffic per slot (band: min..max over days)")
    ax.legend()

    ax = axes[1, 1]
    # Every day's path as one row of a heat map, grouped by split: readable for 10 days or 100, no legend.
    ordered = [f for split in splits for f in facts if f.split == split]
    grid = np.array([np.where(f.slot_wins > 0, f.slot_ratios, np.nan) for f in ordered])
    cmap = plt.get_cmap("viridis").with_extremes(bad="0.85")
    image = ax.imshow(
        np.ma.masked_invalid(grid),
        aspect="auto",
        interpolation="nearest",
        cmap=cmap,
        vmin=0.0,
        vmax=RATIO_MAX,
        extent=(0, SLOTS_PER_DAY / 2, len(ordered), 0),
    )
    fig.colorbar(image, ax=ax, label="slot-wise optimal bid ratio", pad=0.02)
    edges = np.cumsum([0] + [sum(f.split == s for f in facts) for s in splits])
    for edge in edges[1:-1]:
        ax.axhline(edge, color="white", lw=2)
    ax.set_yticks(
        (edges[:-1] + edges[1:]) / 2, [f"{s}\n({edges[i + 1] - edges[i]} days)" for i, s in enumerate(splits)]
    )
    for tick, split in zip(ax.get_yticklabels(), splits, strict=True):
        tick.set_color(SPLIT_COLORS[split])
    ax.set_xticks(range(0, 25, 4))
    ax.set_xlabel("hour of day")
    ax.set_title("Slot-wise optimal ratio, one row per day (grey: no win)")

    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def format_summary(summary: dict[str, dict[str, float]], title: str = "Market summary per split") -> str:
    """A plain-text table of :func:`summarize` under a heading (also what the CLI prints)."""
    rows = [
        ("days", "days", "{:.0f}"),
        ("impressions_per_day", "impressions/day", "{:,.0f}"),
        ("delivery_share", "impressions with delivery", "{:.2%}"),
        ("sc_roi_binds_share", "SC: ROI binds (ratio 4 breaks L=1)", "{:.0%}"),
        ("sc_oracle_positive_share", "SC: oracle feasible with D>0", "{:.0%}"),
        ("day_ratio_mean", "day-wise optimal ratio, mean", "{:.2f}"),
        ("day_ratio_std", "day-wise optimal ratio, std", "{:.2f}"),
        ("slot_log_deviation_std", "slot-wise log-deviation, std", "{:.3f}"),
        ("slot_over_day_oracle_gain", "slot-wise oracle gain over day-wise", "{:+.1%}"),
        ("mc_budget_binds_share", "MC: budget binds", "{:.0%}"),
        ("mc_roi_binds_share", "MC: ROI binds", "{:.0%}"),
    ]
    splits = list(summary)
    width = max(len(label) for _, label, _ in rows) + 2
    lines = [title, "", "per split".ljust(width) + "".join(s.rjust(12) for s in splits)]
    lines.append("-" * len(lines[-1]))
    for key, label, fmt in rows:
        lines.append(label.ljust(width) + "".join(fmt.format(summary[s][key]).rjust(12) for s in splits))
    return "\n".join(lines)
