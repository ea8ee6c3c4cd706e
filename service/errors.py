"""Every error the API answers is JSON ``{error, detail}`` with a fitting status; never a 500 for bad input."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from service.store import StoreUnavailable

log = logging.getLogger("rcb.service")


class BodyTooLarge(Exception):
    """A request body past the size limit, found while it streams in (``service.middleware``)."""


class ApiError(Exception):
    """An answer other than success: ``status``, a stable machine-readable ``error`` code and a human ``detail``."""

    def __init__(self, status: int, error: str, detail: Any, headers: dict[str, str] | None = None):
        super().__init__(f"{status} {error}: {detail}")
        self.status, self.error, self.detail, self.headers = status, error, detail, headers


def bad_request(detail: Any) -> ApiError:
    return ApiError(422, "invalid_request", detail)


def unknown_campaign(campaign: str) -> ApiError:
    return ApiError(404, "unknown_campaign", f"campaign {campaign!r} has no episode: register it with PUT first")


def store_unavailable(exc: Exception) -> ApiError:
    return ApiError(
        503,
        "store_unavailable",
        f"the state store did not answer in time ({exc}); a write is atomic, so it was applied whole or not at all: "
        "resend the same request (a slot update that did land answers replayed)",
    )


def error_response(status: int, error: str, detail: Any, headers: Mapping[str, str] | None = None) -> Response:
    body = orjson.dumps({"error": error, "detail": detail}, default=str)
    return Response(body, status_code=status, media_type="application/json", headers=headers)


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {
        "description": text,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["error", "detail"],
                    "properties": {"error": {"type": "string"}, "detail": {}},
                }
            }
        },
    }
    for code, text in {
        401: "Missing or wrong bearer token (write endpoints, when a token is configured)",
        404: "Unknown campaign or route",
        409: "Conflict: wrong episode, a skipped slot, or other stats for an applied slot (names the expected slot)",
        413: "Request body too large",
        415: "Unsupported content type",
        422: "Invalid request: the detail names the field",
        503: "The state store is unreachable (nothing was written), or the service is not ready",
    }.items()
}
"""The error answers every route documents in OpenAPI."""


def validation_problems(errors: Sequence[Any], where: Sequence[str] = ()) -> list[dict[str, Any]]:
    """pydantic's errors as a 422's detail: ``loc`` (under ``where``), ``msg`` and ``type`` of each."""
    return [
        {"loc": [*where, *(str(p) for p in e.get("loc", ()))], "msg": e.get("msg", ""), "type": e.get("type", "")}
        for e in errors
    ]


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> Response:
        return error_response(exc.status, exc.error, exc.detail, exc.headers)

    @app.exception_handler(StoreUnavailable)
    async def _store_down(request: Request, exc: StoreUnavailable) -> Response:
        metrics = getattr(request.app.state, "metrics", None)
        if metrics is not None:
            metrics.store_failed(exc, slot_updates=int(request.url.path.startswith("/v1/slot-update")))
        e = store_unavailable(exc)
        return error_response(e.status, e.error, e.detail)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        metrics = getattr(request.app.state, "metrics", None)
        if metrics is not None and request.url.path == "/v1/slot-update":  # a batch counts its invalid items
            metrics.slot_updates.labels(result="invalid").inc()
        return error_response(422, "invalid_request", validation_problems(exc.errors()))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 400 and isinstance(exc.__cause__, BodyTooLarge):  # FastAPI's JSON parse wraps it
            return error_response(413, "too_large", str(exc.__cause__))
        codes = {404: "not_found", 405: "method_not_allowed", 401: "unauthorized", 413: "too_large"}
        return error_response(exc.status_code, codes.get(exc.status_code, "http_error"), exc.detail, exc.headers)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error", extra={"path": request.url.path})
        return error_response(500, "internal_error", "unexpected server error (logged)")
