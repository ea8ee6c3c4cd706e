"""The MC setting's per-day constraints ``(roi_target L, budget B)``: how they are drawn.

Recipe (shared by the synthetic generator and the ``cbrl-syn`` importer, which has no constraints
of its own), for each day, with the day's own seeded generator:

1. ``L ~ U(roi_low, roi_high)``. If no constant ratio reaches ROI >= L with positive delivery on
   that day, L is lowered to 0.9x the best ROI reachable while spending at least 5% of the
   top-ratio spend, so every MC day is feasible with positive delivery.
2. ``C_L`` is the spend of the slot-wise hindsight oracle under ROI >= L alone (no budget): what the
   best possible bidder would spend to meet the ROI target.
3. ``B = f * C_L`` with ``f ~ U(budget_low, budget_high)``. With ``f < 1`` the budget binds (the
   ROI-only optimum is unaffordable); with ``f > 1`` it does not, and the ROI constraint binds. The
   default range straddles 1, so across days both constraints bind. ``f`` is kept for analysis.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import model.roi
from training.oracle import ORACLE_GRID, slot_curves, slot_oracle
from training.simulator import DayIndex


@dataclass(frozen=True)
class ConstraintRecipe:
    roi_low: float = 0.8
    """Lowest ROI target drawn."""
    roi_high: float = 1.3
    """Highest ROI target drawn."""
    budget_low: float = 0.3
    """Lowest budget, as a fraction of the spend of the slot-wise oracle under the ROI target alone."""
    budget_high: float = 1.5
    """Highest budget fraction (above 1 the ROI constraint binds instead)."""


def day_curve(index: DayIndex, ratios: np.ndarray = ORACLE_GRID) -> tuple[np.ndarray, np.ndarray]:
    """Total (delivery, cost) of bidding each constant ratio over the whole day, without budget: the oracle's
    :func:`slot_curves` summed over the slots, in slot order."""
    delivery, cost = slot_curves(index, ratios)
    return delivery.sum(axis=0), cost.sum(axis=0)


def draw_mc_constraints(
    index: DayIndex, rng: np.random.Generator, recipe: ConstraintRecipe = ConstraintRecipe()
) -> tuple[float, float, float]:
    """(roi_target, budget, budget_fraction) for one day, per the module's recipe."""
    delivery, cost = day_curve(index)
    roi = model.roi.roi(delivery, cost)
    roi_target = float(rng.uniform(recipe.roi_low, recipe.roi_high))
    fraction = float(rng.uniform(recipe.budget_low, recipe.budget_high))
    feasible = (roi >= roi_target) & (delivery > 0)
    if not feasible.any():
        meaningful = (cost >= 0.05 * cost[-1]) & (delivery > 0)
        best = float(np.max(roi[meaningful])) if meaningful.any() else float(np.max(roi[delivery > 0], initial=1.0))
        roi_target = 0.9 * best
        feasible = (roi >= roi_target) & (delivery > 0)
    spend_at_target = slot_oracle(index, roi_target).cost
    if spend_at_target <= 0:  # nothing worth buying at this target: any positive budget is slack
        spend_at_target = float(cost[feasible][np.argmax(delivery[feasible])]) if feasible.any() else float(cost[-1])
    return round(roi_target, 6), float(fraction * spend_at_target), round(fraction, 6)
