"""A feedback controller of the bid ratio, stateless and numpy-only: the service's fallback (and a safe reference).

The control law is the PID baseline's (paper Sec. 4.2; ``training/bidders/pid.py`` tunes it), written
as a function of the history alone so it can run in any process from stored stats:

* **ROI loop** (PID) on ``e_s = clip((ROI_s - L) / L, -1, 1)``, the cumulative ROI after ``s`` slots
  (0 before any spend)::

      log ratio_roi = log r0 + kp * e_t + ki * sum_{s<=t} e_s + kd * (e_t - e_{t-1})

* **Budget loop** (PI, with a budget) on ``p_s = clip((planned_s - spent_s) / max(planned_s, 0.02), -1, 1)``,
  ``spent_s = C_s / B`` against ``planned_s``, the share of a day's traffic before slot ``s``.

The ratio is the more conservative loop, clipped to ``[0.01, 4]``. The integrals are sums over the
slots reported so far, so the stateless form bids what the stateful PID bidder bids, to rounding (a
cumulative sum where the bidder adds slot by slot: the log-ratios differ by about 1e-14).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from model.contract import RATIO_MAX, SLOTS_PER_DAY
from model.history import History
from model.roi import roi

GAIN_FIELDS = ("initial_ratio", "kp", "ki", "kd", "kp_budget", "ki_budget")
"""The tuned numbers of the law (the PID baseline's parameters, ``training/bidders/pid.py``)."""


class Reference(Protocol):
    """A residual policy's reference controller: its ratio before each slot of a history, ``(n, until + 1)``."""

    def sequence(self, history: History, until: int | None = None) -> np.ndarray: ...


class Controller(Protocol):
    """A stateless law of the bid ratio: its ratio for slot ``history.slot`` of every episode, ``(n,)``. The PID law
    (:class:`ControllerGains`) and the constant ratio (:class:`ConstantRatio`) are the two a model card names."""

    def ratios(self, history: History) -> np.ndarray: ...


RATIO_FLOOR = 0.01
"""The controller never bids below this: a ratio of 0 would stop all feedback."""
PROFILE_SUM_TOLERANCE = 1e-3
"""How far a traffic profile's shares may sum from 1 (a card rounds each share to 6-8 digits)."""


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
        if tuned is not None and (missing := [k for k in GAIN_FIELDS if k not in tuned]):
            raise ValueError(f"the gains lack {', '.join(missing)}")
        gains = {k: float(tuned[k]) for k in GAIN_FIELDS} if tuned is not None else {}
        if traffic_profile is not None:
            gains["traffic_profile"] = tuple(float(x) for x in traffic_profile)  # type: ignore[assignment]
        return cls(**gains)  # type: ignore[arg-type]

    def sequence(self, history: History, until: int | None = None) -> np.ndarray:
        """:func:`controller_sequence` with these gains: what a residual policy reads as ``controller_ratio``."""
        return controller_sequence(history, self, until)

    def ratios(self, history: History) -> np.ndarray:
        """:func:`controller_ratios` with these gains: the ratio for slot ``history.slot``, ``(n,)``."""
        return controller_ratios(history, self)

    def tuned(self) -> dict[str, float]:
        """The :data:`GAIN_FIELDS` (what a model card carries)."""
        return {k: float(getattr(self, k)) for k in GAIN_FIELDS}

    def __post_init__(self) -> None:
        profile = np.asarray(self.traffic_profile, dtype=np.float64)
        if profile.shape != (SLOTS_PER_DAY,) or not np.all(np.isfinite(profile) & (profile >= 0)):
            raise ValueError(f"traffic_profile must hold {SLOTS_PER_DAY} finite non-negative shares")
        # shares of the day's traffic: per-slot counts (summing to 48, say) would read every campaign as underspending
        if abs(float(profile.sum()) - 1.0) > PROFILE_SUM_TOLERANCE:
            raise ValueError(f"traffic_profile must hold shares of the day summing to 1, not {float(profile.sum()):g}")
        if not all(np.isfinite(getattr(self, name)) for name in GAIN_FIELDS):
            raise ValueError(f"the gains ({', '.join(GAIN_FIELDS)}) must be finite numbers")
        if not RATIO_FLOOR <= self.initial_ratio <= RATIO_MAX:
            raise ValueError(f"initial_ratio must be in [{RATIO_FLOOR}, {RATIO_MAX}]")


@dataclass(frozen=True)
class ConstantRatio:
    """The RM law: one ratio in every slot, whatever the day does (the constant tuned on a market's train days)."""

    ratio: float

    def __post_init__(self) -> None:
        if not (np.isfinite(self.ratio) and RATIO_FLOOR <= self.ratio <= RATIO_MAX):
            raise ValueError(f"the constant ratio must be in [{RATIO_FLOOR}, {RATIO_MAX}], not {self.ratio!r}")

    def ratios(self, history: History) -> np.ndarray:
        return np.full(history.n, float(self.ratio))


def _roi_errors(history: History, until: int) -> np.ndarray:
    """``e_s`` for s = 1..until, shape ``(n, until)``: the clipped relative ROI gap after each reported slot."""
    delivery = np.cumsum(history.delivery[:, :until], axis=1)
    cost = np.cumsum(history.cost[:, :until], axis=1)
    target = history.registration.roi_target[:, None]
    return np.where(cost > 0, np.clip((roi(delivery, cost) - target) / target, -1.0, 1.0), 0.0)


def controller_ratios(history: History, gains: ControllerGains | None = None) -> np.ndarray:
    """The controller's ratio for slot ``history.slot`` of every episode, ``(n,)`` in ``[0.01, 4]``."""
    return controller_sequence(history, gains or ControllerGains())[:, -1]


def controller_sequence(history: History, gains: ControllerGains, until: int | None = None) -> np.ndarray:
    """``(n, until + 1)``: the controller's ratio before each slot ``0..until`` (default: ``history.slot``).

    Column ``k`` is the law on the first ``k`` slots alone (what :func:`controller_ratios` answers after ``k``
    slots), all prefixes in one vectorized pass: a residual policy reads every past slot's (its trajectory)."""
    g = gains
    n, last = history.n, history.slot if until is None else until
    if not 0 <= last <= history.slot:
        raise ValueError(f"slot {last} is not observed yet (history has {history.slot} slots)")
    log_initial = np.log(g.initial_ratio)
    log_ratio = np.full((n, last + 1), log_initial)
    if last > 0:
        errors = _roi_errors(history, last)  # e_1 .. e_last; prefix k reads e_1 .. e_k
        previous = np.concatenate([np.zeros((n, 1)), errors[:, :-1]], axis=1)
        roi_loop = log_initial + g.kp * errors + g.ki * np.cumsum(errors, axis=1) + g.kd * (errors - previous)
        budget = history.registration.budget
        budgeted = np.isfinite(budget)
        if budgeted.any():
            planned = np.cumsum(g.traffic_profile)[:last]  # the share of a day's traffic before slots 1..last
            spent = np.cumsum(history.cost[:, :last], axis=1) / np.where(budgeted, budget, 1.0)[:, None]
            pace = np.clip((planned[None, :] - spent) / np.maximum(planned, 0.02)[None, :], -1.0, 1.0)
            budget_loop = log_initial + g.kp_budget * pace + g.ki_budget * np.cumsum(pace, axis=1)
            roi_loop = np.where(budgeted[:, None], np.minimum(roi_loop, budget_loop), roi_loop)
        log_ratio[:, 1:] = roi_loop
    return np.clip(np.exp(log_ratio), RATIO_FLOOR, RATIO_MAX)
