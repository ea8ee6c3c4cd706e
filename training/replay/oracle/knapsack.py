"""The slot-wise oracle's group knapsack as data: its items after exact pruning, and the MILP in solver units.

:func:`prune_items` is the exact presolve (the package docstring says why it keeps the optimum);
:func:`knapsack_model` scales the MILP so HiGHS's absolute tolerances act as relative ones. Solved by
:mod:`training.replay.oracle.milp` through :mod:`training.replay.oracle.highs`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np


@dataclass(frozen=True)
class KnapsackItems:
    """The items that survive exact pruning, flattened slot by slot (ascending cost within a slot)."""

    n_slots: int
    slot: np.ndarray
    """Slot (group) of each item."""
    column: np.ndarray
    """Column of the curve matrices (the candidate ratio) of each item."""
    delivery: np.ndarray
    cost: np.ndarray

    @property
    def n_items(self) -> int:
        return int(self.slot.shape[0])

    def subset(self, keep: np.ndarray) -> KnapsackItems:
        """The items where ``keep`` is true."""
        return KnapsackItems(self.n_slots, self.slot[keep], self.column[keep], self.delivery[keep], self.cost[keep])


def prune_items(delivery: np.ndarray, cost: np.ndarray) -> KnapsackItems:
    """Drop dominated items: those another item of the same slot beats on delivery without costing more.

    Within a slot, items are ordered by cost ascending, delivery descending, column ascending; an item
    survives iff it delivers strictly more than every item before it. So an item is dropped exactly when
    some other item has ``D' >= D`` and ``C' <= C`` (for identical items, all but the first column). The
    optimum is unchanged (see the module docstring).
    """
    delivery = np.asarray(delivery, dtype=np.float64)
    cost = np.asarray(cost, dtype=np.float64)
    if delivery.shape != cost.shape or delivery.ndim != 2 or delivery.shape[1] == 0:
        raise ValueError(f"delivery {delivery.shape} and cost {cost.shape} must be the same (slots, candidates) shape")
    if not (np.all(np.isfinite(delivery)) and np.all(np.isfinite(cost))):
        raise ValueError("delivery and cost must be finite")
    n_slots, n_columns = delivery.shape
    slots, columns = [], []
    for t in range(n_slots):
        order = np.lexsort((np.arange(n_columns), -delivery[t], cost[t]))
        d_sorted = delivery[t, order]
        best_before = np.maximum.accumulate(np.concatenate([[-np.inf], d_sorted[:-1]]))
        kept = order[d_sorted > best_before]
        slots.append(np.full(kept.size, t, dtype=np.int64))
        columns.append(kept.astype(np.int64))
    slot = np.concatenate(slots)
    column = np.concatenate(columns)
    return KnapsackItems(n_slots, slot, column, delivery[slot, column], cost[slot, column])


@dataclass(frozen=True)
class KnapsackModel:
    """The group-knapsack MILP in solver units (everything divided by ``scale``, so coefficients are <= 1).

    Rows: one "pick exactly one" row per slot, ``roi_coef @ x >= roi_rhs`` and, with a budget,
    ``cost_coef @ x <= budget_rhs``. Dividing by ``scale`` makes HiGHS's absolute tolerances relative ones.
    """

    items: KnapsackItems
    scale: float
    objective: np.ndarray
    """``D / scale`` of each item (maximized)."""
    roi_coef: np.ndarray
    """``(D - L*C) / scale``: the linearized ROI constraint."""
    cost_coef: np.ndarray | None
    """``C / scale``; None without a budget."""
    roi_rhs: float
    budget_rhs: float

    def subset(self, keep: np.ndarray) -> KnapsackModel:
        """The same MILP restricted to the items where ``keep`` is true."""
        sub = self.items.subset(keep)
        cost_coef = None if self.cost_coef is None else self.cost_coef[keep]
        return replace(
            self, items=sub, objective=self.objective[keep], roi_coef=self.roi_coef[keep], cost_coef=cost_coef
        )


def knapsack_model(
    items: KnapsackItems, roi_target: float, budget: float, roi_margin: float = 0.0, budget_margin: float = 0.0
) -> KnapsackModel:
    """The MILP of the slot-wise oracle over ``items``; the margins (solver units) tighten the two coupling rows."""
    if not roi_target >= 0 or not budget >= 0:
        raise ValueError(f"roi_target and budget must be >= 0 (got {roi_target!r}, {budget!r})")
    scale = float(max(items.delivery.max(initial=0.0), items.cost.max(initial=0.0) * max(roi_target, 1.0)))
    scale = scale if scale > 0 else 1.0
    has_budget = math.isfinite(budget)
    return KnapsackModel(
        items=items,
        scale=scale,
        objective=items.delivery / scale,
        roi_coef=(items.delivery - roi_target * items.cost) / scale,
        cost_coef=items.cost / scale if has_budget else None,
        roi_rhs=roi_margin,
        budget_rhs=budget / scale - budget_margin if has_budget else math.inf,
    )
