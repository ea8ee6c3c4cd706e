"""Hindsight oracles: the slot-wise oracle ``D*`` that every metric is normalized by (SPEC 4), and a day-wise one.

**Slot-wise oracle** (paper appendix, "Slot-wise Oracle", problem (plan2)). With the bid-ratio space
discretized, choosing one ratio ``beta_t`` per slot is a *group (multiple-choice) knapsack*: slot ``t``
is a group whose items are the candidate ratios, item ``j`` of group ``t`` has value ``D[t, j]`` (the
delivery that bidding ``beta_j`` over the whole slot wins) and weight ``C[t, j]`` (its cost). Pick exactly
one item per group to::

    maximize   sum_tj D[t,j] x[t,j]
    subject to sum_j  x[t,j] = 1                        for every slot t
               sum_tj (D[t,j] - L * C[t,j]) x[t,j] >= 0 (ROI_T >= L, linearized: D - L*C >= 0)
               sum_tj C[t,j] x[t,j] <= B                (omitted without a budget)
               x binary

The paper solves it with PuLP/CBC; we solve the same MILP with HiGHS (``benchmarks/bench_oracle.py``
checks both reach the same optimum) to a relative gap of 1e-9, i.e. exactly for all practical purposes.

Semantics, shared with the simulator so the oracle's answer replays to the same numbers:

* Items come from :meth:`DayIndex.slot_outcome` (win iff ``ratio * u > m``, pay ``c``), over
  :data:`ORACLE_GRID` (0.01..4.00 step 0.01) plus :data:`ABSTAIN_RATIO` = 0.0, which wins nothing and so
  guarantees a feasible choice even when the smallest grid ratio already breaks the ROI target. Ties go
  to the first candidate in that order: the smallest grid ratio, abstention last.
* A choice with total cost ``<= B`` never meets the simulator's budget stop (costs are ``>= 0``), so
  whole-slot items describe it exactly; the answer is replayed through the simulator to confirm.
  The simulator's stop mid-slot is *not* modelled (as in the paper), so under a budget the day-wise
  oracle below (which the stop does apply to) can, in principle, beat the slot-wise one.
* Feasibility is ``C <= B and ROI >= L`` with ``ROI = D / C`` (``+inf`` when ``C = 0``), as in
  :func:`training.metrics.is_feasible`; totals are summed slot by slot in order, as the simulator does.

Exact presolve (keeps the optimum): in each slot an item is dropped when another item delivers at least
as much for at most the same cost (for identical items the first candidate is kept). Swapping a dropped
item for its dominator never lowers the objective and never breaks a constraint (``L >= 0``). The
survivors of a slot are strictly increasing in both delivery and cost.

Speed: a 200k-impression day leaves ~15k items, a MILP HiGHS needs 1-3 s for (CBC about as long). Exact
Lagrangian bound fixing (:func:`solve_knapsack_model`) first drops every item that provably cannot be in an
optimal choice, leaving MILPs of about a hundred items: 0.01-0.2 s per day.

Solver tolerances are turned into exactness by checking the answer in plain float arithmetic (and by
replay); a hair-breadth violation tightens the violated row by at least the tolerance and re-solves.

**Day-wise oracle**: the single candidate ratio bid all day that delivers most while feasible, under the
simulator's full semantics (budget stop included), all candidates replayed at once with
:class:`BatchedReplay`.

:func:`market_oracle` runs either over a market directory and caches each day's answer under
``DIR/.rcb-cache/oracle/``, keyed by a fingerprint of the day file, the constraints, the grid and
:data:`SEMANTICS_VERSION`.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import warnings
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np

from model.contract import SLOTS_PER_DAY, Setting
from training.files import atomic_write_text
from training.market.constraints import CURVE_GRID
from training.market.dataset import DayEntry, Market, MarketError
from training.simulator import BatchedReplay, DayIndex

ORACLE_GRID: np.ndarray = CURVE_GRID
"""The oracle's bid-ratio grid: 0.01..4.00 in steps of 0.01 (400 values, rounded to 2 decimals)."""

