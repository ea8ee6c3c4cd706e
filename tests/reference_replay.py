"""The per-impression reference replay that tests check the simulator's fast paths against (not production code)."""

from __future__ import annotations

import numpy as np

from model.contract import SLOTS_PER_DAY
from training.market.schema import DayLog


def direct_replay(
    log: DayLog, ratios: np.ndarray, budget: float = np.inf, bucket: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The O(impressions) reference: per-slot (delivery, cost, wins) by walking every impression.

    ``ratios`` is ``(48,)``, or ``(48, buckets)`` with ``bucket`` giving each row's traffic bucket
    (:attr:`DayIndex.bucket`). The tests check :class:`training.replay.simulator.BatchedReplay` against it.
    """
    ratios = np.asarray(ratios, dtype=np.float64)
    delivery = np.zeros(SLOTS_PER_DAY)
    cost = np.zeros(SLOTS_PER_DAY)
    wins = np.zeros(SLOTS_PER_DAY, dtype=np.int64)
    spent = 0.0
    for t in range(SLOTS_PER_DAY):
        for i in range(int(log.slot_offsets[t]), int(log.slot_offsets[t + 1])):
            ratio = ratios[t] if bucket is None else ratios[t, bucket[i]]
            if ratio * log.utility[i] > log.market_price[i]:
                if spent + log.cost[i] > budget:
                    return delivery, cost, wins
                spent += log.cost[i]
                delivery[t] += log.delivery[i]
                cost[t] += log.cost[i]
                wins[t] += 1
    return delivery, cost, wins
