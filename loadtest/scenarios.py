"""Scenarios: the request mixes the load generator sends to the bidding service (or to the floor).

- ``bid-json``: ``POST /v1/bid`` JSON ``{"campaign_id", "utilities": [1000 floats]}`` at rate R for D seconds.
- ``bid-binary``: ``POST /v1/bid?campaign_id=`` with a little-endian float32 body, at rate R for D seconds.
- ``slot-burst``: one ``POST /v1/slot-update`` per campaign (N campaigns) at rate R: the burst's wall time.
- ``slot-burst-batch``: the same updates through ``POST /v1/slot-update/batch`` in chunks of M.
- ``mixed``: binary bids at rate R for D seconds while a slot burst for N campaigns (single form, or batches of M
  with ``batch_size``) runs at ``burst_rate`` from ``burst_start``; bid latency during vs outside the burst.

Campaign ids are ``{prefix}{i}`` for i < N; bids cycle over them. ``setup_campaigns`` registers them first
(``PUT /v1/campaigns/{id}``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from urllib.parse import quote

import numpy as np
import orjson

from loadtest.openloop import RunResult, Stream, build_request, parse_url, run_open_loop, summarize

SCENARIOS = ("bid-json", "bid-binary", "slot-burst", "slot-burst-batch", "mixed")
N_UTILITIES = 1000
_OCTET = "application/octet-stream"
_JSON = "application/json"


@dataclass
class Target:
    host: str
    port: int
    prefix: str  # path prefix of the service ("" at the root)

    @classmethod
    def from_url(cls, url: str) -> Target:
        return cls(*parse_url(url))

    def request(self, method: str, path: str, body: bytes = b"", content_type: str | None = None) -> bytes:
        return build_request(method, self.prefix + path, f"{self.host}:{self.port}", body, content_type)


def campaign_ids(n: int, prefix: str = "c") -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def _utilities(rng: np.random.Generator, n_vectors: int, n: int = N_UTILITIES) -> list[np.ndarray]:
    return [rng.lognormal(-1.0, 1.0, n).astype("<f4") for _ in range(n_vectors)]


def bid_binary_requests(target: Target, ids: list[str], seed: int = 0, n_vectors: int = 16) -> list[bytes]:
    """One pre-encoded binary bid request per campaign (utilities drawn from ``n_vectors`` random vectors)."""
    vecs = [v.tobytes() for v in _utilities(np.random.default_rng(seed), n_vectors)]
    return [
        target.request("POST", f"/v1/bid?campaign_id={quote(c)}", vecs[i % n_vectors], _OCTET)
        for i, c in enumerate(ids)
    ]


def bid_json_requests(target: Target, ids: list[str], seed: int = 0, n_vectors: int = 16) -> list[bytes]:
    """One pre-encoded JSON bid request per campaign (float32 utilities, shortest float repr)."""
    frags = [
        orjson.dumps(v, option=orjson.OPT_SERIALIZE_NUMPY) for v in _utilities(np.random.default_rng(seed), n_vectors)
    ]
    out = []
    for i, c in enumerate(ids):
        body = b'{"campaign_id":' + orjson.dumps(c) + b',"utilities":' + frags[i % n_vectors] + b"}"
        out.append(target.request("POST", "/v1/bid", body, _JSON))
    return out


def slot_updates(ids: list[str], episode: str = "e1", slot: int = 0, seed: int = 0) -> list[dict]:
    """One plausible end-of-slot report per campaign."""
    rng = np.random.default_rng(seed)
    out = []
    for c in ids:
        auctions = int(rng.integers(500, 2000))
        wins = int(rng.integers(0, auctions // 4 + 1))
        cost = float(round(wins * rng.lognormal(-1.0, 0.5), 4))
        out.append(
            {
                "campaign_id": c,
                "episode": episode,
                "slot": slot,
                "delivery": float(round(cost * rng.lognormal(0.0, 0.3), 4)),
                "cost": cost,
                "wins": wins,
                "auctions": auctions,
            }
        )
    return out


def slot_update_requests(target: Target, updates: list[dict]) -> list[bytes]:
    return [target.request("POST", "/v1/slot-update", orjson.dumps(u), _JSON) for u in updates]


def slot_batch_requests(target: Target, updates: list[dict], batch_size: int) -> list[bytes]:
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    return [
        target.request("POST", "/v1/slot-update/batch", orjson.dumps({"updates": updates[i : i + batch_size]}), _JSON)
        for i in range(0, len(updates), batch_size)
    ]


def campaign_setup_requests(
    target: Target, ids: list[str], episode: str = "e1", roi_target: float = 1.0, budget: float | None = None
) -> list[bytes]:
    body = orjson.dumps({"episode": episode, "roi_target": roi_target, "budget": budget})
    return [target.request("PUT", f"/v1/campaigns/{quote(c, safe='')}", body, _JSON) for c in ids]


def setup_campaigns(
    url: str,
    ids: list[str],
    *,
    episode: str = "e1",
    roi_target: float = 1.0,
    budget: float | None = None,
    rate: float = 2000.0,
    connections: int = 16,
    timeout: float = 10.0,
) -> dict:
    """Register every campaign (open loop at ``rate``); returns the summary. Raises RuntimeError on any error."""
    reqs = campaign_setup_requests(Target.from_url(url), ids, episode, roi_target, budget)
    run = run_open_loop(url, [Stream("setup", reqs, rate, len(reqs), connections=connections)], timeout=timeout)
    summary = summarize(run.streams["setup"])
    if summary["errors"]:
        raise RuntimeError(f"campaign setup failed: {summary['error_counts']}")
    return summary


@dataclass
class ScenarioResult:
    scenario: str
    params: dict
    run: RunResult
    summary: dict  # JSON-able: per-stream summaries (+ during/outside burst for mixed)
    setup: dict | None = None
    extra: dict = field(default_factory=dict)

    @property
    def errors(self) -> int:
        return sum(s.errors for s in self.run.streams.values())

    def to_json(self) -> dict:
        return {"scenario": self.scenario, "params": self.params, "setup": self.setup, **self.summary}


def _burst_summary(run: RunResult, name: str) -> dict:
    s = run.streams[name]
    out = summarize(s)
    end = out["last_response_s"]
    out["burst_wall_s"] = round(end - out["first_intended_s"], 6) if end is not None else None
    return out


def default_batch_size(scenario: str, batch_size: int | None) -> int:
    if batch_size is not None:
        return batch_size
    return 100 if scenario == "slot-burst-batch" else 0


def build_streams(
    scenario: str,
    target: Target,
    *,
    rate: float,
    duration: float,
    connections: int = 64,
    campaigns: int = 1000,
    batch_size: int | None = None,
    burst_rate: float | None = None,
    burst_start: float | None = None,
    burst_connections: int = 16,
    campaign_prefix: str = "c",
    episode: str = "e1",
    slot: int = 0,
    seed: int = 0,
) -> list[Stream]:
    """The streams of a scenario (see the module docstring). ``batch_size`` None: 100 for slot-burst-batch,
    0 (the single form) for mixed."""
    batch_size = default_batch_size(scenario, batch_size)
    ids = campaign_ids(campaigns, campaign_prefix)
    if scenario == "bid-binary":
        return [
            Stream.for_duration("bid", bid_binary_requests(target, ids, seed), rate, duration, connections=connections)
        ]
    if scenario == "bid-json":
        return [
            Stream.for_duration("bid", bid_json_requests(target, ids, seed), rate, duration, connections=connections)
        ]
    updates = slot_updates(ids, episode, slot, seed)
    if scenario == "slot-burst":
        reqs = slot_update_requests(target, updates)
        return [Stream("burst", reqs, rate, len(reqs), connections=connections)]
    if scenario == "slot-burst-batch":
        reqs = slot_batch_requests(target, updates, batch_size)
        return [Stream("burst", reqs, rate, len(reqs), connections=connections)]
    if scenario == "mixed":
        bids = Stream.for_duration(
            "bid", bid_binary_requests(target, ids, seed), rate, duration, connections=connections
        )
        reqs = (
            slot_batch_requests(target, updates, batch_size)
            if batch_size > 0
            else slot_update_requests(target, updates)
        )
        start = duration / 3 if burst_start is None else burst_start
        burst = Stream("burst", reqs, burst_rate or rate, len(reqs), start=start, connections=burst_connections)
        return [bids, burst]
    raise ValueError(f"unknown scenario {scenario!r}; one of {SCENARIOS}")


def run_scenario(
    scenario: str,
    url: str,
    *,
    rate: float,
    duration: float = 10.0,
    connections: int = 64,
    campaigns: int = 1000,
    batch_size: int | None = None,
    burst_rate: float | None = None,
    burst_start: float | None = None,
    burst_connections: int = 16,
    campaign_prefix: str = "c",
    episode: str = "e1",
    slot: int = 0,
    setup: bool = True,
    timeout: float = 10.0,
    drain_timeout: float = 10.0,
    seed: int = 0,
) -> ScenarioResult:
    """Register the campaigns (``setup``), run one scenario open loop, summarize it.

    ``rate``: requests/s of the bid stream (bid-*, mixed) or of the burst (slot-burst: updates/s; slot-burst-batch:
    batch requests/s). ``duration`` is ignored by slot-burst*, whose length is N/rate (N/M/rate). For ``mixed``,
    ``batch_size`` 0 (its default) sends the burst in the single form; the burst runs at ``burst_rate`` (default
    ``rate``) from ``burst_start`` (default duration/3) over its own ``burst_connections`` connections."""
    params = {
        "url": url,
        "rate": rate,
        "duration": duration,
        "connections": connections,
        "campaigns": campaigns,
        "timeout": timeout,
        "drain_timeout": drain_timeout,
    }
    batch_size = default_batch_size(scenario, batch_size)
    if scenario in ("slot-burst-batch", "mixed"):
        params["batch_size"] = batch_size
    if scenario == "mixed":
        params |= {
            "burst_rate": burst_rate or rate,
            "burst_start": duration / 3 if burst_start is None else burst_start,
        }
        params["burst_connections"] = burst_connections
    target = Target.from_url(url)
    streams = build_streams(
        scenario,
        target,
        rate=rate,
        duration=duration,
        connections=connections,
        campaigns=campaigns,
        batch_size=batch_size,
        burst_rate=burst_rate,
        burst_start=burst_start,
        burst_connections=burst_connections,
        campaign_prefix=campaign_prefix,
        episode=episode,
        slot=slot,
        seed=seed,
    )
    setup_summary = None
    if setup:
        setup_summary = setup_campaigns(url, campaign_ids(campaigns, campaign_prefix), episode=episode, timeout=timeout)
    run = run_open_loop(url, streams, timeout=timeout, drain_timeout=drain_timeout)
    summary: dict = {"wall_s": round(run.wall_s, 6), "streams": {}}
    for name, s in run.streams.items():
        summary["streams"][name] = _burst_summary(run, name) if name == "burst" else summarize(s)
    if scenario == "mixed":
        bid, burst = run.streams["bid"], run.streams["burst"]
        b0 = float(burst.intended.min()) if burst.count else 0.0
        done = burst.completed_at()
        b1 = float(done.max()) if done.size else float(burst.intended.max())
        during = (bid.intended >= b0) & (bid.intended <= b1)
        summary["burst_window_s"] = [round(b0, 6), round(b1, 6)]
        summary["bid_during_burst"] = summarize(bid, during)
        summary["bid_outside_burst"] = summarize(bid, ~during)
    return ScenarioResult(scenario, params, run, summary, setup_summary)


def find_capacity(
    scenario: str,
    url: str,
    *,
    start_rate: float = 500.0,
    max_rate: float = 20000.0,
    factor: float = 1.25,
    duration: float = 5.0,
    slo_p99_ms: float = 50.0,
    min_achieved: float = 0.97,
    setup: bool = True,
    **kw,
) -> dict:
    """Step the rate up by ``factor`` from ``start_rate`` until a step fails: any error, bid p99 above
    ``slo_p99_ms``, or a throughput below ``min_achieved`` x the target rate. Returns the steps and the highest
    rate that passed (``sustainable_rate``; None if even the first failed). Bid scenarios (bid-json, bid-binary)."""
    if scenario not in ("bid-json", "bid-binary"):
        raise ValueError("find_capacity steps the bid rate: use bid-json or bid-binary")
    if not factor > 1:  # a factor of 1 or less never climbs: the search would step until a step fails
        raise ValueError(f"factor must be above 1, not {factor}")
    if not 0 < start_rate <= max_rate:
        raise ValueError(f"need 0 < start_rate <= max_rate, not {start_rate} and {max_rate}")
    steps, best, rate, first = [], None, start_rate, True
    while rate <= max_rate:
        res = run_scenario(scenario, url, rate=rate, duration=duration, setup=setup and first, **kw)
        first = False
        s = res.summary["streams"]["bid"]
        p99 = s["latency_ms"]["p99"]
        passed = (
            s["errors"] == 0
            and p99 is not None
            and p99 <= slo_p99_ms
            and (s["throughput"] or 0.0) >= min_achieved * rate
        )
        steps.append(
            {"rate": rate, "passed": passed, "errors": s["errors"], "p50_ms": s["latency_ms"]["p50"], "p99_ms": p99}
            | {"throughput": s["throughput"], "achieved_rate": s["achieved_rate"]}
        )
        if not passed:
            break
        best = rate
        rate = math.ceil(rate * factor)
    return {"scenario": scenario, "slo_p99_ms": slo_p99_ms, "sustainable_rate": best, "steps": steps}