ABSTAIN_RATIO: float = 0.0
"""Ratio 0 wins nothing (``0 * u > m`` never holds): the always-feasible "do not bid" item."""

SEMANTICS_VERSION = (
    "rcb-oracle/1: win iff ratio*u > m, pay c; budget stops bidding at the first unaffordable win;"
    " candidates = grid + abstain(0.0), ties to the first; feasible iff C <= B and (C == 0 or D/C >= L);"
    " slot-wise MILP mip_rel_gap=1e-9"
)
"""Part of every cache fingerprint: change it whenever the oracle's answer could change."""

MIP_REL_GAP = 1e-9
"""Relative optimality gap HiGHS must close: tight enough that the answer is the optimum."""

_FEASIBILITY_TOL = 1e-9
"""HiGHS primal/MIP feasibility tolerance on the scaled rows (coefficients at most 1)."""

_MAX_RESOLVES = 30
"""Tightening rounds before giving up (each at least doubles the margin; two or three suffice in practice)."""

CACHE_DIR = Path(".rcb-cache") / "oracle"
"""Where :func:`market_oracle` caches answers, relative to the market directory."""


class OracleKind(StrEnum):
    SLOT = "slot"
    """One ratio per slot (the paper's slot-wise oracle; SPEC 4's ``D*``)."""
    DAY = "day"
    """One ratio for the whole day."""


@dataclass(frozen=True)
class OracleResult:
    """One day's oracle answer: the record of ``rcb oracle --json`` (SPEC 6). ``budget`` is None without one."""

    day: int
    split: str
    setting: str
    roi_target: float
    budget: float | None
    delivery: float
    cost: float
    ratios: list[float]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> OracleResult:
        ratios = [float(r) for r in raw["ratios"]]
        if len(ratios) != SLOTS_PER_DAY:
            raise ValueError(f"expected {SLOTS_PER_DAY} ratios, got {len(ratios)}")
        budget = raw["budget"]
        return cls(
            day=int(raw["day"]),
            split=str(raw["split"]),
            setting=str(raw["setting"]),
            roi_target=float(raw["roi_target"]),
            budget=None if budget is None else float(budget),
            delivery=float(raw["delivery"]),
            cost=float(raw["cost"]),
            ratios=ratios,
        )


@dataclass(frozen=True)
class OracleSolution:
    """What one oracle found on one day: the 48 ratios and the delivery and cost they replay to."""

    ratios: np.ndarray
    delivery: float
    cost: float


# ---------------------------------------------------------------------------------------------------------------------
# Feasibility and curves


def meets_constraints(delivery: float, cost: float, roi_target: float, budget: float = math.inf) -> bool:
    """``C <= B and ROI >= L`` with ``ROI = D / C`` (``+inf`` at ``C = 0``): :func:`training.metrics.is_feasible`."""
    return cost <= budget and (cost == 0.0 or delivery / cost >= roi_target)


def _meets_constraints_vec(delivery: np.ndarray, cost: np.ndarray, roi_target: float, budget: float) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        roi = np.where(cost > 0, delivery / cost, np.inf)
    return (cost <= budget) & (roi >= roi_target)


def candidate_ratios(grid: np.ndarray = ORACLE_GRID) -> np.ndarray:
    """The oracles' candidates in tie-break order: the grid ascending, then :data:`ABSTAIN_RATIO`."""
    grid = np.asarray(grid, dtype=np.float64)
    if grid.ndim != 1 or grid.size == 0 or np.any(np.diff(grid) <= 0) or grid[0] <= 0:
        raise ValueError("the grid must be a non-empty, strictly increasing array of ratios > 0")
    return np.append(grid, ABSTAIN_RATIO)


