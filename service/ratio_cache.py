"""Each process's cache of the ratios campaigns bid now: ``/v1/bid`` makes no store round trip.

An entry is fresh for ``ttl_s`` after it was put: read from the store, written by this process, or taken from a
store notice. Every write's notice carries what the new state bids (:class:`~service.store.Summary`: the ratio and
the budget flag) with its ``(episode, slot)``, so each process's entry follows every other process's writes from the
notice alone (:meth:`RatioCache.noticed`), with no store read: a process bids from what it knows even while the
store, or the node holding the campaign, does not answer. A notice never replaces a newer entry: within an episode
slots only grow, so one whose slot the entry has reached (a stale or reordered notice, or this process's own
write's echo) changes nothing. A notice without a summary (a delete, a writer that sends none) marks the entry
stale instead, and the next bid reads the store.

The store is read only for a campaign this process has never seen (nor been told of) and, behind the bids, for an
entry older than ``ttl_s``: that entry is bid at once and read again in a task of its own
(:meth:`RatioCache._refresh_behind`), so a stalled store costs no bid its timeout. **Staleness bound**: after a slot
update is acknowledged, another process bids the previous slot's ratio until the notice arrives (milliseconds), or,
if the notice is lost, for at most ``ttl_s`` (default 1 s) plus one store read. A store read that was out while the
entry changed never replaces a newer one (:meth:`RatioCache.settle`): an entry put meanwhile stands unless the read
shows its episode at a later slot, and a notice without a summary that arrived meanwhile makes the next bid read
again. An entry is said stale (answers say ``stale: true``) only once its read behind the bids failed: older than
``ttl_s``, with no notice since and the store not answering; it keeps serving rather than failing the bid.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import cast

from model.contract import SLOTS_PER_DAY
from model.state import CampaignState, StateError
from service.metrics import Metrics
from service.store import EpisodeStore, Notice, Stored, StoreError, StoreUnavailable, Summary


@dataclass(frozen=True)
class CachedRatio:
    episode: str
    slot: int
    ratio: float
    """The ratio to bid now: 0 when the budget is spent or all slots are reported."""
    fetched: float
    """``time.monotonic()`` when read from the store, written by this process or taken from a notice."""
    stale: bool = False
    """Kept after the store failed to answer: served for another ``ttl_s`` before the store is tried again,
    so an outage costs each campaign one timeout per ``ttl_s``, not one per bid."""
    seq: int = 0
    """When the entry was put or invalidated, in the cache's own count of such changes: a store read that started
    before a later change must not overwrite it with what the store held earlier (:meth:`RatioCache.get_many`)."""


def readable(blob: bytes) -> CampaignState | None:
    """The state in ``blob``; None if unreadable, treated as unknown (the next registration replaces it)."""
    try:
        return CampaignState.from_bytes(blob)
    except StateError:
        return None


def bid_ratio_of(state: CampaignState) -> float:
    return 0.0 if state.budget_exhausted or state.done else state.next_ratio


def summary_of(state: CampaignState) -> Summary:
    """What ``state`` bids, for its write's notice: :func:`bid_ratio_from` of it is :func:`bid_ratio_of` the state."""
    return Summary(state.next_ratio, state.budget_exhausted)


def bid_ratio_from(summary: Summary, slot: int) -> float:
    """The ratio a state at ``slot`` with ``summary`` bids: 0 when the budget is spent or all slots are reported."""
    return 0.0 if summary.budget_exhausted or slot >= SLOTS_PER_DAY else summary.ratio


