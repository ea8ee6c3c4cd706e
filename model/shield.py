"""A safety shield around any bidding policy: keep its ratio in a band around a safe controller's.

A learned policy out of its depth (a market it was not trained on, traffic that drifted) can run away
(bid the maximum and lose money) or collapse (slide its ratio to 0 while it still has cost to earn
back). The shield bounds it, slot by slot, from the campaign's cumulative stats alone:

* the reference is the PID controller of :mod:`model.controller` on the same history;
* the allowed band is ``[c * exp(-w_below), c * exp(+w_above)]`` around the controller's ratio ``c``;
* each half-width is ``wide`` while the constraints are safe and narrows as a threat grows, to ``tight``
  below the controller and to ``tight_above`` above it (both threats are threats of overbidding, so the
  upper edge may close further than the lower one, even below the controller's ratio, while the lower edge
  still lifts a collapsing policy); the ROI threat rises as the cumulative ROI falls from
  ``L * (1 + roi_slack)`` to ``L * (1 - roi_alarm)``,
  the budget threat as the spend runs ahead of the day's traffic plan by up to ``pace_alarm``;
* with a budget, the ROI threat is weighed by how much of B the day has spent, up to ``roi_min_spend``: a
  campaign that paid a sliver of its budget for nothing yet (ROI 0 after a few slots of sparse traffic) has
  not lost the day, and capping it at a controller that is itself sliding to 0 would lose it;
* a proposed ratio outside the band is moved to its edge, and the shield says it acted.

Numpy only; the same function runs in ``rcb evaluate`` (``shield:METHOD``) and in the service.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from model.contract import RATIO_MAX, SLOTS_PER_DAY
from model.controller import RATIO_FLOOR, ControllerGains, controller_ratios
from model.history import History


@dataclass(frozen=True)
class ShieldConfig:
    """The band's widths and the thresholds of the two threats (log-ratio units for widths).

    The defaults keep the shielded CSR within 0.05 of the PID's on the train days of the four suite markets, in MC
    (the shipped model) and in SC (the ensemble trained on ``sparse``), and have the highest mean ANS of the bands
    that do (RESULTS.md). A model card's ``shield`` section may set other values (:class:`model.artifact.ShieldInfo`).
    """

    wide: float = 0.7
    """Half-width of the band while safe: the policy may bid from half to twice the controller's ratio."""
    tight: float = 0.3
    """Half-width below the controller's ratio under full threat: a collapsing policy is lifted to about 74% of
    the controller's ratio."""
    tight_above: float = -0.1
    """Half-width above the controller's ratio under full threat, negative for an upper edge below it: -0.1, at
    most 90% of the controller's ratio then, so a threatened policy ends the day more careful than the PID it
    is measured against (at 0 or above, the shielded CSR falls more than 0.05 below the PID's on a suite market's
    train days)."""
    roi_slack: float = 0.2
    """No ROI threat while the cumulative ROI is at least ``L * (1 + roi_slack)``."""
    roi_alarm: float = 0.0
    """Full ROI threat once the cumulative ROI is down to ``L * (1 - roi_alarm)``: 0, at the target itself. The band
    under full threat still spans ``c * exp(-tight)`` to ``c * exp(tight_above)``, so a good policy is not pinned to
    a weak controller's ratio."""
    pace_alarm: float = 0.2
    """Full budget threat once the spent share of B runs this far ahead of the planned share of the day's traffic."""
    warmup_slots: int = 4
    """No ROI threat is read from fewer slots than this: early slots' ROI is mostly noise (2 costs 0.024 ANS on the
    ``sparse`` market's train days, about 19 delivering impressions a slot, and nothing elsewhere). The budget threat
    is read from the first slot."""
    roi_min_spend: float = 0.02
    """With a budget, the ROI threat grows with the spent share of B up to this share and is whole from there: a
    deficit on a sliver of the budget (2% by default) can still be earned back (0: whole however little was spent).
    Without a budget (SC) there is no scale to weigh by and the threat is whole."""

    def __post_init__(self) -> None:
        if not 0 < self.tight <= self.wide:
            raise ValueError("need 0 < tight <= wide")
        if not -self.tight < self.tight_above <= self.wide:
            raise ValueError("need -tight < tight_above <= wide")
        if self.roi_slack < 0 or self.roi_alarm < 0 or self.roi_slack + self.roi_alarm <= 0:
            raise ValueError("need roi_slack >= 0, roi_alarm >= 0 and roi_slack + roi_alarm > 0")
        if self.pace_alarm <= 0 or not 0 <= self.warmup_slots <= SLOTS_PER_DAY:  # longer: a shield that never acts
            raise ValueError(f"need pace_alarm > 0 and 0 <= warmup_slots <= {SLOTS_PER_DAY}")
        if not 0 <= self.roi_min_spend <= 1:
            raise ValueError("need 0 <= roi_min_spend <= 1")


