"""The EpisodeStore contract: one body per behaviour, run on the memory, Redis and Redis Cluster stores.

Then fault injection on real servers (paused, killed and restarted), and open_store's URL handling.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio.cluster import RedisCluster

from service.store import (
    EpisodeStore,
    MemoryStore,
    Notice,
    RedisClusterStore,
    RedisStore,
    StoreBusy,
    Stored,
    StoreError,
    StoreUnavailable,
    Summary,
    UnknownCampaign,
    open_store,
)

from .redis_servers import RedisClusterProcs, RedisServer, delete_prefix, free_port, raw_client

pytestmark = pytest.mark.anyio

DAY = "2024-05-01"
NEXT_DAY = "2024-05-02"


async def second_instance(store: EpisodeStore, url: str) -> EpisodeStore:
    """Another client on the same data (the same instance for the memory store, which lives in one process)."""
    if isinstance(store, MemoryStore):
        return store
    assert isinstance(store, RedisStore)
    return await open_store(url, prefix=store.prefix)


async def wait_for(predicate, timeout_s: float = 1.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.01)
    return predicate()


# -- the contract, on every store ------------------------------------------------------------------------------


async def test_ping(store: EpisodeStore) -> None:
    assert await store.ping() is True


async def test_register_then_get(store: EpisodeStore) -> None:
    assert await store.get("c1") is None
    stored, created = await store.register("c1", DAY, b"\x00blob\xff")
    assert created is True
    assert stored == Stored(DAY, 0, b"\x00blob\xff")
    assert await store.get("c1") == stored
    assert await store.get("c2") is None


async def test_register_same_episode_is_a_noop(store: EpisodeStore) -> None:
    await store.register("c1", DAY, b"s0")
    assert await store.compare_and_set("c1", DAY, 0, b"s1") is None
    assert await store.compare_and_set("c1", DAY, 1, b"s2") is None
    stored, created = await store.register("c1", DAY, b"another initial blob")
    assert created is False
    assert stored == Stored(DAY, 2, b"s2")
    assert await store.get("c1") == Stored(DAY, 2, b"s2")


async def test_register_new_episode_resets_to_slot_0(store: EpisodeStore) -> None:
    await store.register("c1", DAY, b"s0")
    assert await store.compare_and_set("c1", DAY, 0, b"s1") is None
    stored, created = await store.register("c1", NEXT_DAY, b"fresh")
    assert created is True
    assert stored == Stored(NEXT_DAY, 0, b"fresh")
    assert await store.get("c1") == stored
    # the old episode's updates are now rejected
    assert await store.compare_and_set("c1", DAY, 1, b"late") == stored


async def test_compare_and_set_with_the_blob_read_refuses_a_registration_in_between(store: EpisodeStore) -> None:
    """A -> B -> A between an update's read and its write leaves (A, 0) stored again, with the new registration's
    blob: a write that names the blob it was computed from is refused, and the stored state comes back."""
    await store.register("c1", DAY, b"old-registration")
    read = await store.get("c1")
    assert read is not None
    await store.register("c1", NEXT_DAY, b"other")
    await store.register("c1", DAY, b"new-registration")
    stale = await store.compare_and_set("c1", DAY, 0, b"from-the-old", expected=read.blob)
    assert stale == Stored(DAY, 0, b"new-registration")
    assert await store.get("c1") == Stored(DAY, 0, b"new-registration")  # nothing written
    assert await store.compare_and_set("c1", DAY, 0, b"from-the-new", expected=b"new-registration") is None
    assert await store.get("c1") == Stored(DAY, 1, b"from-the-new")
    assert await store.compare_and_set("c1", DAY, 1, b"unchecked") is None  # no expected blob: (episode, slot)


async def test_compare_and_set_in_order(store: EpisodeStore) -> None:
    await store.register("c1", DAY, b"s0")
    for slot in range(3):
        assert await store.compare_and_set("c1", DAY, slot, f"s{slot + 1}".encode()) is None
        assert await store.get("c1") == Stored(DAY, slot + 1, f"s{slot + 1}".encode())


async def test_stale_or_skipped_slot_writes_nothing(store: EpisodeStore) -> None:
    await store.register("c1", DAY, b"s0")
    assert await store.compare_and_set("c1", DAY, 0, b"s1") is None
    assert await store.compare_and_set("c1", DAY, 1, b"s2") is None
    current = Stored(DAY, 2, b"s2")
    assert await store.compare_and_set("c1", DAY, 1, b"retried s2, other payload") == current  # stale
    assert await store.compare_and_set("c1", DAY, 0, b"very stale") == current
    assert await store.compare_and_set("c1", DAY, 3, b"skipped slot 2") == current  # from the future
    assert await store.get("c1") == current


async def test_wrong_episode_rejected(store: EpisodeStore) -> None:
    stored, _ = await store.register("c1", DAY, b"s0")
    assert await store.compare_and_set("c1", NEXT_DAY, 0, b"other day") == stored
    assert await store.get("c1") == stored


async def test_compare_and_set_on_unknown_campaign(store: EpisodeStore) -> None:
    with pytest.raises(UnknownCampaign) as caught:
        await store.compare_and_set("nobody", DAY, 0, b"x")
    assert isinstance(caught.value, KeyError) and isinstance(caught.value, StoreError)
    assert caught.value.campaign == "nobody"
    assert await store.get("nobody") is None


async def test_delete(store: EpisodeStore) -> None:
    await store.register("c1", DAY, b"s0")
    await store.delete("c1")
    assert await store.get("c1") is None
    await store.delete("c1")  # deleting a missing campaign is fine
    with pytest.raises(UnknownCampaign):
        await store.compare_and_set("c1", DAY, 0, b"s1")


async def test_get_many_with_missing_keys(store: EpisodeStore, store_url: str) -> None:
    campaigns = [f"campaign-{i}" for i in range(50)]
    for i, campaign in enumerate(campaigns):
        if i % 3:
            await store.register(campaign, DAY, f"blob-{i}".encode())
    await store.compare_and_set(campaigns[1], DAY, 0, b"advanced")
    got = await store.get_many(["missing-first", *campaigns, "missing-last"])
    assert got[0] is None and got[-1] is None
    expected = [None if i % 3 == 0 else Stored(DAY, 0, f"blob-{i}".encode()) for i, _ in enumerate(campaigns)]
    expected[1] = Stored(DAY, 1, b"advanced")
    assert got[1:-1] == expected
    assert await store.get_many([]) == []
    assert await store.get_each(["missing-first", *campaigns, "missing-last"]) == got  # nothing failed: the same
    assert await store.get_each([]) == []
    if isinstance(store, RedisClusterStore):  # the keys really are spread over the nodes
        client = raw_client(store_url)
        try:
            await client.initialize()
            nodes = {client.get_node_from_key(store.key(c)).name for c in campaigns}
        finally:
            await client.aclose()
        assert len(nodes) == 3


async def test_concurrent_compare_and_set_applies_once(store: EpisodeStore, store_url: str) -> None:
    await store.register("hot", DAY, b"s0")
    other = await second_instance(store, store_url)
    try:
        blobs = [f"candidate-{i}".encode() for i in range(50)]
        results = await asyncio.gather(
            *((store if i % 2 else other).compare_and_set("hot", DAY, 0, blob) for i, blob in enumerate(blobs))
        )
    finally:
        if other is not store:
            await other.aclose()
    winners = [blob for blob, result in zip(blobs, results, strict=True) if result is None]
    assert len(winners) == 1
    winner = Stored(DAY, 1, winners[0])
    assert all(result == winner for result in results if result is not None)
    assert await store.get("hot") == winner


@pytest.fixture
def lose_a_reply(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Arm with ``armed.append(n)``: the next n list replies (a script's, or a pipeline's first) are read off the
    socket, so the server has run the command, then lost as a dropped connection would lose them. redis-py re-sends
    such a call once with the same arguments (the store's connection retry)."""
    from redis import exceptions as redis_errors
    from redis.asyncio.connection import AbstractConnection

    armed: list[int] = []
    original = AbstractConnection.read_response

    async def read_response(self: AbstractConnection, *args: object, **kwargs: object) -> object:
        reply = await original(self, *args, **kwargs)  # type: ignore[arg-type]
        if armed and armed[-1] > 0 and isinstance(reply, list):
            armed[-1] -= 1
            raise redis_errors.ConnectionError("reply lost (test)")
        return reply

    monkeypatch.setattr(AbstractConnection, "read_response", read_response)
    return armed


