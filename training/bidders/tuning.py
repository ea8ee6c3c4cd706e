"""Tuning baselines on the train days: the score they maximize and a seeded random search.

The score of an episode is its normalized feasible delivery ``D / D* * 1[feasible]`` (the summand of
ANS, docs/metrics.md); a candidate's score is its mean over the train days. Tuning never sees test or OOD days.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from training.bidders.base import Bidder, play
from training.replay.dayset import DaySet
from training.replay.metrics import is_feasible, normalized_delivery


def candidate_scores(make: Callable[[int], Bidder], n_candidates: int, train: DaySet, seed: int = 0) -> np.ndarray:
    """Mean train score of each candidate, all replayed in one batch.

    ``make(n_candidates)`` returns one bidder whose per-episode parameters are laid out candidate-major:
    episode ``c * len(train) + k`` is candidate ``c`` on train day ``k``.
    """
    bidder = make(n_candidates)
    outcome = play(
        bidder,
        train.indexes(bidder.traffic_buckets),
        train.episode_days(n_candidates),
        train.registration(n_candidates),
        seed,
    )
    scores = episode_scores(outcome.delivery, outcome.cost, train, n_candidates)
    return scores.reshape(n_candidates, len(train)).mean(axis=1)


def episode_scores(delivery: np.ndarray, cost: np.ndarray, days: DaySet, repeats: int = 1) -> np.ndarray:
    """``D / D* * 1[feasible]`` per episode, for episodes laid out as ``days.registration(repeats)``."""
    feasible = is_feasible(delivery, cost, np.tile(days.roi_target, repeats), np.tile(days.budget, repeats))
    return normalized_delivery(delivery, np.tile(days.oracle_delivery, repeats)) * feasible


def log_uniform(rng: np.random.Generator, low: float, high: float, size: int) -> np.ndarray:
    return np.exp(rng.uniform(np.log(low), np.log(high), size))


def best_of(scores: np.ndarray, candidates: dict[str, np.ndarray]) -> tuple[dict[str, Any], float]:
    """The first candidate with the highest score (ties go to the earliest), as plain floats."""
    best = int(np.argmax(scores))
    return {name: float(values[best]) for name, values in candidates.items()}, float(scores[best])
