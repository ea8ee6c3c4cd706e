"""Evaluation metrics (docs/metrics.md): ANS, CSR, ANDR (paper appendix, "Evaluation Protocols") and USCB's G-metric.

Every function is vectorized over episodes: it takes arrays (or scalars, broadcast) of one value per
episode — delivery ``D``, cost ``C``, ROI target ``L``, budget ``B`` (``inf`` for none) and the
slot-wise hindsight oracle's delivery ``D*`` — and returns per-episode arrays or their mean.

The paper's formulas (appendix, "Evaluation Protocols"), with ``F`` the feasible set
``{ROI >= L and C <= B}`` (Sec. 2: ``F = F_L ∩ F_B``) and ``N`` episodes::

    ANS  = 1/N   sum_i  D_i / D*_i * 1[i in F]
    CSR  = 1/N   sum_i  1[i in F]
    ANDR = 1/|F| sum_{i in F} (D_i / D*_i - 1) * 100%

and USCB's G-metric (paper, "Additional Empirical Results")::

    G = 1/N sum_i  min(D_i / D*_i, 1) - (gamma ** max(L_i * C_i / D_i - 1, 0) - 1),   gamma = 3

Conventions for the cases the formulas leave undefined (each one is tested in ``tests/test_metrics.py``):

* **Zero cost.** ``ROI = D / C`` with ``C = 0`` is taken as ``+inf``: an episode that spent nothing
  cannot have violated the ROI constraint (``D >= L * C`` holds), so it is feasible whenever it is
  within budget. With ``D = 0`` its score is ``0 / D* = 0`` — feasible but worthless, which is what
  "never bid" deserves.
* **Zero oracle delivery.** ``D / D*`` with ``D* = 0`` is taken as ``1``, so such a day scores 1 if
  the episode is feasible and 0 if not. These are the days where no bidder can reach the ROI target
  (the ``prior`` constraint recipe draws L without looking at the day, so they happen, most on OOD
  days): the best a bidder can do there is not to lose the advertiser's money, which a feasible
  episode achieves (in practice by bidding little); ``rcb evaluate`` counts them (``n_zero_oracle``)
  and reports the feasible share on them and ANS over the other days apart. With ``D = 0`` the ratio
  is ``0/0``: the episode matched the oracle exactly. With ``D > 0`` the oracle failed to be an upper
  bound on that day (its whole-slot plans on a ratio grid found no feasible delivery where a finer ratio, a
  slot cut by the budget stop or a per-bucket bid did: docs/metrics.md); the ratio is capped at ``1`` rather
  than ``+inf`` so that one degenerate day cannot make a mean infinite. Where ``D* > 0`` the same reasons can
  put ``D / D*`` slightly above 1 (measured: at most about 1%), which is left as it is.
* **G-metric with zero delivery.** The relative ROI violation ``L*C/D - 1`` is ``0`` when ``C = 0``
  (nothing spent, nothing violated) and ``+inf`` when ``D = 0 < C``. The violation is clipped at
  ``max_violation`` (default 10, i.e. an ROI eleven times below target) so such an episode scores the
  finite floor ``-(gamma**10 - 1)`` instead of ``-inf``; pass ``max_violation=np.inf`` for the raw formula.
  The G-metric penalizes the ROI constraint only (budgets are enforced by early termination, as in USCB).
* **No feasible episode.** ANDR is a mean over an empty set: ``nan``.
"""

from __future__ import annotations

from typing import TypedDict

import numpy as np
from numpy.typing import ArrayLike

import model.roi as rule

DEFAULT_GAMMA = 3.0
"""USCB's G-metric base (docs/metrics.md)."""

DEFAULT_MAX_VIOLATION = 10.0
"""Clip of the G-metric's relative ROI violation, so ``D = 0 < C`` scores a finite floor."""


class Summary(TypedDict):
    """What :func:`summarize` returns (ANDR in percent; ``nan`` when no episode is feasible)."""

    ans: float
    csr: float
    andr: float
    gmetric: float
    n_episodes: int


def _episodes(**columns: ArrayLike) -> dict[str, np.ndarray]:
    """Broadcast the per-episode columns to one 1-D float64 shape and check them.

    Delivery, cost, ROI target and oracle delivery must be finite and >= 0; a budget may be ``inf``.
    """
    names = list(columns)
    given = [np.asarray(columns[n], dtype=np.float64) for n in names]
    try:
        arrays = np.broadcast_arrays(*given)
    except ValueError:
        shapes = ", ".join(f"{n} {a.shape}" for n, a in zip(names, given, strict=True))
        raise ValueError(f"per-episode columns have mismatched shapes: {shapes}") from None
    out = {n: np.atleast_1d(a).ravel() for n, a in zip(names, arrays, strict=True)}
    n_episodes = next(iter(out.values())).shape[0]
    if n_episodes == 0:
        raise ValueError("no episodes: metrics are means over at least one episode")
    for name, values in out.items():
        bad = np.isnan(values) | (values < 0)
        if name != "budget":  # only a budget may be +inf (no budget)
            bad |= np.isinf(values)
        if np.any(bad):
            k = int(np.flatnonzero(bad)[0])
            what = ">= 0 (inf for none)" if name == "budget" else "finite and >= 0"
            raise ValueError(f"{name} must be {what}; episode {k} has {values[k]!r}")
    return out


def roi(delivery: ArrayLike, cost: ArrayLike) -> np.ndarray:
    """Per-episode ``ROI = D / C`` (paper Sec. 2), ``+inf`` where nothing was spent (``C = 0``)."""
    e = _episodes(delivery=delivery, cost=cost)
    return rule.roi(e["delivery"], e["cost"])


