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
from starlette.routing import Match

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


ERROR_BODY: dict[str, Any] = {
    "type": "object",
    "required": ["error", "detail"],
    "properties": {"error": {"type": "string"}, "detail": {}},
}
"""The JSON schema of every error answer."""

ERROR_TEXTS: dict[int, str] = {
    401: "Missing or wrong bearer token (`unauthorized`; when the service has a token)",
    404: "Not found",
    409: "Conflict with the campaign's state",
    413: "Too large (`too_large`): the body is over `max_body_bytes`",
    415: "The body is not `application/json` (`unsupported_media_type`)",
    422: "Invalid request (`invalid_request`), a body that is not JSON included: the detail names the field",
    503: "The state store did not answer in time (`store_unavailable`): nothing was written, resend",
}
"""What each error status means, unless a route says more."""


def error_responses(*codes: int, **texts: str) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI ``responses`` of a route's error answers: ``codes``, described by ``ERROR_TEXTS`` or by
    ``texts`` (``s404="..."``)."""
    return {
        code: {
            "description": texts.get(f"s{code}", ERROR_TEXTS[code]),
            "content": {"application/json": {"schema": ERROR_BODY}},
        }
        for code in codes
    }


def validation_problems(errors: Sequence[Any], where: Sequence[str] = ()) -> list[dict[str, Any]]:
    """pydantic's errors as a 422's detail: ``loc`` (under ``where``), ``msg`` and ``type`` of each."""
    return [
        {"loc": [*where, *(str(p) for p in e.get("loc", ()))], "msg": e.get("msg", ""), "type": e.get("type", "")}
        for e in errors
    ]


def allowed_methods(request: Request) -> str:
    """``Allow`` of a 405: every method some route of the path takes (Starlette names only the first route's).
    Asked of the routes themselves, one method at a time, so routers included in routers answer too."""
    routes = request.app.router.routes
    allowed = [
        method
        for method in ("DELETE", "GET", "HEAD", "PATCH", "POST", "PUT")
        if any(route.matches({**request.scope, "method": method})[0] is Match.FULL for route in routes)
    ]
    return ", ".join(allowed)


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

    def invalid(request: Request, problems: list[dict[str, Any]]) -> Response:
        metrics = getattr(request.app.state, "metrics", None)
        if metrics is not None and request.url.path == "/v1/slot-update":  # a batch counts its invalid items
            metrics.slot_updates.labels(result="invalid").inc()
        return error_response(422, "invalid_request", problems)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        return invalid(request, validation_problems(exc.errors()))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 400 and isinstance(exc.__cause__, BodyTooLarge):  # FastAPI's JSON parse wraps it
            return error_response(413, "too_large", str(exc.__cause__))
        if exc.status_code == 400 and exc.__cause__ is not None:
            # FastAPI's body parse failed other than on JSON syntax (bytes that are not UTF-8): a body that is not
            # JSON, which every route but /v1/bid answers 422 as it answers a JSON syntax error.
            problem = {"loc": ["body"], "msg": f"the body is not valid JSON ({exc.__cause__})", "type": "json_invalid"}
            return invalid(request, [problem])
        if exc.status_code == 405:
            return error_response(405, "method_not_allowed", exc.detail, {"Allow": allowed_methods(request)})
        codes = {404: "not_found", 401: "unauthorized", 413: "too_large"}
        return error_response(exc.status_code, codes.get(exc.status_code, "http_error"), exc.detail, exc.headers)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error", extra={"path": request.url.path})
        return error_response(500, "internal_error", "unexpected server error (logged)")
