"""The ratio cache (service.ratio_cache): a store read that was out while the entry changed."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from model.state import CampaignState
from service.metrics import Metrics
from service.ratio_cache import RatioCache
from service.store import MemoryStore, Stored

pytestmark = pytest.mark.anyio

DAY = "2024-05-01"


def state_at(slot: int, ratio: float) -> CampaignState:
    state = CampaignState.new("c1", DAY, 1.0, None, 0).decided(1.0, "m")
    for _ in range(slot):
        state = state.reported(1.0, 1.0, 1.0, 2.0).decided(ratio, "m")
    return state


class HeldStore(MemoryStore):
    """A memory store whose batch read takes what the store holds at once, then waits for ``release``: a read in
    flight (its reply on the wire) while the test writes."""

    def __init__(self) -> None:
        super().__init__()
        self.reading = asyncio.Event()
        self.release = asyncio.Event()

    async def get_many(self, campaigns: Sequence[str]) -> list[Stored | None]:
        found = await super().get_many(campaigns)
        self.reading.set()
        await self.release.wait()
        return found


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
