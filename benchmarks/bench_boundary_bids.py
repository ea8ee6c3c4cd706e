"""Bids during a slot boundary: this tree's service against a baseline revision's (or against itself with a setting
changed), ABBA, in one run.

One ``redis-server`` holds ``--campaigns`` campaigns at slot 47 (a few advanced through the API, cloned under more
ids). Each arm is a fresh uvicorn (one worker, pinned to CPU 0 with Redis) serving ``models/default`` from its own
tree: this checkout, or a ``git worktree`` of ``--baseline``. Per run, the campaigns are put back at slot 47 and the
``mixed`` scenario of ``loadtest.scenarios`` runs from CPU 1: binary bids of 1,000 utilities at ``--bid-rate``
per second over all campaigns, the boundary in batches of 1,000 over 4 connections from a third of the way in. The
bids outlast the boundary by a margin measured on a first run, so every run has bids outside it.

    .venv/bin/python benchmarks/bench_boundary_bids.py --baseline HEAD~1
    .venv/bin/python benchmarks/bench_boundary_bids.py --with-env RCB_ONNX_THREADS=2   # this tree, a setting changed

Prints each run and the medians per arm: bid p99 during / outside the boundary and their ratio, boundary wall time.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bench_service import (  # noqa: E402
    CLIENT_CPU,
    LAST_SLOT,
    MODEL_DIR,
    SERVER_CPU,
    boundary_under_bids,
    clone,
    loadavg,
    post_batches,
    redis_single,
    restore,
    snapshot,
)
from benchmarks.machine import describe_machine  # noqa: E402
from benchmarks.timing import abba, compared_arms, medians  # noqa: E402
from loadtest.run_server import ServerProcess, free_port, pin_current_process, start_process  # noqa: E402
from loadtest.scenarios import campaign_ids, setup_campaigns  # noqa: E402

SEEDED = 200
"""Campaigns advanced to slot 47 through the API; the rest are clones of their stored states."""


def serve(tree: Path, redis_url: str, extra_env: dict[str, str] | None = None) -> ServerProcess:
    port = free_port()
    cmd = [sys.executable, "-m", "uvicorn", "service.main:create_app", "--factory", "--host", "127.0.0.1"]
    cmd += ["--port", str(port), "--loop", "uvloop", "--http", "httptools", "--no-access-log", "--log-level", "warning"]
    env = {"RCB_MODEL_DIR": str(MODEL_DIR), "RCB_STORE": redis_url, "RCB_LOG_LEVEL": "WARNING", "PYTHONPATH": str(tree)}
    env |= extra_env or {}
    return start_process(cmd, port, cpu=SERVER_CPU, ready_path="/readyz", env=env, cwd=tree, ready_timeout=60)


def mixed(url: str, campaigns: int, bid_rate: float, duration: float) -> dict:
    sm = boundary_under_bids(url, campaigns, bid_rate, duration, timeout=60.0, drain_timeout=60.0)
    during, outside = sm["bid_during_burst"]["latency_ms"], sm["bid_outside_burst"]["latency_ms"]
    window = sm["burst_window_s"]
    return {
        "during_p99": during["p99"],
        "outside_p99": outside["p99"],
        "ratio": (during["p99"] / outside["p99"]) if during["p99"] and outside["p99"] else float("nan"),
        "boundary_s": window[1] - window[0],
        "bid_errors": sm["streams"]["bid"]["errors"],
        "burst_errors": sm["streams"]["burst"]["errors"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--baseline", help="the git revision to compare with (a worktree of it)")
    which.add_argument("--with-env", help="KEY=VALUE: compare this tree with it set against this tree without it")
    parser.add_argument("--campaigns", type=int, default=4000)
    parser.add_argument("--bid-rate", type=float, default=1000.0)
    parser.add_argument("--rounds", type=int, default=2, help="ABBA rounds (each runs both arms twice)")
    args = parser.parse_args()
    machine = describe_machine()  # before pinning: it counts the cores this process may use
    pin_current_process(CLIENT_CPU)
    print(f"machine: {machine}; load average at start: {loadavg()}", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="bench-boundary-"))
    if args.with_env is not None and "=" not in args.with_env:
        parser.error("--with-env takes KEY=VALUE")
    with compared_arms(ROOT, args.baseline, args.with_env) as (label, trees), redis_single(tmp) as redis_server:
        if args.with_env:
            print(f"arms: this tree as it is, and with {args.with_env}", flush=True)
        client = redis_server.client(10.0)
        ids = campaign_ids(args.campaigns, "b")
        with serve(ROOT, redis_server.url) as svc:
            setup_campaigns(svc.url, ids[:SEEDED], rate=2000, timeout=30.0)
            for slot in range(LAST_SLOT):
                post_batches(svc.url, ids[:SEEDED], slot, SEEDED, 1, seed=slot)
        clone(client, ids[:SEEDED], ids[SEEDED:])
        saved = snapshot(client, ids)
        with serve(ROOT, redis_server.url) as svc:  # a first run sizes the bids: past the boundary's end
            restore(client, ids, saved)
            time.sleep(1.2)
            first = mixed(svc.url, args.campaigns, args.bid_rate, 60.0)
            duration = max(9.0, 2.0 * first["boundary_s"] + 6.0)
        print(f"sizing run: boundary {first['boundary_s']:.1f} s under bids; bids run {duration:.0f} s", flush=True)
        rows: dict[str, list[dict]] = {name: [] for name in trees}
        for name in abba(list(trees), args.rounds):
            tree, env = trees[name]
            with serve(tree, redis_server.url, env) as svc:
                restore(client, ids, saved)
                time.sleep(1.2)  # past the ratio cache's TTL, like a real boundary
                row = mixed(svc.url, args.campaigns, args.bid_rate, duration)
            rows[name].append(row)
            print(
                f"  {name:18s} bid p99 during {row['during_p99']:.2f} ms, outside {row['outside_p99']:.2f} ms "
                f"({row['ratio']:.1f}x); boundary {row['boundary_s']:.1f} s; errors bid {row['bid_errors']} "
                f"burst {row['burst_errors']}  (load {loadavg()})",
                flush=True,
            )
        client.close()
    print("\n| arm | bid p99 during (median) | outside | during / outside | boundary under bids |")
    print("|:---|---:|---:|---:|---:|")
    med = medians(rows)
    for name, m in med.items():
        print(
            f"| {name} | {m['during_p99']:.2f} ms | {m['outside_p99']:.2f} ms | {m['ratio']:.1f}x | "
            f"{m['boundary_s']:.1f} s |"
        )
    base, this = med[label], med["this tree"]
    print(
        f"\nthis tree / baseline: bid p99 during the boundary {this['during_p99'] / base['during_p99']:.2f}x, "
        f"boundary wall {this['boundary_s'] / base['boundary_s']:.2f}x"
    )


if __name__ == "__main__":
    main()
