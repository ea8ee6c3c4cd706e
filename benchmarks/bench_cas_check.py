"""What the compare-and-set's blob check costs at a slot boundary: 10,000 campaigns' writes through one Redis.

A slot update's write checks that the stored blob is the one the update was computed from (the SHA-1
of the read blob in Python, ``redis.sha1hex`` of the stored one in the Lua script), so a registration racing the
update is never overwritten. This times ``RedisStore.compare_and_set_many`` over every campaign of a boundary with
the check (``expected`` = the blob read) against the same writes without it (``expected=None``), alternating the
two arms on one server (ABBA order), and prints medians and their ratio::

    .venv/bin/python benchmarks/bench_cas_check.py [--campaigns 10000] [--repeats 7]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine import describe_machine
from model.state import CampaignState
from service.store import RedisStore, open_store
from tests.serving.redis_servers import RedisServer

DAY = "2024-05-01"


def late_day_blob(slot: int = 47) -> bytes:
    """A campaign's state late in the day (the largest blobs a boundary writes)."""
    state = CampaignState.new("campaign-0000", DAY, 1.2, 500.0, 0).decided(1.0, "bench")
    for _ in range(slot):
        state = state.reported(3.0, 2.5, 40.0, 120.0).decided(1.1, "bench")
    return state.to_bytes()


async def run(campaigns: int, repeats: int) -> None:
    blob = late_day_blob()
    print(f"machine: {describe_machine()}")
    print(f"{campaigns} campaigns, state blob {len(blob)} bytes, {repeats} repeats per arm (alternating)")
    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(Path(tmp) / "redis").start()
        try:
            store = await open_store(server.url, prefix="bench")
            assert isinstance(store, RedisStore)
            names = [f"campaign-{i:05d}" for i in range(campaigns)]
            for name in names:
                await store.register(name, DAY, blob)
            times: dict[str, list[float]] = {"checked": [], "unchecked": []}
            slot = 0
            for round_ in range(repeats + 1):  # the first round warms the connections and the script cache
                for arm in ("checked", "unchecked") if round_ % 2 else ("unchecked", "checked"):  # ABBA: no drift bias
                    expected = blob if arm == "checked" else None
                    items = [(name, DAY, slot, blob, expected) for name in names]
                    started = time.perf_counter()
                    results = await store.compare_and_set_many(items)
                    elapsed = time.perf_counter() - started
                    if any(r is not None for r in results):
                        raise SystemExit(f"error: {sum(r is not None for r in results)} writes did not apply")
                    times[arm].append(elapsed)
                    slot += 1
            started = time.perf_counter()
            for _ in range(campaigns):
                hashlib.sha1(blob, usedforsecurity=False).hexdigest()
            python_sha1 = time.perf_counter() - started
            await store.aclose()
        finally:
            server.stop()
    checked, unchecked = (statistics.median(times[arm][1:]) for arm in ("checked", "unchecked"))
    print(f"{'arm':<10} {'median s':>9} {'per write us':>13}   all repeats (s)")
    for arm, median in (("checked", checked), ("unchecked", unchecked)):
        spread = " ".join(f"{t:.3f}" for t in times[arm][1:])
        print(f"{arm:<10} {median:>9.3f} {1e6 * median / campaigns:>13.1f}   {spread}")
    print(f"checked / unchecked: {checked / unchecked:.3f}x (+{1e3 * (checked - unchecked):.0f} ms a boundary)")
    print(f"of which the SHA-1s in Python: {1e3 * python_sha1:.1f} ms ({1e6 * python_sha1 / campaigns:.2f} us each)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--campaigns", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    asyncio.run(run(args.campaigns, args.repeats))


if __name__ == "__main__":
    main()
