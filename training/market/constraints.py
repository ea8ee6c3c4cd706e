"""The MC setting's per-day constraints ``(roi_target L, budget B)``: how they are drawn.

Two recipes, named by :attr:`ConstraintRecipe.kind`, shared by the synthetic generator and the
``cbrl-syn`` importer (which has no constraints of its own). Both draw, with the day's own generator
``default_rng([seed, day, 1])``, first ``L ~ U(roi_low, roi_high)`` and then a budget fraction
``f ~ U(budget_low, budget_high)``; they differ in what ``f`` multiplies, and in whether ``L`` may move.

``prior`` (the default): only what a campaign knows before the day.
    ``B = f * S(L)``, where ``S(L)`` is the *reference spend*: the median, over the market's train days
    other than the day itself, of what the best constant ratio reaching ROI >= L spent on that day
    (:func:`constant_ratio_spend`). ``L`` is kept as drawn. The day's own impressions never enter its
    constraints, so a bidder cannot pace to ``B`` and be near the oracle for free; in exchange, some
    days cannot reach ``L`` at all (no bidder delivers anything with ROI >= L). Those days keep their
    ``L``, are flagged ``roi_reachable = False`` in the manifest, show up as ``D* = 0`` in evaluation
    (counted as ``n_zero_oracle``) and are scored by the rule of :mod:`training.replay.metrics`: a bidder that
    kept ROI >= L within budget (in practice: bid little) scores 1 there, one that lost money scores 0.

``paper``: the recipe of the paper's reference code, kept for comparison. It reads the day's hindsight.
    1. If no constant ratio reaches ROI >= L with positive delivery on that day, L is lowered to 0.9x
       the best ROI reachable while spending at least 5% of the top-ratio spend.
    2. ``C_L`` is the spend of the slot-wise hindsight oracle under ROI >= L alone (no budget).
    3. ``B = f * C_L``. Measured on a generated market, corr(log B, log D*) = 0.91 under this recipe.

With ``f < 1`` the budget tends to bind and with ``f > 1`` the ROI target does; the default range
straddles 1 so that across days both constraints bind. ``f`` is kept in the manifest for analysis.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

import model.roi
from training.replay.oracle import ORACLE_GRID, slot_curves, slot_oracle
from training.replay.simulator import DayIndex

RECIPES = ("prior", "paper")
"""Names of the constraint recipes; the first is the default."""


@dataclass(frozen=True)
class ConstraintRecipe:
    kind: str = "prior"
    """``prior`` (budget from the train days' statistics, never the day itself) or ``paper`` (the
    reference code's recipe, from the day's own hindsight oracle)."""
    roi_low: float = 0.8
    """Lowest ROI target drawn."""
    roi_high: float = 1.3
    """Highest ROI target drawn."""
    budget_low: float = 0.3
    """Lowest budget fraction: of the reference spend (``prior``) or of the day's own ROI-only oracle spend
    (``paper``)."""
    budget_high: float = 1.5
    """Highest budget fraction (above 1 the ROI constraint tends to bind instead)."""

    def __post_init__(self) -> None:
        if self.kind not in RECIPES:
            raise ValueError(f"unknown constraint recipe {self.kind!r}; known: {', '.join(RECIPES)}")
        if not 0 < self.roi_low <= self.roi_high:
            raise ValueError(f"need 0 < roi_low <= roi_high, not {self.roi_low}, {self.roi_high}")
        if not 0 < self.budget_low <= self.budget_high:
            raise ValueError(f"need 0 < budget_low <= budget_high, not {self.budget_low}, {self.budget_high}")


@dataclass(frozen=True)
class DayCurve:
    """Total delivery and cost of bidding each constant ratio of ``ORACLE_GRID`` over a whole day (no budget)."""

    delivery: np.ndarray
    cost: np.ndarray


@dataclass(frozen=True)
class DayConstraints:
    """One day's drawn constraints and what they were drawn from (the last three go to the manifest)."""

    roi_target: float
    budget: float
    budget_fraction: float
    reference_spend: float
    """What ``budget_fraction`` multiplied."""
    roi_reachable: bool
    """Whether some constant ratio reaches ROI >= roi_target with positive delivery on the day."""

    def regime_fields(self) -> dict[str, float | bool]:
        return {
            "budget_fraction": self.budget_fraction,
            "budget_reference": round(self.reference_spend, 6),
            "roi_reachable": self.roi_reachable,
        }


def day_curve(index: DayIndex, ratios: np.ndarray = ORACLE_GRID) -> tuple[np.ndarray, np.ndarray]:
    """Total (delivery, cost) of bidding each constant ratio over the whole day, without budget: the oracle's
    :func:`slot_curves` summed over the slots, in slot order."""
    delivery, cost = slot_curves(index, ratios)
    return delivery.sum(axis=0), cost.sum(axis=0)


def curve_of(index: DayIndex) -> DayCurve:
    delivery, cost = day_curve(index)
    return DayCurve(delivery=delivery, cost=cost)


def _feasible(curve: DayCurve, roi_target: float) -> np.ndarray:
    """Per ratio of the grid: reaches ROI >= ``roi_target`` over the day with positive delivery."""
    return (model.roi.roi(curve.delivery, curve.cost) >= roi_target) & (curve.delivery > 0)