async def test_a_write_resent_after_its_reply_was_lost_answers_as_its_first_send(
    store: EpisodeStore, lose_a_reply: list[int]
) -> None:
    """Without a token per call, the re-send of a register found its own episode and answered created False (the
    service's ``replayed: true`` to an update sent once), and a re-sent compare-and-set found its own slot and
    answered the state as a stale write."""
    await store.register("warm", DAY, b"w0")  # a cluster client maps its slots on first use: not a reply to lose
    lose_a_reply.append(1)
    assert await store.register("c1", DAY, b"s0") == (Stored(DAY, 0, b"s0"), True)
    lose_a_reply.append(1)
    assert await store.compare_and_set("c1", DAY, 0, b"s1", expected=b"s0") is None
    assert await store.get("c1") == Stored(DAY, 1, b"s1")
    # a second, real send of the same write is still a repeat: it finds the state, not its token
    assert await store.register("c1", DAY, b"s0") == (Stored(DAY, 1, b"s1"), False)
    assert await store.compare_and_set("c1", DAY, 0, b"s1") == Stored(DAY, 1, b"s1")
    if isinstance(store, RedisStore):  # the memory store has no connection to lose, nor a batch call
        await store.register("c2", DAY, b"t0")
        lose_a_reply.append(1)
        items = [("c1", DAY, 1, b"s2", b"s1"), ("c2", DAY, 0, b"t1", b"t0")]
        assert await store.compare_and_set_many(items) == [None, None]  # a pipeline is re-sent whole
        assert await store.get_many(["c1", "c2"]) == [Stored(DAY, 2, b"s2"), Stored(DAY, 1, b"t1")]
        assert lose_a_reply == [0, 0, 0]  # each loss happened


