"""Fast, exact replay of logged auctions under slot-wise bid ratios.

Semantics (docs/metrics.md): impression ``i`` of slot ``t`` is won iff ``ratio_t * u_i > m_i`` and
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

from dataclasses import dataclass, replace

import numpy as np

from model.contract import SLOTS_PER_DAY
from training.market.schema import DayLog

_EXACT_WINDOW = 1e-12
"""Relative half-width around a ratio inside which wins are checked with ``ratio*u > m`` itself."""


@dataclass(frozen=True)
class SlotOutcome:
    """What bidding each queried ratio over a whole slot (or segment) wins, without any budget: arrays over the
    ratios. Per-episode results of a replay step are :class:`SlotResult`."""

    delivery: np.ndarray
    cost: np.ndarray
    wins: np.ndarray


class DayIndex:
    """One day's impressions, pre-sorted per segment by critical ratio, with prefix sums.

    A *segment* is a slot, or with ``buckets > 1`` a (slot, traffic bucket) pair: every impression is
    assigned to one of ``buckets`` traffic buckets by a seeded draw (fixed per day), so a bidder can bid
    different ratios on disjoint shares of the traffic (CEM's exploration spends real impressions).
    Segment ``s = t * buckets + b``. Memory is about 60 bytes per impression (raw arrays kept for the
    budget scan).
    """

    def __init__(self, log: DayLog, buckets: int = 1):
        if buckets < 1:
            raise ValueError(f"buckets must be >= 1, not {buckets}")
        self.log = log
        self.day = log.day
        self.buckets = buckets
        n = log.n_impressions
        n_segments = SLOTS_PER_DAY * buckets
        if buckets == 1:
            self.bucket = np.zeros(n, dtype=np.int64)
        else:
            self.bucket = np.random.default_rng([abs(log.day), 0x5EED, buckets]).integers(0, buckets, n)
        critical = log.market_price / log.utility
        # Rows are already in slot order, so with one bucket the segments are contiguous; otherwise a
        # stable integer sort groups each slot's rows by bucket, keeping arrival order.
        if buckets == 1:
            grouped = np.arange(n)
            counts = np.diff(log.slot_offsets)
        else:
            segment = log.slot * buckets + self.bucket
            grouped = np.argsort(segment, kind="stable")
            counts = np.bincount(segment, minlength=n_segments)
        segment_offsets = np.concatenate([[0], np.cumsum(counts)])
        order = np.empty(n, dtype=np.int64)
        for lo, hi in zip(segment_offsets[:-1].tolist(), segment_offsets[1:].tolist(), strict=True):
            rows = grouped[lo:hi]
            order[lo:hi] = rows[np.argsort(critical[rows], kind="stable")]  # by critical ratio, stable
        self._index(segment_offsets, order, critical[order])

    def resampled(self, log: DayLog, copies: np.ndarray) -> DayIndex:
        """The index of ``log``, this day's rows each repeated ``copies[i]`` times in place (a bootstrap day,
        :mod:`training.replay.day_bootstrap`), built from this index without sorting again: equal, array for array, to
        ``DayIndex(log)``. A stable sort of the copies by critical ratio is this index's order with each row
        repeated: equal ratios keep arrival order, and a row's copies are adjacent in ``log``. One bucket only
        (a bucketed index draws each row's bucket by its position)."""
        if self.buckets != 1:
            raise ValueError("a resampled index needs an index of one bucket")
        copies = np.asarray(copies, dtype=np.int64)
        if copies.shape != (self.log.n_impressions,) or log.n_impressions != int(copies.sum()):
            raise ValueError("copies must give one count per impression of the day, summing to the resample's rows")
        copied_before = np.concatenate([[0], np.cumsum(copies)])
        if not np.array_equal(copied_before[self.log.slot_offsets], log.slot_offsets):
            raise ValueError("the resample's slots do not hold the copies of this day's slots")
        first_copy = copied_before[:-1]  # where row i's first copy sits in ``log``
        repeats = copies[self.order]
        rows = np.repeat(self.order, repeats)
        nth_copy = np.arange(rows.size) - np.repeat(np.cumsum(repeats) - repeats, repeats)
        index = DayIndex.__new__(DayIndex)
        index.log = log
        index.day = log.day
        index.buckets = 1
        index.bucket = np.zeros(log.n_impressions, dtype=np.int64)
        index._index(log.slot_offsets.astype(np.int64), first_copy[rows] + nth_copy, np.repeat(self.critical, repeats))
        return index

    def _index(self, segment_offsets: np.ndarray, order: np.ndarray, critical: np.ndarray) -> None:
        """Everything a step reads, from the rows sorted per segment: ``order`` (rows by segment, then critical
        ratio) and ``critical`` (their critical ratios, in that order)."""
        log = self.log
        self.segment_offsets = segment_offsets
        self.order = order
        self.critical = critical
        # Prefix sums per segment: prefix[lo + s + k] is the sum of the first k sorted items of segment s
        # (each segment gets one leading zero, hence the ``+ s`` shift). Per-segment cumsums keep small
        # segments as accurate as large ones.
        self.prefix_delivery = self._segment_prefix(log.delivery[self.order])
        self.prefix_cost = self._segment_prefix(log.cost[self.order])
        self.auctions = np.diff(log.slot_offsets)
        self.bucket_auctions = np.diff(self.segment_offsets).reshape(SLOTS_PER_DAY, self.buckets)
        # Per-segment views, so a step does no slicing arithmetic: (critical, prefix_delivery, prefix_cost, order).
        bounds = zip(self.segment_offsets[:-1].tolist(), self.segment_offsets[1:].tolist(), strict=True)
        self._segments = [
            (
                self.critical[lo:hi],
                self.prefix_delivery[lo + s : hi + s + 1],
                self.prefix_cost[lo + s : hi + s + 1],
                self.order[lo:hi],
            )
            for s, (lo, hi) in enumerate(bounds)
        ]

    def _segment_prefix(self, sorted_values: np.ndarray) -> np.ndarray:
        offsets = self.segment_offsets
        out = np.empty(sorted_values.shape[0] + len(offsets) - 1, dtype=np.float64)
        for s in range(len(offsets) - 1):
            lo, hi = offsets[s], offsets[s + 1]
            out[lo + s] = 0.0
            np.cumsum(sorted_values[lo:hi], out=out[lo + s + 1 : hi + s + 1])
        return out

    @property
    def nbytes(self) -> int:
        log = self.log
        raw = log.utility.nbytes + log.market_price.nbytes + log.delivery.nbytes + log.cost.nbytes
        index = self.order.nbytes + self.critical.nbytes + self.prefix_delivery.nbytes + self.prefix_cost.nbytes
        return raw + index + (self.bucket.nbytes if self.buckets > 1 else 0)

    def segment_outcome(self, segment: int, ratios: np.ndarray) -> SlotOutcome:
        """Delivery, cost and wins of bidding each of ``ratios`` over a whole segment (no budget)."""
        critical, prefix_delivery, prefix_cost, order = self._segments[segment]
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

    def slot_outcome(self, t: int, ratios: np.ndarray) -> SlotOutcome:
        """Delivery, cost and wins of bidding each of ``ratios`` over all of slot ``t`` (no budget)."""
        if self.buckets == 1:
            return self.segment_outcome(t, ratios)
        parts = [self.segment_outcome(t * self.buckets + b, ratios) for b in range(self.buckets)]
        return SlotOutcome(
            delivery=np.sum([p.delivery for p in parts], axis=0),
            cost=np.sum([p.cost for p in parts], axis=0),
            wins=np.sum([p.wins for p in parts], axis=0),
        )

    def slot_scan(self, t: int, ratio: float | np.ndarray, remaining_budget: float) -> ScanOutcome:
        """Arrival-order replay of slot ``t`` under a budget.

        ``ratio`` is one ratio, or one per traffic bucket. Bidding stops at the first win whose cost
        would take the spend past ``remaining_budget``.
        """
        rows = self.log.slot_rows(t)
        bucket = self.bucket[rows]
        row_ratio = np.asarray(ratio, dtype=np.float64)[bucket] if np.ndim(ratio) else ratio
        won = row_ratio * self.log.utility[rows] > self.log.market_price[rows]
        won_cost = np.where(won, self.log.cost[rows], 0.0)
        spend = np.cumsum(won_cost)
        over = np.flatnonzero(won & (spend > remaining_budget))
        stop = int(over[0]) if over.size else len(spend)
        won_delivery = np.where(won[:stop], self.log.delivery[rows][:stop], 0.0)
        bucket = bucket[:stop]
        m = self.buckets
        return ScanOutcome(
            delivery=np.bincount(bucket, weights=won_delivery, minlength=m),
            cost=np.bincount(bucket, weights=won_cost[:stop], minlength=m),
            wins=np.bincount(bucket, weights=won[:stop], minlength=m).astype(np.int64),
            auctions=np.bincount(bucket, minlength=m),
            total_cost=float(spend[stop - 1]) if stop else 0.0,
            exhausted=bool(over.size),
        )


@dataclass(frozen=True)
class ScanOutcome:
    """A budgeted arrival-order replay of one slot, per traffic bucket (arrays of length ``buckets``)."""

    delivery: np.ndarray
    cost: np.ndarray
    wins: np.ndarray
    auctions: np.ndarray
    total_cost: float
    """Spend summed in arrival order (what the budget was checked against)."""
    exhausted: bool


@dataclass
class SlotResult:
    """One slot's outcome for a batch of ``n`` episodes, as :meth:`BatchedReplay.step` returns it: per-episode
    arrays ``(n,)`` of what each won in the slot, the only things a bidder observes (partial observability).
    (:class:`SlotOutcome`, by contrast, is a whole slot bid at several ratios: no episodes, no budget.)

    After a bucketed step (ratios of shape ``(n, buckets)``), ``by_bucket`` holds the same four
    statistics per traffic bucket, shape ``(n, buckets)``: what each share of the traffic won.
    """

    delivery: np.ndarray
    cost: np.ndarray
    wins: np.ndarray
    auctions: np.ndarray
    by_bucket: SlotResult | None = None


class BatchedReplay:
    """Many episodes replayed in lockstep, one slot per :meth:`step`.

    ``episode_days[k]`` is the day index (into ``days``) that episode ``k`` replays; ``budgets[k]`` is
    its budget (``inf`` for none). Episodes on the same day share one :class:`DayIndex`.

    ``regime`` (training's domain randomization, :mod:`training.rl.domain_randomization`) replays episode ``k`` in a
    market whose prices are ``price_scale[k]`` times the log's and whose delivery is ``value_scale[k]`` times it: a bid
    ``r * u`` there wins what ``r / price_scale * u`` wins in the log, and costs ``price_scale`` times as much.
    Budgets, and every number reported, are in the scaled market's money and delivery.
    """

    def __init__(
        self,
        days: list[DayIndex],
        episode_days: np.ndarray,
        budgets: np.ndarray | None = None,
        regime: tuple[np.ndarray, np.ndarray] | None = None,
    ):
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
        self.price_scale, self.value_scale = np.ones(n), np.ones(n)
        if regime is not None:
            self.price_scale, self.value_scale = (np.asarray(x, dtype=np.float64).copy() for x in regime)
            if self.price_scale.shape != (n,) or self.value_scale.shape != (n,):
                raise ValueError(f"regime scales must have shape ({n},)")
            scales = np.concatenate([self.price_scale, self.value_scale])
            if not (np.all(scales > 0) and np.isfinite(scales).all()):
                raise ValueError("regime scales must be > 0 and finite")
        self._scaled = regime is not None
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

    def step(self, ratios: np.ndarray) -> SlotResult:
        """Bid for every episode over the current slot; advance to the next slot.

        ``ratios`` is ``(n,)`` (one ratio per episode) or ``(n, buckets)`` (one per traffic bucket, with
        days indexed with that many buckets). ``auctions`` counts the auctions an episode took part
        in: the whole slot, or in the slot where its budget runs out, those before the first win it
        could not pay for (0 afterwards).
        """
        if self.slot >= SLOTS_PER_DAY:
            raise RuntimeError("episode is over: all slots replayed; call reset()")
        ratios = np.asarray(ratios, dtype=np.float64)
        n = self.n_episodes
        bucketed = ratios.ndim == 2
        if ratios.shape[:1] != (n,) or ratios.ndim > 2:
            raise ValueError(f"ratios has shape {ratios.shape}, expected ({n},) or ({n}, buckets)")
        if bucketed and any(index.buckets != ratios.shape[1] for index, _ in self._by_day):
            raise ValueError(f"{ratios.shape[1]} ratios per episode, but the days are indexed with other bucket counts")
        # min() propagates NaN, max() catches inf: two reductions instead of four.
        if ratios.size and not (ratios.min() >= 0.0 and np.isfinite(ratios.max())):
            raise ValueError("ratios must be finite and >= 0")
        t = self.slot
        if self._scaled:  # the log's market: what the scaled bid wins there
            ratios = ratios / (self.price_scale[:, None] if bucketed else self.price_scale)
        out = self._zeros(n)
        if bucketed:
            out.by_bucket = self._zeros((n, ratios.shape[1]))
        for index, episodes in self._by_day:
            active = episodes[~self.exhausted[episodes]] if self._any_exhausted else episodes
            if active.size == 0:
                continue
            if bucketed:
                self._bucketed_outcome(index, t, active, ratios[active], out)
            else:
                got = index.slot_outcome(t, ratios[active])
                out.delivery[active] = got.delivery
                out.cost[active] = got.cost
                out.wins[active] = got.wins
                out.auctions[active] = index.auctions[t]
            if self._scaled:
                self._scale(out, active)
            if not self._budgeted:
                continue
            for k in active[out.cost[active] > self.budgets[active] - self.cost[active]]:
                price, value = self.price_scale[k], self.value_scale[k]
                scan = index.slot_scan(t, ratios[k], (self.budgets[k] - self.cost[k]) / price)
                scan = replace(scan, delivery=scan.delivery * value, cost=scan.cost * price)
                out.delivery[k], out.cost[k] = scan.delivery.sum(), scan.total_cost * price
                out.wins[k], out.auctions[k] = scan.wins.sum(), scan.auctions.sum()
                if out.by_bucket is not None:
                    by = out.by_bucket
                    by.delivery[k], by.cost[k], by.wins[k], by.auctions[k] = (
                        scan.delivery,
                        scan.cost,
                        scan.wins,
                        scan.auctions,
                    )
                self.exhausted[k] = scan.exhausted
                self._any_exhausted |= scan.exhausted
        self.delivery += out.delivery
        self.cost += out.cost
        self.slot += 1
        return out

    def _scale(self, out: SlotResult, active: np.ndarray) -> None:
        """Log-market delivery and cost of ``active`` episodes into their regime's (wins and auctions stay)."""
        price, value = self.price_scale[active], self.value_scale[active]
        out.delivery[active] *= value
        out.cost[active] *= price
        if out.by_bucket is not None:
            out.by_bucket.delivery[active] *= value[:, None]
            out.by_bucket.cost[active] *= price[:, None]

    @staticmethod
    def _zeros(shape: int | tuple[int, int]) -> SlotResult:
        return SlotResult(np.zeros(shape), np.zeros(shape), np.zeros(shape, dtype=np.int64), np.zeros(shape, np.int64))

    @staticmethod
    def _bucketed_outcome(index: DayIndex, t: int, active: np.ndarray, ratios: np.ndarray, out: SlotResult) -> None:
        by = out.by_bucket
        assert by is not None
        for b in range(index.buckets):
            got = index.segment_outcome(t * index.buckets + b, ratios[:, b])
            by.delivery[active, b] = got.delivery
            by.cost[active, b] = got.cost
            by.wins[active, b] = got.wins
            by.auctions[active, b] = index.bucket_auctions[t, b]
        out.delivery[active] = by.delivery[active].sum(axis=1)
        out.cost[active] = by.cost[active].sum(axis=1)
        out.wins[active] = by.wins[active].sum(axis=1)
        out.auctions[active] = by.auctions[active].sum(axis=1)


def replay_day(index: DayIndex, ratios: np.ndarray, budget: float = np.inf) -> list[SlotResult]:
    """Replay one episode with 48 fixed ratios; the per-slot results in order."""
    env = BatchedReplay([index], np.zeros(1, dtype=np.int64), np.array([budget]))
    return [env.step(np.array([r])) for r in np.asarray(ratios, dtype=np.float64)]


def replay_totals(index: DayIndex, ratios: np.ndarray, budget: float = np.inf) -> tuple[float, float]:
    """Total delivery and cost of one episode bid with 48 fixed ratios (budget stop included): :func:`replay_day`'s
    slots summed in slot order, as :class:`BatchedReplay` accumulates them."""
    delivery = cost = 0.0
    for slot in replay_day(index, ratios, budget):
        delivery += float(slot.delivery[0])
        cost += float(slot.cost[0])
    return delivery, cost