def roi_reachable(curve: DayCurve, roi_target: float) -> bool:
    """Whether a constant ratio reaches ROI >= ``roi_target`` with positive delivery over the day."""
    return bool(_feasible(curve, roi_target).any())


def constant_ratio_spend(curve: DayCurve, roi_target: float) -> float:
    """Spend of the constant ratio that delivers the most over the day with ROI >= ``roi_target`` (0 if none)."""
    feasible = _feasible(curve, roi_target)
    if not feasible.any():
        return 0.0
    best = np.flatnonzero(feasible)[np.argmax(curve.delivery[feasible])]
    return float(curve.cost[best])


def reference_spend(history: list[DayCurve], roi_target: float) -> float:
    """``S(L)``: the median over ``history`` of :func:`constant_ratio_spend` at ``roi_target``.

    Days that cannot reach the target count as 0 spend. Where the median is 0 (the target is out of
    reach on most days, or the history wins nothing it pays for) it falls back to the median spend of
    the top ratio, then to the largest spend seen, then to 1, so the budget stays positive.
    """
    if not history:
        raise ValueError("the reference spend needs at least one day of history")
    for spend in (
        np.median([constant_ratio_spend(c, roi_target) for c in history]),
        np.median([c.cost[-1] for c in history]),
        max(float(np.max(c.cost)) for c in history),
    ):
        if spend > 0:
            return float(spend)
    return 1.0


def _draws(rng: np.random.Generator, recipe: ConstraintRecipe) -> tuple[float, float]:
    """``(L, f)``, in this order, from the day's generator: both recipes draw the same numbers."""
    roi_target = float(rng.uniform(recipe.roi_low, recipe.roi_high))
    fraction = float(rng.uniform(recipe.budget_low, recipe.budget_high))
    return roi_target, fraction


def draw_paper_constraints(
    index: DayIndex, rng: np.random.Generator, recipe: ConstraintRecipe = ConstraintRecipe(kind="paper")
) -> DayConstraints:
    """The ``paper`` recipe for one day (reads the day's hindsight; see the module docstring)."""
    curve = curve_of(index)
    roi_target, fraction = _draws(rng, recipe)
    if not roi_reachable(curve, roi_target):
        roi = model.roi.roi(curve.delivery, curve.cost)
        positive = curve.delivery > 0
        meaningful = (curve.cost >= 0.05 * curve.cost[-1]) & positive
        best = float(np.max(roi[meaningful])) if meaningful.any() else float(np.max(roi[positive], initial=1.0))
        roi_target = 0.9 * best
    spend_at_target = slot_oracle(index, roi_target).cost
    if spend_at_target <= 0:  # nothing worth buying at this target: any positive budget is slack
        # the day's constant-ratio spend at L where it reaches L, else its top-ratio spend, ... else 1: positive
        spend_at_target = reference_spend([curve], roi_target)
    roi_target = round(roi_target, 6)
    return DayConstraints(
        roi_target=roi_target,
        budget=float(fraction * spend_at_target),
        budget_fraction=round(fraction, 6),
        reference_spend=float(spend_at_target),
        roi_reachable=roi_reachable(curve, roi_target),
    )


def draw_prior_constraints(
    day: int,
    curves: Mapping[int, DayCurve],
    train_days: list[int],
    rng: np.random.Generator,
    recipe: ConstraintRecipe = ConstraintRecipe(),
) -> DayConstraints:
    """The ``prior`` recipe for ``day``: ``B = f * S(L)`` over the train days other than ``day`` itself.

    ``curves`` must hold every train day; the day's own curve is read only to flag ``roi_reachable``
    (for analysis), never to set ``L`` or ``B``. A market whose only train day is ``day`` itself has no
    other history, so that one day's reference is its own (a degenerate case, kept usable).
    """
    history_days = [d for d in train_days if d != day] or list(train_days)
    if not history_days:
        raise ValueError("the prior recipe needs at least one train day")
    roi_target, fraction = _draws(rng, recipe)
    roi_target = round(roi_target, 6)
    reference = reference_spend([curves[d] for d in history_days], roi_target)
    return DayConstraints(
        roi_target=roi_target,
        budget=float(fraction * reference),
        budget_fraction=round(fraction, 6),
        reference_spend=reference,
        roi_reachable=roi_reachable(curves[day], roi_target) if day in curves else True,
    )


def draw_market_constraints(
    curves: Mapping[int, DayCurve],
    splits: Mapping[int, str],
    seed: int,
    recipe: ConstraintRecipe = ConstraintRecipe(),
) -> dict[int, DayConstraints]:
    """Every day's ``prior`` constraints, each with ``default_rng([seed, day, 1])`` (independent of the others)."""
    if recipe.kind != "prior":
        raise ValueError("draw_market_constraints draws the prior recipe; the paper recipe is per day")
    # A market without train days (an import with test_fraction 1) takes its history from every day.
    train_days = sorted(d for d, s in splits.items() if s == "train") or sorted(splits)
    return {
        day: draw_prior_constraints(day, curves, train_days, np.random.default_rng([seed, day, 1]), recipe)
        for day in sorted(splits)
    }
