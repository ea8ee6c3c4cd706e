"""The one interface every offline bidding method implements, and the loop that drives it.

A bidder sees, for a batch of episodes, only what a live bidder sees (:mod:`model.history`): the
registration (L and B), its own past ratios and the aggregate stats of what it won in each finished
slot. It answers the next slot's ratio per episode. Baselines, RL agents and exported ONNX policies
sit behind this interface, so every offline number comes from :func:`play`. The live service does
not (it depends on ``model/`` alone): it decides with :class:`model.policy.Policy`, the same step
:class:`training.bidders.onnx.OnnxBidder` runs, and ``rcb replay`` checks the two agree.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from model.contract import RATIO_MAX, RATIO_MIN
from model.history import History, Registration
from training.replay.simulator import BatchedReplay, DayIndex, SlotResult


class Bidder(ABC):
    """Batched slot-wise bidder. Subclasses set ``name`` and implement :meth:`bid`."""

    name: ClassVar[str] = "bidder"
    traffic_buckets: int = 1
    """> 1: :meth:`bid` answers one ratio per traffic bucket, shape ``(n, traffic_buckets)``."""

    def start(self, registration: Registration, seed: int) -> None:  # noqa: B027 - optional hook
        """A new batch of episodes begins (reset per-episode state; ``seed`` seeds any randomness)."""

    @abstractmethod
    def bid(self, history: History) -> np.ndarray:
        """Ratios for slot ``history.slot``: ``(n,)``, or ``(n, traffic_buckets)``, within [0, 4]."""

    def on_result(self, history: History, result: SlotResult) -> None:  # noqa: B027 - optional hook
        """The slot just bid is over; ``history`` already holds it. ``result.by_bucket`` after a bucketed bid."""

    @property
    def deterministic(self) -> bool:
        """True when the seed does not change a single bid: evaluation then plays it once, not once per seed."""
        return False

    def params(self) -> dict[str, Any]:
        """The hyperparameters that define this bidder (saved and printed after tuning)."""
        return {}


@dataclass(frozen=True)
class Outcome:
    """Per-episode totals of a played batch, plus the full observed history."""

    delivery: np.ndarray
    cost: np.ndarray
    history: History


def play(
    bidder: Bidder,
    days: list[DayIndex],
    episode_days: np.ndarray,
    registration: Registration,
    seed: int,
    regime: tuple[np.ndarray, np.ndarray] | None = None,
) -> Outcome:
    """Replay one episode per entry of ``episode_days`` (indices into ``days``) with ``bidder``.

    Budgets come from the registration (early termination as in the simulator). Ratios outside
    [0, 4] are a bidder bug and raise. ``regime``: per-episode price and delivery scales (training's
    domain randomization, :mod:`training.rl.domain_randomization`).
    """
    env = BatchedReplay(days, episode_days, registration.budget, regime)
    history = History(registration)
    bidder.start(registration, seed)
    while not env.done:
        ratios = np.asarray(bidder.bid(history), dtype=np.float64)
        if ratios.size and not (ratios.min() >= RATIO_MIN and ratios.max() <= RATIO_MAX):
            raise ValueError(f"{bidder.name} bid ratios outside [{RATIO_MIN}, {RATIO_MAX}] (or NaN)")
        result = env.step(ratios)
        # With bucketed bids the history keeps the traffic-weighted mean ratio of each episode.
        shown = ratios if ratios.ndim == 1 else _traffic_weighted(ratios, result)
        history.record(shown, result.delivery, result.cost, result.wins, result.auctions)
        bidder.on_result(history, result)
    return Outcome(delivery=env.delivery.copy(), cost=env.cost.copy(), history=history)


def _traffic_weighted(ratios: np.ndarray, result: SlotResult) -> np.ndarray:
    assert result.by_bucket is not None
    weights = result.by_bucket.auctions.astype(np.float64)
    total = weights.sum(axis=1)
    mean = np.divide((ratios * weights).sum(axis=1), total, out=ratios.mean(axis=1), where=total > 0)
    return mean
