"""One primary of a Redis Cluster stopped (SIGSTOP), each in turn, the first node of the URL included: only the
campaigns that node holds are unavailable, and bids answer from what each process knows.

These tests run on a cluster of their own whose ``cluster-node-timeout`` (60 s) outlasts every stop, so Redis itself
never marks the stopped node failed (the session cluster's 2 s would turn a longer stop into CLUSTERDOWN on every
node, whatever the client does).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from service.store import Notice, RedisClusterStore, Stored, StoreError, StoreUnavailable, Summary, open_store
from service.store.cluster import slot_channel, slot_tags

from .app_fixtures import rcb_serve, update
from .redis_servers import RedisClusterProcs, delete_prefix, raw_client, running_cluster

pytestmark = pytest.mark.cluster

DAY = "2024-05-01"


@pytest.fixture(scope="module")
def patient_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterProcs]:
    with running_cluster(tmp_path_factory.mktemp("patient-cluster"), node_timeout_ms=60_000) as cluster:
        yield cluster


@pytest.fixture(autouse=True)
def _resume_every_node(patient_cluster: RedisClusterProcs) -> Iterator[None]:
    yield
    patient_cluster.ensure_running()


async def owner_ports(cluster: RedisClusterProcs, keys: list[str]) -> list[int]:
    """The port of the primary holding each key, by a client of its own."""
    client = raw_client(cluster.url)
    try:
        await client.initialize()
        return [int(client.get_node_from_key(key).port) for key in keys]
    finally:
        await client.aclose()


def test_every_hash_slot_has_a_channel_in_that_slot() -> None:
    from redis.crc import key_slot

    tags = slot_tags()
    assert len(tags) == 16384 and all(1 <= len(tag) <= 3 for tag in tags)
    assert all(key_slot(slot_channel("rcb", slot).encode()) == slot for slot in range(0, 16384, 7))


@pytest.mark.anyio
async def test_a_stopped_primary_fails_only_its_own_campaigns_and_notices_whichever_node_of_the_url_it_is(
    patient_cluster: RedisClusterProcs,
) -> None:
    """Store level, each primary stopped in turn: reads and batch writes fail its campaigns only, within about one
    timeout, and the notices of the other nodes' writes reach a subscriber. Through redis-py's own command path,
    with the URL's first node stopped, every campaign's read and write fails (it rediscovers the cluster after a
    timeout and runs COMMAND on that node first), and a subscriber connected to that node hears nothing."""
    prefix = f"s{uuid.uuid4().hex[:8]}"
    writer = await open_store(patient_cluster.url, prefix=prefix, timeout_s=0.25)
    reader = await open_store(patient_cluster.url, prefix=prefix, timeout_s=0.25)
    assert isinstance(writer, RedisClusterStore) and isinstance(reader, RedisClusterStore)
    heard: list[Notice] = []
    try:
        await reader.subscribe(heard.append)
        campaigns = [f"c{i}" for i in range(60)]
        for campaign in campaigns:
            await writer.register(campaign, DAY, b"s0", Summary(1.0, False))
        ports = await owner_ports(patient_cluster, [writer.key(c) for c in campaigns])
        for slot, server in enumerate(patient_cluster.servers):  # in the URL's order: the first node first
            on_node = {c for c, port in zip(campaigns, ports, strict=True) if port == server.port}
            assert 0 < len(on_node) < len(campaigns)
            del heard[:]
            server.pause()
            try:
                started = time.monotonic()
                read = await writer.get_each(campaigns)
                read_took = time.monotonic() - started
                items = [(c, DAY, slot, f"s{slot + 1}".encode(), None) for c in campaigns]
                summaries = [Summary(1.0 + slot, False)] * len(items)
                started = time.monotonic()
                written = await writer.compare_and_set_many(items, summaries)
                write_took = time.monotonic() - started
                deadline = time.monotonic() + 2.0
                while len(heard) < len(campaigns) - len(on_node) and time.monotonic() < deadline:
                    await asyncio.sleep(0.01)
            finally:
                server.resume()
            failed_reads = {c for c, item in zip(campaigns, read, strict=True) if isinstance(item, StoreError)}
            failed_writes = {c for c, item in zip(campaigns, written, strict=True) if item is not None}
            print(
                f"node {slot} ({server.port}) stopped: reads failed {len(failed_reads)}, writes failed "
                f"{len(failed_writes)} of {len(campaigns)} ({len(on_node)} on it); {read_took:.2f} s, "
                f"{write_took:.2f} s; {len(heard)} notices heard"
            )
            assert failed_reads == on_node and failed_writes == on_node
            assert all(isinstance(written[k], StoreUnavailable) for k, c in enumerate(campaigns) if c in on_node)
            assert read_took < 1.0 and write_took < 1.0, (read_took, write_took)
            expected = {Notice(c, DAY, slot + 1, Summary(1.0 + slot, False)) for c in campaigns if c not in on_node}
            assert set(heard) == expected, (len(heard), len(expected))
            patient_cluster.wait_ok()
            # the stopped node's writes were refused whole: sent again, each applies once, the next slot
            retried = [item for item in items if item[0] in on_node]
            assert await writer.compare_and_set_many(retried, summaries[: len(retried)]) == [None] * len(retried)
            assert await writer.get_many(campaigns) == [Stored(DAY, slot + 1, f"s{slot + 1}".encode())] * len(campaigns)
    finally:
        await reader.aclose()
        await writer.aclose()
        await delete_prefix(patient_cluster.url, prefix)


def test_two_workers_with_each_primary_stopped_in_turn_apply_the_rest_and_every_bid_answers(
    models: Any, patient_cluster: RedisClusterProcs
) -> None:
    """``rcb serve --workers 2`` on the cluster, 200 campaigns; each primary stopped in turn (the URL's first node
    first). A slot batch applies every campaign the other nodes hold and answers 503 for the stopped node's only;
    every bid answers 200 meanwhile, from both workers (each knows every campaign from the writes' notices, which
    carry what each write bids, so no bid needs the store), fresh and at the new slot for the applied campaigns;
    resent after SIGCONT, the 503'd updates apply exactly once (the next slot, the stats counted once)."""
    prefix = f"w{uuid.uuid4().hex[:8]}"
    env = {"RCB_KEY_PREFIX": prefix, "RCB_STORE_TIMEOUT_S": "0.25"}
    campaigns = [f"c{i:03d}" for i in range(200)]
    ports = asyncio.run(owner_ports(patient_cluster, [f"{prefix}:{{{c}}}" for c in campaigns]))
    fresh = httpx.Limits(max_keepalive_connections=0)  # a new connection per request: both workers answer
    started = time.monotonic()
    with (
        rcb_serve(models.cbrl_model, patient_cluster.url, "--workers", "2", ready_timeout=90, **env) as server,
        httpx.Client(base_url=server.url, limits=fresh, timeout=10) as http,
    ):
        try:
            for campaign in campaigns:
                reply = http.put(f"/v1/campaigns/{campaign}", json={"episode": DAY, "roi_target": 1.0})
                assert reply.status_code == 201, reply.text
            for slot, node in enumerate(patient_cluster.servers):
                on_node = {c for c, port in zip(campaigns, ports, strict=True) if port == node.port}
                assert 0 < len(on_node) < len(campaigns)
                batch = {"updates": [update(c, DAY, slot=slot) for c in campaigns]}
                node.pause()
                try:
                    answer = http.post("/v1/slot-update/batch", json=batch)
                    bids = [
                        (campaign, http.post("/v1/bid", json={"campaign_id": campaign, "utilities": [1.0]}))
                        for campaign in campaigns
                        for _ in range(2)
                    ]
                finally:
                    node.resume()
                assert answer.status_code == 200, answer.text
                results = answer.json()["results"]
                unavailable = {r["campaign_id"] for r in results if r["status"] == 503}
                applied = {r["campaign_id"] for r in results if r["status"] == 200 and not r["answer"]["replayed"]}
                failed_bids = [(c, b.status_code, b.text[:200]) for c, b in bids if b.status_code != 200]
                answered = [(c, b.json()) for c, b in bids if b.status_code == 200]
                answers = dict(answered)
                elsewhere = [(c, body) for c, body in answered if c not in on_node]
                stale_elsewhere = [c for c, body in elsewhere if body["stale"]]
                old_slot_elsewhere = sorted({c for c, body in elsewhere if body["slot"] != slot + 1})
                print(
                    f"node {slot} ({node.port}) stopped: batch applied {len(applied)}, 503 {len(unavailable)} "
                    f"({len(on_node)} on it); bids failed {len(failed_bids)} of {len(bids)}; healthy campaigns "
                    f"bid stale {len(stale_elsewhere)}, at the old slot {len(old_slot_elsewhere)}"
                )
                assert unavailable == on_node, sorted(unavailable ^ on_node)
                assert applied == set(campaigns) - on_node
                assert all(r["error"] == "store_unavailable" for r in results if r["status"] == 503)
                assert not failed_bids, failed_bids[:5]
                assert not stale_elsewhere and not old_slot_elsewhere, (stale_elsewhere[:5], old_slot_elsewhere[:5])
                assert all(answers[c]["slot"] == slot for c in on_node)  # what was last decided there
                patient_cluster.wait_ok()
                resend = {"updates": [update(c, DAY, slot=slot) for c in sorted(on_node)]}
                first = http.post("/v1/slot-update/batch", json=resend).json()["results"]
                assert all(r["status"] == 200 and not r["answer"]["replayed"] for r in first), first[:3]
                again = http.post("/v1/slot-update/batch", json=resend).json()["results"]
                assert all(r["status"] == 200 and r["answer"]["replayed"] for r in again), again[:3]
                for campaign in campaigns:
                    view = http.get(f"/v1/campaigns/{campaign}").json()
                    assert (view["slot"], view["cost"]) == (slot + 1, 2.0 * (slot + 1)), (campaign, view)
        except BaseException:
            print(server.log_tail())
            raise
        finally:
            for stopped in patient_cluster.servers:
                stopped.resume()
    asyncio.run(delete_prefix(patient_cluster.url, prefix))
    print(f"{len(patient_cluster.servers)} stops with 2 workers in {time.monotonic() - started:.1f} s")