async def test_a_resent_write_does_not_claim_a_state_an_older_script_wrote_over_its_token(
    store: EpisodeStore, store_url: str
) -> None:
    """A process still on the scripts before tokens (a rolling upgrade) writes e, s and b and leaves w: a re-send
    that finds its token must also find its own slot and blob before it answers written."""
    if not isinstance(store, RedisStore):
        return  # the memory store has no scripts nor re-sends
    key, token = store.key("c1"), b"fixed-token"
    channel, publish = store.channel_for(key), store.publish_command
    register = [DAY, b"ours", store.state_ttl_ms, channel, "c1", token, "", publish]
    assert (await store._register(keys=[key], args=register))[0] == 1
    client = raw_client(store_url)
    try:
        await client.hset(key, mapping={"e": DAY, "s": "0", "b": b"theirs"})  # B then A again, old script
        assert [int(x) if i == 0 else x for i, x in enumerate(await store._register(keys=[key], args=register))] == [
            0,
            DAY.encode(),
            b"0",
            b"theirs",
        ]
        cas = [DAY, 0, b"ours-1", store.state_ttl_ms, channel, "c1", "", token, "", publish]
        assert (await store._compare_and_set(keys=[key], args=cas))[0] == 1
        await client.hset(key, mapping={"s": "1", "b": b"theirs-1"})  # an old script's write of the same slot
        assert (await store._compare_and_set(keys=[key], args=cas))[0] == 0
    finally:
        await client.aclose()


async def test_heard_updates_once_the_subscription_is_confirmed(store: EpisodeStore) -> None:
    """A Redis store has heard nothing before it subscribes (``/readyz`` waits for it); the in-process store hears
    every write it makes."""
    assert store.heard_updates is isinstance(store, MemoryStore)
    await store.subscribe(lambda notice: None)
    assert await wait_for(lambda: store.heard_updates, 5.0)


