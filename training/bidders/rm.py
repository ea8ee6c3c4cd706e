"""RM (paper Sec. 4.2, [RM]): the constant bid ratio that scores best over the train days.

A static functional optimization: one ratio, solved on the train set, applied unchanged to every
test day. It cannot adapt to a day, but it respects constraints on average.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from model.history import History
from training.bidders.base import Bidder
from training.bidders.tuning import candidate_scores
from training.replay.dayset import DaySet
from training.replay.oracle import ORACLE_GRID


class ConstantRatio(Bidder):
    """Bids one fixed ratio per episode in every slot (``ratio`` broadcasts over episodes)."""

    name: ClassVar[str] = "rm"
    deterministic: ClassVar[bool] = True  # type: ignore[misc]

    def __init__(self, ratio: float | np.ndarray):
        self.ratio = np.asarray(ratio, dtype=np.float64)

    def bid(self, history: History) -> np.ndarray:
        return np.broadcast_to(self.ratio, (history.n,)).copy()

    def params(self) -> dict[str, Any]:
        return {"ratio": float(self.ratio)} if self.ratio.ndim == 0 else {}


def tune(train: DaySet, seed: int = 0, progress: Callable[[str], None] | None = None) -> tuple[ConstantRatio, float]:
    """Scan the oracle grid (0.01..4.00); the best mean train score wins, ties to the smaller ratio."""
    grid = ORACLE_GRID
    scores = candidate_scores(lambda n: ConstantRatio(np.repeat(grid, len(train))), len(grid), train, seed)
    if progress:
        progress("rm")
    best = int(np.argmax(scores))
    return ConstantRatio(float(grid[best])), float(scores[best])


def from_params(params: dict[str, Any], train: Callable[[], DaySet] | None = None) -> ConstantRatio:
    return ConstantRatio(float(params["ratio"]))