@dataclass(frozen=True)
class Shielded:
    """The shield's answer for ``n`` episodes."""

    ratio: np.ndarray
    """``(n,)`` the ratio to bid: the proposed one, moved into the band where it was outside."""
    acted: np.ndarray
    """``(n,)`` bool: the proposed ratio was outside the band."""
    low: np.ndarray
    high: np.ndarray
    threat: np.ndarray
    """``(n,)`` in [0, 1]: how far the band was narrowed."""


def threat_level(history: History, gains: ControllerGains, config: ShieldConfig) -> np.ndarray:
    """The larger of the ROI and budget threats, ``(n,)`` in [0, 1]. No ROI threat before ``warmup_slots`` (the
    first slots' ROI is noise); the budget threat counts from the first slot, since spend that runs ahead of the
    traffic plan is no noise (a front-loaded day, a runaway policy on the card's traffic profile)."""
    n, t = history.n, history.slot
    if t < 1:
        return np.zeros(n)
    registration = history.registration
    cost = history.total_cost
    budgeted = np.isfinite(registration.budget)
    planned = float(np.sum(gains.traffic_profile[:t]))
    spent = np.where(budgeted, cost / np.where(budgeted, registration.budget, 1.0), 0.0)
    budget_threat = np.where(budgeted, np.clip((spent - planned) / config.pace_alarm, 0, 1), 0.0)
    if t < config.warmup_slots:
        return budget_threat
    ratio_to_target = np.divide(
        history.total_delivery, registration.roi_target * cost, out=np.full(n, np.inf), where=cost > 0
    )
    roi_threat = np.clip((1 + config.roi_slack - ratio_to_target) / (config.roi_slack + config.roi_alarm), 0, 1)
    if config.roi_min_spend > 0:
        roi_threat = roi_threat * np.where(budgeted, np.clip(spent / config.roi_min_spend, 0, 1), 1.0)
    return np.maximum(roi_threat, budget_threat)


def shield(
    history: History,
    proposed: np.ndarray,
    gains: ControllerGains | None = None,
    config: ShieldConfig | None = None,
) -> Shielded:
    """Bound ``proposed`` ratios for slot ``history.slot`` (see the module docstring)."""
    gains, config = gains or ControllerGains(), config or ShieldConfig()
    proposed = np.asarray(proposed, dtype=np.float64)
    if proposed.shape != (history.n,):
        raise ValueError(f"proposed must be ({history.n},), got {proposed.shape}")
    low, high, threat = band(history, gains, config)
    ratio = np.clip(proposed, low, high)
    return Shielded(ratio=ratio, acted=ratio != proposed, low=low, high=high, threat=threat)


def band(history: History, gains: ControllerGains, config: ShieldConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The band for slot ``history.slot``, whatever is proposed: ``(low, high, threat)``, each ``(n,)``."""
    reference = controller_ratios(history, gains)
    threat = threat_level(history, gains, config)
    below = config.wide * (1 - threat) + config.tight * threat
    above = config.wide * (1 - threat) + config.tight_above * threat
    low = np.clip(reference * np.exp(-below), RATIO_FLOOR, RATIO_MAX)
    high = np.clip(reference * np.exp(above), RATIO_FLOOR, RATIO_MAX)
    return low, high, threat