async def test_subscribe_sees_writes_of_another_instance(store: EpisodeStore, store_url: str) -> None:
    seen: list[str] = []
    await store.subscribe(lambda notice: seen.append(notice.campaign))
    writer = await second_instance(store, store_url)
    try:
        await writer.register("c1", DAY, b"s0")
        assert await wait_for(lambda: "c1" in seen, 1.0), seen
        await writer.compare_and_set("c1", DAY, 0, b"s1")
        assert await wait_for(lambda: seen.count("c1") >= 2, 1.0), seen
        await writer.register("c1", DAY, b"s0")  # a re-confirm writes nothing: no update
        await writer.compare_and_set("c1", DAY, 0, b"stale")  # rejected: no update
        await writer.register("c2", DAY, b"s0")
        assert await wait_for(lambda: "c2" in seen, 1.0), seen
        assert seen == ["c1", "c1", "c2"]
    finally:
        if writer is not store:
            await writer.aclose()


@pytest.mark.parametrize(
    "store_url",
    [pytest.param("redis", marks=pytest.mark.redis), pytest.param("cluster", marks=pytest.mark.cluster)],
    indirect=True,
)
async def test_writes_refresh_the_ttl(store_url: str) -> None:
    store = await open_store(store_url, prefix="ttl-test", state_ttl_s=3600)
    assert isinstance(store, RedisStore)
    client = raw_client(store_url)
    try:
        await store.register("c1", DAY, b"s0")
        key = store.key("c1")
        assert 3590_000 < await client.pttl(key) <= 3600_000
        await client.pexpire(key, 10_000)
        await store.register("c1", DAY, b"s0")  # re-confirm: writes nothing, TTL untouched
        assert await client.pttl(key) <= 10_000
        assert await store.compare_and_set("c1", DAY, 0, b"s1") is None
        assert await client.pttl(key) > 3590_000
        assert await client.type(key) in (b"hash", "hash")
    finally:
        await client.aclose()
        await store.aclose()
        await delete_prefix(store_url, "ttl-test")


async def test_memory_states_expire_after_their_last_write() -> None:
    """As on Redis: a state expires ``state_ttl_s`` after its last write (a re-confirm is not one), and the embedded
    store drops what expired, so a long-running service does not keep every campaign it ever saw."""
    now = [0.0]
    store = MemoryStore(state_ttl_s=10, clock=lambda: now[0])
    await store.register("c1", DAY, b"s0")
    await store.register("c2", DAY, b"t0")
    now[0] = 6.0
    await store.register("c1", DAY, b"s0")  # re-confirm: writes nothing, expiry untouched
    assert await store.compare_and_set("c2", DAY, 0, b"t1") is None  # a write: c2 now lives to 16
    now[0] = 10.0
    assert await store.get("c1") is None and await store.get("c2") == Stored(DAY, 1, b"t1")
    with pytest.raises(UnknownCampaign):
        await store.compare_and_set("c1", DAY, 0, b"s1")
    assert await store.campaigns() == ["c2"]
    for k in range(100):  # campaigns seen once and gone: each write drops what has expired
        now[0] = 20.0 + k
        await store.register(f"once-{k}", DAY, b"x")
    assert len(store._states) == 10 and await store.get("c2") is None
    configured, default = await open_store("memory", state_ttl_s=5), await open_store(None)
    assert isinstance(configured, MemoryStore) and isinstance(default, MemoryStore)
    assert configured.state_ttl_s == 5 and default.state_ttl_s == 7 * 24 * 3600  # RCB_STATE_TTL_S reaches it
    with pytest.raises(ValueError, match="state_ttl_s"):
        MemoryStore(state_ttl_s=0)


# -- faults on a real server --------------------------------------------------------------------------------------


@pytest.mark.redis
async def test_paused_server_fails_fast_then_applies_once(redis_server: RedisServer) -> None:
    store = await open_store(redis_server.url, prefix="paused", timeout_s=0.25)
    try:
        await store.register("c1", DAY, b"s0")
        redis_server.pause()
        try:
            for call in (
                lambda: store.get("c1"),
                lambda: store.compare_and_set("c1", DAY, 0, b"s1"),
                lambda: store.get_many(["c1", "c2"]),
            ):
                started = time.monotonic()
                with pytest.raises(StoreUnavailable):
                    await call()
                assert time.monotonic() - started < 1.0
            started = time.monotonic()
            assert await store.ping() is False
            assert time.monotonic() - started < 1.0
        finally:
            redis_server.resume()
        # The timed-out CAS may have reached the server's socket buffer and run on resume; either way, the retry
        # leaves slot 1 applied exactly once with this blob.
        result = await store.compare_and_set("c1", DAY, 0, b"s1")
        assert result is None or result == Stored(DAY, 1, b"s1")
        assert await store.compare_and_set("c1", DAY, 0, b"s1") == Stored(DAY, 1, b"s1")
        assert await store.get("c1") == Stored(DAY, 1, b"s1")
        assert await store.ping() is True
    finally:
        await store.aclose()
        await delete_prefix(redis_server.url, "paused")


