"""``shield:METHOD``: any bidder behind the safety shield of :mod:`model.shield` (the code the service runs).

The shield's reference controller uses the PID gains of :class:`model.controller.ControllerGains` and the
traffic profile of the market's train days (known before any evaluated day).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, ClassVar

import numpy as np

from model.controller import ControllerGains
from model.history import History, Registration
from model.shield import ShieldConfig, shield
from training.bidders.base import Bidder
from training.replay.simulator import SlotResult


class ShieldedBidder(Bidder):
    """Bids what ``inner`` bids, moved into the shield's band; counts how often the shield acted."""

    name: ClassVar[str] = "shield"

    def __init__(self, inner: Bidder, gains: ControllerGains, config: ShieldConfig | None = None):
        self.inner = inner
        self.gains = gains
        self.config = config or ShieldConfig()
        self.traffic_buckets = inner.traffic_buckets
        self.decisions = 0
        self.acted = 0

    @property
    def deterministic(self) -> bool:
        return self.inner.deterministic

    def start(self, registration: Registration, seed: int) -> None:
        self.inner.start(registration, seed)

    def bid(self, history: History) -> np.ndarray:
        proposed = np.asarray(self.inner.bid(history), dtype=np.float64)
        columns = proposed[:, None] if proposed.ndim == 1 else proposed
        out = np.empty_like(columns)
        for b in range(columns.shape[1]):  # one band for every traffic bucket's ratio
            guarded = shield(history, columns[:, b], self.gains, self.config)
            out[:, b] = guarded.ratio
            self.acted += int(guarded.acted.sum())
            self.decisions += guarded.acted.size
        return out[:, 0] if proposed.ndim == 1 else out

    def on_result(self, history: History, result: SlotResult) -> None:
        self.inner.on_result(history, result)

    @property
    def acted_share(self) -> float:
        return self.acted / self.decisions if self.decisions else 0.0

    def params(self) -> dict[str, Any]:
        return {"inner": self.inner.name, **self.inner.params(), "shield": asdict(self.config)}
