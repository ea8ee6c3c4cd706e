"""Reward functions of CBRL and its rivals (paper Sec. 3.2.2-3.2.3 and appendix), vectorized over episodes.

Inputs are per-slot stats of ``n`` episodes, shape ``(n, T)``: ``delivery[:, t]`` and ``cost[:, t]``
won in slot ``t``; per-episode ``roi_target`` L, ``budget`` B (``inf`` for none) and ``oracle``
delivery ``D*`` of the day being trained on. Rewards may use the training day's hindsight ``D*``
(as the paper does, to put days on one scale); observation features never do
(:mod:`model.features`).

Scale (appendix, "Policy Learning"): delivery is normalized by ``D*`` and constraint violations by
their limits, so both terms are O(1).

* :func:`indicator_reward`, Eq. (5), the **Hard** (Ind-Sp) reward: at ``t = T`` only,
  ``D_T / D*`` if the episode is feasible, else minus its normalized violation
  ``(L - ROI_T)_+ / L + (C_T - B)_+ / B``. Feasible rewards are ``>= 0`` and infeasible ones ``< 0``:
  every feasible episode outranks every infeasible one, with no trade-off parameter.
* :func:`curriculum_reward`, Eq. (7), the dense reward of curriculum ``P_k``: at every slot the slot's
  delivery if the cumulative constraints of ``P_k`` hold, else minus their violations, with the
  limits of Eq. (appendix "Curriculum Design")::

      L_t^k = (1 - b_k (1 - t/T)^g) L,    B_t^k = h_k (1 - t/T)^g B

  which tighten early slots (reserve budget, demand ROI) and reach the original ``L`` and ``0`` at ``T``.
* :func:`uscb_reward`: USCB's soft combination, ``min(D/D*, 1) - (gamma^{(L C / D - 1)_+} - 1)`` at ``T``
  (the G-metric's per-episode score, :func:`training.replay.metrics.gmetric_scores`, with a tuned ``gamma``).
* ``D* = 0``: the terminal rewards follow the metrics' convention (``D / D*`` counts as 1;
  :mod:`training.replay.metrics`); :func:`curriculum_reward`'s per-slot credit ``d_t / D*`` is 0 there (its
  penalties still apply). No train day of the suite's markets has ``D* = 0``.
* :func:`lagrangian_reward`: RCPO's ``D/D* - lambda * violation`` at ``T``; lambda follows dual ascent
  (:class:`DualAscent`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from model.contract import SLOTS_PER_DAY
from model.roi import roi
from training.replay.metrics import gmetric_scores, normalized_delivery


def violation(delivery: np.ndarray, cost: np.ndarray, roi_target: np.ndarray, budget: np.ndarray) -> np.ndarray:
    """Normalized constraint violation ``(L - ROI)_+ / L + (C - B)_+ / B`` (0 iff feasible)."""
    roi_part = np.maximum(roi_target - roi(delivery, cost), 0.0) / roi_target
    budget_part = np.where(np.isfinite(budget), np.maximum(cost - budget, 0.0) / budget, 0.0)
    return roi_part + budget_part


def constraint_gap(delivery: np.ndarray, cost: np.ndarray, roi_target: np.ndarray, budget: np.ndarray) -> np.ndarray:
    """The most violated constraint, signed: ``max((L - ROI) / L, (C - B) / B, -1)``; ``> 0`` iff infeasible.

    Unlike :func:`violation` it goes negative with slack, so RCPO's dual ascent on it can lower its
    multiplier again once the policy is safely feasible (Tessler et al.'s update on the constraint value).
    """
    roi_gap = (roi_target - roi(delivery, cost)) / roi_target
    budget_gap = np.where(np.isfinite(budget), (cost - budget) / np.where(np.isfinite(budget), budget, 1.0), -np.inf)
    return np.maximum(np.maximum(roi_gap, budget_gap), -1.0)


def _terminal(n: int, values: np.ndarray) -> np.ndarray:
    rewards = np.zeros((n, SLOTS_PER_DAY))
    rewards[:, -1] = values
    return rewards


def indicator_reward(
    delivery: np.ndarray, cost: np.ndarray, roi_target: np.ndarray, budget: np.ndarray, oracle: np.ndarray
) -> np.ndarray:
    """Eq. (5): sparse, ``(n, T)``; nonzero only at the last slot."""
    total_d, total_c = delivery.sum(axis=1), cost.sum(axis=1)
    broken = violation(total_d, total_c, roi_target, budget)
    return _terminal(len(total_d), np.where(broken > 0, -broken, normalized_delivery(total_d, oracle)))


def remaining_power(g: float) -> np.ndarray:
    """``(1 - t/T)^g`` for t = 1..T: how much of the curriculum's relaxation is left after slot t."""
    return (1.0 - np.arange(1, SLOTS_PER_DAY + 1) / SLOTS_PER_DAY) ** g


def curriculum_limits(b: float, h: float, g: float, roi_target: np.ndarray, budget: np.ndarray):
    """``(L_t^k, B_t^k)`` for t = 1..T, each ``(n, T)``: the cumulative constraints after slot t."""
    remaining = remaining_power(g)
    roi_limit = (1.0 - b * remaining)[None, :] * roi_target[:, None]
    reserve = h * remaining[None, :] * np.where(np.isfinite(budget), budget, 0.0)[:, None]
    return roi_limit, reserve


def curriculum_reward(
    delivery: np.ndarray,
    cost: np.ndarray,
    roi_target: np.ndarray,
    budget: np.ndarray,
    oracle: np.ndarray,
    b: float,
    h: float = 0.95,
    g: float = 3.0,
) -> np.ndarray:
    """Eq. (7): dense, ``(n, T)``. Slot ``t`` earns its delivery ``/ D*`` while ``ROI_t >= L_t^k`` and
    ``B - C_t >= B_t^k``; otherwise it pays ``(L_t^k - ROI_t) / L + (B_t^k + C_t - B) / B`` for what is broken."""
    cum_d, cum_c = np.cumsum(delivery, axis=1), np.cumsum(cost, axis=1)
    roi_limit, reserve = curriculum_limits(b, h, g, roi_target, budget)
    roi_gap = np.maximum(roi_limit - roi(cum_d, cum_c), 0.0) / roi_target[:, None]
    finite = np.isfinite(budget)[:, None]
    budget_gap = np.where(finite, np.maximum(reserve + cum_c - np.where(finite, budget[:, None], 0.0), 0.0), 0.0)
    budget_gap = budget_gap / np.where(finite, budget[:, None], 1.0)
    broken = roi_gap + budget_gap
    credit = np.divide(delivery, oracle[:, None], out=np.zeros_like(delivery), where=oracle[:, None] > 0)
    return np.where(broken > 0, -broken, credit)


def uscb_reward(
    delivery: np.ndarray, cost: np.ndarray, roi_target: np.ndarray, oracle: np.ndarray, gamma: float
) -> np.ndarray:
    """USCB's soft combination at ``T``: its episode's G-metric score with base ``gamma`` (docs/metrics.md)."""
    total_d, total_c = delivery.sum(axis=1), cost.sum(axis=1)
    return _terminal(len(total_d), gmetric_scores(total_d, total_c, roi_target, oracle, gamma=gamma))


def lagrangian_reward(
    delivery: np.ndarray,
    cost: np.ndarray,
    roi_target: np.ndarray,
    budget: np.ndarray,
    oracle: np.ndarray,
    multiplier: float,
) -> np.ndarray:
    """RCPO's penalized reward at ``T``: ``D/D* - lambda * violation``."""
    total_d, total_c = delivery.sum(axis=1), cost.sum(axis=1)
    penalty = multiplier * violation(total_d, total_c, roi_target, budget)
    return _terminal(len(total_d), normalized_delivery(total_d, oracle) - penalty)


@dataclass
class DualAscent:
    """RCPO's Lagrange multiplier: ``lambda <- max(0, lambda + lr * (mean constraint gap - tolerance))``."""

    multiplier: float = 1.0
    learning_rate: float = 0.05
    tolerance: float = 0.0

    def update(self, gaps: np.ndarray) -> float:
        """One dual step on the episodes' constraint measure (RCPO's trainer passes :func:`constraint_gap`)."""
        self.multiplier = max(0.0, self.multiplier + self.learning_rate * (float(np.mean(gaps)) - self.tolerance))
        return self.multiplier
