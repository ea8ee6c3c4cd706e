"""compare_and_set_many (the batch write of /v1/slot-update/batch), on every store: per item, the answer that
compare_and_set alone gives, in order (pipelined on Redis, one call each on a Redis Cluster, in turn in memory)."""

from __future__ import annotations

import pytest

from service.store import EpisodeStore, Stored, UnknownCampaign

pytestmark = pytest.mark.anyio
DAY = "2024-05-01"


async def test_each_item_answers_as_alone(store: EpisodeStore) -> None:
    for c in ("a", "b", "c"):
        await store.register(c, DAY, b"s0")
    assert await store.compare_and_set("b", DAY, 0, b"b1") is None
    items = [  # no expected blob (None): checked on (episode, slot) alone
        ("a", DAY, 0, b"a1", None),  # applies
        ("b", DAY, 0, b"b1 again", None),  # stale: answers the state found
        ("nobody", DAY, 0, b"x", None),  # unknown
        ("c", "2024-05-02", 0, b"other day", None),  # wrong episode: answers the state found
        ("a", DAY, 1, b"a2", None),  # the next slot of an item written earlier in the same call
    ]
    out = await store.compare_and_set_many(items)
    assert out[0] is None
    assert out[1] == Stored(DAY, 1, b"b1")
    assert isinstance(out[2], UnknownCampaign) and out[2].campaign == "nobody"
    assert out[3] == Stored(DAY, 0, b"s0")
    assert out[4] is None
    expected = [Stored(DAY, 2, b"a2"), Stored(DAY, 1, b"b1"), Stored(DAY, 0, b"s0")]
    assert await store.get_many(["a", "b", "c"]) == expected


async def test_items_naming_the_blob_they_read_are_checked_against_it(store: EpisodeStore) -> None:
    for c in ("a", "b"):
        await store.register(c, DAY, b"s0")
    await store.register("b", "2024-05-02", b"other")
    await store.register("b", DAY, b"registered again")  # A -> B -> A: (DAY, 0) again, another blob
    items = [("a", DAY, 0, b"a1", b"s0"), ("b", DAY, 0, b"b1 from the old", b"s0")]
    out = await store.compare_and_set_many(items)
    assert out == [None, Stored(DAY, 0, b"registered again")]
    assert await store.get_many(["a", "b"]) == [Stored(DAY, 1, b"a1"), Stored(DAY, 0, b"registered again")]
