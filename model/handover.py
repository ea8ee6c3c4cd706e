"""The hand-over rule: when a model is failing its campaign live, its controller bids the rest of the day.

A model out of its depth (a market it was not built for, traffic that drifted) can keep bidding above the controller
while the day's ROI sinks below the target. The shield bounds each slot's ratio; the hand-over says that the model
has lost the day's trust and gives the campaign to the controller (the PID the shield and the fallback run
around) for the rest of the episode. The rule, per campaign, at the decision for slot ``t`` (``t`` slots reported):

* **enough evidence**: with a budget, at least ``spent_share`` of B spent (0.3: the ROI is then read from a third
  of the day's money, no longer the noise of a few slots, and two thirds of B are left to earn it back); without a
  budget (SC, no scale to weigh cost by), at least ``sc_slots`` slots reported (16, a third of the day) of which at
  least ``sc_cost_slots`` had cost (8: twice the shield's warm-up, so the ROI is read from spend, not from one slot);
* **the target is lost so far**: the realized ROI, delivery / cost, is below ``L * (1 - margin)`` (0.1: a day 10%
  under the target has missed it by more than the shield's full threat, which starts at ``L``, can hold);
* **the controller is the more cautious**: its ratio for slot ``t`` is below the ratio about to be bid (the model's,
  after the shield where it runs). Where the controller would bid more, handing over would not make the campaign
  more careful, so the model keeps it. Behind the default shield, whose band under full threat tops out at 90% of
  the controller's ratio, the rule therefore never fires (the shield already holds the model below the controller);
  it fires behind a band that lets the model above the controller under threat (``tight_above > 0``).

Once handed over, a campaign stays with the controller for the rest of that episode, even if the ROI recovers (the
recovery is the controller's; handing back would let a failing model spend the margin again); a new episode starts
with the model. The rule reads the stats of the day so far and the two ratios only, so it is deterministic: the
service and an offline bidder (``training/bidders/handover.py``) play the same hand-overs on the same days.

Numpy only, no torch: the service runs it on every slot update.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from model.contract import SLOTS_PER_DAY
from model.history import History


@dataclass(frozen=True)
class HandoverConfig:
    """The thresholds of the rule (module docstring)."""

    spent_share: float = 0.3
    """With a budget: the share of B spent before the rule reads the ROI."""
    margin: float = 0.1
    """The rule fires below ``L * (1 - margin)``."""
    sc_slots: int = 16
    """Without a budget: the slots reported before the rule reads the ROI."""
    sc_cost_slots: int = 8
    """Without a budget: of those, the slots with cost."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.spent_share) and 0 < self.spent_share <= 1):
            raise ValueError("need 0 < spent_share <= 1")
        if not (math.isfinite(self.margin) and 0 <= self.margin < 1):
            raise ValueError("need 0 <= margin < 1")
        if not 1 <= self.sc_cost_slots <= self.sc_slots <= SLOTS_PER_DAY:
            raise ValueError(f"need 1 <= sc_cost_slots <= sc_slots <= {SLOTS_PER_DAY}")


def evidence(history: History, config: HandoverConfig) -> np.ndarray:
    """``(n,)`` bool: the day so far says enough to judge the model (the first point of the rule)."""
    cost = history.total_cost
    budget = history.registration.budget
    budgeted = np.isfinite(budget)
    spent = np.divide(cost, budget, out=np.zeros(history.n), where=budgeted)
    paid_slots = np.count_nonzero(history.cost[:, : history.slot] > 0, axis=1)
    unbudgeted = (history.slot >= config.sc_slots) & (paid_slots >= config.sc_cost_slots)
    return np.where(budgeted, spent >= config.spent_share, unbudgeted) & (cost > 0)


def due(history: History, bid: np.ndarray, controller: np.ndarray, config: HandoverConfig | None = None) -> np.ndarray:
    """``(n,)`` bool: the rule hands the campaign over at the decision for slot ``history.slot``.

    ``bid``: the ratio about to be bid (the model's, after the shield where it runs); ``controller``: the
    controller's ratio for the same slot. A day that is over (48 slots reported) has nothing left to hand over."""
    config = config or HandoverConfig()
    bid, controller = np.asarray(bid, dtype=np.float64), np.asarray(controller, dtype=np.float64)
    if bid.shape != (history.n,) or controller.shape != (history.n,):
        raise ValueError(f"bid and controller must be ({history.n},), got {bid.shape} and {controller.shape}")
    if history.done:
        return np.zeros(history.n, dtype=bool)
    cost = history.total_cost
    floor = history.registration.roi_target * (1 - config.margin)
    lost = history.total_delivery < floor * cost  # ROI below L (1 - margin), without dividing by a zero cost
    return evidence(history, config) & lost & (controller < bid)


def handed_over(
    history: History,
    bid: np.ndarray,
    controller: np.ndarray,
    already: np.ndarray,
    config: HandoverConfig | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``(ratio, handed)`` for slot ``history.slot``: the controller's ratio where the campaign is handed over
    (``already``, or :func:`due` now), else ``bid``; ``handed`` ``(n,)`` bool, the campaigns with the controller from
    this decision on (the flag to keep for the rest of the episode)."""
    already = np.asarray(already, dtype=bool)
    handed = already | due(history, bid, controller, config)
    return np.where(handed, np.asarray(controller, dtype=np.float64), np.asarray(bid, dtype=np.float64)), handed
