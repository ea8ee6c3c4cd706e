"""``/healthz`` (the process answers), ``/readyz`` (store reachable and model loaded), ``/metrics`` (Prometheus)."""

from __future__ import annotations

import os
from dataclasses import asdict

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from service.deps import MetricsDep, RunnerDep, SettingsDep, StoreDep
from service.errors import ERROR_BODY, ApiError

router = APIRouter(tags=["health"])

READYZ_503 = (
    "Not ready (`not_ready`): the store is unreachable, its update notices are not subscribed yet, or no model is "
    "loaded; the detail says which"
)


@router.head("/healthz", include_in_schema=False)  # load balancers probe with HEAD
@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is alive (no dependency checked)."""
    return {"status": "ok"}


@router.head("/readyz", include_in_schema=False)
@router.get(
    "/readyz", responses={503: {"description": READYZ_503, "content": {"application/json": {"schema": ERROR_BODY}}}}
)
async def readyz(store: StoreDep, runner: RunnerDep, settings: SettingsDep, metrics: MetricsDep) -> dict[str, object]:
    """Ready to take traffic: the store answers a ping, its update notices have been subscribed (so this process
    hears the other processes' writes and bids at their ratios, not at one it cached), and a model is loaded (not the
    fallback)."""
    store_up, listening = await store.ping(), store.heard_updates
    metrics.store_up.set(1 if store_up else 0)
    artifact = runner.artifact
    detail = {
        "process": os.getpid(),  # which worker answered (``rcb serve --workers N`` runs N)
        "store": settings.store_kind,
        "store_reachable": store_up,
        "store_listening": listening,
        "model_loaded": artifact is not None,
        "model_version": runner.version,
        "algorithm": None if artifact is None else artifact.card.algorithm,
        "model_kind": None if artifact is None else artifact.card.kind,
        "setting": None if artifact is None else str(artifact.card.setting),
        "model_error": runner.load_error,
        "noise_seed": settings.noise_seed,
        "shield": settings.shield,
        "shield_config": asdict(runner.shield_config) if settings.shield and artifact is not None else None,
        "bid_scale": None if artifact is None else artifact.card.bid_scale_factor(),
        # the controller the shield and the fallback run around, and the market whose train days tuned it
        "safety_controller": runner.controller_source(),
    }
    if not (store_up and listening and artifact is not None):
        raise ApiError(503, "not_ready", detail)
    return {"status": "ready", **detail}


@router.get("/metrics", response_class=Response)
async def metrics_endpoint(metrics: MetricsDep) -> Response:
    """Prometheus text format: request latency per route, slot updates by result, fallbacks, cache, model."""
    return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)