def slot_curves(index: DayIndex, grid: np.ndarray = ORACLE_GRID) -> tuple[np.ndarray, np.ndarray]:
    """Per-slot delivery and cost ``(D[T, G], C[T, G])`` of bidding each ratio of ``grid`` over a whole slot.

    Exactly the simulator's numbers (:meth:`DayIndex.slot_outcome`, no budget): the items of the group knapsack.
    """
    grid = np.asarray(grid, dtype=np.float64)
    delivery = np.empty((SLOTS_PER_DAY, grid.size))
    cost = np.empty((SLOTS_PER_DAY, grid.size))
    for t in range(SLOTS_PER_DAY):
        got = index.slot_outcome(t, grid)
        delivery[t] = got.delivery
        cost[t] = got.cost
    return delivery, cost


def sequential_totals(delivery: np.ndarray, cost: np.ndarray, choice: np.ndarray) -> tuple[float, float]:
    """Total delivery and cost of picking column ``choice[t]`` in each slot, summed slot by slot like the simulator."""
    rows = np.arange(delivery.shape[0])
    total_delivery = 0.0
    total_cost = 0.0
    for d, c in zip(delivery[rows, choice].tolist(), cost[rows, choice].tolist(), strict=True):
        total_delivery += d
        total_cost += c
    return total_delivery, total_cost


# ---------------------------------------------------------------------------------------------------------------------
# The group knapsack (generic in the curves, so tests can brute-force small instances)


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
class KnapsackSolution:
    """The optimal choice: column ``choice[t]`` in slot ``t``, with its (checked) totals."""

    choice: np.ndarray
    delivery: float
    cost: float
    n_items: int
    """Items left after pruning (the MILP's binaries)."""
    n_solves: int
    """MILP solves it took (more than 1 when a solver-tolerance violation had to be tightened away)."""


Evaluate = Callable[[np.ndarray], tuple[float, float]]
"""Maps a choice (one column per slot) to its true (delivery, cost), e.g. by replaying it."""


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


def solve_slot_knapsack(
    delivery: np.ndarray,
    cost: np.ndarray,
    roi_target: float,
    budget: float = math.inf,
    *,
    items: KnapsackItems | None = None,
    evaluate: Evaluate | None = None,
    mip_rel_gap: float = MIP_REL_GAP,
    bound_fixing: bool = True,
) -> KnapsackSolution | None:
    """Solve the slot-wise oracle's group knapsack (paper appendix, "Slot-wise Oracle") exactly with HiGHS.

    ``delivery``/``cost`` are ``[T, G]`` item curves; returns None when no choice is feasible (impossible
    when some column is all zeros, like the abstain candidate). ``items`` lets a caller reuse a pruning.
    ``evaluate`` (default: the curves summed slot by slot) gives a choice's true totals; the answer is
    accepted only when those totals are feasible and equal the curves' own, otherwise the offending row
    is tightened and the MILP re-solved. ``bound_fixing=False`` hands HiGHS the whole MILP at once
    (slower; see :func:`solve_knapsack_model`).
    """
    delivery = np.asarray(delivery, dtype=np.float64)
    cost = np.asarray(cost, dtype=np.float64)
    items = prune_items(delivery, cost) if items is None else items
    roi_margin = 0.0
    budget_margin = 0.0
    for n_solves in range(1, _MAX_RESOLVES + 1):
        model = knapsack_model(items, roi_target, budget, roi_margin, budget_margin)
        choice = solve_knapsack_model(model, mip_rel_gap=mip_rel_gap, bound_fixing=bound_fixing)
        if choice is None:
            return None
        curve_delivery, curve_cost = sequential_totals(delivery, cost, choice)
        true_delivery, true_cost = (curve_delivery, curve_cost) if evaluate is None else evaluate(choice)
        roi_ok = true_cost == 0.0 or true_delivery / true_cost >= roi_target
        budget_ok = true_cost <= budget and (true_delivery, true_cost) == (curve_delivery, curve_cost)
        if roi_ok and budget_ok:
            return KnapsackSolution(choice, true_delivery, true_cost, items.n_items, n_solves)
        # A violation within solver tolerance: demand at least that much (and the tolerance) more slack.
        if not roi_ok:
            shortfall = (roi_target * true_cost - true_delivery) / model.scale
            roi_margin = max(2.0 * roi_margin, 2.0 * shortfall, _FEASIBILITY_TOL)
        if not budget_ok:
            excess = max(true_cost - budget, curve_cost - budget, 0.0) / model.scale
            budget_margin = max(2.0 * budget_margin, 2.0 * excess, _FEASIBILITY_TOL)
    raise RuntimeError(f"slot-wise oracle: no exactly feasible answer after {_MAX_RESOLVES} tightened solves")


