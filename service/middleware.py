"""Pure ASGI middleware (no per-request Starlette objects): body size limit (413) and latency histograms."""

from __future__ import annotations

import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.errors import error_response
from service.metrics import Metrics

ROUTES = ("/v1/bid", "/v1/slot-update", "/v1/slot-update/batch", "/healthz", "/readyz", "/metrics", "/ui")


def route_label(path: str) -> str:
    """The route template, so label cardinality stays bounded (ids are not labels)."""
    if path in ROUTES:
        return path
    if path.startswith("/v1/campaigns/"):
        return "/v1/campaigns/{campaign_id}"
    if path.startswith("/v1/admin/"):
        return path if path == "/v1/admin/reload-model" else "other"
    return "other"


class _TooLarge(Exception):
    pass


class LimitsAndMetrics:
    def __init__(self, app: ASGIApp, metrics: Metrics, max_body_bytes: int):
        self.app, self.metrics, self.max_body_bytes = app, metrics, max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = {"code": 500}
        limit = self.max_body_bytes
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    too_large = int(value) > limit
                except ValueError:
                    too_large = False
                if too_large:
                    await self._reject(scope, send, status)
                    self._observe(scope, status["code"], start)
                    return
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise _TooLarge
            return message

        async def tracking_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _TooLarge:
            await self._reject(scope, send, status)
        finally:
            self._observe(scope, status["code"], start)

    async def _reject(self, scope: Scope, send: Send, status: dict[str, Any]) -> None:
        response = error_response(413, "too_large", f"request body over {self.max_body_bytes} bytes")
        status["code"] = 413

        async def no_body() -> Message:
            return {"type": "http.request", "body": b"", "more_body": False}

        await response(scope, no_body, send)

    def _observe(self, scope: Scope, code: int, start: float) -> None:
        self.metrics.request_seconds.labels(
            route=route_label(scope.get("path", "")), method=scope.get("method", ""), status=str(code)
        ).observe(time.perf_counter() - start)
