"""Hindsight oracles: the slot-wise oracle ``D*`` every metric is normalized by (docs/metrics.md), and a day-wise one.

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

The paper solves it with PuLP/CBC; this solves the same MILP with HiGHS (``benchmarks/bench_oracle.py``
checks both reach the same optimum) to a relative gap of 1e-9, i.e. exactly for all practical purposes.

Semantics, shared with the simulator so the oracle's answer replays to the same numbers:

* Items come from :meth:`DayIndex.slot_outcome` (win iff ``ratio * u > m``, pay ``c``), over
  :data:`ORACLE_GRID` (0.01..4.00 step 0.01) plus :data:`ABSTAIN_RATIO` = 0.0, which wins nothing and so
  guarantees a feasible choice even when the smallest grid ratio already breaks the ROI target. Ties go
  to the first candidate in that order: the smallest grid ratio, abstention last.
* A choice with total cost ``<= B`` never meets the simulator's budget stop (costs are ``>= 0``), so
  whole-slot items describe it exactly; the answer is replayed through the simulator to confirm.
  The simulator's stop mid-slot is *not* modelled (as in the paper), so under a budget a bidder (and the
  day-wise oracle below, which the stop does apply to) can beat the slot-wise one: bidding high in one slot
  until the stop beat it by up to 1.1% on a small generated market and 0.02-0.17% on suite days
  (docs/metrics.md). D* is the paper's reference, not a strict upper bound.
* Feasibility is ``C <= B and ROI >= L`` with ``ROI = D / C`` (``+inf`` when ``C = 0``), as in
  :func:`model.roi.is_feasible`; totals are summed slot by slot in order, as the simulator does.

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

Layout, one concept per module (each imports only the ones above it):

* :mod:`training.replay.oracle.knapsack`: the group knapsack's items (exact presolve) and the scaled MILP.
* :mod:`training.replay.oracle.highs`: HiGHS at the array level (the column-wise ``HighsLp``, options, status, the
  silenced banner).
* :mod:`training.replay.oracle.milp`: bound fixing, the checked and tightened solve. Generic in the curves.
* :mod:`training.replay.oracle.oracles`: the grid and both oracles on one day's :class:`DayIndex`.
* :mod:`training.replay.oracle.cache`: over a market directory, with the answer cache.

``training.market.constraints`` uses the oracle (an MC day's budget is drawn from the slot-wise oracle's spend);
nothing here imports it back.
"""

from training.replay.oracle.cache import (
    CACHE_DIR,
    SEMANTICS_VERSION,
    OracleKind,
    OracleResult,
    market_oracle,
    oracle_fingerprint,
    setting_constraints,
    solve_day,
)
from training.replay.oracle.knapsack import KnapsackItems, KnapsackModel, knapsack_model, prune_items
from training.replay.oracle.milp import (
    MIP_REL_GAP,
    Evaluate,
    KnapsackSolution,
    choice_from_values,
    sequential_totals,
    solve_knapsack_model,
    solve_slot_knapsack,
)
from training.replay.oracle.oracles import (
    ABSTAIN_RATIO,
    ORACLE_GRID,
    OracleSolution,
    candidate_ratios,
    day_oracle,
    slot_curves,
    slot_oracle,
)

__all__ = [
    "ABSTAIN_RATIO",
    "CACHE_DIR",
    "MIP_REL_GAP",
    "ORACLE_GRID",
    "SEMANTICS_VERSION",
    "Evaluate",
    "KnapsackItems",
    "KnapsackModel",
    "KnapsackSolution",
    "OracleKind",
    "OracleResult",
    "OracleSolution",
    "candidate_ratios",
    "choice_from_values",
    "day_oracle",
    "knapsack_model",
    "market_oracle",
    "oracle_fingerprint",
    "prune_items",
    "sequential_totals",
    "setting_constraints",
    "slot_curves",
    "slot_oracle",
    "solve_day",
    "solve_knapsack_model",
    "solve_slot_knapsack",
]
