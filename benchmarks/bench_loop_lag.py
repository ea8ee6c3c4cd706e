"""How long a slot batch keeps bids waiting on the event loop: this tree against a baseline revision's, ABBA.

A bid is answered on the event loop, so while a slot batch's Python work holds the loop a bid waits. Each arm runs
in a child process of its own tree (this checkout, or a ``git worktree`` of ``--baseline``): the service app in
process (memory store, ``models/default``, its lifespan), ``--campaigns`` campaigns registered and advanced to slot
47, then the slot-47 batch posted through ``httpx.ASGITransport`` with the ratio cache told that bids flow (the
batch then works in its small spans) while a probe coroutine asks for the loop every 0.5 ms and records how late
it got it: the wait a bid arriving at that moment would have had before its own work. No network and no load
generator, so the figure is the service's own, less exposed to a noisy VM than an HTTP run (``bench_service.py``).

    .venv/bin/python benchmarks/bench_loop_lag.py --baseline HEAD~1
    .venv/bin/python benchmarks/bench_loop_lag.py --with-env RCB_ONNX_THREADS=2   # this tree, a setting changed

Prints each run and, per arm, the medians over runs of the probe's p99 and max lateness and of the batch's wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROBE_S = 0.0005


async def child(campaigns: int, model_dir: str) -> dict:
    import httpx
    import numpy as np
    import orjson

    from service.config import Settings
    from service.main import create_app

    app = create_app(Settings(model_dir=model_dir, store="memory", log_level="WARNING"))
    rng = random.Random(0)
    ids = [f"b{i:06d}" for i in range(campaigns)]

    def batch(slot: int) -> bytes:
        stats = {"wins": 10, "auctions": 100}
        updates = [
            {
                "campaign_id": c,
                "episode": "e1",
                "slot": slot,
                "delivery": rng.uniform(0, 20),
                "cost": rng.uniform(0, 15),
            }
            | stats
            for c in ids
        ]
        return orjson.dumps({"updates": updates})

    headers = {"content-type": "application/json"}
    transport = httpx.ASGITransport(app=app)
    async with app.router.lifespan_context(app), httpx.AsyncClient(transport=transport, base_url="http://b") as client:
        for c in ids:
            registration = {"episode": "e1", "roi_target": 1.0, "budget": None}
            assert (await client.put(f"/v1/campaigns/{c}", json=registration)).status_code in (200, 201)
        for slot in range(47):
            assert (await client.post("/v1/slot-update/batch", content=batch(slot), headers=headers)).is_success
        body = batch(47)
        app.state.cache.bids_flowing = lambda: True  # the spans a batch uses while bids flow
        late: list[float] = []
        done = asyncio.Event()
        loop = asyncio.get_running_loop()

        async def probe() -> None:
            while not done.is_set():
                asked = loop.time()
                await asyncio.sleep(PROBE_S)
                late.append(loop.time() - asked - PROBE_S)

        task = asyncio.create_task(probe())
        started = time.perf_counter()
        answer = await client.post("/v1/slot-update/batch", content=body, headers=headers)
        wall = time.perf_counter() - started
        done.set()
        await task
    assert answer.is_success and all(r["status"] == 200 for r in answer.json()["results"])
    lateness = np.asarray(late) * 1e3
    return {
        "p99_ms": float(np.percentile(lateness, 99)),
        "max_ms": float(lateness.max()),
        "over_2ms": int((lateness > 2.0).sum()),
        "probes": int(lateness.size),
        "wall_s": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", help="the git revision to compare with (a worktree of it)")
    parser.add_argument("--with-env", help="KEY=VALUE: compare this tree with it set against this tree without it")
    parser.add_argument("--campaigns", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=2, help="ABBA rounds (each runs both arms twice)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(child(args.campaigns, str(ROOT / "models" / "default")))))
        return
    if bool(args.baseline) == bool(args.with_env) or (args.with_env and "=" not in args.with_env):
        parser.error("give --baseline REV or --with-env KEY=VALUE (one of them)")
    sys.path.insert(0, str(ROOT))
    from benchmarks.machine import describe_machine

    print(f"machine: {describe_machine()}; load average at start: {os.getloadavg()}", flush=True)
    from benchmarks.timing import abba, compared_arms, medians, run_in_tree

    with compared_arms(ROOT, args.baseline, args.with_env) as (label, trees):
        rows: dict[str, list[dict]] = {name: [] for name in trees}
        for name in abba(list(trees), args.rounds):
            tree, env = trees[name]
            row = run_in_tree(Path(__file__), tree, ["--campaigns", str(args.campaigns)], env)
            rows[name].append(row)
            print(
                f"  {name:18s} probe lateness p99 {row['p99_ms']:.2f} ms, max {row['max_ms']:.2f} ms, over 2 ms "
                f"{row['over_2ms']} of {row['probes']}; batch {row['wall_s']:.2f} s  (load {os.getloadavg()[0]:.2f})",
                flush=True,
            )
    print(f"\n{args.campaigns} campaigns at slot 47, medians over {2 * args.rounds} runs per arm:\n")
    print("| arm | probe lateness p99 | max | probes over 2 ms | batch wall |")
    print("|:---|---:|---:|---:|---:|")
    med = medians(rows)
    for name, m in med.items():
        print(f"| {name} | {m['p99_ms']:.2f} ms | {m['max_ms']:.2f} ms | {m['over_2ms']:.0f} | {m['wall_s']:.2f} s |")
    base, this = med[label], med["this tree"]
    print(
        f"\nthis tree / baseline: lateness p99 {this['p99_ms'] / base['p99_ms']:.2f}x, max "
        f"{this['max_ms'] / base['max_ms']:.2f}x, batch wall {this['wall_s'] / base['wall_s']:.2f}x"
    )


if __name__ == "__main__":
    main()