@pytest.mark.redis
async def test_killed_and_restarted_server(redis_server: RedisServer) -> None:
    store = await open_store(redis_server.url, prefix="restart")
    writer = await open_store(redis_server.url, prefix="restart")
    seen: list[str] = []
    try:
        await store.subscribe(lambda notice: seen.append(notice.campaign))
        await store.register("c1", DAY, b"s0")
        redis_server.kill()
        started = time.monotonic()
        with pytest.raises(StoreUnavailable):
            await store.get("c1")
        with pytest.raises(StoreUnavailable):
            await store.register("c1", DAY, b"s0")
        assert await store.ping() is False
        assert time.monotonic() - started < 1.0
        redis_server.restart()
        assert await store.ping() is True
        assert await store.get("c1") is None  # persistence is off: the state is gone
        stored, created = await store.register("c1", DAY, b"s0")
        assert created and stored == Stored(DAY, 0, b"s0")
        assert await store.compare_and_set("c1", DAY, 0, b"s1") is None
        # the update listener reconnected on its own (backoff) and sees other clients' writes again
        deadline = time.monotonic() + 5.0
        while "c9" not in seen and time.monotonic() < deadline:
            await writer.delete("c9")
            await writer.register("c9", DAY, b"s0")
            await asyncio.sleep(0.05)
        assert "c9" in seen
    finally:
        await writer.aclose()
        await store.aclose()
        await delete_prefix(redis_server.url, "restart")


@contextlib.asynccontextmanager
async def on_cluster(
    cluster: RedisClusterProcs, prefix: str, **options: Any
) -> AsyncIterator[tuple[RedisClusterStore, RedisCluster]]:
    """A store on ``cluster`` under its own key prefix (``timeout_s`` 0.25 unless given) and a raw cluster client
    beside it; both closed and the prefix's keys deleted afterwards."""
    store = await open_store(cluster.url, prefix=prefix, **{"timeout_s": 0.25, **options})
    assert isinstance(store, RedisClusterStore)
    client = raw_client(cluster.url)
    try:
        yield store, client
    finally:
        await client.aclose()
        await store.aclose()
        await delete_prefix(cluster.url, prefix)


@pytest.mark.cluster
async def test_cluster_paused_node_fails_fast(redis_cluster: RedisClusterProcs) -> None:
    async with on_cluster(redis_cluster, "paused") as (store, client):
        await store.register("c1", DAY, b"s0")
        await client.initialize()
        port = client.get_node_from_key(store.key("c1")).port
        node = next(s for s in redis_cluster.servers if s.port == port)
        node.pause()  # well under cluster-node-timeout (2 s): the cluster does not fail the node over
        try:
            started = time.monotonic()
            with pytest.raises(StoreUnavailable):
                await store.compare_and_set("c1", DAY, 0, b"s1")
            assert time.monotonic() - started < 1.5
        finally:
            node.resume()
        redis_cluster.wait_ok()
        result = await store.compare_and_set("c1", DAY, 0, b"s1")
        assert result is None or result == Stored(DAY, 1, b"s1")
        assert await store.get("c1") == Stored(DAY, 1, b"s1")


