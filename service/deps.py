"""Dependencies the routes name: the app's settings, store, model runner, episodes, cache and metrics.

Each is read from ``request.app.state`` (set by the lifespan), declared once as an ``Annotated`` alias.
They are ``async def`` on purpose: FastAPI runs a plain ``def`` dependency in a worker thread, a hop
that cost ~0.1 ms per dependency per request (measured by benchmarks/bench_service.py).
"""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Request

from service.config import Settings
from service.episodes import Episodes
from service.errors import ApiError
from service.metrics import Metrics
from service.ratio_cache import RatioCache
from service.runner import ModelRunner
from service.store import EpisodeStore


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_store(request: Request) -> EpisodeStore:
    return request.app.state.store


async def get_runner(request: Request) -> ModelRunner:
    return request.app.state.runner


async def get_episodes(request: Request) -> Episodes:
    return request.app.state.episodes


async def get_cache(request: Request) -> RatioCache:
    return request.app.state.cache


async def get_metrics(request: Request) -> Metrics:
    return request.app.state.metrics


async def require_token(request: Request) -> None:
    """Write endpoints: when ``api_token`` is set, ``Authorization: Bearer <token>`` must carry it (401 otherwise)."""
    token = request.app.state.settings.api_token
    if token is None:
        return
    given = request.headers.get("authorization", "")
    scheme, _, value = given.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), token.get_secret_value().encode()):
        raise ApiError(
            401,
            "unauthorized",
            "this endpoint needs Authorization: Bearer <token>",
            headers={"WWW-Authenticate": "Bearer"},
        )


SettingsDep = Annotated[Settings, Depends(get_settings)]
StoreDep = Annotated[EpisodeStore, Depends(get_store)]
RunnerDep = Annotated[ModelRunner, Depends(get_runner)]
EpisodesDep = Annotated[Episodes, Depends(get_episodes)]
CacheDep = Annotated[RatioCache, Depends(get_cache)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
Authorized = Depends(require_token)


async def require_json(request: Request) -> None:
    """JSON bodies: a body sent as anything but ``application/json`` (or ``+json``) is 415, not a 422 saying the
    body "should be a valid dictionary" (``curl -d`` sends form encoding); a request without a body passes."""
    if not request.headers.get("content-length", "0").strip("0") and "transfer-encoding" not in request.headers:
        return
    kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if kind != "application/json" and not (kind.startswith("application/") and kind.endswith("+json")):
        raise ApiError(415, "unsupported_media_type", f"send application/json, not {kind or 'nothing'!r}")


JsonBody = Depends(require_json)
