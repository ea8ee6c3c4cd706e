"""The curriculum of CRL/CBRL (paper Sec. 3.2.3, Sec. 4.3 and appendix "Curriculum Design").

A sequence of proxy problems ``P_n, ..., P_1, P_0`` trained in order: the first with the tightest
slot-wise constraints (smallest relaxation ``b_k``), then looser ones, then the original problem
``P_0`` with the sparse indicator reward. The paper's fixed three-stage sequence: a cold-start
curriculum for three epochs (``b = 0.1``), a warm-up curriculum for three epochs (``b = 0.2``), both
with ``h = 0.95`` and ``g = 3``, then ``P_0`` for the remaining epochs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from training.rewards import curriculum_reward, indicator_reward, lagrangian_reward, uscb_reward


@dataclass(frozen=True)
class Stage:
    """One curriculum: ``b is None`` means the original problem (sparse indicator reward)."""

    name: str
    epochs: int | None
    """How many epochs it lasts (``None``: all that remain)."""
    b: float | None = None
    """Relaxation of the ROI limit at the start of the day (Eq. clhp)."""
    h: float = 0.95
    """Share of the budget held in reserve at the start of the day."""
    g: float = 3.0
    """Power of the limits' approach to the final constraints."""

    def rewards(
        self, delivery: np.ndarray, cost: np.ndarray, roi_target: np.ndarray, budget: np.ndarray, oracle: np.ndarray
    ) -> np.ndarray:
        """This stage's per-slot rewards, ``(n, T)``."""
        if self.b is None:
            return indicator_reward(delivery, cost, roi_target, budget, oracle)
        return curriculum_reward(delivery, cost, roi_target, budget, oracle, b=self.b, h=self.h, g=self.g)


@dataclass(frozen=True)
class USCBStage(Stage):
    """USCB's soft combination (a rival, not a curriculum): ``min(D/D*, 1) - (gamma^violation - 1)`` at T."""

    gamma: float = 3.0

    def rewards(
        self, delivery: np.ndarray, cost: np.ndarray, roi_target: np.ndarray, budget: np.ndarray, oracle: np.ndarray
    ) -> np.ndarray:
        return uscb_reward(delivery, cost, roi_target, oracle, gamma=self.gamma)


@dataclass(frozen=True)
class LagrangianStage(Stage):
    """RCPO's penalized reward ``D/D* - lambda * violation`` at T; the trainer moves lambda by dual ascent."""

    multiplier: float = 1.0

    def rewards(
        self, delivery: np.ndarray, cost: np.ndarray, roi_target: np.ndarray, budget: np.ndarray, oracle: np.ndarray
    ) -> np.ndarray:
        return lagrangian_reward(delivery, cost, roi_target, budget, oracle, multiplier=self.multiplier)


PAPER_CURRICULUM: tuple[Stage, ...] = (
    Stage("cold start", epochs=3, b=0.1),
    Stage("warm-up", epochs=3, b=0.2),
    Stage("original problem", epochs=None),
)
SPARSE_ONLY: tuple[Stage, ...] = (Stage("original problem", epochs=None),)
"""Hard (Ind-Sp): the original problem from the first epoch."""


def stage_at(epoch: int, stages: tuple[Stage, ...] = PAPER_CURRICULUM) -> Stage:
    """The curriculum in force at ``epoch`` (0-based)."""
    if epoch < 0:
        raise ValueError(f"epoch must be >= 0, not {epoch}")
    start = 0
    for stage in stages:
        if stage.epochs is None or epoch < start + stage.epochs:
            return stage
        start += stage.epochs
    return stages[-1]
