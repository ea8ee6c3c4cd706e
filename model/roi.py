"""The feasibility rule of the bidding problem (paper Sec. 2), written once for training, metrics and serving.

* ``ROI = D / C``, and an episode (or a slot, or a prefix of one) that spent nothing has ``ROI = +inf``:
  it cannot have violated the ROI constraint (``D >= L * C`` holds at ``C = 0``).
* An episode is feasible iff ``ROI >= L`` and ``C <= B`` (``B = inf`` for no budget). Both comparisons are
  exact: there is no tolerance. The oracle's answers are checked against this very predicate in plain
  float arithmetic (``training.replay.oracle``), so an exact rule is what keeps ``D*`` feasible by construction.

Torch-free and numpy-only, so the service can import it.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike


def roi(delivery: ArrayLike, cost: ArrayLike) -> np.ndarray:
    """``D / C`` elementwise (broadcast), ``+inf`` where ``C <= 0`` (nothing spent)."""
    delivery = np.asarray(delivery, dtype=np.float64)
    cost = np.asarray(cost, dtype=np.float64)
    out = np.full(np.broadcast_shapes(delivery.shape, cost.shape), np.inf)
    with np.errstate(over="ignore"):  # a denormal cost gives +inf, which is the right answer
        return np.divide(delivery, cost, out=out, where=cost > 0)


def is_feasible(delivery: ArrayLike, cost: ArrayLike, roi_target: ArrayLike, budget: ArrayLike = np.inf) -> np.ndarray:
    """``ROI >= L and C <= B`` elementwise (broadcast), with :func:`roi`'s ``+inf`` at zero cost."""
    target, limit = np.asarray(roi_target, dtype=np.float64), np.asarray(budget, dtype=np.float64)
    return (roi(delivery, cost) >= target) & (np.asarray(cost, dtype=np.float64) <= limit)
