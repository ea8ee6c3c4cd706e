"""The ratio cache (service.ratio_cache): a store read that was out while the entry changed, and the notices of
writes, which carry what each write bids."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from model.contract import SLOTS_PER_DAY
from model.state import CampaignState
from service.metrics import Metrics
from service.ratio_cache import RatioCache, bid_ratio_from, bid_ratio_of, summary_of
from service.store import MemoryStore, Notice, Stored, StoreError, StoreUnavailable, Summary
from service.store.base import NOTICE_SEPARATOR, format_notice, parse_notice

pytestmark = pytest.mark.anyio

DAY = "2024-05-01"


def state_at(slot: int, ratio: float) -> CampaignState:
    state = CampaignState.new("c1", DAY, 1.0, None, 0).decided(1.0, "m")
    for _ in range(slot):
        state = state.reported(1.0, 1.0, 1.0, 2.0).decided(ratio, "m")
    return state


class HeldStore(MemoryStore):
    """A memory store whose reads take what the store holds at once, then wait for ``release`` (the one of that
    read, ``held[k]`` for the k-th read): a read in flight, its reply on the wire, while the test writes."""

    def __init__(self) -> None:
        super().__init__()
        self.reading = asyncio.Event()
        self.release = asyncio.Event()
        self.held: list[asyncio.Event] = []
        self.fail = False

    async def get_many(self, campaigns: Sequence[str]) -> list[Stored | None]:
        found = await super().get_many(campaigns)
        if not self.release.is_set():  # set: reads pass at once
            release = self.release if not self.held else asyncio.Event()
            self.held.append(release)
            self.reading.set()
            await release.wait()
        if self.fail:
            raise StoreUnavailable("down (test)")
        return found

    async def reads_out(self, n: int) -> None:
        """Until ``n`` reads have been held (a task started may not have reached the store yet)."""
        while len(self.held) < n:
            await asyncio.sleep(0)

    async def get(self, campaign: str) -> Stored | None:
        return (await self.get_many([campaign]))[0]


async def test_a_read_out_while_this_process_wrote_does_not_replace_the_write() -> None:
    """Before: the bid's read came back with slot 1 and overwrote the slot-2 ratio this process had just written,
    so bids served the old ratio for ttl_s."""
    store, cache = HeldStore(), RatioCache(ttl_s=60.0, metrics=Metrics())
    await store.register("c1", DAY, state_at(1, 1.5).to_bytes())
    bid = asyncio.create_task(cache.get_many(["c1"], store))
    await store.reading.wait()
    cache.put("c1", state_at(2, 2.5))  # what Episodes does after its compare-and-set landed
    store.release.set()
    entries, _ = await bid
    assert entries[0] is not None and (entries[0].slot, entries[0].ratio) == (2, 2.5)
    entry = cache.peek("c1")
    assert entry is not None and (entry.slot, entry.ratio) == (2, 2.5)


async def test_a_read_out_while_another_process_wrote_is_read_again_at_the_next_bid() -> None:
    """The notification of another process's write arrived while the read was out: what was read may predate that
    write, so it answers this bid but is not trusted for ttl_s."""
    store, cache = HeldStore(), RatioCache(ttl_s=60.0, metrics=Metrics())
    await store.register("c1", DAY, state_at(1, 1.5).to_bytes())
    cache.put("c1", state_at(1, 1.5))
    cache.invalidate("c1", DAY, 1)  # the echo of the entry's own state: nothing to do
    assert cache.peek("c1").fetched > float("-inf")  # type: ignore[union-attr]
    cache.invalidate("c1", DAY, 0)
    bid = asyncio.create_task(cache.get_many(["c1"], store))
    await store.reading.wait()
    assert await store.compare_and_set("c1", DAY, 0, state_at(2, 2.5).to_bytes()) is None  # another process's write ...
    cache.invalidate("c1", DAY, 2)  # ... and its notification, both while the read is out
    store.release.set()
    entries, _ = await bid
    assert entries[0] is not None and (entries[0].slot, entries[0].ratio) == (1, 1.5)  # what the read saw
    store.release = asyncio.Event()
    store.release.set()
    entries, _ = await cache.get_many(["c1"], store)  # read again, not served from the entry for ttl_s
    assert entries[0] is not None and (entries[0].slot, entries[0].ratio) == (2, 2.5)


async def test_a_read_with_nothing_changed_meanwhile_is_kept_for_ttl() -> None:
    store, cache = HeldStore(), RatioCache(ttl_s=60.0, metrics=Metrics())
    store.release.set()
    await store.register("c1", DAY, state_at(1, 1.5).to_bytes())
    entries, _ = await cache.get_many(["c1"], store)
    assert entries[0] is not None and entries[0].slot == 1
    assert (
        await store.compare_and_set("c1", DAY, 0, state_at(2, 2.5).to_bytes()) is None
    )  # no notification: the cache keeps slot 1
    entries, _ = await cache.get_many(["c1"], store)
    assert entries[0] is not None and entries[0].slot == 1


async def test_a_notification_of_a_campaign_not_yet_cached_during_its_first_read_is_kept() -> None:
    """A cold cache (a process just started at a slot boundary): the first read sees slot 1, another process writes
    slot 2 and notifies while it is out; before, the notification found no entry and was lost, and slot 1 was bid
    for ttl_s."""
    store, cache = HeldStore(), RatioCache(ttl_s=60.0, metrics=Metrics())
    await store.register("c1", DAY, state_at(1, 1.5).to_bytes())
    bid = asyncio.create_task(cache.get_many(["c1"], store))
    await store.reading.wait()
    assert await store.compare_and_set("c1", DAY, 0, state_at(2, 2.5).to_bytes()) is None
    cache.invalidate("c1", DAY, 2)
    store.release.set()
    entries, _ = await bid
    assert entries[0] is not None and entries[0].slot == 1
    entries, _ = await cache.get_many(["c1"], store)  # read again (release is set: at once)
    assert entries[0] is not None and (entries[0].slot, entries[0].ratio) == (2, 2.5)


async def test_a_read_failing_while_this_process_wrote_keeps_the_write_fresh_and_its_order() -> None:
    """Before: the failed read turned the entry just written into a stale copy without its change count, and an
    older read coming back after it overwrote the write for ttl_s."""
    store, cache = HeldStore(), RatioCache(ttl_s=60.0, metrics=Metrics())
    await store.register("c1", DAY, state_at(1, 1.5).to_bytes())
    cache.put("c1", state_at(0, 1.0))
    cache.invalidate("c1", DAY, 1)
    first = asyncio.create_task(cache.get_many(["c1"], store))  # sees slot 1, held
    await store.reading.wait()
    second = asyncio.create_task(cache.get_many(["c1"], store))  # another loop pass: its own read, held
    await store.reads_out(2)
    cache.put("c1", state_at(2, 2.5))  # this process's write lands
    store.fail = True
    store.held[1].set()
    entries, stale = await second
    assert entries[0] is not None and (entries[0].slot, entries[0].stale, stale) == (2, False, False)
    store.fail = False
    store.held[0].set()
    entries, _ = await first
    assert entries[0] is not None and entries[0].slot == 2
    entry = cache.peek("c1")
    assert entry is not None and (entry.slot, entry.ratio) == (2, 2.5)


async def test_a_read_that_comes_back_after_a_later_one_does_not_replace_it() -> None:
    """Two reads out (a campaign page's and a bid's): the one that saw the later slot stands, whichever returns
    first."""
    from service.episodes import Episodes

    store, cache = HeldStore(), RatioCache(ttl_s=60.0, metrics=Metrics())
    await store.register("c1", DAY, state_at(1, 1.5).to_bytes())
    episodes = Episodes(store, None, cache, cache.metrics, None)  # type: ignore[arg-type]  # read() needs neither
    page = asyncio.create_task(episodes.read("c1"))  # sees slot 1, held
    await store.reading.wait()
    assert await store.compare_and_set("c1", DAY, 0, state_at(2, 2.5).to_bytes()) is None
    bid = asyncio.create_task(cache.get_many(["c1"], store))  # sees slot 2, held
    await store.reads_out(2)
    store.held[1].set()
    entries, _ = await bid
    assert entries[0] is not None and entries[0].slot == 2
    store.held[0].set()
    assert (await page).slot == 1  # the page shows what it read ...
    entry = cache.peek("c1")
    assert entry is not None and (entry.slot, entry.ratio) == (2, 2.5)  # ... and the cache keeps the later slot


async def test_a_notification_during_overlapping_reads_costs_one_reread_not_one_per_bid() -> None:
    """A read that settles after a notification marked its entry stale by recording a notification of its own, so
    every overlapping read of a busy campaign re-read in turn (300 store reads for 300 bids in the reviewer's run)."""
    store, cache = HeldStore(), RatioCache(ttl_s=60.0, metrics=Metrics())
    await store.register("c1", DAY, state_at(1, 1.5).to_bytes())
    first = asyncio.create_task(cache.get_many(["c1"], store))  # out before the write
    await store.reading.wait()
    assert await store.compare_and_set("c1", DAY, 0, state_at(2, 2.5).to_bytes()) is None
    cache.invalidate("c1", DAY, 2)  # its notification, while the first read is out
    second = asyncio.create_task(cache.get_many(["c1"], store))  # out after the write: sees slot 2
    await store.reads_out(2)
    store.held[0].set()
    entries, _ = await first
    assert entries[0] is not None and entries[0].slot == 1
    store.held[1].set()
    entries, _ = await second
    assert entries[0] is not None and entries[0].slot == 2
    entry = cache.peek("c1")
    assert entry is not None and entry.slot == 2 and entry.fetched > float("-inf")  # fresh: no further reads
    reads = len(store.held)
    entries, _ = await cache.get_many(["c1"], store)
    assert entries[0] is not None and entries[0].slot == 2 and len(store.held) == reads


async def test_an_aged_entry_is_bid_at_once_and_read_again_behind_the_bids() -> None:
    """Before: a bid for a campaign whose entry passed ttl_s waited for the store, a stalled store's whole timeout
    (about 250 ms once a second per campaign in a review's probe)."""
    store, cache = HeldStore(), RatioCache(ttl_s=0.0, metrics=Metrics())
    await store.register("c1", DAY, state_at(2, 2.5).to_bytes())
    cache.put("c1", state_at(1, 1.5))  # aged at once (ttl 0), and no notification says it changed
    first, stale = await cache.get_many(["c1"], store)  # answered while the read behind it is held
    assert first[0] is not None and (first[0].slot, first[0].ratio, stale) == (1, 1.5, False)
    await store.reads_out(1)
    second, _ = await cache.get_many(["c1", "c1"], store)  # asked again meanwhile: no second read
    assert [e.slot for e in second if e is not None] == [1, 1] and len(store.held) == 1
    store.release.set()
    while cache._refreshing:
        await asyncio.sleep(0)
    entry = cache.peek("c1")
    assert entry is not None and (entry.slot, entry.ratio, entry.stale) == (2, 2.5, False)


async def test_a_read_behind_the_bids_that_fails_keeps_the_entry_as_stale() -> None:
    metrics = Metrics()
    store, cache = HeldStore(), RatioCache(ttl_s=0.0, metrics=metrics)
    store.release.set()
    store.fail = True
    await store.register("c1", DAY, state_at(1, 1.5).to_bytes())
    cache.put("c1", state_at(1, 1.5))
    entries, stale = await cache.get_many(["c1"], store)
    assert entries[0] is not None and not stale  # this bid did not wait for the failure
    while cache._refreshing:
        await asyncio.sleep(0)
    entry = cache.peek("c1")
    assert entry is not None and entry.stale and entry.ratio == 1.5
    assert metrics.store_up._value.get() == 0  # type: ignore[attr-defined]
    cache.ttl_s = 60.0  # kept for another ttl_s: served stale without asking the store
    entries, stale = await cache.get_many(["c1"], store)
    assert stale and entries[0] is not None and entries[0].ratio == 1.5
    # a campaign never seen still needs the store: that bid waits and fails, as before
    with pytest.raises(StoreUnavailable):
        await cache.get_many(["c2"], store)


def test_a_full_cache_lets_go_of_the_campaign_put_longest_ago() -> None:
    """Before: the oldest insertion went first, so a campaign cached first and bidding ever since was the one evicted
    (and, with the store down, refused)."""
    cache = RatioCache(ttl_s=60.0, metrics=Metrics(), max_entries=2)
    cache.put("hot", state_at(1, 1.5))
    cache.put("cold", state_at(1, 1.5))
    cache.put("hot", state_at(2, 2.5))  # read again (or written) since
    cache.put("new", state_at(1, 1.5))
    assert cache.peek("cold") is None and cache.peek("hot") is not None and cache.peek("new") is not None


class NodeDownStore(MemoryStore):
    """As a Redis Cluster with one node stalled: reads of ``down`` campaigns fail; ``get_many`` fails as a whole."""

    def __init__(self, down: set[str]) -> None:
        super().__init__()
        self.down = down

    async def get_many(self, campaigns: Sequence[str]) -> list[Stored | None]:
        if self.down & set(campaigns):
            raise StoreUnavailable("a node is down (test)")
        return await super().get_many(campaigns)

    async def get_each(self, campaigns: Sequence[str]) -> list[Stored | StoreError | None]:
        found = await super().get_many(campaigns)
        down = StoreUnavailable("a node is down (test)")
        return [down if c in self.down else f for c, f in zip(campaigns, found, strict=True)]


async def test_bids_read_together_fail_only_for_the_campaigns_whose_reads_failed() -> None:
    """Bids of one loop pass share one store read: a campaign on a node that is down fails its own bid, not the
    bids of campaigns the read found (before, the shared read's failure was every bid's)."""
    store, cache = NodeDownStore({"c2"}), RatioCache(ttl_s=60.0, metrics=Metrics())
    await store.register("c1", DAY, state_at(1, 1.5).to_bytes())
    await store.register("c2", DAY, state_at(1, 2.5).to_bytes())
    healthy = asyncio.create_task(cache.get_many(["c1"], store))
    on_the_down_node = asyncio.create_task(cache.get_many(["c2"], store))
    entries, stale = await healthy
    assert entries[0] is not None and (entries[0].slot, entries[0].ratio) == (1, 1.5) and not stale
    with pytest.raises(StoreUnavailable):
        await on_the_down_node
    assert cache.peek("c2") is None


async def test_a_bid_of_several_campaigns_takes_what_a_partly_failed_read_found() -> None:
    """One bid, two campaigns to read: the one found is settled and served fresh, the one whose node is down is
    served from its cached entry, said stale (before, the whole read failed and the campaign never cached made
    the bid a 503)."""
    store, cache = NodeDownStore({"c2"}), RatioCache(ttl_s=60.0, metrics=Metrics())
    await store.register("c1", DAY, state_at(1, 1.5).to_bytes())
    await store.register("c2", DAY, state_at(1, 2.5).to_bytes())
    cache.put("c2", state_at(1, 2.5))
    cache.invalidate("c2", DAY, 2)  # another process wrote slot 2: the next bid reads it
    entries, stale = await cache.get_many(["c1", "c2"], store)
    assert entries[0] is not None and (entries[0].slot, entries[0].ratio, entries[0].stale) == (1, 1.5, False)
    assert entries[1] is not None and (entries[1].slot, entries[1].ratio, entries[1].stale) == (1, 2.5, True)
    assert stale is True


# -- notices that carry what the write bids ------------------------------------------------------------------------


class NoReads(MemoryStore):
    """A store this process must not read: every read is counted and fails the test."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    async def get_many(self, campaigns: Sequence[str]) -> list[Stored | None]:
        self.reads += 1
        raise AssertionError(f"read {list(campaigns)}: the notice should have been enough")

    async def get_each(self, campaigns: Sequence[str]) -> list[Stored | StoreError | None]:
        return list(await self.get_many(campaigns))


async def test_a_notice_with_a_summary_updates_another_process_cache_without_a_store_read() -> None:
    """Another process's write, told by its notice (ratio and budget flag with the state's episode and slot): this
    process bids it at once, fresh, with no store read. A notice that only marks the entry stale (or, for a
    campaign this process has not cached, does nothing) makes the next bid read the store: a 503 while the node
    holding the campaign is stalled."""
    store, cache = NoReads(), RatioCache(ttl_s=60.0, metrics=Metrics())
    cache.noticed(Notice("c1", DAY, 0, Summary(1.25, False)))  # its registration, never seen here before
    entries, stale = await cache.get_many(["c1"], store)
    assert entries[0] is not None and (entries[0].slot, entries[0].ratio, stale) == (0, 1.25, False)
    cache.noticed(Notice("c1", DAY, 1, Summary(0.1 + 0.2, False)))  # its next slot
    entries, stale = await cache.get_many(["c1"], store)
    assert entries[0] is not None and (entries[0].slot, entries[0].ratio, stale) == (1, 0.1 + 0.2, False)
    cache.noticed(Notice("c1", DAY, 2, Summary(2.0, True)))  # the budget spent: bids 0
    cache.noticed(Notice("c2", DAY, SLOTS_PER_DAY, Summary(2.0, False)))  # every slot reported: bids 0
    entries, _ = await cache.get_many(["c1", "c2"], store)
    assert [(e.slot, e.ratio) for e in entries if e is not None] == [(2, 0.0), (SLOTS_PER_DAY, 0.0)]
    assert store.reads == 0


async def test_an_older_or_reordered_notice_never_replaces_a_newer_entry() -> None:
    store, cache = NoReads(), RatioCache(ttl_s=60.0, metrics=Metrics())
    cache.put("c1", state_at(3, 2.5))  # this process's write of slot 3
    cache.noticed(Notice("c1", DAY, 2, Summary(1.0, False)))  # slot 2's notice, arriving late
    cache.noticed(Notice("c1", DAY, 3, Summary(9.0, False)))  # the echo of the write itself
    entries, _ = await cache.get_many(["c1"], store)
    assert entries[0] is not None and (entries[0].slot, entries[0].ratio) == (3, 2.5)
    cache.noticed(Notice("c1", "2024-05-02", 0, Summary(0.5, False)))  # a new episode: another state, taken
    entries, _ = await cache.get_many(["c1"], store)
    assert entries[0] is not None and (entries[0].episode, entries[0].slot, entries[0].ratio) == ("2024-05-02", 0, 0.5)
    assert store.reads == 0


async def test_a_notice_without_a_summary_makes_the_next_bid_read() -> None:
    """A delete, or a write by a process that sends no summary: the entry is read again, as before."""
    store, cache = HeldStore(), RatioCache(ttl_s=60.0, metrics=Metrics())
    store.release.set()
    await store.register("c1", DAY, state_at(2, 2.5).to_bytes())
    cache.put("c1", state_at(1, 1.5))
    cache.noticed(Notice("c1", DAY, 2))
    entries, _ = await cache.get_many(["c1"], store)
    assert entries[0] is not None and (entries[0].slot, entries[0].ratio) == (2, 2.5)  # what the store holds


async def test_a_notice_during_a_read_stands_against_the_older_state_the_read_brings() -> None:
    store, cache = HeldStore(), RatioCache(ttl_s=60.0, metrics=Metrics())
    await store.register("c1", DAY, state_at(1, 1.5).to_bytes())
    bid = asyncio.create_task(cache.get_many(["c1"], store))  # reads slot 1, held
    await store.reading.wait()
    cache.noticed(Notice("c1", DAY, 2, Summary(2.5, False)))  # another process wrote slot 2 meanwhile
    store.release.set()
    entries, _ = await bid
    assert entries[0] is not None and (entries[0].slot, entries[0].ratio) == (2, 2.5)
    entry = cache.peek("c1")
    assert entry is not None and (entry.slot, entry.ratio) == (2, 2.5) and entry.fetched > float("-inf")


async def test_an_entry_said_stale_is_fresh_again_once_a_notice_tells_its_state() -> None:
    store, cache = HeldStore(), RatioCache(ttl_s=0.0, metrics=Metrics())
    store.release.set()
    store.fail = True
    cache.put("c1", state_at(1, 1.5))
    await cache.get_many(["c1"], store)  # aged at once: read behind the bid, which fails
    while cache._refreshing:
        await asyncio.sleep(0)
    assert cache.peek("c1").stale  # type: ignore[union-attr]
    cache.ttl_s = 60.0
    cache.noticed(Notice("c1", DAY, 2, Summary(2.5, False)))
    entries, stale = await cache.get_many(["c1"], store)
    assert entries[0] is not None and (entries[0].slot, entries[0].ratio, entries[0].stale) == (2, 2.5, False)
    assert stale is False


def test_a_notice_reads_back_as_written_and_an_older_writer_s_notice_has_no_summary() -> None:
    for notice in (
        Notice("c1", DAY, 3, Summary(0.1 + 0.2, False)),
        Notice("c1", DAY, 0, Summary(4.0, True)),
        Notice("c1", DAY, 7),
        Notice("c1"),
    ):
        assert parse_notice(format_notice(notice)) == notice
    assert parse_notice(f"c1{NOTICE_SEPARATOR}{DAY}{NOTICE_SEPARATOR}3") == Notice("c1", DAY, 3)  # the 3-field form
    assert parse_notice("c1") == Notice("c1")  # a delete
    for bad in ("nan", "inf", "x"):  # never bid from a ratio that does not read back
        assert parse_notice(NOTICE_SEPARATOR.join(("c1", DAY, "3", bad, "0"))) == Notice("c1", DAY, 3)
    assert parse_notice(NOTICE_SEPARATOR.join(("c1", DAY, "3", "1.5", "2"))) == Notice("c1", DAY, 3)


def test_summary_of_a_state_bids_as_the_state() -> None:
    spent = CampaignState.new("c1", DAY, 1.0, 1.0, 0).decided(1.0, "m").reported(1.0, 5.0, 1.0, 2.0).decided(2.0, "m")
    for state in (state_at(0, 1.0), state_at(3, 2.5), spent):
        assert bid_ratio_from(summary_of(state), state.slot) == bid_ratio_of(state)
    assert bid_ratio_of(spent) == 0.0
