"""The curriculum of CRL/CBRL (paper Sec. 3.2.3, Sec. 4.3 and appendix "Curriculum Design").

A sequence of proxy problems ``P_n, ..., P_1, P_0`` trained in order: the first with the tightest
slot-wise constraints (smallest relaxation ``b_k``), then looser ones, then the original problem
``P_0`` with the sparse indicator reward. The paper's fixed three-stage sequence: a cold-start
curriculum for three epochs (``b = 0.1``), a warm-up curriculum for three epochs (``b = 0.2``), both
with ``h = 0.95`` and ``g = 3``, then ``P_0`` for the remaining epochs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from training.replay.metrics import is_feasible
from training.rl.rewards import curriculum_reward, indicator_reward, lagrangian_reward, remaining_power, uscb_reward


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

    @property
    def terminal(self) -> bool:
        """Whether the reward comes at the day's end only (the original problem and the soft-combination rivals)."""
        return self.b is None

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


@dataclass
class RegretCurriculum:
    """The automated curriculum (paper appendix, "Curriculum Design"): learn each proxy problem's ``b_k``.

    Objective, over the feasible episodes of an epoch's collection (``1_F``)::

        min_{b_k}  E[(D_T - sum_t R'_t(b_k)) 1_F]

    i.e. make the proxy return of curriculum ``k`` agree with the true delivery where the episode ends
    feasible, so the proxy does not punish behaviour that was fine in the end. The indicator of Eq. (7)'s
    slot constraint ``ROI_t >= L_t^k`` is not differentiable in ``b_k``; it is smoothed by a logistic
    ``sigmoid(v (ROI_t - L_t^k) / L)`` with slope ``v = 10`` (the paper's printed form of this function is
    garbled; the logistic is its evident intent), and ``b_k`` takes Adam steps (lr 3e-3) clipped to [0, 1].
    Delivery is normalized by ``D*`` as everywhere, so ``D_T`` here is ``D_T / D*``.

    Read as written, this objective is monotone in ``b_k``: a looser limit raises every slot's smoothed indicator
    and shrinks every penalty, so the proxy return rises towards ``D_T`` and the regret falls as ``b_k`` grows.
    Its minimum is ``b_k = 1`` on any data, and each epoch's 20 steps of a fresh Adam (whose first steps are
    ``lr`` each, whatever the gradient's size) move ``b_k`` up about ``20 lr = 0.06`` an epoch until then: the
    learned relaxation is a schedule set by ``learning_rate`` and ``steps`` more than by the episodes. It stays
    an option (``--auto-curriculum``), off by default.
    """

    b: dict[str, float]
    """The current ``b_k`` of every curriculum stage, by stage name."""
    slope: float = 10.0
    learning_rate: float = 3e-3
    steps: int = 20
    """Adam steps per epoch."""

    @classmethod
    def of(cls, stages: tuple[Stage, ...]) -> RegretCurriculum:
        return cls(b={s.name: float(s.b) for s in stages if s.b is not None})

    def stage(self, stage: Stage) -> Stage:
        """``stage`` with its learned ``b_k`` (the original problem passes through)."""
        return stage if stage.b is None else replace(stage, b=self.b[stage.name])

    def update(
        self,
        stage: Stage,
        delivery: np.ndarray,
        cost: np.ndarray,
        roi_target: np.ndarray,
        budget: np.ndarray,
        oracle: np.ndarray,
    ) -> float:
        """Adam steps on ``b`` of ``stage`` from one epoch's episodes; returns the new ``b``."""
        import torch  # training-only dependency, imported where the automated curriculum is used

        if stage.b is None:
            return float("nan")
        feasible = is_feasible(delivery.sum(axis=1), cost.sum(axis=1), roi_target, budget)
        if not feasible.any():
            return self.b[stage.name]
        as_tensor = lambda x: torch.as_tensor(x[feasible], dtype=torch.float64)  # noqa: E731
        d, c, target, scale = as_tensor(delivery), as_tensor(cost), as_tensor(roi_target), as_tensor(oracle)
        scale = torch.where(scale > 0, scale, torch.ones_like(scale))
        cum_d, cum_c = torch.cumsum(d, dim=1), torch.cumsum(c, dim=1)
        roi = torch.where(cum_c > 0, cum_d / cum_c.clamp(min=1e-12), torch.full_like(cum_d, 1e6))
        remaining = torch.as_tensor(remaining_power(stage.g))  # the same limits as Eq. (7)'s reward
        b = torch.tensor(self.b[stage.name], dtype=torch.float64, requires_grad=True)
        optimizer = torch.optim.Adam([b], lr=self.learning_rate)
        true_return = d.sum(dim=1) / scale
        for _ in range(self.steps):
            limit = (1.0 - b * remaining)[None, :] * target[:, None]
            gap = (roi - limit) / target[:, None]
            holds = torch.sigmoid(self.slope * gap)
            proxy = holds * d / scale[:, None] - (1.0 - holds) * torch.clamp(-gap, min=0.0)
            regret = (true_return - proxy.sum(dim=1)).mean()
            optimizer.zero_grad()
            regret.backward()
            optimizer.step()
            with torch.no_grad():
                b.clamp_(0.0, 1.0)
        self.b[stage.name] = float(b.detach())
        return self.b[stage.name]
