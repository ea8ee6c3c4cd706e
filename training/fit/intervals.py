"""A candidate's figures on the held-out days and their 95% intervals: a bootstrap over the days, seeded.

The figures are ``rcb evaluate``'s (docs/metrics.md): a seed's ANS is the mean over the days of ``D / D* x
1[feasible]`` and its CSR the share of feasible days; a candidate's median ANS is the median of its seeds' ANS, its
CSR their mean. An interval resamples the days with replacement (:data:`RESAMPLES` times, from
:data:`BOOTSTRAP_SEED`) and recomputes the figure on each resample; it spans the middle :data:`LEVEL` of them. Every
candidate is resampled with the same draws of the days (the same seed and the same number of days), so two
candidates' intervals come from the same resamples.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

BOOTSTRAP_SEED = 7919
RESAMPLES = 2000
LEVEL = 0.95


@dataclass(frozen=True)
class Figures:
    """One candidate's median ANS and mean CSR on the held-out days, each with its bootstrap interval."""

    ans: float
    ans_low: float
    ans_high: float
    csr: float
    csr_low: float
    csr_high: float
    seeds: int
    """Seeds played (1 for a deterministic candidate)."""
    days: int

    def record(self) -> dict[str, Any]:
        """The figures rounded for a card or a report (4 decimals)."""
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in asdict(self).items()}


def score_matrix(episodes: pd.DataFrame, days: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Each seed's score and feasibility on each day, ``(seeds, days)`` in the order of ``days``, from one
    candidate's episode rows (:func:`training.evaluation.evaluate.episode_rows`). Raises ``ValueError`` where a seed
    misses a day or plays one twice."""
    seeds = sorted(pd.unique(episodes["seed"]))
    position = {day: k for k, day in enumerate(days)}
    score = np.full((len(seeds), len(days)), np.nan)
    feasible = np.zeros((len(seeds), len(days)), dtype=bool)
    for i, seed in enumerate(seeds):
        rows = episodes[episodes["seed"] == seed]
        if sorted(rows["day"].tolist()) != sorted(days):
            raise ValueError(f"seed {seed}'s episodes are not one on each held-out day")
        at = [position[int(d)] for d in rows["day"]]
        score[i, at] = rows["score"].to_numpy(dtype=np.float64)
        feasible[i, at] = rows["feasible"].to_numpy(dtype=bool)
    return score, feasible


def figures(score: np.ndarray, feasible: np.ndarray) -> Figures:
    """Median ANS and mean CSR of ``(seeds, days)`` matrices, with their bootstrap intervals (module docstring)."""
    seeds, n = score.shape
    draws = np.random.default_rng(BOOTSTRAP_SEED).integers(0, n, size=(RESAMPLES, n))
    ans_draws = np.median(score[:, draws].mean(axis=2), axis=0)  # (seeds, R, n) -> (R,)
    csr_draws = feasible[:, draws].mean(axis=2).mean(axis=0)
    tail = 100 * (1 - LEVEL) / 2
    ans_low, ans_high = np.percentile(ans_draws, [tail, 100 - tail])
    csr_low, csr_high = np.percentile(csr_draws, [tail, 100 - tail])
    return Figures(
        ans=float(np.median(score.mean(axis=1))),
        ans_low=float(ans_low),
        ans_high=float(ans_high),
        csr=float(feasible.mean(axis=1).mean()),
        csr_low=float(csr_low),
        csr_high=float(csr_high),
        seeds=int(seeds),
        days=int(n),
    )
