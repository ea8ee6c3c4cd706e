"""How a verdict against PID moves as more days are read: the running gap, and the gap on the first days vs all.

The suite reads 20 OOD days per market; ``rcb market generate --days-ood N`` with a larger N adds OOD days of the
same process and keeps the first ones byte-identical (each day is drawn from ``default_rng([seed, day])``), so a
model evaluated on the longer market is read on the suite's days plus new ones. This module takes such
evaluations (``rcb evaluate``'s ``episodes.csv``) and answers, per row: the mean daily gap to the baseline over
the first ``--first`` days and over all, each with its paired-bootstrap interval (:mod:`research.significance`),
and a plot of the running mean of the daily ANS gap, days in order.

``python -m research.long_ood OUT_PNG --row LABEL EPISODES_CSV METHOD [--row ...] [--first 20] [--baseline pid]``;
``research/scripts/long_ood.sh`` generates the markets, evaluates the models and calls it.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from research.significance import PairedGap, daily, paired_gap
from research.suite_report import ANS_MARGIN


@dataclass(frozen=True)
class Row:
    """One model on one market: ``label``, the episodes' file and the method's label in it."""

    label: str
    episodes: Path
    method: str


def daily_gaps(episodes: pd.DataFrame, method: str, baseline: str = "pid") -> pd.Series:
    """Per day both played (in day order), the method's mean score over its seeds minus the baseline's."""
    ours, theirs = daily(episodes, method)["score"], daily(episodes, baseline)["score"]
    return (ours - theirs).dropna().sort_index()


def running_mean(gaps: pd.Series) -> np.ndarray:
    """The mean of the first k daily gaps, for k = 1..days."""
    values = gaps.to_numpy(dtype=float)
    return np.cumsum(values) / np.arange(1, len(values) + 1)


def first_and_all(
    episodes: pd.DataFrame, method: str, first: int, baseline: str = "pid"
) -> tuple[PairedGap, PairedGap]:
    """The paired gap over the first ``first`` days (in day order) and over every day."""
    days = sorted(episodes["day"].unique())
    head = episodes[episodes["day"].isin(days[:first])]
    return paired_gap(head, method, baseline), paired_gap(episodes, method, baseline)


def plot(rows: list[Row], frames: dict[Path, pd.DataFrame], out: Path, first: int, baseline: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    # A label's first word (the market) picks the colour, the rest (the setting) the line style.
    colours: dict[str, str] = {}
    styles: dict[str, str] = {}
    for row in rows:
        head, _, rest = row.label.partition(" ")
        colour = colours.setdefault(head, f"C{len(colours) % 10}")
        style = styles.setdefault(rest, ["-", "--", "-.", ":"][len(styles) % 4])
        curve = running_mean(daily_gaps(frames[row.episodes], row.method, baseline))
        ax.plot(np.arange(1, len(curve) + 1), curve, color=colour, ls=style, label=row.label)
    ax.axhline(ANS_MARGIN, color="k", lw=0.8, ls=(0, (1, 3)), label=f"bar: {baseline} + {ANS_MARGIN}")
    ax.axhline(0.0, color="grey", lw=0.6)
    ax.axvline(first, color="grey", lw=0.8, ls="--", label=f"the first {first} days")
    ax.set_xlabel("days read (in day order)")
    ax.set_ylabel(f"running mean of the daily ANS gap to {baseline}")
    ax.legend(fontsize=8, ncol=2, loc="lower right")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m research.long_ood", description=__doc__.splitlines()[0])
    parser.add_argument("plot", type=Path, help="where to write the running-gap plot (PNG)")
    parser.add_argument(
        "--row",
        nargs=3,
        action="append",
        required=True,
        metavar=("LABEL", "EPISODES_CSV", "METHOD"),
        help="one model on one market (repeat): a label, an `rcb evaluate` episodes.csv, the method's label in it",
    )
    parser.add_argument("--first", type=int, default=20, help="the days the shorter evaluation read (default 20)")
    parser.add_argument("--baseline", default="pid", help="the method compared with (default pid)")
    args = parser.parse_args(argv)
    if args.first < 1:
        parser.error(f"--first must be at least 1 (got {args.first})")
    try:
        rows = [Row(label, Path(path), method) for label, path, method in args.row]
        frames = {row.episodes: pd.read_csv(row.episodes) for row in rows}
        for row in rows:
            head, whole = first_and_all(frames[row.episodes], row.method, args.first, args.baseline)
            if head.days == whole.days:
                print(f"warning: {row.label}: {whole.days} days in all, not more than --first", file=sys.stderr)
            print(f"{row.label}: {row.method} - {args.baseline}")
            print(f"  {f'first {head.days} days':>14}: ANS {head.describe()}")
            print(f"  {f'all {whole.days} days':>14}: ANS {whole.describe()}")
        plot(rows, frames, args.plot, args.first, args.baseline)
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
