"""What reading a slot boundary node by node costs on a Redis Cluster: 10,000 campaigns through three primaries.

A slot batch reads with ``RedisClusterStore.get_each``: one pipeline per primary, the primaries in parallel, each
under its own deadline, so a stalled primary fails only its own campaigns. The alternative, ``get_many``, runs one
cluster pipeline over every key (redis-py groups it per node itself; one node's failure fails every key). This times
the two over the same keys on one local 3-primary cluster, alternating the arms (ABBA), in chunks of 256 as the
service reads while no bid flows (``service.episodes._CHUNK``; 16 while bids flow; ``--chunk`` sets it), and
prints medians and their ratio::

    .venv/bin/python benchmarks/bench_cluster_reads.py [--campaigns 10000] [--chunk 256] [--repeats 7]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_cas_check import DAY, late_day_blob
from benchmarks.machine import describe_machine
from service.store import RedisClusterStore, open_store
from service.store.redis import _FIELDS, _decode
from tests.serving.redis_servers import RedisClusterProcs


async def one_cluster_pipeline(store: RedisClusterStore, campaigns: Sequence[str]) -> list[Any]:
    """The baseline read: one cluster pipeline over every key."""
    keys = [store.key(c) for c in campaigns]

    async def fetch() -> list[Any]:
        async with store._client.pipeline() as pipe:
            for key in keys:
                pipe.hmget(key, *_FIELDS)
            return await pipe.execute()

    return [_decode(fields) for fields in await store._call("get_many", fetch)]


async def run(campaigns: int, chunk: int, repeats: int) -> None:
    blob = late_day_blob()
    print(f"machine: {describe_machine()}")
    print(f"{campaigns} campaigns on 3 primaries, blob {len(blob)} bytes, chunks of {chunk}, {repeats} repeats per arm")
    with tempfile.TemporaryDirectory() as tmp:
        cluster = RedisClusterProcs(Path(tmp) / "cluster")
        cluster.start()
        try:
            store = await open_store(cluster.url, prefix="bench")
            assert isinstance(store, RedisClusterStore)
            names = [f"campaign-{i:05d}" for i in range(campaigns)]
            for start in range(0, campaigns, 500):
                await asyncio.gather(*(store.register(n, DAY, blob) for n in names[start : start + 500]))
            arms = {
                "node by node (get_each)": store.get_each,
                "one cluster pipeline (before)": lambda part: one_cluster_pipeline(store, part),
            }
            times: dict[str, list[float]] = {arm: [] for arm in arms}
            for round_ in range(repeats + 1):  # the first round warms the connections
                order = list(arms) if round_ % 2 else list(reversed(arms))  # ABBA: no drift bias
                for arm in order:
                    started = time.perf_counter()
                    found = []
                    for start in range(0, campaigns, chunk):
                        found += await arms[arm](names[start : start + chunk])
                    took = time.perf_counter() - started
                    assert len(found) == campaigns and all(f is not None and f.blob == blob for f in found)
                    if round_:
                        times[arm].append(took)
            await store.aclose()
        finally:
            cluster.stop()
    medians = {arm: statistics.median(t) for arm, t in times.items()}
    for arm, median in medians.items():
        spread = ", ".join(f"{1e3 * t:.0f}" for t in sorted(times[arm]))
        print(f"{arm:>32}: median {1e3 * median:7.1f} ms a boundary read ({spread})")
    after, before = medians["node by node (get_each)"], medians["one cluster pipeline (before)"]
    ratios = [
        a / b for a, b in zip(times["node by node (get_each)"], times["one cluster pipeline (before)"], strict=True)
    ]
    print(
        f"node by node / one pipeline: {after / before:.2f}x"
        f" (median of per-round ratios {statistics.median(ratios):.2f}x)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--campaigns", type=int, default=10_000)
    parser.add_argument("--chunk", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    asyncio.run(run(args.campaigns, args.chunk, args.repeats))


if __name__ == "__main__":
    main()