class RatioCache:
    def __init__(self, ttl_s: float, metrics: Metrics, max_entries: int = 1_000_000):
        self.ttl_s = ttl_s
        self.metrics = metrics
        self.max_entries = max_entries
        self._entries: dict[str, CachedRatio] = {}
        self._seq = 0
        """Puts and invalidations so far (:attr:`CachedRatio.seq`)."""
        self._reading: dict[str, int] = {}
        """Store reads out now, per campaign (:meth:`reading`)."""
        self._notified: dict[str, int] = {}
        """The change count at the last notification of a campaign with a read out (entry or not)."""
        self._hits = metrics.cache.labels(outcome="hit")  # labels() costs microseconds: once, not once a bid
        # Misses waiting for the next store read: every bid that misses in one event-loop pass shares one
        # get_many (one Redis pipeline instead of one round trip each), and a campaign is read once.
        self._waiting: dict[str, asyncio.Future[Stored | None]] = {}
        self._waiting_store: EpisodeStore | None = None
        self._reads: set[asyncio.Task[None]] = set()
        self._refreshing: set[str] = set()
        """Campaigns whose aged entry is being read again behind the bids (:meth:`_refresh_behind`)."""
        self.bids_in_flight = 0
        """``/v1/bid`` requests being answered now: slot batches let them finish first (service.episodes)."""
        self.last_bid = float("-inf")
        """``time.monotonic()`` when the last ``/v1/bid`` started: while bids flow, slot batches take smaller steps."""

    def bids_flowing(self, window_s: float = 0.05) -> bool:
        return bool(self.bids_in_flight) or time.monotonic() - self.last_bid < window_s

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, campaign: str, state: CampaignState) -> CachedRatio:
        return self._put(campaign, state.episode, state.slot, bid_ratio_of(state))

    def _put(self, campaign: str, episode: str, slot: int, ratio: float) -> CachedRatio:
        # Re-inserted, so the dict's order is the order of the last put (a read, a write or a notice): a campaign
        # that bids stays at the young end; the one put longest ago goes first when full.
        if self._entries.pop(campaign, None) is None and len(self._entries) >= self.max_entries:
            self._entries.pop(next(iter(self._entries)))  # a bounded memory footprint
        self._seq += 1
        entry = CachedRatio(episode, slot, ratio, time.monotonic(), seq=self._seq)
        self._entries[campaign] = entry
        return entry

    def noticed(self, notice: Notice) -> None:
        """A store notice of a write (this process's or another's; the store's subscription callback).

        With a summary: the entry is the notice's state, fresh, unless the entry already shows that episode at that
        slot or a later one (an older or reordered notice, or the echo of this process's own write, changes nothing:
        slots only grow within an episode). Without one (a delete, a writer that sends none): the entry is read
        again at the next bid (:meth:`invalidate`).
        """
        if notice.summary is None:
            self.invalidate(notice.campaign, notice.episode, notice.slot)
            return
        entry = self._entries.get(notice.campaign)
        if entry is not None and entry.episode == notice.episode and entry.slot >= notice.slot:
            return
        self._put(notice.campaign, notice.episode, notice.slot, bid_ratio_from(notice.summary, notice.slot))

    def invalidate(self, campaign: str, episode: str = "", slot: int = -1) -> None:
        """A write of this campaign left ``(episode, slot)``: unless the entry already shows that state (the echo
        of this process's own write), re-read at the next bid (the old entry stays as a fallback meanwhile)."""
        entry = self._entries.get(campaign)
        if entry is not None and entry.episode == episode and entry.slot == slot:
            return
        if entry is not None:
            self._mark_stale(campaign, entry)
        else:
            self._seq += 1
        if campaign in self._reading:  # a read out now may predate this write, whether or not there is an entry
            self._notified[campaign] = self._seq

    def _mark_stale(self, campaign: str, entry: CachedRatio) -> None:
        """``entry`` kept as a fallback, to be read again at the next bid (a change, counted)."""
        self._seq += 1
        self._entries[campaign] = replace(entry, fetched=float("-inf"), stale=False, seq=self._seq)

    @staticmethod
    def _put_since(entry: CachedRatio, read_from: int) -> bool:
        """``entry`` was put (not marked stale) after change count ``read_from``: newer than a read started then."""
        return entry.seq > read_from and entry.fetched > float("-inf")

    @contextmanager
    def reading(self, campaigns: Sequence[str]) -> Iterator[int]:
        """Around a store read of ``campaigns``: yields the change count the read starts from, for :meth:`settle`
        (inside the block), and keeps the notifications that arrive meanwhile."""
        for name in campaigns:
            self._reading[name] = self._reading.get(name, 0) + 1
        try:
            yield self._seq
        finally:
            for name in campaigns:
                left = self._reading[name] - 1
                if left:
                    self._reading[name] = left
                else:
                    del self._reading[name]
                    self._notified.pop(name, None)

    def settle(self, campaign: str, read_from: int, state: CampaignState | None) -> CachedRatio | None:
        """Enter what a store read that started at change count ``read_from`` found (None: no state), given what
        changed while it was out; returns the entry to answer with (None: unknown campaign).

        An entry put meanwhile (this process's write, or a read that came back first) is kept unless the read shows
        the same episode at a later slot (slots only grow within an episode). A notification that arrived meanwhile
        may be of a write the read did not see: the answer stands, and the next bid reads again.
        """
        current = self._entries.get(campaign)
        put_meanwhile = current is not None and self._put_since(current, read_from)
        later = (
            state is not None and current is not None and state.episode == current.episode and state.slot > current.slot
        )
        entry: CachedRatio | None
        if put_meanwhile and not later:
            entry = current
        elif state is None:
            self.forget(campaign)
            return None
        else:
            entry = self.put(campaign, state)
        if self._notified.get(campaign, -1) > read_from and entry is not None:
            # not recorded as a notification, which would make every overlapping read of a busy campaign re-read in
            # turn (only the store's notifications are recorded)
            self._mark_stale(campaign, entry)
        return entry

    def forget(self, campaign: str) -> None:
        self._entries.pop(campaign, None)

    def _refresh_behind(self, campaigns: list[str], store: EpisodeStore) -> None:
        """Read ``campaigns`` again in a task of their own, once each however many bids ask meanwhile: the read
        settles as a bid's would; if the store fails, the entries are kept as stale for another ``ttl_s``."""
        names = [c for c in dict.fromkeys(campaigns) if c not in self._refreshing]
        if not names:
            return
        self._refreshing.update(names)
        task = asyncio.get_running_loop().create_task(self._refresh(names, store))
        self._reads.add(task)
        task.add_done_callback(self._reads.discard)

    async def _refresh(self, names: list[str], store: EpisodeStore) -> None:
        try:
            with self.reading(names) as read_from:
                read = await self._read_each(names, store)
                self._store_answered(read)
                retry_after = time.monotonic()
                kept = 0
                for name, item in zip(names, read, strict=True):
                    if isinstance(item, StoreError):
                        entry = self._entries.get(name)
                        # marked changed meanwhile (a notification): the next bid reads it, not ours to keep
                        if entry is not None and entry.fetched > float("-inf"):
                            kept += self._kept_stale(name, entry, read_from, retry_after).stale
                    else:
                        self.settle(name, read_from, None if item is None else readable(item.blob))
                self.metrics.cache.labels(outcome="stale").inc(kept)
        finally:
            self._refreshing.difference_update(names)

    def _store_answered(self, read: Sequence[Stored | StoreError | None]) -> None:
        """``rcb_store_up`` after a read: 0 if any campaign's read failed (a Redis Cluster node down fails its own
        campaigns only: the store is not whole), else 1."""
        failed = next((item for item in read if isinstance(item, StoreError)), None)
        if failed is not None:
            self.metrics.store_failed(failed)
        else:
            self.metrics.store_up.set(1)

    def _kept_stale(self, name: str, entry: CachedRatio, read_from: int, retry_after: float) -> CachedRatio:
        """After a store read that started at change count ``read_from`` failed: ``entry`` as it stands if it was
        put meanwhile (this process's write: not stale), else kept as stale, not asked for again for ``ttl_s``."""
        if self._put_since(entry, read_from):
            return entry
        kept = self._entries[name] = replace(entry, fetched=retry_after, stale=True)
        return kept

    def peek(self, campaign: str) -> CachedRatio | None:
        return self._entries.get(campaign)

    async def _read_each(self, names: list[str], store: EpisodeStore) -> list[Stored | StoreError | None]:
        """``store.get_each(names)`` (per campaign: its state, None, or the error its read raised), coalesced with
        the other misses of this event-loop pass."""
        if self._waiting and store is not self._waiting_store:
            return await store.get_each(names)
        loop = asyncio.get_running_loop()
        futures = []
        for name in names:
            future = self._waiting.get(name)
            if future is None:
                future = self._waiting[name] = loop.create_future()
            futures.append(future)
        if self._waiting_store is None:
            self._waiting_store = store
            loop.call_soon(self._start_read)
        # shield: a cancelled bid must not cancel the read that other bids wait for
        answers = await asyncio.gather(*(asyncio.shield(f) for f in futures), return_exceptions=True)
        for answer in answers:
            if isinstance(answer, BaseException) and not isinstance(answer, StoreError):
                raise answer
        return cast(list[Stored | StoreError | None], answers)

    def _start_read(self) -> None:
        batch, store = self._waiting, self._waiting_store
        self._waiting, self._waiting_store = {}, None
        assert store is not None
        task = asyncio.get_running_loop().create_task(self._read_batch(batch, store))
        self._reads.add(task)
        task.add_done_callback(self._reads.discard)

    @staticmethod
    async def _read_batch(batch: dict[str, asyncio.Future[Stored | None]], store: EpisodeStore) -> None:
        names = list(batch)
        try:
            stored = await store.get_each(names)  # a Redis Cluster node down fails its own campaigns' bids only
        except BaseException as exc:
            error = exc if isinstance(exc, Exception) else StoreUnavailable(f"store read interrupted ({exc!r})")
            for future in batch.values():
                if not future.done():
                    future.set_exception(error)
                    # Every waiter still raises it; a waiter that is gone (a read behind the bids cancelled at
                    # shutdown) leaves no "exception never retrieved" in the log.
                    future.exception()
            if not isinstance(exc, Exception):
                raise
            return
        for name, item in zip(names, stored, strict=True):
            future = batch[name]
            if future.done():
                continue
            if isinstance(item, StoreError):
                future.set_exception(item)
                future.exception()  # as above: its waiters raise it, a gone one leaves no log
            else:
                future.set_result(item)

    async def get_many(self, campaigns: Sequence[str], store: EpisodeStore) -> tuple[list[CachedRatio | None], bool]:
        """Entries for ``campaigns`` (None: unknown campaign), and whether any was served stale.

        Fresh entries cost nothing; the others are read in one ``get_many``. If the store is down, stale
        entries are served; a campaign never seen by this process then raises :class:`StoreUnavailable`.
        """
        now = time.monotonic()
        out: list[CachedRatio | None] = []
        missing: list[int] = []
        aged: list[str] = []
        for k, campaign in enumerate(campaigns):
            entry = self._entries.get(campaign)
            if entry is not None and now - entry.fetched < self.ttl_s:
                out.append(entry)
            elif entry is not None and entry.fetched > float("-inf"):  # aged, not known to have changed
                out.append(entry)
                aged.append(campaign)
            else:
                out.append(None)
                missing.append(k)
        if aged:
            self._refresh_behind(aged, store)
        hits = len(campaigns) - len(missing)
        if hits:
            self._hits.inc(hits)
        served_stale = any(e is not None and e.stale for e in out)
        if not missing:
            return out, served_stale
        names = [campaigns[k] for k in missing]
        with self.reading(names) as read_from:
            read = await self._read_each(names, store)
            self._store_answered(read)  # a bid saw an outage: the gauge says so (served stale or refused)
            for name, item in zip(names, read, strict=True):
                if isinstance(item, StoreError) and self._entries.get(name) is None:
                    raise item  # never seen by this process: nothing to bid from
            retry_after = time.monotonic()
            stale = 0
            for k, name, item in zip(missing, names, read, strict=True):
                if isinstance(item, StoreError):
                    entry = self._entries[name]
                    kept = out[k] = self._kept_stale(name, entry, read_from, retry_after)
                    served_stale = served_stale or kept.stale
                    stale += 1
                else:
                    out[k] = self.settle(name, read_from, None if item is None else readable(item.blob))
            self.metrics.cache.labels(outcome="stale").inc(stale)
            self.metrics.cache.labels(outcome="miss").inc(len(missing) - stale)
        return out, served_stale
