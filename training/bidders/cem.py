"""CEM (paper Sec. 4.2, [CEM]): per-slot cross-entropy search that spends real traffic to explore.

The traffic of every slot is split into ``TRAFFIC_BUCKETS`` seeded, disjoint shares (the simulator's
traffic buckets). ``explore`` of them each bid one ratio drawn from the current search distribution
``log ratio ~ N(mu, sigma^2)``; the rest bid the current elite ratio ``exp(mu)``. After the slot, each
exploring share is scored on the greedy sub-problem of that slot (deliver most with slot ROI >= L,
and, under a budget, without spending faster than the remaining budget allows):

    score_k = d_k                       if d_k >= L * c_k and the spend pace holds
            = -(L * c_k - d_k) - excess  otherwise

The ``elites`` best shares move the distribution: ``mu <- (1 - a) mu + a mean(elite log ratios)``,
``sigma <- max((1 - a) sigma + a std(elite log ratios), min_sigma)``. Exploration costs what it
costs: its wins and spend count toward the episode like any other. Parameters may be arrays over
episodes, so a random search plays as one batch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from model.contract import RATIO_MAX, SLOTS_PER_DAY
from model.controller import RATIO_FLOOR
from model.history import History, Registration
from training.bidders.base import Bidder
from training.bidders.tuning import best_of, candidate_scores, log_uniform
from training.replay.dayset import DaySet
from training.replay.simulator import SlotResult

TRAFFIC_BUCKETS = 20
"""Traffic shares of 5% each; ``explore`` of them explore."""
RESCORED = 8
"""The random search's best candidates that :func:`tune` replays again on fresh exploration noise."""
RESCORE_SEEDS = 4
"""Fresh noise draws per rescored candidate: a candidate's search score is one draw of CEM's exploration noise per
day, and the best of 48 such scores is the luckiest as much as the best (its replays on other noise scored 0.02-0.12
below it on the suite's train days, BENCHMARKS.md); the winner is chosen on the mean of five."""
TUNER_VERSION = "2"
"""Part of the tuning-cache key (:func:`training.bidders.tuned.tuning_key`): 2 picks on five noise draws."""
PARAMS = ("initial_ratio", "initial_sigma", "explore", "elites", "smoothing", "min_sigma")