_CORE_WIDTH = 1e-5
"""First core: the items whose Lagrangian gap is within this fraction of the bound (about one item per slot)."""

_CORE_GROWTH = 4.0
"""Factor the core's width grows by while it is infeasible or its incumbent leaves too many survivors."""

_FIXING_SLACK = 1e-7
"""Relative slack in the bound test, far above float rounding and solver tolerances: it only keeps more items."""


def solve_knapsack_model(
    model: KnapsackModel, *, mip_rel_gap: float = MIP_REL_GAP, bound_fixing: bool = True
) -> np.ndarray | None:
    """The optimal column per slot of the MILP (to ``mip_rel_gap``), or None when it is infeasible.

    With ``bound_fixing`` (the default), items that provably cannot be in any optimal choice are removed
    before the MILP, by Lagrangian reduced costs (a standard exact technique for multiple-choice knapsacks):

    1. The LP relaxation's duals give multipliers ``lam, mu >= 0`` of the ROI and budget rows. For *any*
       ``lam, mu >= 0`` and any feasible choice, ``obj <= U - sum_t gap_t`` with item value
       ``v = obj + lam*roi_coef - mu*cost_coef``, ``U = sum_t max v - lam*roi_rhs + mu*budget_rhs`` and
       ``gap_t`` = (best ``v`` of slot t) - (``v`` of the item chosen in slot t) >= 0.
    2. A *core* MILP over the items with small ``gap`` gives a feasible incumbent of value ``Z``.
    3. An item with ``U - gap >= Z`` (up to a slack) can be in a better choice; all others cannot and are
       dropped. If the survivors are all in the core, the core's optimum is the optimum. If they are many
       (a weak incumbent), the core is widened and step 2 repeated; otherwise the MILP over the survivors
       and the core is solved. (Not warm-started with the incumbent: given a MIP start, HiGHS 1.16 was
       seen to report the right optimum but return the start's column values.)

    The bound holds for any multipliers, so the duals' sign convention and accuracy affect speed only.
    """
    if not bound_fixing:
        found = _highs_run(model, integral=True, mip_rel_gap=mip_rel_gap)
        return None if found is None else choice_from_values(model.items, found[0])
    # The LP over each slot's upper hull in the (cost, delivery) plane has the same optimum and duals as the
    # full LP (a slot's Lagrangian value a*D - b*C, a > 0, b >= 0, peaks on that hull) at a tenth of the size.
    relaxed = _highs_run(model.subset(_upper_hull(model.items)), integral=False, mip_rel_gap=mip_rel_gap)
    if relaxed is None:
        return None  # the LP relaxation is infeasible, so is the MILP
    _, row_dual = relaxed
    n_slots = model.items.n_slots
    lam = abs(float(row_dual[n_slots]))
    mu = abs(float(row_dual[n_slots + 1])) if model.cost_coef is not None else 0.0
    value = model.objective + lam * model.roi_coef
    if model.cost_coef is not None:
        value = value - mu * model.cost_coef
    best = np.full(n_slots, -np.inf)
    np.maximum.at(best, model.items.slot, value)
    gap = best[model.items.slot] - value
    upper = float(best.sum()) - lam * model.roi_rhs + (mu * model.budget_rhs if mu > 0 else 0.0)
    slack = _FIXING_SLACK * max(abs(upper), 1.0)

    unit = max(abs(upper), 1.0)
    width = _CORE_WIDTH
    core = gap <= width * unit
    while True:
        found = _highs_run(model.subset(core), integral=True, mip_rel_gap=mip_rel_gap, heuristics=False)
        everything = bool(core.all())
        if found is None:
            if everything:
                return None  # the core was the whole MILP
            width *= _CORE_GROWTH  # no feasible choice among so few items yet
            core = gap <= width * unit
            continue
        incumbent = choice_from_values(model.items.subset(core), found[0])
        survivors = upper - gap >= _choice_objective(model, incumbent) - slack
        if everything or not np.any(survivors & ~core):
            return incumbent  # optimal in the core, and nothing outside it can do better
        width *= _CORE_GROWTH
        wider = gap <= width * unit
        if survivors.sum() <= wider.sum():
            break  # the survivors are fewer than the next core would be: solve them directly
        core = wider  # a weak incumbent left too many survivors: a wider core finds a better one
    keep = survivors | core
    final = _highs_run(model.subset(keep), integral=True, mip_rel_gap=mip_rel_gap, heuristics=False)
    if final is None:  # cannot happen: the incumbent is feasible for this MILP
        raise RuntimeError("slot-wise oracle: HiGHS found infeasible a MILP with a known feasible choice")
    return choice_from_values(model.items.subset(keep), final[0])