def is_feasible(delivery: ArrayLike, cost: ArrayLike, roi_target: ArrayLike, budget: ArrayLike = np.inf) -> np.ndarray:
    """Per-episode feasibility ``1[F] = 1[ROI >= L and C <= B]`` (paper Sec. 2; zero cost: ROI = +inf)."""
    e = _episodes(delivery=delivery, cost=cost, roi_target=roi_target, budget=budget)
    return rule.is_feasible(e["delivery"], e["cost"], e["roi_target"], e["budget"])


def normalized_delivery(delivery: ArrayLike, oracle_delivery: ArrayLike) -> np.ndarray:
    """Per-episode ``D / D*``; ``1`` where ``D* = 0`` (see the module docstring for why)."""
    e = _episodes(delivery=delivery, oracle_delivery=oracle_delivery)
    d, d_star = e["delivery"], e["oracle_delivery"]
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(d_star > 0, d / d_star, 1.0)


def ans(
    delivery: ArrayLike, cost: ArrayLike, roi_target: ArrayLike, budget: ArrayLike, oracle_delivery: ArrayLike
) -> float:
    """Average Normalized Score: ``1/N sum_i D_i/D*_i * 1[F_i]`` (paper appendix, "Evaluation Protocols")."""
    feasible = is_feasible(delivery, cost, roi_target, budget)
    score = normalized_delivery(delivery, oracle_delivery)
    return float(np.mean(np.where(feasible, score, 0.0)))


def csr(delivery: ArrayLike, cost: ArrayLike, roi_target: ArrayLike, budget: ArrayLike = np.inf) -> float:
    """Constraint Satisfaction Rate: ``1/N sum_i 1[F_i]`` (paper appendix, "Evaluation Protocols")."""
    return float(np.mean(is_feasible(delivery, cost, roi_target, budget)))


def andr(
    delivery: ArrayLike, cost: ArrayLike, roi_target: ArrayLike, budget: ArrayLike, oracle_delivery: ArrayLike
) -> float:
    """Average Normalized Delivery Regret in percent: ``1/|F| sum_{i in F} (D_i/D*_i - 1) * 100``.

    Paper appendix, "Evaluation Protocols". Negative means below the oracle; ``nan`` when no episode
    is feasible (a mean over an empty set).
    """
    feasible = is_feasible(delivery, cost, roi_target, budget)
    if not feasible.any():
        return float("nan")
    score = normalized_delivery(delivery, oracle_delivery)
    return float(np.mean(score[feasible] - 1.0) * 100.0)


def gmetric_scores(
    delivery: ArrayLike,
    cost: ArrayLike,
    roi_target: ArrayLike,
    oracle_delivery: ArrayLike,
    gamma: float = DEFAULT_GAMMA,
    max_violation: float = DEFAULT_MAX_VIOLATION,
) -> np.ndarray:
    """Per-episode USCB G-metric ``min(D/D*, 1) - (gamma ** max(L*C/D - 1, 0) - 1)``.

    Zero delivery: the violation is 0 when ``C = 0`` and ``+inf`` when ``C > 0``, then clipped at
    ``max_violation`` (see the module docstring).
    """
    if not gamma >= 1.0:
        raise ValueError(f"gamma must be >= 1 (a penalty that grows with the violation), not {gamma!r}")
    if not max_violation >= 0.0:
        raise ValueError(f"max_violation must be >= 0, not {max_violation!r}")
    e = _episodes(delivery=delivery, cost=cost, roi_target=roi_target, oracle_delivery=oracle_delivery)
    d, c, target = e["delivery"], e["cost"], e["roi_target"]
    with np.errstate(divide="ignore", invalid="ignore"):
        # L*C/D - 1 is the relative shortfall of the ROI below L (L/ROI - 1); C = 0 violates nothing.
        relative = np.where(c > 0, np.where(d > 0, target * c / d - 1.0, np.inf), 0.0)
    violation = np.minimum(np.maximum(relative, 0.0), max_violation)
    penalty = np.power(gamma, violation) - 1.0
    return np.minimum(normalized_delivery(d, e["oracle_delivery"]), 1.0) - penalty


def gmetric(
    delivery: ArrayLike,
    cost: ArrayLike,
    roi_target: ArrayLike,
    oracle_delivery: ArrayLike,
    gamma: float = DEFAULT_GAMMA,
    max_violation: float = DEFAULT_MAX_VIOLATION,
) -> float:
    """USCB G-metric: the mean of :func:`gmetric_scores` over episodes."""
    return float(np.mean(gmetric_scores(delivery, cost, roi_target, oracle_delivery, gamma, max_violation)))


def summarize(
    delivery: ArrayLike,
    cost: ArrayLike,
    roi_target: ArrayLike,
    budget: ArrayLike | None,
    oracle_delivery: ArrayLike,
    gamma: float = DEFAULT_GAMMA,
    max_violation: float = DEFAULT_MAX_VIOLATION,
) -> Summary:
    """ANS, CSR, ANDR (percent), G-metric and the episode count of one set of episodes.

    ``budget=None`` means no budget (the SC setting); otherwise one budget per episode, ``inf`` for none.
    """
    budget = np.inf if budget is None else budget
    e = _episodes(delivery=delivery, cost=cost, roi_target=roi_target, budget=budget, oracle_delivery=oracle_delivery)
    d, c, target, b, d_star = e["delivery"], e["cost"], e["roi_target"], e["budget"], e["oracle_delivery"]
    return Summary(
        ans=ans(d, c, target, b, d_star),
        csr=csr(d, c, target, b),
        andr=andr(d, c, target, b, d_star),
        gmetric=gmetric(d, c, target, d_star, gamma, max_violation),
        n_episodes=int(d.shape[0]),
    )
