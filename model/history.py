"""What a bidder may know about its episodes: the registration and the slot stats observed so far.

Every bidder (baselines, RL agents, exported ONNX models, the live service) sees exactly this and
nothing else, so offline numbers and online behaviour come from the same information (no hindsight, no
regime, no oracle). Arrays are batched over ``n`` episodes.

The slot stats are what an ad engine can report at the end of each 30-minute slot
(:data:`SLOT_STATS`): the delivery it attributed *during* the slot (a late conversion counts in the
slot in which it arrives, so a reported slot is final and never revised), the cost paid, the auctions
won and the auctions entered. The simulator reports exactly these, the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from model.contract import SLOTS_PER_DAY
from model.roi import roi

SLOT_STATS: tuple[str, ...] = ("delivery", "cost", "wins", "auctions")
"""The per-slot stats a model needs from the ad engine, in this order (the model card lists them)."""


@dataclass(frozen=True)
class Registration:
    """What a campaign declares when an episode starts (arrays of shape ``(n,)``): L and B, nothing else.

    Both are known before the day: no field may need the day's own hindsight.
    """

    roi_target: np.ndarray
    """L: the episode must end with delivery / cost >= L."""
    budget: np.ndarray
    """B: the spend cap (``inf`` for none, as in SC)."""

    def __post_init__(self) -> None:
        n = self.roi_target.shape
        if self.budget.shape != n or len(n) != 1:
            raise ValueError("roi_target and budget must be 1-d arrays of one length")
        if np.any(~np.isfinite(self.roi_target)) or np.any(~(self.roi_target > 0)):
            raise ValueError("roi_target must be finite and > 0")
        if np.any(np.isnan(self.budget)) or np.any(self.budget <= 0):
            raise ValueError("budget must be > 0 (inf for none)")

    @property
    def n(self) -> int:
        return int(self.roi_target.shape[0])

    @classmethod
    def of(cls, roi_target: float, budget: float | None, n: int = 1) -> Registration:
        """``n`` identical registrations (``budget=None`` means no budget)."""
        return cls(
            roi_target=np.full(n, float(roi_target)),
            budget=np.full(n, np.inf if budget is None else float(budget)),
        )

    def take(self, episodes: np.ndarray | list[int]) -> Registration:
        """The registrations of some episodes, in the order given."""
        index = np.asarray(episodes, dtype=np.int64)
        return Registration(self.roi_target[index], self.budget[index])


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

    @classmethod
    def of_stats(cls, registration: Registration, slot: int, **stats: np.ndarray) -> History:
        """A history at ``slot`` from the stats of its finished slots: ``ratios`` and each of
        :data:`SLOT_STATS`, arrays ``(n, slot)`` (or ``(n, >= slot)``, of which ``[:, :slot]`` is read).

        The inverse of reading ``history.ratios[:, :slot]`` etc.: a history rebuilt this way observes
        exactly like the one recorded slot by slot (the service rebuilds a campaign's from its stored stats).
        """
        if not 0 <= slot <= SLOTS_PER_DAY:
            raise ValueError(f"slot must be in 0..{SLOTS_PER_DAY}, not {slot}")
        history = cls(registration)
        for name in ("ratios", *SLOT_STATS):
            values = np.asarray(stats[name], dtype=np.float64)
            if values.ndim != 2 or values.shape[0] != history.n or values.shape[1] < slot:
                raise ValueError(f"{name} must be ({history.n}, >= {slot}); got {values.shape}")
            getattr(history, name)[:, :slot] = values[:, :slot]
        history.slot = slot
        return history

    def until(self, slot: int, episodes: list[int] | None = None) -> History:
        """This history as it stood when ``slot`` slots had been reported (of ``episodes`` only, if given): what a
        bidder asked at ``slot`` saw."""
        if slot > self.slot:
            raise ValueError(f"slot {slot} is not reported yet ({self.slot} are)")
        rows = list(range(self.n)) if episodes is None else episodes
        stats = {name: getattr(self, name)[rows] for name in ("ratios", *SLOT_STATS)}
        return History.of_stats(self.registration.take(rows), slot, **stats)

    @property
    def total_delivery(self) -> np.ndarray:
        return self.delivery[:, : self.slot].sum(axis=1)

    @property
    def total_cost(self) -> np.ndarray:
        return self.cost[:, : self.slot].sum(axis=1)

    @property
    def roi(self) -> np.ndarray:
        """Cumulative delivery / cost so far (``inf`` before any spend)."""
        return roi(self.total_delivery, self.total_cost)

    @property
    def remaining_budget(self) -> np.ndarray:
        return self.registration.budget - self.total_cost
