"""Startup and shutdown: load the model, open the store, subscribe the ratio cache; close them on exit.

A model that cannot be loaded does not stop the service: the fallback controller decides, ``/readyz``
answers 503 and ``rcb_model_loaded`` is 0. A store that is down at startup opens degraded and recovers.
SIGHUP reloads the model (the old one keeps serving if the new one is refused).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

from anyio import to_thread
from fastapi import FastAPI

from model.artifact import ArtifactError
from service.episodes import Episodes
from service.ratio_cache import RatioCache
from service.runner import ModelRunner
from service.store import open_store

log = logging.getLogger("rcb.service")


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    settings, metrics = app.state.settings, app.state.metrics
    runner = ModelRunner(
        settings.model_dir, onnx_threads=settings.onnx_threads, use_shield=settings.shield, on_load=metrics.set_model
    )
    try:
        await to_thread.run_sync(runner.load)
    except ArtifactError as exc:
        log.error("model not loaded: the fallback controller decides", extra={"error": str(exc)})
    if not runner.loaded:
        metrics.set_model(runner.version, loaded=False)
    store = await open_store(
        settings.store,
        prefix=settings.key_prefix,
        state_ttl_s=settings.state_ttl_s,
        pool_size=settings.pool_size,
        pool_timeout_s=settings.pool_timeout_s,
        timeout_s=settings.store_timeout_s,
    )
    cache = RatioCache(settings.ratio_cache_ttl_s, metrics)
    await store.subscribe(cache.noticed)  # every write's notice updates the cache, whichever process wrote
    metrics.store_up.set(1 if await store.ping() else 0)  # from the start, not from the first write or /readyz
    app.state.runner, app.state.store, app.state.cache = runner, store, cache
    app.state.episodes = Episodes(store, runner, cache, metrics, settings)
    _install_sighup(runner)
    log.info(
        "service started",
        extra={"store": settings.store_kind, "model_version": runner.version, "model_dir": str(settings.model_dir)},
    )
    try:
        yield
    finally:
        with suppress(Exception):
            await store.aclose()
        log.info("service stopped")


def _install_sighup(runner: ModelRunner) -> None:
    """SIGHUP reloads the model in a thread (no-op where the loop cannot take signal handlers)."""

    def reload() -> None:
        async def run() -> None:
            try:
                await runner.reload_async()  # the runner's on_load sets the metrics
            except ArtifactError as exc:
                log.error("model reload refused; the old model keeps serving", extra={"error": str(exc)})
            except Exception:  # a signal's task has no caller to report to: log it, keep the old model serving
                log.exception("model reload failed; the old model keeps serving")

        asyncio.get_running_loop().create_task(run())

    with suppress(NotImplementedError, RuntimeError, ValueError):
        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, reload)
