"""``rcb replay``: play the ad engine against a running service, one campaign per logged day.

For every episode: register the campaign (``PUT /v1/campaigns``), then slot by slot send the slot's
impressions to ``POST /v1/bid`` in batches, decide the wins from the logged market price (win iff
``bid > market_price``, pay the market price, and stop at the first win the budget cannot pay for,
in arrival order: the simulator's rules), and report the slot's stats to ``POST /v1/slot-update``,
which answers the next slot's ratio. Many episodes run concurrently, one campaign each.

Bids travel as JSON float64 (``orjson`` round-trips every float exactly), so ``bid = ratio x utility``
is the same number the simulator compares with the price: replaying a model through the service gives
``rcb evaluate onnx:MODEL_DIR``'s episodes, when the service's noise seed is the evaluation seed and
campaigns are named by the offline convention (campaign ``episode-{k}``, episode ``offline``; the
defaults here).
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
import orjson
import pandas as pd

from model.contract import SLOTS_PER_DAY
from model.history import SLOT_STATS
from training.evaluation.evaluate import Evaluation, episode_rows, summarize
from training.market.schema import DayLog
from training.replay.dayset import DaySet

OFFLINE_EPISODE = "offline"


class ReplayError(RuntimeError):
    """The service answered something the ad engine cannot go on with."""


@dataclass
class EpisodeTrace:
    """What one replayed episode bid and got, slot by slot."""

    campaign: str
    day: int
    ratios: list[float] = field(default_factory=list)
    slots: list[dict[str, float]] = field(default_factory=list)
    decided_by: list[str] = field(default_factory=list)

    @property
    def delivery(self) -> float:
        return float(sum(s["delivery"] for s in self.slots))

    @property
    def cost(self) -> float:
        return float(sum(s["cost"] for s in self.slots))


def play_slot(log: DayLog, t: int, bids: np.ndarray, remaining_budget: float) -> tuple[dict[str, float], bool]:
    """The slot's stats given the service's bids (arrival order), and whether the budget ran out in it."""
    rows = log.slot_rows(t)
    won = bids > log.market_price[rows]
    won_cost = np.where(won, log.cost[rows], 0.0)
    spend = np.cumsum(won_cost)
    over = np.flatnonzero(won & (spend > remaining_budget))
    stop = int(over[0]) if over.size else len(spend)
    stats = {
        "delivery": float(np.where(won[:stop], log.delivery[rows][:stop], 0.0).sum()),
        "cost": float(spend[stop - 1]) if stop else 0.0,
        "wins": int(won[:stop].sum()),
        "auctions": stop,
    }
    return stats, bool(over.size)


class ServiceClient:
    """The few calls the ad engine makes, with errors that name the call."""

    def __init__(self, client: httpx.AsyncClient, token: str | None = None):
        self.client = client
        self.headers = {"content-type": "application/json"}
        if token:
            self.headers["authorization"] = f"Bearer {token}"

    async def _call(self, method: str, path: str, body: Any) -> dict[str, Any]:
        try:
            response = await self.client.request(
                method, path, content=orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY), headers=self.headers
            )
        except httpx.HTTPError as exc:
            raise ReplayError(f"{method} {path}: {type(exc).__name__}: {exc}") from None
        if response.status_code >= 300:
            raise ReplayError(f"{method} {path}: HTTP {response.status_code} {response.text[:300]}")
        return _json_object(response, f"{method} {path}")

    async def register(self, campaign: str, episode: str, roi_target: float, budget: float | None) -> dict[str, Any]:
        body = {"episode": episode, "roi_target": roi_target, "budget": budget}
        return await self._call("PUT", f"/v1/campaigns/{campaign}", body)

    async def bids(self, campaign: str, utilities: np.ndarray, batch_size: int) -> tuple[np.ndarray, float]:
        out, ratio = [], 0.0
        for start in range(0, len(utilities), batch_size):
            chunk = utilities[start : start + batch_size]
            answer = await self._call("POST", "/v1/bid", {"campaign_id": campaign, "utilities": chunk})
            out.append(np.asarray(_field(answer, "bids", "POST /v1/bid"), dtype=np.float64))
            ratio = float(_field(answer, "bid_ratio", "POST /v1/bid"))
        return (np.concatenate(out) if out else np.zeros(0)), ratio

    async def slot_update(self, campaign: str, episode: str, slot: int, stats: dict[str, float]) -> dict[str, Any]:
        return await self._call(
            "POST", "/v1/slot-update", {"campaign_id": campaign, "episode": episode, "slot": slot, **stats}
        )

    async def ready(self) -> dict[str, Any]:
        try:
            response = await self.client.get("/readyz")
        except httpx.HTTPError as exc:
            raise ReplayError(f"the service does not answer ({type(exc).__name__}: {exc})") from None
        body = _json_object(response, f"GET {str(self.client.base_url).rstrip('/')}/readyz")
        if response.status_code != 200:
            raise ReplayError(f"the service is not ready: {body.get('detail', body)}")
        return body


def http_client(url: str, **options: Any) -> httpx.AsyncClient:
    """An httpx client on ``url``, or a ReplayError saying the URL does not parse (httpx raises InvalidURL, which is
    not an HTTPError, for ``http://host:abc`` or ``http://[::1``)."""
    try:
        parsed = httpx.URL(url)
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise ValueError("expected http://host:port or https://host:port")
        if parsed.port is not None and not 0 < parsed.port < 65536:  # httpx parses it, the request overflows
            raise ValueError(f"port {parsed.port} is out of range")
        return httpx.AsyncClient(base_url=url, **options)
    except (httpx.InvalidURL, ValueError) as exc:
        raise ReplayError(f"--url {url!r} is not a URL ({exc})") from None


def check_setting(ready: dict[str, Any], setting: str) -> None:
    """Refuse to replay ``setting``'s days on a model of the other setting (``rcb evaluate`` refuses it too): the
    model would read budgets it was not trained on, and the summary would be labelled with the wrong setting."""
    served = ready.get("setting")
    if served is not None and str(served) != str(setting):
        raise ReplayError(
            f"the service serves a {served} model ({ready.get('model_version')}), not {setting}; "
            f"replay it with --setting {served}"
        )


async def probe(url: str, token: str | None, setting: str) -> dict[str, Any]:
    """``/readyz`` before any work: the URL parses, the service is ready and serves a model of ``setting``."""
    async with http_client(url, timeout=10.0) as client:
        ready = await ServiceClient(client, token).ready()
    check_setting(ready, setting)
    return ready


def _json_object(response: httpx.Response, call: str) -> dict[str, Any]:
    """The answer's JSON object, or a ReplayError naming the call (a wrong URL often answers an HTML page)."""
    try:
        body = orjson.loads(response.content)
    except orjson.JSONDecodeError:
        raise ReplayError(
            f"{call}: HTTP {response.status_code}, not a JSON answer ({response.text[:80]!r}); is this an rcb service?"
        ) from None
    if not isinstance(body, dict):
        raise ReplayError(f"{call}: HTTP {response.status_code}, a JSON {type(body).__name__}, not an object")
    return body


def _field(answer: dict[str, Any], key: str, call: str) -> Any:
    if key not in answer:
        raise ReplayError(f"{call}: the answer has no {key!r} ({sorted(answer)})")
    return answer[key]


async def replay_episode(
    service: ServiceClient,
    campaign: str,
    episode: str,
    log: DayLog,
    roi_target: float,
    budget: float,
    batch_size: int,
) -> EpisodeTrace:
    trace = EpisodeTrace(campaign=campaign, day=log.day)
    state = await service.register(campaign, episode, roi_target, None if np.isinf(budget) else budget)
    if _field(state, "slot", f"PUT /v1/campaigns/{campaign}") != 0:
        raise ReplayError(
            f"campaign {campaign}: episode {episode!r} already registered at slot {state['slot']}; "
            "use another --episode-id"
        )
    spent, exhausted = 0.0, False
    ratio = float(_field(state, "bid_ratio", f"PUT /v1/campaigns/{campaign}"))
    for t in range(SLOTS_PER_DAY):
        if exhausted:
            stats = dict.fromkeys(SLOT_STATS, 0.0)
            stats["wins"] = stats["auctions"] = 0
        else:
            utilities = log.utility[log.slot_rows(t)]
            bids, answered_ratio = await service.bids(campaign, utilities, batch_size)
            ratio = answered_ratio if len(utilities) else ratio
            stats, exhausted = play_slot(log, t, bids, budget - spent)
            spent += stats["cost"]
        trace.ratios.append(ratio)
        trace.slots.append(stats)
        answer = await service.slot_update(campaign, episode, t, stats)
        trace.decided_by.append(str(answer.get("decided_by", "unknown")))  # who decided the ratio (docs/http-api.md)
        ratio = float(_field(answer, "bid_ratio", "POST /v1/slot-update"))
    return trace


async def replay_days(
    url: str,
    days: DaySet,
    *,
    concurrency: int = 4,
    batch_size: int = 5000,
    episode: str = OFFLINE_EPISODE,
    token: str | None = None,
    timeout_s: float = 30.0,
    on_episode: Callable[[EpisodeTrace], None] | None = None,
    numbers: Sequence[int] | None = None,
) -> tuple[list[EpisodeTrace], dict[str, Any]]:
    """Replay every day of ``days`` (episode ``k`` is campaign ``episode-{k}``); traces in day order, /readyz.

    ``numbers``: each day's ``k`` when ``days`` is a part of its split (its index in the whole split), so a day
    is the campaign, and draws the noise, it is in ``rcb evaluate``'s play of the split; by default 0, 1, ..."""
    numbers = list(range(len(days))) if numbers is None else list(numbers)
    if len(numbers) != len(days) or len(set(numbers)) != len(numbers):
        raise ValueError(f"numbers must name each of the {len(days)} days once, not {numbers}")
    limits = httpx.Limits(max_connections=concurrency * 2, max_keepalive_connections=concurrency * 2)
    async with http_client(url, timeout=timeout_s, limits=limits) as client:
        service = ServiceClient(client, token)
        ready = await service.ready()
        check_setting(ready, str(days.setting))
        gate = asyncio.Semaphore(concurrency)

        async def one(k: int) -> EpisodeTrace:
            async with gate:
                trace = await replay_episode(
                    service,
                    f"episode-{numbers[k]}",
                    episode,
                    days.logs[k],
                    float(days.roi_target[k]),
                    float(days.budget[k]),
                    batch_size,
                )
            if on_episode:
                on_episode(trace)
            return trace

        traces = await asyncio.gather(*(one(k) for k in range(len(days))))
    return list(traces), ready


def replay_evaluation(days: DaySet, traces: list[EpisodeTrace], ready: dict[str, Any], url: str) -> Evaluation:
    """The replayed episodes as ``rcb evaluate`` writes them (method ``service``, seed = the service's noise seed)."""
    seed = int(ready.get("noise_seed", 0) or 0)
    method = "service"
    delivery = np.array([t.delivery for t in traces])
    cost = np.array([t.cost for t in traces])
    episodes = episode_rows(method, seed, days, delivery, cost)
    episodes["fallback_slots"] = [sum(1 for d in t.decided_by if d == "fallback") for t in traces]
    episodes["shield_slots"] = [sum(1 for d in t.decided_by if d == "shield") for t in traces]
    meta = {
        "market": str(days.market.root),
        "split": days.split,
        "setting": str(days.setting),
        "seeds": 1,
        "methods": [method],
        "tuned": {
            method: {
                "url": url,
                "model_version": ready.get("model_version"),
                "store": ready.get("store"),
                "noise_seed": seed,
            }
        },
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    return Evaluation(episodes=episodes, summary=summarize(episodes, [method]), meta=meta)


def slot_table(traces: list[EpisodeTrace]) -> pd.DataFrame:
    """Per episode and slot: the ratio bid and the reported stats (``slots.csv``)."""
    rows = [
        {
            "campaign": t.campaign,
            "day": t.day,
            "slot": s,
            "ratio": t.ratios[s],
            "decided_by": t.decided_by[s],
            **t.slots[s],
        }
        for t in traces
        for s in range(len(t.slots))
    ]
    return pd.DataFrame(rows)