def _upper_hull(items: KnapsackItems) -> np.ndarray:
    """Mask of the items on their slot's upper concave hull of (cost, delivery) points (Andrew's monotone chain)."""
    order = np.lexsort((-items.delivery, items.cost, items.slot))
    slots = items.slot[order].tolist()
    xs = items.cost[order].tolist()
    ys = items.delivery[order].tolist()
    hull: list[int] = []  # positions in ``order`` of the hull so far, over all slots
    first = 0  # where the current slot's hull starts in ``hull``
    for i in range(len(order)):
        if i and slots[i] != slots[i - 1]:
            first = len(hull)
        elif len(hull) > first and xs[i] == xs[hull[-1]]:
            continue  # same cost as the previous point and (sorted) no more delivery: inside the hull
        while len(hull) - first >= 2:
            o, a = hull[-2], hull[-1]
            if (xs[a] - xs[o]) * (ys[i] - ys[o]) - (ys[a] - ys[o]) * (xs[i] - xs[o]) < 0:
                break  # a clockwise turn: ``a`` stays on the upper hull
            hull.pop()
        hull.append(i)
    on_hull = np.zeros(items.n_items, dtype=bool)
    on_hull[order[hull]] = True
    return on_hull


def _choice_objective(model: KnapsackModel, choice: np.ndarray) -> float:
    """The objective (solver units) of a choice given as one column per slot."""
    items = model.items
    picked = items.column == choice[items.slot]
    return float(model.objective[picked].sum())


_highs_banner_silenced = False


def _new_highs() -> Any:
    """A silent ``highspy.Highs``.

    The first one in a process prints a banner straight to file descriptor 1, before any option can be
    set; that would corrupt ``--json`` output, so the first construction runs with fd 1 sent to /dev/null.
    """
    global _highs_banner_silenced
    import highspy

    if _highs_banner_silenced:
        highs = highspy.Highs()
    else:
        sys.stdout.flush()
        saved = os.dup(1)
        try:
            with open(os.devnull, "w") as devnull:
                os.dup2(devnull.fileno(), 1)
                highs = highspy.Highs()
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        _highs_banner_silenced = True
    highs.setOptionValue("output_flag", False)
    return highs


