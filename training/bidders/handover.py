"""Any bidder with the service's live hand-over (:mod:`model.handover`): the same rule on the same days.

Slot by slot it bids what ``inner`` bids until the rule hands an episode over; from then on that episode bids the
controller's ratio for the rest of the day, as the service answers ``decided_by: handover``. The service runs the
hand-over behind the shield: ``HandoverBidder(ShieldedBidder(model))`` plays what it serves. ``controller`` is the
law the service hands over to: the model card's fallback controller
(:meth:`model.artifact.Artifact.fallback_controller`).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from model.controller import Controller
from model.handover import HandoverConfig, handed_over
from model.history import History, Registration
from training.bidders.base import Bidder
from training.replay.simulator import SlotResult


class HandoverBidder(Bidder):
    """Bids what ``inner`` bids until an episode is handed over, then the controller's ratio; counts the
    hand-overs (:attr:`handed`: per episode of the batch playing, the slot from which the controller bid, or -1)."""

    name: ClassVar[str] = "handover"

    def __init__(self, inner: Bidder, controller: Controller, config: HandoverConfig | None = None):
        if inner.traffic_buckets != 1:
            raise ValueError("the hand-over plays one ratio per episode, as the service bids (traffic_buckets 1)")
        self.inner = inner
        self.controller = controller
        self.config = config or HandoverConfig()
        self.handed = np.zeros(0, dtype=np.int64)

    @property
    def deterministic(self) -> bool:
        return self.inner.deterministic

    def start(self, registration: Registration, seed: int) -> None:
        self.inner.start(registration, seed)
        self.handed = np.full(registration.n, -1, dtype=np.int64)

    def bid(self, history: History) -> np.ndarray:
        proposed = np.asarray(self.inner.bid(history), dtype=np.float64)
        controller = np.asarray(self.controller.ratios(history), dtype=np.float64)
        ratio, handed = handed_over(history, proposed, controller, self.handed >= 0, self.config)
        self.handed = np.where(handed & (self.handed < 0), history.slot, self.handed)
        return ratio

    def on_result(self, history: History, result: SlotResult) -> None:
        self.inner.on_result(history, result)

    def params(self) -> dict[str, Any]:
        return {"inner": self.inner.name, **self.inner.params()}