class CEM(Bidder):
    """The CEM bidder; see the module docstring."""

    name: ClassVar[str] = "cem"
    traffic_buckets = TRAFFIC_BUCKETS

    def __init__(self, profile: np.ndarray, **params: float | np.ndarray):
        missing = set(PARAMS) - set(params)
        if missing:
            raise ValueError(f"CEM needs {', '.join(sorted(missing))}")
        self.settings = {k: np.asarray(params[k], dtype=np.float64) for k in PARAMS}
        explore = self.settings["explore"]
        if np.any(explore < 1) or np.any(explore >= TRAFFIC_BUCKETS) or np.any(explore != np.round(explore)):
            raise ValueError(f"explore must be an integer in 1..{TRAFFIC_BUCKETS - 1}")
        if np.any(self.settings["elites"] < 1) or np.any(self.settings["elites"] > explore):
            raise ValueError("elites must be in 1..explore")
        self.profile = np.asarray(profile, dtype=np.float64)
        if self.profile.shape != (SLOTS_PER_DAY,):
            raise ValueError(f"traffic profile must have {SLOTS_PER_DAY} shares")
        self.remaining_share = np.cumsum(self.profile[::-1])[::-1]  # share of traffic from slot t to the end

    def start(self, registration: Registration, seed: int) -> None:
        n = registration.n
        s = self.settings
        self.rng = np.random.default_rng([seed, 0xCE3])
        self.mu = np.broadcast_to(np.log(s["initial_ratio"]), (n,)).copy()
        self.sigma = np.broadcast_to(s["initial_sigma"], (n,)).copy()
        self.explore = np.broadcast_to(s["explore"], (n,)).astype(np.int64)
        self.elites = np.broadcast_to(s["elites"], (n,)).astype(np.int64)
        self.smoothing = np.broadcast_to(s["smoothing"], (n,))
        self.min_sigma = np.broadcast_to(s["min_sigma"], (n,))
        self.exploring = np.arange(TRAFFIC_BUCKETS)[None, :] < self.explore[:, None]  # (n, buckets)
        self.last_log_ratios = np.zeros((n, TRAFFIC_BUCKETS))

    def bid(self, history: History) -> np.ndarray:
        draws = self.mu[:, None] + self.sigma[:, None] * self.rng.standard_normal((history.n, TRAFFIC_BUCKETS))
        log_ratios = np.where(self.exploring, draws, self.mu[:, None])
        log_ratios = np.clip(log_ratios, np.log(RATIO_FLOOR), np.log(RATIO_MAX))
        self.last_log_ratios = log_ratios
        return np.exp(log_ratios)

    def on_result(self, history: History, result: SlotResult) -> None:
        by = result.by_bucket
        assert by is not None, "CEM bids per traffic bucket"
        registration = history.registration
        t = history.slot - 1
        roi_target = registration.roi_target[:, None]
        violation = np.maximum(roi_target * by.cost - by.delivery, 0.0)
        # Spend pace: a share may spend at most its part of what the remaining budget allows this slot.
        share = np.maximum(by.auctions / np.maximum(result.auctions, 1)[:, None], 1e-9)
        budget_before = registration.budget - (history.total_cost - result.cost)
        allowance = budget_before * self.profile[t] / max(self.remaining_share[t], 1e-9)
        excess = np.maximum(by.cost / share - allowance[:, None], 0.0) * share
        ok = (violation <= 0) & (excess <= 0)
        score = np.where(ok, by.delivery, -(violation + excess))
        score = np.where(self.exploring & (by.auctions > 0), score, -np.inf)

        ranked = np.argsort(-score, axis=1, kind="stable")
        take = np.arange(TRAFFIC_BUCKETS)[None, :] < self.elites[:, None]
        chosen = np.take_along_axis(self.last_log_ratios, ranked, axis=1)
        valid = take & np.isfinite(np.take_along_axis(score, ranked, axis=1))
        count = valid.sum(axis=1)
        has = count > 0  # a share with no traffic teaches nothing: keep the distribution
        elite_mean = np.where(has, (chosen * valid).sum(axis=1) / np.maximum(count, 1), self.mu)
        elite_var = (((chosen - elite_mean[:, None]) ** 2) * valid).sum(axis=1) / np.maximum(count, 1)
        a = self.smoothing
        self.mu = np.where(has, (1 - a) * self.mu + a * elite_mean, self.mu)
        self.sigma = np.where(
            has, np.maximum((1 - a) * self.sigma + a * np.sqrt(elite_var), self.min_sigma), self.sigma
        )

    def params(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: float(v) for k, v in self.settings.items() if v.ndim == 0}
        out["traffic_profile"] = [round(float(x), 6) for x in self.profile]
        return out


def sample_candidates(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    explore = rng.choice([2, 3, 4, 6, 8], n).astype(np.float64)
    return {
        "initial_ratio": rng.uniform(0.5, 3.0, n),
        "initial_sigma": rng.uniform(0.1, 0.6, n),
        "explore": explore,
        "elites": np.maximum(1.0, np.floor(explore * rng.uniform(0.2, 0.5, n))),
        "smoothing": rng.uniform(0.1, 0.9, n),
        "min_sigma": log_uniform(rng, 0.02, 0.2, n),
    }


def tune(
    train: DaySet, seed: int = 0, progress: Callable[[str], None] | None = None, n_random: int = 48
) -> tuple[CEM, float]:
    """Seeded random search on the train days: ``n_random`` candidates scored on one noise draw (play seed ``seed``),
    the best :data:`RESCORED` replayed on :data:`RESCORE_SEEDS` more (seeds ``seed + 1`` ...), the one with the best
    mean of its five train scores kept; that mean is the score returned."""
    rng = np.random.default_rng([seed, 0xCE3])
    profile = train.traffic_profile()
    candidates = sample_candidates(rng, n_random)

    def scores(rows: np.ndarray, play_seed: int) -> np.ndarray:
        tiled = {k: np.repeat(v[rows], len(train)) for k, v in candidates.items()}
        return candidate_scores(lambda _: CEM(profile, **tiled), len(rows), train, play_seed)

    search = scores(np.arange(n_random), seed)
    top = np.argsort(-search, kind="stable")[: min(RESCORED, n_random)]
    draws = [search[top], *(scores(top, seed + r) for r in range(1, RESCORE_SEEDS + 1))]
    if progress:
        progress("cem")
    best, score = best_of(np.mean(draws, axis=0), {k: v[top] for k, v in candidates.items()})
    # As pid.tune: the bidder the tuning cache will give back, with the selection's score (a lone replay would draw
    # other exploration noise: CEM's draws depend on the batch).
    return from_params(CEM(profile, **best).params()), score


def from_params(params: dict[str, Any], train: Callable[[], DaySet] | None = None) -> CEM:
    return CEM(np.asarray(params["traffic_profile"]), **{k: float(params[k]) for k in PARAMS})
