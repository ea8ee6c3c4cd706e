"""Pure ASGI middleware (no per-request Starlette objects): body size limit (413) and latency histograms."""

from __future__ import annotations

import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.errors import BodyTooLarge, error_response
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


HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})
"""The methods ``rcb_request_seconds`` names; any other is ``other`` (the label comes from the client)."""


class LimitsAndMetrics:
    def __init__(self, app: ASGIApp, metrics: Metrics, max_body_bytes: int):
        self.app, self.metrics, self.max_body_bytes = app, metrics, max_body_bytes
        # The histogram's child per (route label, method, status): ``labels()`` costs several microseconds.
        self._children: dict[tuple[str, str, int], Any] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = {"code": 500}
        limit = self.max_body_bytes
        # A valid Content-Length within the limit and no Transfer-Encoding: the server frames the body by it and
        # delivers no more, so receive() needs no counting wrapper.
        declared = chunked = False
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    too_large = int(value) > limit
                    declared = True
                except ValueError:
                    too_large = False
                if too_large:
                    await self._reject(scope, send, status)
                    self._observe(scope, status["code"], start)
                    return
            elif name == b"transfer-encoding":
                chunked = True
        declared = declared and not chunked
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(f"request body over {limit} bytes")
            return message

        async def tracking_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive if declared else limited_receive, tracking_send)
        except BodyTooLarge:
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
        elapsed = time.perf_counter() - start
        method = scope.get("method", "")
        key = (route_label(scope.get("path", "")), method if method in HTTP_METHODS else "other", code)
        child = self._children.get(key)
        if child is None:
            child = self.metrics.request_seconds.labels(route=key[0], method=key[1], status=str(code))
            if len(self._children) < 1024:
                self._children[key] = child
        child.observe(elapsed)
