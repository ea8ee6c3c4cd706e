"""A feedback controller of the bid ratio, stateless and numpy-only: the service's fallback (and a safe reference).

The control law is the PID baseline's (paper Sec. 4.2; ``training/bidders/pid.py`` tunes it), written
as a function of the history alone so it can run in any process from stored stats:

* **ROI loop** (PID) on ``e_s = clip((ROI_s - L) / L, -1, 1)``, the cumulative ROI after ``s`` slots
  (0 before any spend)::

      log ratio_roi = log r0 + kp * e_t + ki * sum_{s<=t} e_s + kd * (e_t - e_{t-1})

* **Budget loop** (PI, with a budget) on ``p_s = clip((planned_s - spent_s) / max(planned_s, 0.02), -1, 1)``,
  ``spent_s = C_s / B`` against ``planned_s``, the share of a day's traffic before slot ``s``.

The ratio is the more conservative loop, clipped to ``[0.01, 4]``. The integrals are sums over the
slots reported so far, so the stateless form bids exactly what the stateful PID bidder bids.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from model.contract import RATIO_MAX, SLOTS_PER_DAY
from model.history import History
from model.roi import roi

GAIN_FIELDS = ("initial_ratio", "kp", "ki", "kd", "kp_budget", "ki_budget")
"""The tuned numbers of the law (the PID baseline's parameters, ``training/bidders/pid.py``)."""

RATIO_FLOOR = 0.01
"""The controller never bids below this: a ratio of 0 would stop all feedback."""


@dataclass(frozen=True)
class ControllerGains:
    """PID gains. The defaults are the PID baseline tuned on the benchmark market's train days (MC, RESULTS.md)."""

    initial_ratio: float = 0.9625
    kp: float = 0.7107
    ki: float = 0.04972
    kd: float = 0.7587
    kp_budget: float = 2.518
    ki_budget: float = 0.113
    traffic_profile: tuple[float, ...] = field(default_factory=lambda: (1.0 / SLOTS_PER_DAY,) * SLOTS_PER_DAY)
    """Share of a day's traffic in each slot (uniform unless the model card carries the training days')."""

    @classmethod
    def with_profile(
        cls, traffic_profile: Sequence[float] | None, tuned: Mapping[str, float] | None = None
    ) -> ControllerGains:
        """Gains tuned elsewhere (a model card's, a PID baseline's: the :data:`GAIN_FIELDS`), else the defaults,
        with a traffic profile (a model card's, say), else the uniform one."""
        gains = {k: float(tuned[k]) for k in GAIN_FIELDS} if tuned is not None else {}
        if traffic_profile is not None:
            gains["traffic_profile"] = tuple(float(x) for x in traffic_profile)  # type: ignore[assignment]
        return cls(**gains)  # type: ignore[arg-type]

    def tuned(self) -> dict[str, float]:
        """The :data:`GAIN_FIELDS` (what a model card carries)."""
        return {k: float(getattr(self, k)) for k in GAIN_FIELDS}

    def __post_init__(self) -> None:
        if len(self.traffic_profile) != SLOTS_PER_DAY or min(self.traffic_profile) < 0:
            raise ValueError(f"traffic_profile must hold {SLOTS_PER_DAY} non-negative shares")
        if not RATIO_FLOOR <= self.initial_ratio <= RATIO_MAX:
            raise ValueError(f"initial_ratio must be in [{RATIO_FLOOR}, {RATIO_MAX}]")


def _roi_errors(history: History) -> np.ndarray:
    """``e_s`` for s = 1..t, shape ``(n, t)``: the clipped relative ROI gap after each reported slot."""
    t = history.slot
    delivery = np.cumsum(history.delivery[:, :t], axis=1)
    cost = np.cumsum(history.cost[:, :t], axis=1)
    target = history.registration.roi_target[:, None]
    return np.where(cost > 0, np.clip((roi(delivery, cost) - target) / target, -1.0, 1.0), 0.0)


def controller_ratios(history: History, gains: ControllerGains | None = None) -> np.ndarray:
    """The controller's ratio for slot ``history.slot`` of every episode, ``(n,)`` in ``[0.01, 4]``."""
    g = gains or ControllerGains()
    n, t = history.n, history.slot
    log_initial = np.log(g.initial_ratio)
    if t == 0:
        return np.full(n, float(np.clip(g.initial_ratio, RATIO_FLOOR, RATIO_MAX)))
    errors = _roi_errors(history)
    current = errors[:, -1]
    previous = errors[:, -2] if t >= 2 else np.zeros(n)
    log_ratio = log_initial + g.kp * current + g.ki * errors.sum(axis=1) + g.kd * (current - previous)
    budget = history.registration.budget
    budgeted = np.isfinite(budget)
    if budgeted.any():
        planned = np.concatenate([[0.0], np.cumsum(g.traffic_profile)])[1 : t + 1]  # before slots 1..t
        spent = np.cumsum(history.cost[:, :t], axis=1) / np.where(budgeted, budget, 1.0)[:, None]
        pace = np.clip((planned[None, :] - spent) / np.maximum(planned, 0.02)[None, :], -1.0, 1.0)
        budget_log_ratio = log_initial + g.kp_budget * pace[:, -1] + g.ki_budget * pace.sum(axis=1)
        log_ratio = np.where(budgeted, np.minimum(log_ratio, budget_log_ratio), log_ratio)
    return np.clip(np.exp(log_ratio), RATIO_FLOOR, RATIO_MAX)


def controller_sequence(history: History, gains: ControllerGains, until: int | None = None) -> np.ndarray:
    """``(n, until + 1)``: the controller's ratio before each slot ``0..until`` (default: ``history.slot``).

    Column ``k`` is :func:`controller_ratios` of the history's first ``k`` slots, computed the same way (so a
    residual policy's base ratio and the shield's reference agree bit for bit)."""
    last = history.slot if until is None else until
    if not 0 <= last <= history.slot:
        raise ValueError(f"slot {last} is not observed yet (history has {history.slot} slots)")
    return np.stack([controller_ratios(prefix(history, k), gains) for k in range(last + 1)], axis=1)


def prefix(history: History, slot: int) -> History:
    """The history as it stood before slot ``slot`` (a view: the arrays are shared, only ``[:, :slot]`` is read)."""
    if slot == history.slot:
        return history
    view = copy.copy(history)  # shallow: the stat arrays are shared, never written
    view.slot = slot
    return view