def _highs_run(
    model: KnapsackModel,
    *,
    integral: bool,
    mip_rel_gap: float,
    heuristics: bool = True,
) -> tuple[np.ndarray, np.ndarray] | None:
    """Solve the MILP (or its LP relaxation) with HiGHS: (column values, row duals), or None when infeasible.

    The model is passed as arrays (a column-wise ``HighsLp``): item ``k`` is column ``k`` with a 1 in its
    slot's row and its coefficients in the ROI row and (with a budget) the budget row; zeros are skipped.
    ``heuristics=False``
    turns off HiGHS's primal heuristics: on the small MILPs left after bound fixing, where the incumbent is
    already near-optimal, they cost more time (sub-MIPs, feasibility jump) than the search itself.
    """
    import highspy

    items = model.items
    n, n_slots = items.n_items, items.n_slots
    has_budget = model.cost_coef is not None
    rows = [items.slot, np.full(n, n_slots)]
    values = [np.ones(n), model.roi_coef]
    if model.cost_coef is not None:
        rows.append(np.full(n, n_slots + 1))
        values.append(model.cost_coef)
    row_index = np.stack(rows, axis=1)
    value = np.stack(values, axis=1)
    nonzero = value != 0.0

    lp = highspy.HighsLp()
    lp.num_col_ = n
    lp.num_row_ = n_slots + 1 + int(has_budget)
    lp.sense_ = highspy.ObjSense.kMaximize
    lp.col_cost_ = model.objective
    lp.col_lower_ = np.zeros(n)
    lp.col_upper_ = np.ones(n)
    inf = highspy.kHighsInf
    lp.row_lower_ = np.concatenate([np.ones(n_slots), [model.roi_rhs], [-inf] if has_budget else []])
    lp.row_upper_ = np.concatenate([np.ones(n_slots), [inf], [model.budget_rhs] if has_budget else []])
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.num_col_ = n
    lp.a_matrix_.num_row_ = lp.num_row_
    lp.a_matrix_.start_ = np.concatenate([[0], np.cumsum(nonzero.sum(axis=1))]).astype(np.int32)
    lp.a_matrix_.index_ = row_index[nonzero].astype(np.int32)
    lp.a_matrix_.value_ = value[nonzero]
    if integral:
        lp.integrality_ = [highspy.HighsVarType.kInteger] * n

    highs = _new_highs()
    highs.setOptionValue("mip_rel_gap", mip_rel_gap)
    highs.setOptionValue("mip_abs_gap", 0.0)
    highs.setOptionValue("mip_feasibility_tolerance", _FEASIBILITY_TOL)
    highs.setOptionValue("primal_feasibility_tolerance", _FEASIBILITY_TOL)
    if not heuristics:
        highs.setOptionValue("mip_heuristic_effort", 0.0)
        for heuristic in ("rins", "rens", "feasibility_jump"):
            highs.setOptionValue(f"mip_heuristic_run_{heuristic}", False)
    highs.passModel(lp)
    highs.run()
    status = highs.getModelStatus()
    if status in (highspy.HighsModelStatus.kInfeasible, highspy.HighsModelStatus.kUnboundedOrInfeasible):
        return None
    if status != highspy.HighsModelStatus.kOptimal:
        raise RuntimeError(f"slot-wise oracle: HiGHS stopped with {highs.modelStatusToString(status)}")
    solution = highs.getSolution()
    x = np.asarray(solution.col_value)
    # Guard against a solver whose column values do not match its reported optimum (seen with MIP starts).
    reported = highs.getInfo().objective_function_value
    if abs(float(model.objective @ x) - reported) > 1e-7 * max(1.0, abs(reported)):
        raise RuntimeError(
            f"slot-wise oracle: HiGHS returned values of objective {model.objective @ x}, not {reported}"
        )
    return x, np.asarray(solution.row_dual)