@pytest.mark.cluster
async def test_cluster_reads_fail_only_the_paused_nodes_campaigns(redis_cluster: RedisClusterProcs) -> None:
    """get_each: a paused primary fails its own campaigns' reads (as values), the other nodes' answer; get_many,
    which has no per-item answer, raises."""
    async with on_cluster(redis_cluster, "partial") as (store, client):
        campaigns = [f"c{i}" for i in range(30)]
        for campaign in campaigns:
            await store.register(campaign, DAY, campaign.encode())
        await client.initialize()
        ports = [client.get_node_from_key(store.key(c)).port for c in campaigns]
        node = next(s for s in redis_cluster.servers if s.port == ports[0])
        node.pause()  # well under cluster-node-timeout (2 s): the cluster does not fail the node over
        try:
            started = time.monotonic()
            got = await store.get_each(campaigns)
            took = time.monotonic() - started
            with pytest.raises(StoreUnavailable):
                await store.get_many(campaigns)
        finally:
            node.resume()
        assert took < 1.5
        for campaign, port, item in zip(campaigns, ports, got, strict=True):
            if port == node.port:
                assert isinstance(item, StoreUnavailable), (campaign, item)
            else:
                assert item == Stored(DAY, 0, campaign.encode()), (campaign, item)
        assert 0 < sum(port == node.port for port in ports) < len(campaigns)
        redis_cluster.wait_ok()
        assert await store.get_each(campaigns) == [Stored(DAY, 0, c.encode()) for c in campaigns]


@pytest.mark.redis
async def test_every_connection_busy_is_store_busy_not_an_outage(redis_server: RedisServer) -> None:
    """A command that waited pool_timeout_s for one of pool_size connections raises StoreBusy (a StoreUnavailable:
    still 503), so the service can tell its own overload from a store that is down."""
    store = await open_store(redis_server.url, prefix="busy", pool_size=1, pool_timeout_s=0.05, timeout_s=1.0)
    assert isinstance(store, RedisStore)
    try:
        assert await store.get("c1") is None  # the one connection, open
        holding = asyncio.create_task(store._client.blpop(["busy:nothing"], timeout=0.5))  # holds it for 0.5 s
        await asyncio.sleep(0.05)
        with pytest.raises(StoreBusy, match="every connection busy"):
            await store.get("c1")
        assert await holding is None
        assert await store.get("c1") is None  # free again
    finally:
        await store.aclose()
        await delete_prefix(redis_server.url, "busy")


async def two_nodes_apart(
    store: EpisodeStore, client: RedisCluster, cluster: RedisClusterProcs
) -> tuple[str, str, RedisServer]:
    """Registers twelve campaigns (state ``(DAY, 0, b"s0")``); returns one of them, one on another primary, and the
    first one's server (to pause)."""
    assert isinstance(store, RedisClusterStore)
    campaigns = [f"c{i}" for i in range(12)]
    for campaign in campaigns:
        await store.register(campaign, DAY, b"s0")
    await client.initialize()
    ports = {c: client.get_node_from_key(store.key(c)).port for c in campaigns}
    stalled = campaigns[0]
    healthy = next(c for c in campaigns if ports[c] != ports[stalled])
    return stalled, healthy, next(s for s in cluster.servers if s.port == ports[stalled])


@pytest.mark.cluster
async def test_a_stalled_nodes_commands_do_not_queue_the_other_nodes(redis_cluster: RedisClusterProcs) -> None:
    """pool_size bounds the commands in flight per primary: reads waiting on a stalled node hold its turns, not
    the others' (with one bound for the whole cluster, a read of a healthy node waited behind them for the deadline
    and failed as busy or down)."""
    async with on_cluster(redis_cluster, "turns", pool_size=2) as (store, client):
        stalled, healthy, node = await two_nodes_apart(store, client, redis_cluster)
        node.pause()
        try:
            waiting = [asyncio.create_task(store.get(stalled)) for _ in range(8)]  # 2 in flight, 6 queued
            await asyncio.sleep(0.01)
            started = time.monotonic()
            assert await store.get(healthy) == Stored(DAY, 0, b"s0")
            took = time.monotonic() - started
            outcomes = await asyncio.gather(*waiting, return_exceptions=True)
        finally:
            node.resume()
        assert took < 0.2, took
        assert all(isinstance(o, StoreUnavailable) for o in outcomes), outcomes
        redis_cluster.wait_ok()


