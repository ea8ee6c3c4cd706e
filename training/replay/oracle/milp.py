"""The slot-wise oracle's group knapsack solved: Lagrangian bound fixing, checked and tightened answers.

Generic in the item curves ``D[t, j]``, ``C[t, j]`` (tests brute-force small instances); the curves of a
real day come from :mod:`training.replay.oracle.oracles`, the items and the scaled MILP from
:mod:`training.replay.oracle.knapsack`. See the package docstring for the model.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from model.roi import is_feasible
from training.replay.oracle.highs import FEASIBILITY_TOL, highs_run
from training.replay.oracle.knapsack import KnapsackItems, KnapsackModel, knapsack_model, prune_items

MIP_REL_GAP = 1e-9
"""Relative optimality gap HiGHS must close: tight enough that the answer is the optimum."""

_MAX_RESOLVES = 30
"""Tightening rounds before giving up (each at least doubles the margin; two or three suffice in practice)."""


def sequential_totals(delivery: np.ndarray, cost: np.ndarray, choice: np.ndarray) -> tuple[float, float]:
    """Total delivery and cost of picking column ``choice[t]`` in each slot, summed slot by slot like the simulator."""
    rows = np.arange(delivery.shape[0])
    total_delivery = 0.0
    total_cost = 0.0
    for d, c in zip(delivery[rows, choice].tolist(), cost[rows, choice].tolist(), strict=True):
        total_delivery += d
        total_cost += c
    return total_delivery, total_cost


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
        roi_ok = bool(is_feasible(true_delivery, true_cost, roi_target))
        budget_ok = true_cost <= budget and (true_delivery, true_cost) == (curve_delivery, curve_cost)
        if roi_ok and budget_ok:
            return KnapsackSolution(choice, true_delivery, true_cost, items.n_items, n_solves)
        # A violation within solver tolerance: demand at least that much (and the tolerance) more slack.
        if not roi_ok:
            shortfall = (roi_target * true_cost - true_delivery) / model.scale
            roi_margin = max(2.0 * roi_margin, 2.0 * shortfall, FEASIBILITY_TOL)
        if not budget_ok:
            excess = max(true_cost - budget, curve_cost - budget, 0.0) / model.scale
            budget_margin = max(2.0 * budget_margin, 2.0 * excess, FEASIBILITY_TOL)
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
        found = highs_run(model, integral=True, mip_rel_gap=mip_rel_gap)
        return None if found is None else choice_from_values(model.items, found[0])
    # The LP over each slot's upper hull in the (cost, delivery) plane has the same optimum and duals as the
    # full LP (a slot's Lagrangian value a*D - b*C, a > 0, b >= 0, peaks on that hull) at a tenth of the size.
    relaxed = highs_run(model.subset(_upper_hull(model.items)), integral=False, mip_rel_gap=mip_rel_gap)
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
        found = highs_run(model.subset(core), integral=True, mip_rel_gap=mip_rel_gap, heuristics=False)
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
    final = highs_run(model.subset(keep), integral=True, mip_rel_gap=mip_rel_gap, heuristics=False)
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
