"""Domain randomization of training episodes: each one replays its day in a market of its own regime.

The paper's argument for CBRL's posterior is that the market's regime is hidden and shifts: a policy that
infers it from the slots seen so far can adapt where a fixed one cannot. A market's train days hold few
regimes, and on a sparse market the ones they hold are blurred by noise, so the posterior has little to
infer and the policy fits the train days' own luck. Randomizing the regime per collected episode
gives it regimes to tell apart (issue 12's lever): episode ``k`` replays its day with prices
``price_scale[k]`` times the log's and delivery ``value_scale[k]`` times it (:class:`BatchedReplay`'s
``regime``), each ``exp(U(-spread, spread))``, independent. Together they move the day's ROI at a given
ratio by ``value / price`` and the ratio that wins a given share of the auctions by ``price``: the two
things the suite's markets differ in.

The registration (L, B) stays the day's own, so a regime is also a tighter or looser constraint. The
reward's normalizer is the day's own slot-wise oracle ``D*`` times ``value_scale`` (the oracle of the
scaled day would need one more MILP per episode): within an episode it is a constant, so the policy's
per-episode objective is unchanged; across episodes it weighs a harsh regime's (lower reachable) delivery
less. Model selection and every evaluation play the unscaled days.

A residual run may randomize its reference controller too (:class:`ScaledReference`, ``rcb train
--reference-spread``): each collected episode's reference ratio is the controller's times ``exp(U(-spread,
spread))``, the same factor all day. Served on another market, a residual model's reference is the controller tuned
on its train days, off by a factor there (the shipped model's sits at 0.75-0.89 of each suite market's own PID's
ratio: RESULTS.md, rule F), and the hope was a policy that learns to correct one from the slots. Measured (rule C,
session 39, MC, spread 0.4): it learned to bid lower instead, and lost to the same recipe without it on 7 of 8 rows;
off by default.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from model.contract import RATIO_MAX
from model.controller import RATIO_FLOOR, Reference
from model.history import History

Regime = tuple[np.ndarray, np.ndarray]
"""``(price_scale, value_scale)``, each ``(n,)``."""


def log_uniform(rng: np.random.Generator, n: int, spread: float, what: str) -> np.ndarray | None:
    """``n`` factors log-uniform on ``[exp(-spread), exp(spread)]``; None when ``spread`` is 0 (``what``: the
    spread's name in the error a negative one raises)."""
    if spread < 0:
        raise ValueError(f"the {what} spread must be >= 0")
    return None if spread == 0 else np.exp(rng.uniform(-spread, spread, n))


def draw_regimes(rng: np.random.Generator, n: int, spread: float) -> Regime | None:
    """``n`` episodes' regimes, log-uniform on ``[exp(-spread), exp(spread)]`` each; None when ``spread`` is 0."""
    factors = log_uniform(rng, 2 * n, spread, "regime")  # the price scales, then the value scales: one stream
    return None if factors is None else (factors[:n], factors[n:])


@dataclass(frozen=True)
class ScaledReference:
    """``reference``'s ratios times ``scale[k]`` for episode ``k``, clipped to the controller's range: the
    reference a residual policy reads and corrects, off by a factor per episode (training only)."""

    reference: Reference
    scale: np.ndarray
    """``(n,)``, one factor per episode of the histories it is asked about."""

    def sequence(self, history: History, until: int | None = None) -> np.ndarray:
        if history.n != self.scale.size:
            raise ValueError(f"{self.scale.size} scales for {history.n} episodes")
        base = self.reference.sequence(history, until)
        return np.clip(base * self.scale[:, None], RATIO_FLOOR, RATIO_MAX)


def draw_reference_scales(rng: np.random.Generator, n: int, spread: float) -> np.ndarray | None:
    """``n`` episodes' reference factors, log-uniform on ``[exp(-spread), exp(spread)]``; None when ``spread`` is 0."""
    return log_uniform(rng, n, spread, "reference")