@pytest.mark.cluster
async def test_a_write_loads_its_script_on_its_own_node_only(redis_cluster: RedisClusterProcs) -> None:
    """A node without the write scripts (restarted, or a replica promoted) runs them by EVAL there: redis-py's own
    fallback loads them on every primary, so a write to a healthy node failed while another primary stalled."""
    async with on_cluster(redis_cluster, "scripts") as (store, client):
        stalled, healthy, node = await two_nodes_apart(store, client, redis_cluster)
        for server in redis_cluster.servers:  # no node holds a script now
            server.client().script_flush()
        node.pause()
        try:
            assert await store.compare_and_set(healthy, DAY, 0, b"s1") is None
        finally:
            node.resume()
        assert await store.get(healthy) == Stored(DAY, 1, b"s1")
        redis_cluster.wait_ok()
        assert await store.compare_and_set(stalled, DAY, 0, b"s1") is None  # and the other node loads its own


@pytest.mark.cluster
async def test_no_command_waits_for_a_refresh_of_the_slot_map(
    redis_cluster: RedisClusterProcs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After one node's timeout, redis-py 8.1's own command path rediscovers the cluster in front of the next command
    of every node and runs COMMAND on its default node, the primary of slot 0 (the first node of the URL): with that
    node stalled, every command of every node fails. The store refreshes the slot map behind the commands (here a
    refresh that hangs), each command goes to its key's node, and no COMMAND is ever sent."""
    from redis.asyncio.cluster import ClusterNode, NodesManager

    async with on_cluster(redis_cluster, "refresh") as (store, client):
        stalled, healthy, node = await two_nodes_apart(store, client, redis_cluster)
        owners = {c: store._client.get_node_from_key(store.key(c)).port for c in (stalled, healthy)}
        sent: list[tuple[str, int]] = []
        real_execute, real_initialize = ClusterNode.execute_command, NodesManager.initialize

        async def recording(cluster_node: ClusterNode, *args: Any, **kwargs: Any) -> Any:
            sent.append((str(args[0]), int(cluster_node.port)))
            return await real_execute(cluster_node, *args, **kwargs)

        refreshing, release = asyncio.Event(), asyncio.Event()

        async def held(manager: NodesManager, *args: Any, **kwargs: Any) -> None:
            refreshing.set()
            await release.wait()
            await real_initialize(manager, *args, **kwargs)

        monkeypatch.setattr(ClusterNode, "execute_command", recording)
        monkeypatch.setattr(NodesManager, "initialize", held)
        node.pause()
        try:
            with pytest.raises(StoreUnavailable):
                await store.get(stalled)
            await asyncio.wait_for(refreshing.wait(), 2.0)  # the timeout asked for a refresh, which now hangs
            started = time.monotonic()
            for _ in range(5):
                assert await store.get(healthy) == Stored(DAY, 0, b"s0")
            took = time.monotonic() - started
        finally:
            node.resume()
            release.set()
        assert took < 0.2, took
        assert [port for command, port in sent if command == "HMGET"] == [owners[stalled]] + [owners[healthy]] * 5
        assert not any(command == "COMMAND" for command, _ in sent), sent
        redis_cluster.wait_ok()


async def test_a_client_failure_inside_redis_py_is_a_store_outage_and_ours_is_not() -> None:
    """redis-py 8.1's cluster client can write on a connection another task tore down (an AttributeError raised in
    redis-py, seen with a paused primary): that is StoreUnavailable (503), while an AttributeError of our own
    code still raises as the bug it is."""
    from redis.asyncio.connection import Connection

    store = await open_store(f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.1)
    try:
        torn_down = Connection()  # never connected: no writer, as after a disconnect
        with pytest.raises(StoreUnavailable, match="connection lost in the client"):
            await store._call("get", lambda: torn_down._send_packed_command([b"PING"]))

        async def ours() -> None:
            raise AttributeError("a bug of ours")

        with pytest.raises(AttributeError, match="a bug of ours"):
            await store._call("get", ours)
        from service.store import redis as redis_store

        scope: dict[str, object] = {}  # raised in a sibling package (redis_om, say), not in redis-py
        exec(
            compile("async def f():\n    raise AttributeError('theirs')\n", redis_store._REDIS_PY + "_om/x.py", "exec"),
            scope,
        )
        with pytest.raises(AttributeError, match="theirs"):
            await store._call("get", scope["f"])  # type: ignore[arg-type]
    finally:
        await store.aclose()


@pytest.mark.cluster
async def test_cluster_ping_fails_while_any_primary_is_down(redis_cluster: RedisClusterProcs) -> None:
    """Readiness reads ping: a plain PING reaches one node and answers while another primary is down (and its
    campaigns answer 503); every primary must answer."""
    store = await open_store(redis_cluster.url, prefix="pingall", timeout_s=0.25)
    try:
        assert await store.ping() is True
        for node in redis_cluster.servers:  # whichever node the client pings by default, one of these is another
            node.pause()
            try:
                assert await store.ping() is False
            finally:
                node.resume()
        redis_cluster.wait_ok()
        assert await store.ping() is True
    finally:
        await store.aclose()


# -- open_store ---------------------------------------------------------------------------------------------------


async def test_open_store_picks_the_backend() -> None:
    assert isinstance(await open_store(), MemoryStore)
    assert isinstance(await open_store("memory"), MemoryStore)
    port = free_port()  # nothing listens there: opening still works, degraded
    for url, cls in (
        (f"redis://127.0.0.1:{port}/0", RedisStore),
        (f"rediss://127.0.0.1:{port}", RedisStore),
        (f"redis+cluster://127.0.0.1:{port},127.0.0.1:{port + 1}", RedisClusterStore),
    ):
        opened = await open_store(url, timeout_s=0.1)
        try:
            assert type(opened) is cls
            if url.startswith("redis:") or "cluster" in url:
                assert await opened.ping() is False
                with pytest.raises(StoreUnavailable):
                    await opened.get("c1")
        finally:
            await opened.aclose()


@pytest.mark.parametrize(
    "url",
    [
        "",
        "mysql://localhost",
        "redis://",
        "redis://localhost:notaport/0",
        "redis://localhost:6379/zero",
        "redis+cluster://",
        "redis+cluster://localhost",
        "redis+cluster://localhost:6379,localhost:x",
        "redis+cluster://localhost:6379/0",
        "unix:///tmp/redis.sock",
    ],
)
async def test_open_store_rejects_bad_urls(url: str) -> None:
    with pytest.raises(ValueError, match="URL"):
        await open_store(url)


async def test_bad_arguments_are_refused_before_any_io() -> None:
    store = await open_store("memory")
    with pytest.raises(ValueError):
        await store.register("", DAY, b"x")
    with pytest.raises(ValueError):
        await store.compare_and_set("c1", DAY, -1, b"x")
    with pytest.raises(TypeError):
        await store.register("c1", DAY, "not bytes")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        await open_store("redis://127.0.0.1:1/0", prefix="has{brace}")


@pytest.mark.anyio
async def test_campaigns_lists_the_stored_ones(store: EpisodeStore) -> None:
    names = [f"list-{i:03d}" for i in range(30)]
    for name in names:
        await store.register(name, "e1", b"x")
    await store.delete(names[0])
    assert await store.campaigns(limit=1000) == names[1:]
    assert len(await store.campaigns(limit=5)) == 5


@pytest.mark.anyio
async def test_notices_name_the_state_each_write_left_and_what_it_bids(store: EpisodeStore) -> None:
    """Per write, the state it left (campaign, episode, slot), so a process tells the echo of its own write from a
    newer one, and the writer's summary of what that state bids, so it updates its cache without a read (the ratio
    exactly as written: repr round-trips a float)."""
    notices: list[Notice] = []
    await store.subscribe(notices.append)
    first, second = Summary(0.1 + 0.2, False), Summary(1.0 / 3.0, True)
    await store.register("n1", DAY, b"s0", first)
    await store.compare_and_set("n1", DAY, 0, b"s1", summary=second)
    await store.compare_and_set("n1", DAY, 1, b"s2")  # no summary given: the notice says only that it changed
    assert await store.compare_and_set_many([("n1", DAY, 2, b"s3", None)], [first]) == [None]
    await store.delete("n1")
    expected = [
        Notice("n1", DAY, 0, first),
        Notice("n1", DAY, 1, second),
        Notice("n1", DAY, 2, None),
        Notice("n1", DAY, 3, first),
        Notice("n1"),
    ]
    assert await wait_for(lambda: notices[-5:] == expected, 1.0), notices
    assert notices[-5].summary is not None and notices[-5].summary.ratio == 0.1 + 0.2
