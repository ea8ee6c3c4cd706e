"""HiGHS at the array level: the slot-wise MILP (or its LP relaxation) handed over as a column-wise ``HighsLp``.

Kept apart from the model (:mod:`training.replay.oracle.knapsack`) and its solve (:mod:`training.replay.oracle.milp`)
because it is plumbing: the array layout HiGHS wants, its options, its status codes, and the banner the first
``highspy.Highs()`` of a process prints straight to file descriptor 1 (silenced here by redirecting that
descriptor, so ``--json`` output stays clean).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np

from training.replay.oracle.knapsack import KnapsackModel

FEASIBILITY_TOL = 1e-9
"""HiGHS primal/MIP feasibility tolerance on the scaled rows (coefficients at most 1)."""

_highs_banner_silenced = False


def new_highs() -> Any:
    """A silent ``highspy.Highs``.

    The first one in a process prints a banner straight to file descriptor 1, before any option can be
    set; that would corrupt ``--json`` output, so the first construction runs with fd 1 sent to /dev/null.
    """
    global _highs_banner_silenced
    import highspy  # here, not at the top: highspy is optional (the offline extra), and `rcb --help` imports the oracle

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


def highs_run(
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

    highs = new_highs()
    highs.setOptionValue("mip_rel_gap", mip_rel_gap)
    highs.setOptionValue("mip_abs_gap", 0.0)
    highs.setOptionValue("mip_feasibility_tolerance", FEASIBILITY_TOL)
    highs.setOptionValue("primal_feasibility_tolerance", FEASIBILITY_TOL)
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