def choice_from_values(items: KnapsackItems, x: np.ndarray) -> np.ndarray:
    """The column picked in each slot from the binaries' values (the largest per slot, robust to 1 - 1e-9)."""
    choice = np.empty(items.n_slots, dtype=np.int64)
    best = np.full(items.n_slots, -np.inf)
    for k in range(items.n_items):
        t = items.slot[k]
        if x[k] > best[t]:
            best[t] = x[k]
            choice[t] = items.column[k]
    if np.any(best < 0.5):
        raise RuntimeError("slot-wise oracle: the solver picked no item in some slot")
    return choice


# ---------------------------------------------------------------------------------------------------------------------
# The two oracles on one day


def replay_totals(index: DayIndex, ratios: np.ndarray, budget: float = math.inf) -> tuple[float, float]:
    """Total delivery and cost the simulator reports for one episode bid with ``ratios`` (budget stop included)."""
    env = BatchedReplay([index], np.zeros(1, dtype=np.int64), np.array([budget]))
    for ratio in np.asarray(ratios, dtype=np.float64):
        env.step(np.array([ratio]))
    return float(env.delivery[0]), float(env.cost[0])


def slot_oracle(
    index: DayIndex, roi_target: float, budget: float = math.inf, grid: np.ndarray = ORACLE_GRID
) -> OracleSolution:
    """The slot-wise hindsight oracle of one day (paper appendix, "Slot-wise Oracle"): ``D*`` of SPEC 4.

    The answer is replayed through the simulator (:func:`replay_totals`), and the reported delivery and cost
    are the replay's.
    """
    candidates = candidate_ratios(grid)
    d_grid, c_grid = slot_curves(index, grid)
    # The abstain column wins nothing: all zeros, no need to ask the index.
    delivery = np.concatenate([d_grid, np.zeros((SLOTS_PER_DAY, 1))], axis=1)
    cost = np.concatenate([c_grid, np.zeros((SLOTS_PER_DAY, 1))], axis=1)

    def replayed(choice: np.ndarray) -> tuple[float, float]:
        return replay_totals(index, candidates[choice], budget)

    solution = solve_slot_knapsack(delivery, cost, roi_target, budget, evaluate=replayed)
    if solution is None:  # unreachable: abstaining everywhere is always feasible
        raise RuntimeError("slot-wise oracle: infeasible despite the abstain candidate")
    return OracleSolution(candidates[solution.choice], solution.delivery, solution.cost)


def day_oracle(
    index: DayIndex, roi_target: float, budget: float = math.inf, grid: np.ndarray = ORACLE_GRID
) -> OracleSolution:
    """The day-wise oracle: the best single ratio bid all day, budget stop included (one replay per candidate)."""
    candidates = candidate_ratios(grid)
    env = BatchedReplay([index], np.zeros(candidates.size, dtype=np.int64), np.full(candidates.size, budget))
    while not env.done:
        env.step(candidates)
    feasible = _meets_constraints_vec(env.delivery, env.cost, roi_target, budget)
    # argmax returns the first maximum: the smallest grid ratio among ties, abstention (always feasible) last.
    best = int(np.argmax(np.where(feasible, env.delivery, -np.inf)))
    return OracleSolution(np.full(SLOTS_PER_DAY, candidates[best]), float(env.delivery[best]), float(env.cost[best]))


# ---------------------------------------------------------------------------------------------------------------------
# Over a market directory, cached


def setting_constraints(entry: DayEntry, setting: Setting | str) -> tuple[float, float]:
    """``(L, B)`` of a day under a setting (SPEC 1): SC is ``(1, inf)``; MC is the manifest's ``mc`` constraints."""
    setting = Setting(setting)
    if setting is Setting.SC:
        return 1.0, math.inf
    return float(entry.mc.roi_target), float(entry.mc.budget)


