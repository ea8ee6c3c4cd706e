"""The ``bayes@m`` reference of :mod:`research.headroom`: the market told, the conversion scale learned by Bayes' rule.

On a sparse market a campaign reads the day's conversion scale (true over predicted conversion rate, the regime
part only deliveries reveal) from a few deliveries a slot. How much can a bidder gain that reads it as well as
Bayes' rule allows? :class:`BayesConversion` is told everything else of the day's regime (price level and its
intraday path, traffic, shocks: the day's twins, :func:`training.market.generator.generate_twin`, whose deliveries
are rescaled to conversion scale 1) and learns the scale ``s`` from its own cumulative delivery ``D``:

* prior: ``log s ~ N(mu, sd)``, the ID family's (what the train days show; the bidder is not told whether a day is
  out of distribution);
* likelihood: ``D ~ N(s E, s V)``, ``E`` and ``V`` the mean and variance over the twins of the delivery at scale 1
  of the ratios it bid, slot by slot (a sum of rare conversions: mean and variance both proportional to ``s``);
* decision, every slot (closed loop): the ratio of :data:`GRID` that, held for the rest of the day, has the most
  posterior-expected day delivery, a (twin, scale) pair's delivery counted only where the day's ROI, what it has
  already won plus what that twin wins at that scale, reaches ``L (1 + m)``.

It is certainty-equivalent in the ratio (one constant ratio for the rest of the day, re-chosen each slot), not
Bayes-optimal, and it is told the market's future, which no bidder knows: a reference for what reading the
conversion scale from deliveries is worth, not a bidder. SC only (no budget).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from model.history import History, Registration
from model.planner import from_slot_on
from training.bidders.base import Bidder
from training.market.generator import REGIME_PARTS, MarketConfig, draw_regime, generate_twin
from training.replay.oracle import ORACLE_GRID
from training.replay.oracle.oracles import slot_curves
from training.replay.simulator import DayIndex

GRID = ORACLE_GRID[1::2]
"""Ratios the reference chooses among (every other ratio of the oracle grid: 0.02 .. 4.00)."""
SCALE_SPAN = 1.5
"""The scale grid spans ``mu +- SCALE_SPAN`` in log (7.5 ID-family sds on ``sparse``: OOD days' scales included)."""
SCALES = 31


@dataclass(frozen=True)
class DayTwins:
    """What the twins of one day expect at conversion scale 1, per ratio of :data:`GRID`."""

    mean: np.ndarray
    """``(T, G)``: mean delivery over twins in each slot."""
    var: np.ndarray
    """``(T, G)``: its variance over twins."""
    delivery_after: np.ndarray
    """``(K, T + 1, G)``: each twin's delivery from slot ``t`` to the end of the day (float32)."""
    cost_after: np.ndarray
    """``(K, T + 1, G)``: the same for cost (cost does not depend on the scale)."""


def day_twins(day: int, ood: bool, generator: MarketConfig, twins: range, market_told: bool = True) -> DayTwins:
    """The twins of a day, deliveries rescaled to conversion scale 1: its whole regime with fresh impressions, or
    (``market_told=False``) its conversion scale only, the market part of each twin another regime of the family."""
    family = generator.ood_family if ood else generator.id_family
    scale = draw_regime(np.random.default_rng([generator.seed, day]), family, generator)["conversion_scale"]
    known = tuple(REGIME_PARTS) if market_told else ("conversion",)
    curves = [slot_curves(DayIndex(generate_twin(day, ood, generator, k, known)), GRID) for k in twins]
    delivery = np.stack([d for d, _ in curves]) / scale  # (K, T, G)
    cost = np.stack([c for _, c in curves])
    rest_delivery, rest_cost = (from_slot_on(x).astype(np.float32) for x in (delivery, cost))
    return DayTwins(delivery.mean(axis=0), delivery.var(axis=0), rest_delivery, rest_cost)


def _day_twins(args: tuple[int, bool, MarketConfig, range, bool]) -> DayTwins:
    return day_twins(*args)


class BayesConversion(Bidder):
    """Episode ``i`` plays day ``twins_of[i]`` at margin ``margins[i]``; see the module docstring."""

    name: ClassVar[str] = "bayes"
    deterministic: ClassVar[bool] = True  # type: ignore[misc]

    def __init__(self, twins_of: list[DayTwins], margins: np.ndarray, prior_mean: float, prior_sd: float):
        self.twins_of, self.margins = twins_of, np.asarray(margins, dtype=np.float64)
        self.log_scales = np.linspace(prior_mean - SCALE_SPAN, prior_mean + SCALE_SPAN, SCALES)
        self.scales = np.exp(self.log_scales)
        self.log_prior = -0.5 * ((self.log_scales - prior_mean) / prior_sd) ** 2

    def start(self, registration: Registration, seed: int) -> None:
        if np.isfinite(registration.budget).any():
            raise ValueError("the bayes reference plays SC episodes only (no budget)")

    def booked(self, history: History) -> tuple[np.ndarray, np.ndarray]:
        """Per episode, the mean and variance over its twins of what scale 1 delivers at the ratios bid so far (from
        the history alone: asking twice in a slot gives the same answer)."""
        t = history.slot
        bid = np.searchsorted(GRID, history.ratios[:, :t] - 1e-9).clip(0, GRID.size - 1)
        expected, variance = np.zeros(history.n), np.zeros(history.n)
        for i, twins in enumerate(self.twins_of):
            expected[i] = sum(twins.mean[s, bid[i, s]] for s in range(t))  # in slot order, left to right
            variance[i] = sum(twins.var[s, bid[i, s]] for s in range(t))
        return expected, variance

    def posterior(self, delivered: float, expected: float, variance: float) -> np.ndarray:
        """Weights over the scale grid after delivering ``delivered`` where scale 1 expects ``expected``."""
        log_post = self.log_prior.copy()
        if expected > 0:
            # 5% relative error in quadrature: the twins' mean is an estimate (64 twins), not the day's truth
            spread = self.scales * variance + (0.05 * self.scales * expected) ** 2 + 1e-12
            log_post += -0.5 * (delivered - self.scales * expected) ** 2 / spread - 0.5 * np.log(spread)
        weights = np.exp(log_post - log_post.max())
        return weights / weights.sum()

    def bid(self, history: History) -> np.ndarray:
        t = history.slot
        expected, variance = self.booked(history)
        delivered, spent = history.total_delivery, history.total_cost
        target = history.registration.roi_target * (1.0 + self.margins)
        ratios = np.empty(history.n)
        for i, twins in enumerate(self.twins_of):
            weights = self.posterior(delivered[i], expected[i], variance[i])
            day_delivery = delivered[i] + self.scales[None, :, None] * twins.delivery_after[:, None, t, :]  # (K, S, G)
            day_cost = spent[i] + twins.cost_after[:, None, t, :]
            counted = np.where((day_delivery >= target[i] * day_cost) & (day_delivery > 0), day_delivery, 0.0)
            value = np.einsum("ksg,s->g", counted, weights)
            ratios[i] = GRID[int(np.argmax(value))]
        return ratios


def bayes_prior(generator: MarketConfig) -> tuple[float, float]:
    """The prior a bidder has of the log conversion scale: the ID family's (train days are ID)."""
    return generator.id_family.conversion_log_mean, generator.id_family.conversion_log_std
