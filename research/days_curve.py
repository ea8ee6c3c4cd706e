"""How a method's gap over its baseline moves with the amount of logs it was fitted on.

The markets are nested cuts of one market (``rcb market subset DIR --train-days N``): the first N train days, the
same test and OOD days. Each cut has its own ``rcb evaluate`` output, in which the method and its baseline (the PID
tuned on the same N days) played the same held-out days; the gap is the paired bootstrap of
:mod:`research.significance` on each. The figure draws the gap and its 95% interval against N, one panel a split,
with the issue's bar (+0.03 ANS) as a line.

    python -m research.days_curve OUT.png --method shield:ensemble:cbrl \\
        --point test 30 out/s26/t30/sc-test/episodes.csv --point ood 30 out/s26/t30/sc-ood/episodes.csv ...

prints one line per point (split, train days, ANS gap and CSR gap with intervals) and writes the figure.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from research.significance import PairedGap, paired_gap

BAR = 0.03
"""The suite target: ANS at least the PID's + 0.03 (at the PID's CSR)."""


@dataclass(frozen=True)
class Point:
    """One cut's evaluation on one split."""

    split: str
    train_days: int
    episodes: Path


def gaps(points: list[Point], method: str, baseline: str) -> list[tuple[Point, PairedGap]]:
    """Each point's paired gap, in the order given (raises ``ValueError`` where a method did not play)."""
    return [(p, paired_gap(pd.read_csv(p.episodes), method, baseline)) for p in points]


def plot(results: list[tuple[Point, PairedGap]], out: Path, method: str, baseline: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    splits = list(dict.fromkeys(p.split for p, _ in results))
    fig, axes = plt.subplots(1, len(splits), figsize=(4.5 * len(splits), 3.6), squeeze=False, sharey=True)
    for ax, split in zip(axes[0], splits, strict=True):
        rows = sorted(((p.train_days, g) for p, g in results if p.split == split), key=lambda r: r[0])
        days = [d for d, _ in rows]
        ans = [g.ans for _, g in rows]
        low = [g.ans - g.ans_low for _, g in rows]
        high = [g.ans_high - g.ans for _, g in rows]
        ax.errorbar(days, ans, yerr=[low, high], marker="o", capsize=4, label=f"{method} - {baseline} (mean daily)")
        # The bar is read on median ANS over seeds at the PID's CSR; the line is a guide on this mean gap.
        ax.axhline(BAR, color="tab:green", linestyle="--", linewidth=1, label=f"bar (+{BAR}, read on medians)")
        ax.axhline(0.0, color="grey", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xticks(days, [str(d) for d in days])
        ax.set_xlabel("train days")
        ax.set_title(f"{split} ({rows[0][1].days} days)")
    axes[0][0].set_ylabel("ANS gap (mean daily, 95% interval)")
    axes[0][0].legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m research.days_curve", description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the figure (PNG)")
    parser.add_argument("--method", required=True, help="the method's label in episodes.csv")
    parser.add_argument("--baseline", default="pid", help="the label it is compared with (default pid)")
    parser.add_argument(
        "--point",
        nargs=3,
        action="append",
        required=True,
        metavar=("SPLIT", "TRAIN_DAYS", "EPISODES_CSV"),
        help="one cut's evaluation on one split (repeatable)",
    )
    args = parser.parse_args(argv)
    if args.out.is_dir() or not args.out.parent.is_dir():
        print(f"error: {args.out}: the figure needs a file path in an existing directory", file=sys.stderr)
        return 2
    points = []
    for split, days, path in args.point:
        if not days.isdigit() or int(days) < 1:
            print(f"error: TRAIN_DAYS must be a positive integer, got {days!r}", file=sys.stderr)
            return 2
        if not Path(path).is_file():
            print(f"error: {path}: no such file (an `rcb evaluate` output's episodes.csv)", file=sys.stderr)
            return 2
        points.append(Point(split, int(days), Path(path)))
    try:
        results = gaps(points, args.method, args.baseline)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyError as error:  # an episodes.csv without rcb evaluate's columns
        print(f"error: not an `rcb evaluate` episodes.csv: no column {error}", file=sys.stderr)
        return 2
    for point, gap in results:
        print(f"{point.split} {point.train_days} train days, {gap.days} days: ANS {gap.describe()}")
    plot(results, args.out, args.method, args.baseline)
    print(f"figure: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
