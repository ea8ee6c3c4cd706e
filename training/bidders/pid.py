"""PID (paper Sec. 4.2, [PID]): feedback control of the bid ratio toward the ROI target (and budget pace).

Two loops on the log of the ratio, evaluated after every slot:

* **ROI loop** (PID): error ``e = clip((ROI_t - L) / L, -1, 1)`` on the cumulative ROI so far; a ROI
  above target raises the ratio, below target lowers it::

      log ratio_roi = log r0 + kp * e_t + ki * sum(e) + kd * (e_t - e_{t-1})

* **Budget loop** (PI, MC only): error ``p = clip((planned - spent) / max(planned, 0.02), -1, 1)``
  where ``spent = C_t / B`` and ``planned`` is the share of a day's traffic seen by slot ``t`` in the
  train days' diurnal profile (learned from training logs, never from the day being played).

The bid is the more conservative loop: ``min(ratio_roi, r0 * exp(kp_b * p + ki_b * sum(p)))``,
clipped to [0.01, 4]. Every parameter may be an array over episodes, so a whole random search plays
as one batch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from model.contract import RATIO_MAX, SLOTS_PER_DAY
from model.controller import GAIN_FIELDS, RATIO_FLOOR
from model.history import History, Registration
from training.bidders.base import Bidder
from training.bidders.tuning import best_of, candidate_scores, log_uniform
from training.replay.dayset import DaySet

PARAMS = GAIN_FIELDS


class PID(Bidder):
    """The PID bidder; see the module docstring for the control law."""

    name: ClassVar[str] = "pid"
    deterministic: ClassVar[bool] = True  # type: ignore[misc]

    def __init__(self, profile: np.ndarray, **params: float | np.ndarray):
        missing = set(PARAMS) - set(params)
        if missing:
            raise ValueError(f"PID needs {', '.join(sorted(missing))}")
        self.gains = {k: np.asarray(params[k], dtype=np.float64) for k in PARAMS}
        self.profile = np.asarray(profile, dtype=np.float64)
        if self.profile.shape != (SLOTS_PER_DAY,):
            raise ValueError(f"traffic profile must have {SLOTS_PER_DAY} shares")
        self.planned = np.concatenate([[0.0], np.cumsum(self.profile)])  # share of traffic before slot t

    def start(self, registration: Registration, seed: int) -> None:
        n = registration.n
        self.roi_integral = np.zeros(n)
        self.previous_error = np.zeros(n)
        self.budget_integral = np.zeros(n)

    def bid(self, history: History) -> np.ndarray:
        g = self.gains
        t = history.slot
        initial = np.broadcast_to(g["initial_ratio"], (history.n,))
        if t == 0:
            return np.clip(initial, RATIO_FLOOR, RATIO_MAX)
        registration = history.registration
        cost = history.total_cost
        # No spend yet: no ROI evidence, so no error (stay at the initial ratio).
        error = np.where(cost > 0, np.clip((history.roi - registration.roi_target) / registration.roi_target, -1, 1), 0)
        self.roi_integral += error
        derivative = error - self.previous_error
        self.previous_error = error
        log_ratio = np.log(initial) + g["kp"] * error + g["ki"] * self.roi_integral + g["kd"] * derivative

        budgeted = np.isfinite(registration.budget)
        if budgeted.any():
            planned = self.planned[t]
            spent = np.where(budgeted, cost / np.where(budgeted, registration.budget, 1.0), 0.0)
            pace = np.clip((planned - spent) / max(planned, 0.02), -1, 1)
            self.budget_integral += pace
            budget_log_ratio = np.log(initial) + g["kp_budget"] * pace + g["ki_budget"] * self.budget_integral
            log_ratio = np.where(budgeted, np.minimum(log_ratio, budget_log_ratio), log_ratio)
        return np.clip(np.exp(log_ratio), RATIO_FLOOR, RATIO_MAX)

    def params(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: float(v) for k, v in self.gains.items() if v.ndim == 0}
        out["traffic_profile"] = [round(float(x), 6) for x in self.profile]
        return out


def sample_candidates(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    """Random-search ranges: initial ratio uniform, gains log-uniform (derivative gain uniform, may be 0)."""
    return {
        "initial_ratio": rng.uniform(0.5, 3.0, n),
        "kp": log_uniform(rng, 0.02, 3.0, n),
        "ki": log_uniform(rng, 0.002, 0.5, n),
        "kd": rng.uniform(0.0, 1.0, n),
        "kp_budget": log_uniform(rng, 0.05, 5.0, n),
        "ki_budget": log_uniform(rng, 0.005, 1.0, n),
    }


def tune(
    train: DaySet, seed: int = 0, progress: Callable[[str], None] | None = None, n_random: int = 96, n_refine: int = 48
) -> tuple[PID, float]:
    """Seeded random search on the train days, then a local refinement around the best candidate."""
    rng = np.random.default_rng([seed, 0x61D])
    profile = train.traffic_profile()

    def scores_of(candidates: dict[str, np.ndarray]) -> np.ndarray:
        n = len(next(iter(candidates.values())))
        tiled = {k: np.repeat(v, len(train)) for k, v in candidates.items()}
        result = candidate_scores(lambda _: PID(profile, **tiled), n, train, seed)
        if progress:
            progress("pid")
        return result

    candidates = sample_candidates(rng, n_random)
    best, _ = best_of(scores_of(candidates), candidates)
    # Refinement: log-normal perturbations of the best (the best itself stays candidate 0).
    local = {k: best[k] * np.exp(np.concatenate([[0.0], rng.normal(0.0, 0.3, n_refine - 1)])) for k in PARAMS}
    local["initial_ratio"] = np.clip(local["initial_ratio"], RATIO_FLOOR, RATIO_MAX)
    best, score = best_of(scores_of(local), local)
    # The bidder its params() describe (the profile rounded as the tuning cache stores it): a run that tunes afresh
    # plays exactly what a later run reads back from the cache. The score stays the search's, as the cache records
    # it (the rounding moves a replay's by about 1e-4).
    return from_params(PID(profile, **best).params()), score


def from_params(params: dict[str, Any], train: Callable[[], DaySet] | None = None) -> PID:
    return PID(np.asarray(params["traffic_profile"]), **{k: float(params[k]) for k in PARAMS})
