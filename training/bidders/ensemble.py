"""``ensemble:LABEL=GLOB``: K trained policies bidding as one, by the median of their log-ratios.

Training seeds of the same config disagree a lot (RESULTS.md: validation 0.63 to 0.78 for five CBRL MC
seeds); a median over K members is robust to one member that runs away or collapses on a day it
reads wrongly, where a mean would follow it. Each member keeps its own posterior and its own noise
(member ``k`` is started with seed ``seed * ENSEMBLE_SEED_STRIDE + k``), and every member sees the same
history: the ensemble's ratios, not its own.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from model.controller import RATIO_FLOOR
from model.history import History, Registration
from training.bidders.base import Bidder
from training.simulator import SlotResult

ENSEMBLE_SEED_STRIDE = 1000
"""Member ``k`` of an ensemble started with seed ``s`` gets seed ``s * STRIDE + k``: distinct noise per member."""


class EnsembleBidder(Bidder):
    """The median log-ratio of ``members`` (their traffic buckets must agree)."""

    name: ClassVar[str] = "ensemble"

    def __init__(self, members: list[Bidder]):
        if not members:
            raise ValueError("an ensemble needs at least one member")
        buckets = {m.traffic_buckets for m in members}
        if len(buckets) != 1:
            raise ValueError(f"ensemble members bid on different traffic buckets: {sorted(buckets)}")
        self.members = members
        self.traffic_buckets = buckets.pop()

    @property
    def deterministic(self) -> bool:
        return all(m.deterministic for m in self.members)

    def start(self, registration: Registration, seed: int) -> None:
        for k, member in enumerate(self.members):
            member.start(registration, seed * ENSEMBLE_SEED_STRIDE + k)

    def bid(self, history: History) -> np.ndarray:
        ratios = np.stack([np.asarray(m.bid(history), dtype=np.float64) for m in self.members])
        # A member bidding 0 (abstaining) has log-ratio -inf: floor it so the median stays finite.
        return np.exp(np.median(np.log(np.maximum(ratios, RATIO_FLOOR)), axis=0))

    def on_result(self, history: History, result: SlotResult) -> None:
        for member in self.members:
            member.on_result(history, result)

    def params(self) -> dict[str, Any]:
        return {"members": len(self.members), "member": self.members[0].name}