def oracle_fingerprint(
    day_sha256: str, setting: str, kind: str, roi_target: float, budget: float, grid: np.ndarray = ORACLE_GRID
) -> str:
    """The cache key of one answer: sha256 over the day file's hash, the setting and kind, ``L``, ``B``, the grid
    and :data:`SEMANTICS_VERSION`. Floats enter by their exact hex form."""
    payload = {
        "day_sha256": day_sha256,
        "setting": str(setting),
        "kind": str(kind),
        "roi_target": float(roi_target).hex(),
        "budget": float(budget).hex(),
        "grid_sha256": hashlib.sha256(np.ascontiguousarray(grid, dtype="<f8").tobytes()).hexdigest(),
        "semantics": SEMANTICS_VERSION,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def solve_day(market: Market, entry: DayEntry, setting: Setting | str, kind: OracleKind | str) -> OracleResult:
    """Load one day and run one oracle on it (no cache)."""
    setting, kind = Setting(setting), OracleKind(kind)
    roi_target, budget = setting_constraints(entry, setting)
    index = DayIndex(market.load(entry.day))
    solve = slot_oracle if kind is OracleKind.SLOT else day_oracle
    found = solve(index, roi_target, budget)
    return OracleResult(
        day=entry.day,
        split=entry.split,
        setting=setting.value,
        roi_target=roi_target,
        budget=budget if math.isfinite(budget) else None,
        delivery=found.delivery,
        cost=found.cost,
        ratios=[float(r) for r in found.ratios],
    )


def _cache_path(market: Market, day: int, setting: Setting, kind: OracleKind) -> Path:
    return market.root / CACHE_DIR / f"{kind.value}-{setting.value}-day{day}.json"


def _read_cache(path: Path, fingerprint: str) -> OracleResult | None:
    """The cached answer if present, readable and made from the same inputs; None otherwise (a miss)."""
    try:
        raw = json.loads(path.read_text())
        if raw.get("fingerprint") != fingerprint:
            return None
        return OracleResult.from_dict(raw["result"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_cache(path: Path, fingerprint: str, result: OracleResult) -> None:
    """Atomically, so a reader never sees half an answer."""
    body = {"fingerprint": fingerprint, "semantics": SEMANTICS_VERSION, "result": result.to_dict()}
    atomic_write_text(path, json.dumps(body))


def _warn(message: str) -> None:
    warnings.warn(message, RuntimeWarning, stacklevel=3)


def market_oracle(
    market: Market,
    setting: Setting | str,
    kind: OracleKind | str = OracleKind.SLOT,
    days: Iterable[int] | None = None,
    progress: Callable[[OracleResult], None] | None = None,
    on_warning: Callable[[str], None] = _warn,
) -> list[OracleResult]:
    """The oracle's answer for each of ``days`` (default: every day of the market), in day order.

    Answers are cached in ``market.root / CACHE_DIR``, one JSON file per (day, setting, kind), and reused
    only when their fingerprint (:func:`oracle_fingerprint`) matches: changed data is recomputed. When the
    cache cannot be written (e.g. a read-only market), ``on_warning`` is told once and solving goes on.
    ``progress`` is called with each day's answer as it is ready.
    """
    setting, kind = Setting(setting), OracleKind(kind)
    entries = market.days if days is None else [market.entry(int(d)) for d in days]
    entries = sorted(entries, key=lambda e: e.day)
    if not entries:
        raise MarketError(f"{market.root}: no days to solve")
    can_write = True
    results = []
    for entry in entries:
        roi_target, budget = setting_constraints(entry, setting)
        fingerprint = oracle_fingerprint(market.fingerprint(entry.day), setting, kind, roi_target, budget)
        path = _cache_path(market, entry.day, setting, kind)
        result = _read_cache(path, fingerprint)
        if result is not None and result.split != entry.split:
            result = replace(result, split=entry.split)  # a re-split day: same answer, new label
        if result is None:
            result = solve_day(market, entry, setting, kind)
            if can_write:
                try:
                    _write_cache(path, fingerprint, result)
                except OSError as exc:
                    can_write = False
                    on_warning(f"cannot write the oracle cache in {path.parent} ({exc.strerror or exc}); not caching")
        results.append(result)
        if progress is not None:
            progress(result)
    return results
