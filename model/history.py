"""What a bidder may know about its episodes: the registration and the slot stats observed so far.

Every bidder (baselines, RL agents, exported ONNX models, the live service) sees exactly this and
nothing else, so offline numbers and online behaviour come from the same information (SPEC 5: no
hindsight, no regime, no oracle). Arrays are batched over ``n`` episodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from model.contract import SLOTS_PER_DAY


@dataclass(frozen=True)
class Registration:
    """What a campaign declares when an episode starts (arrays of shape ``(n,)``)."""

    roi_target: np.ndarray
    """L: the episode must end with delivery / cost >= L."""
    budget: np.ndarray
    """B: the spend cap (``inf`` for none, as in SC)."""
    reference_delivery: np.ndarray
    """A typical daily delivery known before the day starts (e.g. from earlier days): a scale for features."""

    def __post_init__(self) -> None:
        n = self.roi_target.shape
        if self.budget.shape != n or self.reference_delivery.shape != n or len(n) != 1:
            raise ValueError("roi_target, budget and reference_delivery must be 1-d arrays of one length")
        if np.any(~(self.roi_target > 0)) or np.any(np.isnan(self.budget)) or np.any(self.budget <= 0):
            raise ValueError("roi_target must be > 0 and budget > 0 (inf for none)")
        if np.any(~(self.reference_delivery > 0)) or not np.all(np.isfinite(self.reference_delivery)):
            raise ValueError("reference_delivery must be finite and > 0")

    @property
    def n(self) -> int:
        return int(self.roi_target.shape[0])

    @classmethod
    def of(cls, roi_target: float, budget: float | None, reference_delivery: float, n: int = 1) -> Registration:
        """``n`` identical registrations (``budget=None`` means no budget)."""
        return cls(
            roi_target=np.full(n, float(roi_target)),
            budget=np.full(n, np.inf if budget is None else float(budget)),
            reference_delivery=np.full(n, float(reference_delivery)),
        )

    def take(self, episodes: np.ndarray | list[int]) -> Registration:
        """The registrations of some episodes, in the order given."""
        index = np.asarray(episodes, dtype=np.int64)
        return Registration(self.roi_target[index], self.budget[index], self.reference_delivery[index])


@dataclass
class History:
    """The slot stats of ``n`` episodes, recorded slot by slot: ``[:, :slot]`` is filled."""

    registration: Registration
    ratios: np.ndarray = field(init=False)
    delivery: np.ndarray = field(init=False)
    cost: np.ndarray = field(init=False)
    wins: np.ndarray = field(init=False)
    auctions: np.ndarray = field(init=False)
    slot: int = 0
    """Slots observed so far; the next ratio is for this slot."""

    def __post_init__(self) -> None:
        shape = (self.registration.n, SLOTS_PER_DAY)
        self.ratios = np.zeros(shape)
        self.delivery = np.zeros(shape)
        self.cost = np.zeros(shape)
        self.wins = np.zeros(shape)
        self.auctions = np.zeros(shape)

    @property
    def n(self) -> int:
        return self.registration.n

    @property
    def done(self) -> bool:
        return self.slot >= SLOTS_PER_DAY

    def record(
        self, ratios: np.ndarray, delivery: np.ndarray, cost: np.ndarray, wins: np.ndarray, auctions: np.ndarray
    ) -> None:
        """Append one slot: the ratios bid (one per episode) and what they won."""
        if self.done:
            raise RuntimeError("history is full: all slots recorded")
        t = self.slot
        self.ratios[:, t] = ratios
        self.delivery[:, t] = delivery
        self.cost[:, t] = cost
        self.wins[:, t] = wins
        self.auctions[:, t] = auctions
        self.slot = t + 1

    @property
    def total_delivery(self) -> np.ndarray:
        return self.delivery[:, : self.slot].sum(axis=1)

    @property
    def total_cost(self) -> np.ndarray:
        return self.cost[:, : self.slot].sum(axis=1)

    @property
    def roi(self) -> np.ndarray:
        """Cumulative delivery / cost so far (``inf`` before any spend)."""
        cost = self.total_cost
        return np.divide(self.total_delivery, cost, out=np.full(self.n, np.inf), where=cost > 0)

    @property
    def remaining_budget(self) -> np.ndarray:
        return self.registration.budget - self.total_cost
