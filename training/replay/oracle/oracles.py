"""The two hindsight oracles on one day's :class:`DayIndex`: slot-wise (the MILP of :mod:`training.replay.oracle.milp`
over the simulator's per-slot curves) and day-wise (every candidate ratio replayed at once).

Both answer in the simulator's numbers: the slot-wise choice is replayed (:func:`replay_totals`) and the
reported totals are the replay's; the day-wise one is a replay.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from model.contract import SLOTS_PER_DAY
from model.roi import is_feasible
from training.replay.oracle.milp import solve_slot_knapsack
from training.replay.simulator import BatchedReplay, DayIndex, replay_totals

ORACLE_GRID: np.ndarray = np.round(np.arange(1, 401) * 0.01, 2)
"""The oracle's bid-ratio grid: 0.01..4.00 in steps of 0.01 (400 values, rounded to 2 decimals)."""

ABSTAIN_RATIO: float = 0.0
"""Ratio 0 wins nothing (``0 * u > m`` never holds): the always-feasible "do not bid" item."""


@dataclass(frozen=True)
class OracleSolution:
    """What one oracle found on one day: the 48 ratios and the delivery and cost they replay to."""

    ratios: np.ndarray
    delivery: float
    cost: float


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


def slot_oracle(
    index: DayIndex, roi_target: float, budget: float = math.inf, grid: np.ndarray = ORACLE_GRID
) -> OracleSolution:
    """The slot-wise hindsight oracle of one day (paper appendix, "Slot-wise Oracle"): ``D*`` of docs/metrics.md.

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
    feasible = is_feasible(env.delivery, env.cost, roi_target, budget)
    # argmax returns the first maximum: the smallest grid ratio among ties, abstention (always feasible) last.
    best = int(np.argmax(np.where(feasible, env.delivery, -np.inf)))
    return OracleSolution(np.full(SLOTS_PER_DAY, candidates[best]), float(env.delivery[best]), float(env.cost[best]))
