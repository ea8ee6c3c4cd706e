"""Fast, exact replay of logged auctions under slot-wise bid ratios.

Semantics (SPEC 1, issue 2): impression ``i`` of slot ``t`` is won iff ``ratio_t * u_i > m_i`` and
a win pays ``c_i``. With a budget ``B`` the campaign wins in arrival order while its cumulative cost
stays ``<= B``; the first win that would exceed ``B`` ends its bidding for the episode.

Speed: for a fixed slot the won set only depends on the impression's *critical ratio* ``m_i / u_i``,
so each slot is pre-sorted by critical ratio with prefix sums of delivery and cost (:class:`DayIndex`).
A step is then one binary search per episode. Floating point can disagree between ``m/u < ratio``
and ``ratio*u > m`` in the last ulp, so the few impressions whose critical ratio lies within
``1e-12`` (relative) of the ratio are decided by the exact predicate. Only the slot where the
budget runs out scans its impressions in arrival order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from model.contract import SLOTS_PER_DAY
from training.market.schema import DayLog

_EXACT_WINDOW = 1e-12
"""Relative half-width around a ratio inside which wins are checked with ``ratio*u > m`` itself."""


@dataclass(frozen=True)
class SlotOutcome:
    """What bidding ``ratio`` over a slot won, without any budget (arrays over the queried ratios)."""

    delivery: np.ndarray
    cost: np.ndarray
    wins: np.ndarray


class DayIndex:
    """One day's impressions, pre-sorted per slot by critical ratio, with prefix sums.

    Memory is about 60 bytes per impression (raw arrays kept for the budget scan).
    """

    def __init__(self, log: DayLog):
        self.log = log
        self.day = log.day
        self.offsets = log.slot_offsets
        n = log.n_impressions
        critical = log.market_price / log.utility
        self.order = np.empty(n, dtype=np.int64)
        for t in range(SLOTS_PER_DAY):
            lo, hi = self.offsets[t], self.offsets[t + 1]
            self.order[lo:hi] = lo + np.argsort(critical[lo:hi], kind="stable")
        self.critical = critical[self.order]
        # Prefix sums per slot: pref[lo + t + k] holds the sum of the first k sorted items of slot t.
        # Each slot gets one extra leading zero, hence the ``+ t`` shift.
        self.prefix_delivery = self._slot_prefix(log.delivery[self.order])
        self.prefix_cost = self._slot_prefix(log.cost[self.order])
        self.impressions = np.diff(self.offsets)
        # Per-slot views, so a step does no slicing arithmetic: (critical, prefix_delivery, prefix_cost, order).
        self._slots = [
            (
                self.critical[lo:hi],
                self.prefix_delivery[lo + t : hi + t + 1],
                self.prefix_cost[lo + t : hi + t + 1],
                self.order[lo:hi],
            )
            for t, (lo, hi) in enumerate(zip(self.offsets[:-1].tolist(), self.offsets[1:].tolist(), strict=True))
        ]

    def _slot_prefix(self, sorted_values: np.ndarray) -> np.ndarray:
        out = np.empty(sorted_values.shape[0] + SLOTS_PER_DAY, dtype=np.float64)
        for t in range(SLOTS_PER_DAY):
            lo, hi = self.offsets[t], self.offsets[t + 1]
            out[lo + t] = 0.0
            np.cumsum(sorted_values[lo:hi], out=out[lo + t + 1 : hi + t + 1])
        return out

    @property
    def nbytes(self) -> int:
        log = self.log
        raw = log.utility.nbytes + log.market_price.nbytes + log.delivery.nbytes + log.cost.nbytes
        return raw + self.order.nbytes + self.critical.nbytes + self.prefix_delivery.nbytes + self.prefix_cost.nbytes

    def slot_outcome(self, t: int, ratios: np.ndarray) -> SlotOutcome:
        """Delivery, cost and wins of bidding each of ``ratios`` over all of slot ``t`` (no budget)."""
        critical, prefix_delivery, prefix_cost, order = self._slots[t]
        ratios = np.asarray(ratios, dtype=np.float64)
        sure = critical.searchsorted(ratios * (1.0 - _EXACT_WINDOW), side="left")
        edge = critical.searchsorted(ratios * (1.0 + _EXACT_WINDOW), side="right")
        delivery = prefix_delivery[sure]
        cost = prefix_cost[sure]
        wins = sure
        near = edge > sure
        if near.any():
            log = self.log
            for j in np.flatnonzero(near):
                rows = order[sure[j] : edge[j]]
                won = ratios[j] * log.utility[rows] > log.market_price[rows]
                delivery[j] += log.delivery[rows][won].sum()
                cost[j] += log.cost[rows][won].sum()
                wins[j] += int(won.sum())
        return SlotOutcome(delivery=delivery, cost=cost, wins=wins)

    def slot_scan(self, t: int, ratio: float, remaining_budget: float) -> tuple[float, float, int, int, bool]:
        """Arrival-order replay of slot ``t`` under a budget: (delivery, cost, wins, impressions, exhausted).

        Bidding stops at the first win whose cost would take the spend past ``remaining_budget``.
        """
        rows = self.log.slot_rows(t)
        won = ratio * self.log.utility[rows] > self.log.market_price[rows]
        spend = np.cumsum(np.where(won, self.log.cost[rows], 0.0))
        over = np.flatnonzero(won & (spend > remaining_budget))
        stop = int(over[0]) if over.size else len(spend)
        delivered = float(np.where(won[:stop], self.log.delivery[rows][:stop], 0.0).sum())
        paid = float(spend[stop - 1]) if stop else 0.0
        return delivered, paid, int(won[:stop].sum()), stop, bool(over.size)


@dataclass
class StepResult:
    """Per-episode aggregates of one slot: the only things a bidder observes (partial observability)."""

    delivery: np.ndarray
    cost: np.ndarray
    wins: np.ndarray
    impressions: np.ndarray


class BatchedReplay:
    """Many episodes replayed in lockstep, one slot per :meth:`step`.

    ``episode_days[k]`` is the day index (into ``days``) that episode ``k`` replays; ``budgets[k]`` is
    its budget (``inf`` for none). Episodes on the same day share one :class:`DayIndex`.
    """

    def __init__(self, days: list[DayIndex], episode_days: np.ndarray, budgets: np.ndarray | None = None):
        self.days = days
        self.episode_days = np.asarray(episode_days, dtype=np.int64)
        n = self.episode_days.shape[0]
        if self.episode_days.ndim != 1 or (n and (self.episode_days.min() < 0 or self.episode_days.max() >= len(days))):
            raise ValueError(f"episode_days must be a 1-d array of indices into the {len(days)} days")
        self.budgets = np.full(n, np.inf) if budgets is None else np.asarray(budgets, dtype=np.float64).copy()
        if self.budgets.shape != (n,):
            raise ValueError(f"budgets has shape {self.budgets.shape}, expected ({n},)")
        if np.isnan(self.budgets).any() or (self.budgets < 0).any():
            raise ValueError("budgets must be >= 0 (inf for no budget), never NaN")
        self._budgeted = bool(np.isfinite(self.budgets).any())
        self._by_day = [(self.days[d], np.flatnonzero(self.episode_days == d)) for d in np.unique(self.episode_days)]
        self.reset()

    @property
    def n_episodes(self) -> int:
        return int(self.episode_days.shape[0])

    def reset(self) -> None:
        n = self.n_episodes
        self.slot = 0
        self.delivery = np.zeros(n)
        self.cost = np.zeros(n)
        self.exhausted = np.zeros(n, dtype=bool)
        self._any_exhausted = False

    @property
    def done(self) -> bool:
        return self.slot >= SLOTS_PER_DAY

    def step(self, ratios: np.ndarray) -> StepResult:
        """Bid ``ratios[k]`` for episode ``k`` over the current slot; advance to the next slot.

        ``impressions`` counts the auctions the episode took part in: the whole slot, or in the slot
        where its budget runs out, those before the first win it could not pay for (0 afterwards).
        """
        if self.slot >= SLOTS_PER_DAY:
            raise RuntimeError("episode is over: all slots replayed; call reset()")
        ratios = np.asarray(ratios, dtype=np.float64)
        n = self.n_episodes
        if ratios.shape != (n,):
            raise ValueError(f"ratios has shape {ratios.shape}, expected ({n},)")
        # min() propagates NaN, max() catches inf: two reductions instead of four.
        if n and not (ratios.min() >= 0.0 and np.isfinite(ratios.max())):
            raise ValueError("ratios must be finite and >= 0")
        t = self.slot
        out = StepResult(np.zeros(n), np.zeros(n), np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64))
        for index, episodes in self._by_day:
            active = episodes[~self.exhausted[episodes]] if self._any_exhausted else episodes
            if active.size == 0:
                continue
            got = index.slot_outcome(t, ratios[active])
            out.delivery[active] = got.delivery
            out.cost[active] = got.cost
            out.wins[active] = got.wins
            out.impressions[active] = index.impressions[t]
            if not self._budgeted:
                continue
            for k in active[got.cost > self.budgets[active] - self.cost[active]]:
                delivered, paid, wins, seen, exhausted = index.slot_scan(t, ratios[k], self.budgets[k] - self.cost[k])
                out.delivery[k], out.cost[k], out.wins[k], out.impressions[k] = delivered, paid, wins, seen
                self.exhausted[k] = exhausted
                self._any_exhausted |= exhausted
        self.delivery += out.delivery
        self.cost += out.cost
        self.slot += 1
        return out


def replay_day(index: DayIndex, ratios: np.ndarray, budget: float = np.inf) -> list[StepResult]:
    """Replay one episode with 48 fixed ratios; the per-slot results in order."""
    env = BatchedReplay([index], np.zeros(1, dtype=np.int64), np.array([budget]))
    return [env.step(np.array([r])) for r in np.asarray(ratios, dtype=np.float64)]


def direct_replay(log: DayLog, ratios: np.ndarray, budget: float = np.inf) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The O(impressions) reference: per-slot (delivery, cost, wins) by walking every impression.

    Used by tests and benchmarks to check :class:`BatchedReplay`; never on a hot path.
    """
    delivery = np.zeros(SLOTS_PER_DAY)
    cost = np.zeros(SLOTS_PER_DAY)
    wins = np.zeros(SLOTS_PER_DAY, dtype=np.int64)
    spent = 0.0
    for t in range(SLOTS_PER_DAY):
        for i in range(int(log.slot_offsets[t]), int(log.slot_offsets[t + 1])):
            if ratios[t] * log.utility[i] > log.market_price[i]:
                if spent + log.cost[i] > budget:
                    return delivery, cost, wins
                spent += log.cost[i]
                delivery[t] += log.delivery[i]
                cost[t] += log.cost[i]
                wins[t] += 1
    return delivery, cost, wins
