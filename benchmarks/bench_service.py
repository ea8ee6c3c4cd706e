"""The bidding service over HTTP: capacity and latency against the bare floor, stores, workers, slot boundaries.

    .venv/bin/python benchmarks/bench_service.py            # ~10 minutes
    .venv/bin/python benchmarks/bench_service.py --quick    # ~4 minutes, fewer repeats and 2,000 campaigns in (5)
    .venv/bin/python benchmarks/bench_service.py --only 45 --model DIR   # slot updates only, another model

Every server is pinned to CPU 0 (with its redis-server processes), the open-loop generator (``loadtest``) to CPU 1.
Capacity = the highest rate (requests/s) whose run has no error, p99 <= 50 ms and a throughput >= 97% of the rate:
a coarse x1.25 ladder, then bisection between the last passing and the first failing rate. Floor and service are
measured alternately in the same run; each figure is the median over the repeats, each ratio the median of the
per-repeat ratios.

1. JSON ``/v1/bid``, 1,000 utilities: floor vs service (memory store); service p99 at half its capacity.
2. Binary ``/v1/bid`` (float32, 1,000 utilities): the same.
3. Binary bids: service with memory, Redis, a 3-master Redis Cluster (one uvicorn worker each), and ``rcb serve
   --workers 1/2`` on Redis (2 workers on CPU 0 alone, and on both CPUs, sharing CPU 1 with the generator).
4-5. Slot updates through Redis, the incremental posterior as served beside the full recompute
   (``RCB_BELIEF_CACHE=0``) in the same run: single ``POST /v1/slot-update`` at 100/s at slots 1 and 47 (p50/p99),
   a 10,000-campaign boundary through the batch endpoint (chunks of 1,000 over 4 connections; wall time) at every
   slot of the walk (incremental) and at slots 1 and 47 (full), and the ``mixed`` scenario (bid p99 during the
   burst vs outside it).

For each measurement the background training (``rcb train``) is paused (SIGSTOP) and resumed after, also on
errors (a watchdog process resumes it if this script is killed); a running pytest is waited for first.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import orjson  # noqa: E402
import redis  # noqa: E402

from benchmarks.machine import describe_machine  # noqa: E402
from loadtest.openloop import Stream, run_open_loop, summarize  # noqa: E402
from loadtest.run_server import (  # noqa: E402
    ServerProcess,
    free_port,
    pin_current_process,
    start_nullserver,
    start_process,
    start_uvicorn,
)
from loadtest.scenarios import (  # noqa: E402
    Target,
    campaign_ids,
    run_scenario,
    setup_campaigns,
    slot_batch_requests,
    slot_update_requests,
    slot_updates,
)
from model.artifact import ArtifactError, load_artifact  # noqa: E402
from model.state import CampaignState  # noqa: E402
from tests.serving.redis_servers import RedisClusterProcs, RedisServer  # noqa: E402

TRAIN = "rcb trai[n]"  # a regex: matches the training's command line, never a shell that names the pattern
PYTEST = "[p]ytest"
SLO_P99_MS = 50.0
MIN_ACHIEVED = 0.97
SERVER_CPU, CLIENT_CPU = 0, 1
REDIS_CPU = int(os.environ.get("BENCH_REDIS_CPU", SERVER_CPU))
MODEL_DIR = ROOT / "models" / "default"
LAST_SLOT = 47
MIXED_SLOT = 46
"""The incremental walk measures the bids across this boundary (its campaigns cannot be put back a slot)."""
T = TypeVar("T")

ROWS: list[tuple[str, str, str, str]] = []  # (measure, figure, target, load averages)


def loadavg() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def log(msg: str) -> None:
    print(msg, flush=True)


# -- the background training: paused during every measurement ---------------------------------------------------


def wait_for_pytest(limit_s: float = 600.0) -> None:
    deadline = time.monotonic() + limit_s
    waited = False
    while time.monotonic() < deadline:
        if subprocess.run(["pgrep", "-f", PYTEST], capture_output=True).returncode != 0:
            if waited:
                log(f"  (pytest finished; load {loadavg()})")
            return
        if not waited:
            log("  waiting for a running pytest to finish (at most 10 minutes)...")
            waited = True
        time.sleep(5)
    log("  pytest still running after 10 minutes: measuring anyway (see the load averages)")


class Quiet:
    """What happened around one measurement: the load average before it, and whether a pytest ran during it."""

    def __init__(self) -> None:
        self.load = loadavg()
        self.pytest_seen = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        for _ in range(3600):  # bounded: one pgrep a second, at most an hour
            if self._stop.wait(1.0):
                return
            if subprocess.run(["pgrep", "-f", PYTEST], capture_output=True).returncode == 0:
                self.pytest_seen = True

    def note(self) -> str:
        return f"load {self.load}" + ("; a pytest ran during it" if self.pytest_seen else "")


@contextlib.contextmanager
def training_paused() -> Iterator[Quiet]:
    """Wait for a running pytest, pause the training, yield; resume the training whatever happens."""
    wait_for_pytest()
    subprocess.run(["pkill", "-STOP", "-f", TRAIN], capture_output=True)
    try:
        time.sleep(1.0)  # let the load settle a little
        quiet = Quiet()
        quiet._thread.start()
        try:
            yield quiet
        finally:
            quiet._stop.set()
    finally:
        subprocess.run(["pkill", "-CONT", "-f", TRAIN], capture_output=True)


def measured(fn: Callable[[], T], retries: int = 1) -> tuple[T, Quiet]:
    """``fn()`` with the training paused; run again (once) if a pytest ran meanwhile. Returns (result, Quiet)."""
    for attempt in range(retries + 1):
        with training_paused() as quiet:
            result = fn()
        if not quiet.pytest_seen or attempt == retries:
            return result, quiet
        log(f"  (a pytest ran during that measurement: measuring again; {quiet.note()})")
    raise AssertionError("unreachable")


def start_watchdog() -> subprocess.Popen:
    """Resumes the training if this process dies without its finally blocks (SIGKILL); bounded to 2 hours."""
    script = (
        f"i=0; while kill -0 {os.getpid()} 2>/dev/null && [ $i -lt 7200 ]; do sleep 1; i=$((i+1)); done; "
        f"pkill -CONT -f '{TRAIN}'"
    )
    return subprocess.Popen(["sh", "-c", script], start_new_session=True)


# -- servers -----------------------------------------------------------------------------------------------------


def service_env(store: str) -> dict[str, str]:
    return {"RCB_MODEL_DIR": str(MODEL_DIR), "RCB_STORE": store, "RCB_LOG_LEVEL": "WARNING"}


def start_floor() -> ServerProcess:
    return start_uvicorn("loadtest.floor:create_floor_app", cpu=SERVER_CPU, ready_path="/healthz")


def start_service(store: str = "memory", env: dict[str, str] | None = None) -> ServerProcess:
    full_env = {**service_env(store), **(env or {})}
    return start_uvicorn("service.main:create_app", cpu=SERVER_CPU, ready_path="/readyz", env=full_env)


def start_rcb_serve(store: str, workers: int, cpu: int | None) -> ServerProcess:
    port = free_port()
    rcb = str(Path(sys.executable).parent / "rcb")
    cmd = [rcb, "serve", "--store", store, "--workers", str(workers), "--port", str(port), "--log-level", "warning"]
    return start_process(
        cmd, port, cpu=cpu, ready_path="/readyz", env=service_env(store), ready_timeout=60, workers=workers
    )


def pin(pid: int, cpu: int) -> None:
    with contextlib.suppress(OSError):
        os.sched_setaffinity(pid, {cpu})


# -- capacity ------------------------------------------------------------------------------------------------------


def step(scenario: str, url: str, rate: float, duration: float, campaigns: int, prefix: str = "c") -> dict:
    res = run_scenario(
        scenario,
        url,
        rate=rate,
        duration=duration,
        campaigns=campaigns,
        campaign_prefix=prefix,
        setup=False,
        timeout=2.0,
        drain_timeout=2.0,
    )
    s = res.summary["streams"]["bid"]
    p99 = s["latency_ms"]["p99"]
    ok = s["errors"] == 0 and p99 is not None and p99 <= SLO_P99_MS and (s["throughput"] or 0) >= MIN_ACHIEVED * rate
    return {"rate": rate, "passed": ok, "p50": s["latency_ms"]["p50"], "p99": p99, "errors": s["errors"]}


LADDER_STEPS = 24
"""At most this many x1.25 steps from the guess (x211): a floor faster than every earlier one still gets bracketed."""


def capacity(
    scenario: str, url: str, guess: float, duration: float, campaigns: int = 1000, bisect: int = 2, prefix: str = "c"
) -> float:
    """Highest passing rate: x1.25 up (or /1.25 down) from ``guess`` to a pass/fail pair, then ``bisect`` steps."""
    lo = hi = None
    rate = guess
    for _ in range(LADDER_STEPS):
        r = step(scenario, url, rate, duration, campaigns, prefix)
        if r["passed"]:
            lo = rate
            if hi is not None:
                break
            rate = rate * 1.25
        else:
            hi = rate
            time.sleep(0.5)  # let a saturated server drain its queue
            if lo is not None:
                break
            rate = rate / 1.25
        if rate < 50:
            return 0.0
    if lo is None or hi is None:  # the ladder never bracketed the capacity (every step passed, or failed)
        raise RuntimeError(f"{scenario} at {url}: no capacity bracketed from {guess:,.0f}/s (last step {rate:,.0f}/s)")
    for _ in range(bisect):
        mid = math.sqrt(lo * hi)
        r = step(scenario, url, mid, duration, campaigns, prefix)
        if r["passed"]:
            lo = mid
        else:
            hi = mid
            time.sleep(0.5)
    return round(lo)


def p99_at(scenario: str, url: str, rate: float, duration: float, campaigns: int = 1000) -> dict:
    res = run_scenario(scenario, url, rate=rate, duration=duration, campaigns=campaigns, setup=False)
    s = res.summary["streams"]["bid"]
    lag = s["send_lag_ms"]["p99"]
    return {"p50": s["latency_ms"]["p50"], "p99": s["latency_ms"]["p99"], "errors": s["errors"], "lag_p99": lag}


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def floor_vs_service(scenario: str, label: str, guess: float, reps: int, duration: float, half_s: float) -> dict:
    log(f"\n== {label}: floor vs service (memory store), {reps} alternating repeats ==")
    loads: list[str] = []
    # The generator's own ceiling on this scenario, in the same run: a floor near it measures the generator, and
    # the service/floor ratio is then a lower bound. The null server answers at once with 2 bytes, so the ceiling
    # leaves out the client's cost of reading a bid's answer: an upper estimate.
    with start_nullserver(cpu=SERVER_CPU) as null:
        ceiling, quiet = measured(lambda: capacity(scenario, null.url, guess, duration))
    log(f"  the generator's ceiling (loadtest.nullserver): {ceiling:,.0f}/s  ({quiet.note()})")
    with start_floor() as floor, start_service("memory") as svc:
        for server in (floor, svc):
            setup_campaigns(server.url, campaign_ids(1000))
        caps: dict[str, list[float]] = {"floor": [], "service": []}
        guesses = {"floor": guess, "service": guess}
        ratios = []
        for rep in range(reps):
            order = [("floor", floor), ("service", svc)]
            if rep % 2:
                order.reverse()

            def pair(order=order) -> dict[str, float]:
                return {name: capacity(scenario, server.url, guesses[name], duration) for name, server in order}

            got, quiet = measured(pair)
            loads.append(quiet.load)
            for name, cap in got.items():
                caps[name].append(cap)
                guesses[name] = max(0.85 * cap, 50.0)  # capacity() answers 0 below 50/s; the next search starts there
            if got["floor"] <= 0:
                raise RuntimeError(
                    "the floor sustained no rate: the generator or the machine is the limit, not the app"
                )
            ratios.append(got["service"] / got["floor"])
            log(
                f"  rep {rep + 1}: floor {got['floor']:,.0f}/s, service {got['service']:,.0f}/s, "
                f"service/floor {ratios[-1]:.2f}  ({quiet.note()})"
            )
        cap_svc = med(caps["service"])
        half = cap_svc / 2
        halves: dict[str, list[dict]] = {"floor": [], "service": []}
        for _ in range(max(reps, 2)):

            def both() -> dict[str, dict]:
                return {
                    name: p99_at(scenario, server.url, half, half_s)
                    for name, server in (("floor", floor), ("service", svc))
                }

            got, quiet = measured(both)
            loads.append(quiet.load)
            for name, h in got.items():
                halves[name].append(h)
                log(
                    f"  at {half:,.0f}/s (half the service's capacity): {name:7s} p50 {h['p50']:.2f} ms, "
                    f"p99 {h['p99']:.2f} ms, send-lag p99 {h['lag_p99']:.2f} ms, errors {h['errors']}  ({quiet.note()})"
                )
    out = {
        "ceiling": ceiling,
        "floor": med(caps["floor"]),
        "service": cap_svc,
        "ratio": med(ratios),
        "floor_all": caps["floor"],
        "service_all": caps["service"],
        "ratios": ratios,
        "half_rate": half,
        "half_p99": med([h["p99"] for h in halves["service"]]),
        "half_p50": med([h["p50"] for h in halves["service"]]),
        "half_p99_floor": med([h["p99"] for h in halves["floor"]]),
        "half_errors": sum(h["errors"] for h in halves["service"]),
        "load": load_range(loads),
    }
    log(
        f"  median: floor {out['floor']:,.0f}/s, service {cap_svc:,.0f}/s, service/floor {out['ratio']:.2f}; "
        f"p99 at {half:,.0f}/s: service {out['half_p99']:.2f} ms, floor {out['half_p99_floor']:.2f} ms"
    )
    return out


def load_range(loads: list[str]) -> str:
    ones = sorted(float(x.split("/")[0]) for x in loads)
    return f"{ones[0]:.2f}-{ones[-1]:.2f}" if ones else ""


# -- stores and workers ----------------------------------------------------------------------------------------------


@contextlib.contextmanager
def redis_single(tmp: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp / "redis").start()
    pin(server.pid, REDIS_CPU)
    try:
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def redis_cluster(tmp: Path) -> Iterator[RedisClusterProcs]:
    cluster = RedisClusterProcs(tmp / "cluster")
    try:
        cluster.start()
        for s in cluster.servers:
            pin(s.pid, REDIS_CPU)
        yield cluster
    finally:
        cluster.stop()


def stores_and_workers(guess: float, reps: int, duration: float, tmp: Path) -> dict:
    log(f"\n== binary bids: memory vs Redis vs Redis Cluster; rcb serve 1 vs 2 workers (Redis); {reps} repeats ==")
    configs = ["memory", "redis", "cluster", "serve-1w", "serve-2w-cpu0", "serve-2w-both"]
    caps: dict[str, list[float]] = {c: [] for c in configs}
    loads: list[str] = []
    with redis_single(tmp) as single, redis_cluster(tmp) as cluster:
        g = dict.fromkeys(configs, guess)
        for rep in range(reps):
            for config in configs:
                if config == "memory":
                    server = start_service("memory")
                elif config == "redis":
                    server = start_service(single.url)
                elif config == "cluster":
                    server = start_service(cluster.url)
                elif config == "serve-1w":
                    server = start_rcb_serve(single.url, 1, SERVER_CPU)
                elif config == "serve-2w-cpu0":
                    server = start_rcb_serve(single.url, 2, SERVER_CPU)
                else:
                    server = start_rcb_serve(single.url, 2, None)
                with server:
                    prefix = f"r{rep}{config.replace('-', '')}c"
                    setup_campaigns(server.url, campaign_ids(1000, prefix))
                    # warm every worker's ratio cache and connections
                    run_scenario("bid-binary", server.url, rate=500, duration=1, campaign_prefix=prefix, setup=False)
                    cap, quiet = measured(
                        lambda: capacity("bid-binary", server.url, g[config], duration, bisect=1, prefix=prefix)  # noqa: B023
                    )
                caps[config].append(cap)
                loads.append(quiet.load)
                g[config] = 0.85 * cap
                log(f"  rep {rep + 1}: {config:14s} capacity {cap:,.0f}/s  ({quiet.note()})")
    out = {c: med(v) for c, v in caps.items()}
    out["all"] = caps
    out["load"] = load_range(loads)
    return out


# -- slot updates at slot 47 -------------------------------------------------------------------------------------------


def post_batches(url: str, ids: list[str], slot: int, chunk: int, connections: int, seed: int) -> dict:
    """Every campaign's update of ``slot`` through /v1/slot-update/batch in chunks of ``chunk``, all sent at once
    over ``connections`` connections; the summary plus the wall time (first send -> last response)."""
    reqs = slot_batch_requests(Target.from_url(url), slot_updates(ids, "e1", slot, seed), chunk)
    streams = [Stream("batch", reqs, 1e6, len(reqs), connections=connections)]
    run = run_open_loop(url, streams, timeout=60.0, drain_timeout=60.0)  # a slow boundary is measured, not cut
    s = summarize(run.streams["batch"])
    s["wall_s"] = (s["last_response_s"] or float("nan")) - s["first_intended_s"]
    if s["errors"]:
        raise RuntimeError(f"slot {slot} batch failed: {s['error_counts']}")
    return s


def snapshot(client: redis.Redis, ids: list[str]) -> list[list]:
    pipe = client.pipeline(transaction=False)
    for c in ids:
        pipe.hmget(f"rcb:{{{c}}}", "e", "s", "b")
    return pipe.execute()


def clone(client: redis.Redis, sources: list[str], targets: list[str]) -> None:
    """Store ``targets[k]`` as a copy of ``sources[k % len(sources)]``'s state, re-encoded with its own campaign id
    (registering and advancing 10,000 campaigns through 47 slots over HTTP would take minutes)."""
    if not targets:
        return
    saved = snapshot(client, sources)
    pipe = client.pipeline(transaction=False)
    for k, c in enumerate(targets):
        e, s, b = saved[k % len(sources)]
        blob = dataclasses.replace(CampaignState.from_bytes(b), campaign=c).to_bytes()
        pipe.hset(f"rcb:{{{c}}}", mapping={"e": e, "s": s, "b": blob})
    pipe.execute()


def restore(client: redis.Redis, ids: list[str], saved: list[list]) -> None:
    """Put the campaigns back at their snapshot (slot 47 not applied), so each variant applies the same boundary."""
    pipe = client.pipeline(transaction=False)
    for c, (e, s, b) in zip(ids, saved, strict=True):
        pipe.hset(f"rcb:{{{c}}}", mapping={"e": e, "s": s, "b": b})
    pipe.execute()


def boundary_under_bids(
    url: str,
    campaigns: int,
    bid_rate: float,
    duration: float,
    slot: int = LAST_SLOT,
    timeout: float = 30.0,
    drain_timeout: float = 10.0,
) -> dict:
    """The ``mixed`` scenario at ``slot`` over campaigns ``b...`` already there: binary bids of 1,000 utilities at
    ``bid_rate`` for ``duration`` s, the boundary in batches of 1,000 over 4 connections; its summary."""
    return run_scenario(
        "mixed",
        url,
        rate=bid_rate,
        duration=duration,
        campaigns=campaigns,
        campaign_prefix="b",
        slot=slot,
        batch_size=1000,
        burst_rate=100.0,
        burst_connections=4,
        setup=False,
        timeout=timeout,
        drain_timeout=drain_timeout,
        seed=slot,
    ).summary


def single_updates(url: str, ids: list[str], slot: int) -> dict:
    """One ``POST /v1/slot-update`` of ``slot`` per campaign at 100/s: p50/p99/max and errors."""
    reqs = slot_update_requests(Target.from_url(url), slot_updates(ids, "e1", slot, slot))
    run = run_open_loop(url, [Stream("single", reqs, 100.0, len(reqs), connections=8)], timeout=10.0)
    s = summarize(run.streams["single"])
    lat = s["latency_ms"]
    return {"p50": lat["p50"], "p99": lat["p99"], "max": lat["max"], "errors": s["errors"]}


def measured_singles(url: str, ids: list[str], slot: int, loads: list[str]) -> dict:
    """:func:`single_updates` with the training paused, logged; its load average appended to ``loads``. Once only:
    the campaigns are a slot further after it."""
    sg, quiet = measured(lambda: single_updates(url, ids, slot), retries=0)
    loads.append(quiet.load)
    log(
        f"  slot {slot}: single updates at 100/s: p50 {sg['p50']:.2f} ms, p99 {sg['p99']:.2f} ms, "
        f"max {sg['max']:.2f} ms, errors {sg['errors']}  ({quiet.note()})"
    )
    return sg


def mixed_row(sm: dict) -> dict:
    """The bid latency during and outside the boundary burst of one ``mixed`` run, and its ratio."""
    burst = sm["streams"]["burst"]
    row = {
        "during_p99": sm["bid_during_burst"]["latency_ms"]["p99"],
        "outside_p99": sm["bid_outside_burst"]["latency_ms"]["p99"],
        "during_p50": sm["bid_during_burst"]["latency_ms"]["p50"],
        "outside_p50": sm["bid_outside_burst"]["latency_ms"]["p50"],
        "bid_errors": sm["streams"]["bid"]["errors"],
        "burst_errors": burst["errors"],
        "burst_wall_s": burst["burst_wall_s"],
    }
    kinds = {"bid": sm["streams"]["bid"].get("error_counts"), "burst": burst.get("error_counts")}
    if any(kinds.values()):
        log(f"    errors by kind: {kinds}")
    if row["during_p99"] is None or row["outside_p99"] is None:
        raise RuntimeError("the mixed scenario had no bid during or outside the burst; lengthen the bids")
    row["ratio"] = row["during_p99"] / row["outside_p99"]
    return row


def log_mixed(label: str, row: dict, bid_rate: float, quiet: Quiet) -> None:
    log(
        f"  {label}: mixed, bids {bid_rate:,.0f}/s: p99 during the burst {row['during_p99']:.2f} ms vs "
        f"outside {row['outside_p99']:.2f} ms ({row['ratio']:.1f}x; p50 {row['during_p50']:.2f} vs "
        f"{row['outside_p50']:.2f} ms); burst wall {row['burst_wall_s']:.2f} s; errors bid "
        f"{row['bid_errors']} burst {row['burst_errors']}  ({quiet.note()})"
    )


def incremental_walk(n_single: int, n_boundary: int, bid_rate: float, tmp: Path) -> dict:
    """The service as it runs (each process's belief cache holding every campaign): every campaign registered and
    advanced through the API a slot at a time, each boundary of the ``b`` campaigns timed (batches of 1,000 over 4
    connections), the ``s`` campaigns' single updates timed at slots 1 and 47, the bids across the slot-46
    boundary measured (the ``mixed`` scenario). A campaign's belief is its own day's: no state can be cloned."""
    log(
        f"\n== incremental posterior through Redis: {n_boundary:,} campaigns advanced slot by slot (batches of 1,000 "
        f"x 4 connections), {n_single:,} single updates at 100/s at slots 1 and 47 =="
    )
    out: dict = {"walls": {}, "single": {}}
    loads: list[str] = []
    env = {"RCB_BELIEF_CACHE": str(n_single + n_boundary)}
    with redis_single(tmp) as single, start_service(single.url, env) as svc:
        url = svc.url
        ids_single, ids_boundary = campaign_ids(n_single, "s"), campaign_ids(n_boundary, "b")
        started = time.perf_counter()
        setup_campaigns(url, ids_single + ids_boundary, rate=1500, timeout=60.0)
        log(f"  registered {n_single + n_boundary:,} campaigns in {time.perf_counter() - started:.1f} s")
        for slot in range(LAST_SLOT + 1):
            if slot in (1, LAST_SLOT):
                out["single"][slot] = measured_singles(url, ids_single, slot, loads)
            else:
                post_batches(url, ids_single, slot, 1000, 2, seed=slot)
            if slot == MIXED_SLOT:
                duration = max(9.0, 1.5 * max(out["walls"].values()) + 4.0)
                sm, quiet = measured(
                    lambda d=duration, s_=slot: boundary_under_bids(url, n_boundary, bid_rate, d, s_), retries=0
                )
                out["mixed"] = mixed_row(sm)
                log_mixed(f"slot {slot}", out["mixed"], bid_rate, quiet)
                continue
            s, quiet = measured(lambda slot=slot: post_batches(url, ids_boundary, slot, 1000, 4, seed=slot), 0)
            out["walls"][slot] = s["wall_s"]
            loads.append(quiet.load)
            if slot in (0, 1, 2, 3, 4) or slot % 8 == 0 or slot >= LAST_SLOT - 4:
                log(f"  slot {slot}: boundary {s['wall_s']:.2f} s  ({quiet.note()})")
    walls = out["walls"]
    out["early"] = med([walls[s] for s in range(1, 5)])
    out["late"] = med([walls[s] for s in range(LAST_SLOT - 4, LAST_SLOT + 1) if s in walls])
    out["load"] = load_range(loads)
    return out


def full_recompute(n_single: int, n_boundary: int, bid_rate: float, reps: int, tmp: Path) -> dict:
    """The full pass beside it (``RCB_BELIEF_CACHE=0``: every update encodes its campaign's whole day), which needs
    no cache, so 1,000 campaigns advanced through the API seed the rest (their stored states cloned) and each
    repeat puts the stored states back before the boundary: slots 1 and 47, and the bids across slot 47."""
    log(f"\n== full recompute through Redis (RCB_BELIEF_CACHE=0): slots 1 and 47, {n_boundary:,} campaigns ==")
    out: dict = {"walls": {}, "single": {}}
    loads: list[str] = []
    with redis_single(tmp) as single, start_service(single.url, {"RCB_BELIEF_CACHE": "0"}) as svc:
        url = svc.url
        client = single.client(10.0)
        ids_single, ids_boundary = campaign_ids(n_single, "s"), campaign_ids(n_boundary, "b")
        n_seed = min(n_boundary, 1000)
        seeds = ids_boundary[:n_seed]
        setup_campaigns(url, ids_single + seeds, rate=1500, timeout=60.0)
        seeds_at, singles_at = 0, 0  # the next slot each set updates
        for slot in (1, LAST_SLOT):
            for s_ in range(seeds_at, slot):
                post_batches(url, seeds, s_, 2000, 2, seed=s_)
            for s_ in range(singles_at, slot):
                post_batches(url, ids_single, s_, 2000, 2, seed=s_)
            clone(client, seeds, ids_boundary[n_seed:])
            saved = snapshot(client, ids_boundary)
            assert all(int(s_) == slot for _, s_, _ in saved), f"campaigns not at slot {slot}"
            out["single"][slot] = measured_singles(url, ids_single, slot, loads)
            walls = []
            for rep in range(reps):

                def boundary(slot: int = slot, saved: list[list] = saved) -> dict:
                    restore(client, ids_boundary, saved)
                    time.sleep(1.2)  # past the ratio cache's TTL, like a real boundary
                    return post_batches(url, ids_boundary, slot, 1000, 4, seed=slot)

                s, quiet = measured(boundary)
                loads.append(quiet.load)
                walls.append(s["wall_s"])
                log(f"  slot {slot}, rep {rep + 1}: boundary {s['wall_s']:.2f} s  ({quiet.note()})")
            out["walls"][slot] = med(walls)
            if slot == LAST_SLOT:
                duration = max(9.0, 1.5 * out["walls"][slot] + 4.0)

                def mixed_run(saved: list[list] = saved, duration: float = duration) -> dict:
                    restore(client, ids_boundary, saved)
                    time.sleep(1.2)
                    return mixed_row(boundary_under_bids(url, n_boundary, bid_rate, duration, LAST_SLOT))

                out["mixed"], quiet = measured(mixed_run)
                log_mixed(f"slot {LAST_SLOT}", out["mixed"], bid_rate, quiet)
            restore(client, ids_boundary, saved)  # the seeds back at this slot; the singles one past it
            seeds_at, singles_at = slot, slot + 1
        client.close()
    out["load"] = load_range(loads)
    return out


def slot_boundaries(n_single: int, n_boundary: int, bid_rate: float, reps: int, tmp: Path) -> dict:
    """Slot updates through Redis: the incremental posterior as served, the full recompute beside it."""
    return {
        "incremental": incremental_walk(n_single, n_boundary, bid_rate, tmp / "incremental"),
        "full": full_recompute(n_single, n_boundary, bid_rate, reps, tmp / "full"),
    }


# -- main --------------------------------------------------------------------------------------------------------------


def main() -> None:
    global MODEL_DIR  # the servers' environment reads it (service_env)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats, shorter steps, a 2,000-campaign boundary")
    parser.add_argument("--only", default="12345", help="which sections to run (digits 1-5)")
    parser.add_argument("--model", type=Path, default=MODEL_DIR, help="the model the service serves (models/default)")
    args = parser.parse_args()
    MODEL_DIR = args.model.resolve()
    try:  # a bad --model fails here with the loader's message, not later at the servers' readiness check
        load_artifact(MODEL_DIR)
    except ArtifactError as exc:
        parser.error(f"--model {args.model}: {exc}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    watchdog = start_watchdog()
    reps = 2 if args.quick else 3
    duration = 2.0 if args.quick else 2.5
    half_s = 4.0 if args.quick else 6.0
    n_boundary = 2000 if args.quick else 10_000
    machine = describe_machine()  # before pinning: it counts the cores this process may use
    pin_current_process(CLIENT_CPU)
    log(f"machine: {machine}")
    log(f"model: {MODEL_DIR}")
    log(f"load average at start: {loadavg()}; servers (and redis-server) on CPU {SERVER_CPU}, generator on CPU 1")
    tmp = Path(tempfile.mkdtemp(prefix="bench-service-"))
    t_start = time.perf_counter()
    res: dict = {}
    try:
        if "1" in args.only:
            res["json"] = floor_vs_service("bid-json", "JSON /v1/bid, 1,000 utilities", 800, reps, duration, half_s)
        if "2" in args.only:
            res["bin"] = floor_vs_service("bid-binary", "binary /v1/bid, 1,000 float32", 2500, reps, duration, half_s)
        if "3" in args.only:
            guess = 0.9 * res["bin"]["service"] if "bin" in res else 2500
            res["stores"] = stores_and_workers(guess, max(reps - 1, 1), duration, tmp)
        if "4" in args.only or "5" in args.only:
            bid_rate = 1000.0
            res["slots"] = slot_boundaries(1000, n_boundary, bid_rate, max(reps - 1, 1), tmp)
    finally:
        watchdog.terminate()
        subprocess.run(["pkill", "-CONT", "-f", TRAIN], capture_output=True)
    log(f"\ntotal {time.perf_counter() - t_start:.0f} s")
    print_table(res, n_boundary)


def print_table(res: dict, n_boundary: int) -> None:
    rows: list[tuple[str, str, str, str]] = []

    def verdict(ok: bool) -> str:
        return "met" if ok else "**missed**"

    for key, label in (("json", "JSON"), ("bin", "binary")):
        if key not in res:
            continue
        r = res[key]
        near = r["floor"] >= 0.9 * r["ceiling"]  # the floor measured the generator: the ratio is a lower bound
        rows.append((f"{label} /v1/bid: the generator's ceiling (null server)", f"{r['ceiling']:,.0f}/s", "", ""))
        rows.append(
            (
                f"{label} /v1/bid capacity, floor",
                f"{r['floor']:,.0f}/s",
                "at the generator's ceiling: service/floor is a lower bound" if near else "",
                r["load"],
            )
        )
        rows.append((f"{label} /v1/bid capacity, service (memory)", f"{r['service']:,.0f}/s", "", r["load"]))
        if key == "json":
            rows.append(("JSON service / floor", f"{r['ratio']:.2f}", f">= 0.85: {verdict(r['ratio'] >= 0.85)}", ""))
        else:
            rows.append(("binary service / floor", f"{r['ratio']:.2f}", "", ""))
            ok = r["service"] >= 5000
            rows.append(("binary service capacity", f"{r['service']:,.0f}/s", f">= 5,000/s: {verdict(ok)}", ""))
        ok = r["half_p99"] <= 5.0 and r["half_errors"] == 0
        target = f"<= 5 ms: {verdict(ok)}" if key == "json" else "(<= 5 ms)"
        rows.append((f"{label} service p99 at half capacity", f"{r['half_p99']:.2f} ms", target, r["load"]))
        rows.append((f"{label} floor p99 at the same rate", f"{r['half_p99_floor']:.2f} ms", "", r["load"]))
    if "stores" in res:
        s = res["stores"]
        names = {
            "memory": "binary capacity, memory store (uvicorn, 1 worker)",
            "redis": "binary capacity, Redis store (uvicorn, 1 worker)",
            "cluster": "binary capacity, 3-master Redis Cluster (1 worker)",
            "serve-1w": "binary capacity, rcb serve --workers 1, Redis",
            "serve-2w-cpu0": "binary capacity, rcb serve --workers 2, Redis, both on CPU 0",
            "serve-2w-both": "binary capacity, rcb serve --workers 2, Redis, CPUs 0-1 (shared with generator)",
        }
        for k, label in names.items():
            rows.append((label, f"{s[k]:,.0f}/s", f"{s[k] / s['memory']:.2f}x memory", s["load"]))
    if "slots" in res:
        inc, full = res["slots"]["incremental"], res["slots"]["full"]
        load = f"{inc['load']}; {full['load']}"
        for slot in (1, LAST_SLOT):
            a, b = inc["single"][slot], full["single"][slot]
            ok = a["p99"] <= 5.0 and a["errors"] == 0
            rows.append(
                (
                    f"single slot-{slot} update via Redis at 100/s, p50 / p99: incremental (full recompute)",
                    f"{a['p50']:.2f} / {a['p99']:.2f} ms ({b['p50']:.2f} / {b['p99']:.2f} ms)",
                    f"p99 <= 5 ms: {verdict(ok)}",
                    load,
                )
            )
        p99_1, p99_47 = inc["single"][1]["p99"], inc["single"][LAST_SLOT]["p99"]
        spread = max(p99_1, p99_47) / min(p99_1, p99_47)
        rows.append(
            (
                "single update p99, slot 47 / slot 1 (incremental)",
                f"{p99_47 / p99_1:.2f}x",
                f"within 1.5x: {verdict(spread <= 1.5)}",
                "",
            )
        )
        for slot in (1, LAST_SLOT):
            wall, old = inc["walls"][slot], full["walls"][slot]
            target = f"<= 2 s: {verdict(wall <= 2.0)}" if slot == LAST_SLOT else ""
            rows.append(
                (
                    f"{n_boundary:,}-campaign slot-{slot} boundary (1,000 x 4 conns): incremental (full recompute)",
                    f"{wall:.2f} s ({old:.2f} s; {old / wall:.1f}x)",
                    target,
                    load,
                )
            )
        spread = max(inc["early"], inc["late"]) / min(inc["early"], inc["late"])
        rows.append(
            (
                "boundary, median of slots 43-47 / of slots 1-4 (incremental)",
                f"{inc['late']:.2f} / {inc['early']:.2f} s = {inc['late'] / inc['early']:.2f}x",
                f"within 1.5x: {verdict(spread <= 1.5)}",
                "",
            )
        )
        for name, r in (("incremental, slot 46", inc["mixed"]), ("full recompute, slot 47", full["mixed"])):
            errors = r["bid_errors"] + r["burst_errors"]
            rows.append(
                (
                    f"mixed ({name}): bid p99 during the boundary / outside",
                    f"{r['during_p99']:.1f} / {r['outside_p99']:.1f} ms = {r['ratio']:.1f}x (errors {errors})",
                    f"<= 2x: {verdict(r['ratio'] <= 2.0 and errors == 0)}" if name.startswith("incr") else "",
                    load,
                )
            )
    print("\n| measure | figure | target | load average (1/5/15 min) |")
    print("|---|---:|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print("\n" + orjson.dumps(res, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS).decode())


if __name__ == "__main__":
    main()
