"""How sure a row's gap against PID is: a paired bootstrap over the days both methods played.

A suite row is 30 days, so one day moves CSR by 0.033 and ANS by about 0.02. ``rcb evaluate``'s
``episodes.csv`` pairs every method's episodes by day, so the gap of a method over PID can be read day by
day and resampled: draw the days with replacement, take the mean of the daily gaps, repeat. The
percentile interval of those means says whether a "met" or "missed" verdict is more than one day's luck.

Daily values are each method's mean over its seeds on that day (a deterministic method played one seed),
so the gaps' mean is ``mean-over-days`` of ANS and CSR. For a stochastic method that differs slightly from the
tables' median over seeds; the interval is about the days, which dominate the uncertainty here.

``python -m research.significance EPISODES_CSV METHOD [--baseline pid] [--seed K]`` prints the gaps.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

RESAMPLES = 10_000
"""Bootstrap draws; at 30 days the interval's ends move by about 0.002 ANS between generator seeds."""
LEVEL = 0.95
"""The interval's coverage."""


@dataclass(frozen=True)
class PairedGap:
    """``method`` minus ``baseline`` over the days both played: the mean daily gap and its bootstrap interval,
    for the score (``D / D* x 1[feasible]``, ANS's summand) and for feasibility (CSR's)."""

    days: int
    ans: float
    ans_low: float
    ans_high: float
    csr: float
    csr_low: float
    csr_high: float

    def describe(self, decimals: int = 3) -> str:
        """``+0.012 [-0.020, +0.045]; CSR -0.03 [-0.10, +0.03]``."""
        a = f"{self.ans:+.{decimals}f} [{self.ans_low:+.{decimals}f}, {self.ans_high:+.{decimals}f}]"
        c = f"{self.csr:+.2f} [{self.csr_low:+.2f}, {self.csr_high:+.2f}]"
        return f"{a}; CSR {c}"


def daily(episodes: pd.DataFrame, method: str, seed: int | None = None) -> pd.DataFrame:
    """One row per day of ``method`` (one seed of it, if ``seed``): the mean ``score`` and ``feasible``."""
    rows = episodes[episodes["method"].astype(str) == method]
    if seed is not None:
        rows = rows[rows["seed"] == seed]
    if rows.empty:
        raise ValueError(f"no episodes of {method!r}" + ("" if seed is None else f" with seed {seed}"))
    return rows.assign(feasible=rows["feasible"].astype(float)).groupby("day")[["score", "feasible"]].mean()


def paired_gap(
    episodes: pd.DataFrame,
    method: str,
    baseline: str = "pid",
    seed: int | None = None,
    resamples: int = RESAMPLES,
    rng_seed: int = 0,
) -> PairedGap:
    """The paired bootstrap of ``method`` (one ``seed`` of it, if given) against ``baseline`` on their common
    days (see the module docstring). Raises ``ValueError`` when either did not play or they share no day."""
    ours, theirs = daily(episodes, method, seed), daily(episodes, baseline)
    gaps = ours.add_suffix("_ours").join(theirs.add_suffix("_theirs"), how="inner")
    if gaps.empty:
        raise ValueError(f"{method!r} and {baseline!r} played no day in common")
    score = (gaps["score_ours"] - gaps["score_theirs"]).to_numpy()
    feasible = (gaps["feasible_ours"] - gaps["feasible_theirs"]).to_numpy()
    draws = np.random.default_rng(rng_seed).integers(0, len(score), size=(resamples, len(score)))
    tails = (100 * (1 - LEVEL) / 2, 100 * (1 + LEVEL) / 2)
    score_low, score_high = np.percentile(score[draws].mean(axis=1), tails)
    feasible_low, feasible_high = np.percentile(feasible[draws].mean(axis=1), tails)
    return PairedGap(
        days=len(score),
        ans=float(score.mean()),
        ans_low=float(score_low),
        ans_high=float(score_high),
        csr=float(feasible.mean()),
        csr_low=float(feasible_low),
        csr_high=float(feasible_high),
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m research.significance", description=__doc__.splitlines()[0])
    parser.add_argument("episodes", type=Path, help="an `rcb evaluate` output's episodes.csv")
    parser.add_argument("method", help="the method's label in episodes.csv (e.g. shield:ensemble:cbrl)")
    parser.add_argument("--baseline", default="pid", help="the label it is compared with (default pid)")
    parser.add_argument("--seed", type=int, help="only this seed of the method (a single run, run k = seed k)")
    args = parser.parse_args(argv)
    if not args.episodes.is_file():
        print(f"{args.episodes}: no such file (an `rcb evaluate` output's episodes.csv)", file=sys.stderr)
        return 2
    try:
        gap = paired_gap(pd.read_csv(args.episodes), args.method, args.baseline, args.seed)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"{args.method} - {args.baseline} over {gap.days} days (95% paired bootstrap): ANS {gap.describe()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
