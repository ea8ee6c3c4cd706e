"""``POST /v1/bid``: score a batch of impressions, ``bid_i = ratio x utility_i``, with no store round trip.

Three bodies, told apart by content type and shape:

* JSON ``{campaign_id, utilities: [...]}`` -> ``{campaign_id, bids, bid_ratio, slot, stale}``;
* ``application/octet-stream``: little-endian float32 utilities, ``?campaign_id=`` in the query ->
  float32 bids, with ``X-Bid-Ratio``, ``X-Slot`` and ``X-Stale`` headers;
* columnar JSON for many campaigns ``{campaign_ids, counts, utilities}`` -> ``{bids, bid_ratios, slots, stale}``.

The body goes through orjson straight into numpy (no per-impression objects); the ratio comes from the
process's :class:`service.ratio_cache.RatioCache`. A campaign whose budget is spent, or whose day is
over, bids 0.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import orjson
from fastapi import APIRouter, Request, Response

from service.errors import ERROR_BODY, ApiError, bad_request, error_responses, store_unavailable, unknown_campaign
from service.ratio_cache import CachedRatio
from service.schemas import (
    CAMPAIGN_ID,
    ID_SCHEMA,
    MAX_UTILITY,
    BidAnswer,
    BidRequest,
    ColumnarBidAnswer,
    ColumnarBidRequest,
)
from service.store import StoreUnavailable

router = APIRouter(prefix="/v1", tags=["bids"])

JSON = "application/json"
BINARY = "application/octet-stream"
_OPTIONS = orjson.OPT_SERIALIZE_NUMPY

_OPENAPI: dict[str, Any] = {
    "parameters": [
        {
            "name": "campaign_id",
            "in": "query",
            "required": False,
            "description": "The campaign of the binary (application/octet-stream) form, which needs it (422 without "
            "it); the JSON forms name their campaigns in the body and refuse only an invalid id here",
            "schema": ID_SCHEMA,
        }
    ],
    "requestBody": {
        "required": True,
        "content": {
            JSON: {
                "schema": {
                    "oneOf": [
                        {"$ref": "#/components/schemas/BidRequest"},
                        {"$ref": "#/components/schemas/ColumnarBidRequest"},
                    ]
                }
            },
            BINARY: {
                "schema": {
                    "type": "string",
                    "format": "binary",
                    "minLength": 4,
                    "description": "Little-endian float32 utilities (a multiple of 4 bytes), each finite, 0 to 1e30",
                }
            },
        },
    },
    "responses": {
        "200": {
            "description": "Bids in the order of the utilities (binary in, binary float32 out)",
            "content": {
                JSON: {
                    "schema": {
                        "oneOf": [
                            {"$ref": "#/components/schemas/BidAnswer"},
                            {"$ref": "#/components/schemas/ColumnarBidAnswer"},
                        ]
                    }
                },
                BINARY: {"schema": {"type": "string", "format": "binary"}},
            },
        },
        "400": {
            "description": "The body is not JSON (`malformed_json`): this route parses its body itself",
            "content": {JSON: {"schema": ERROR_BODY}},
        },
    },
}
_RESPONSES = error_responses(
    404,
    413,
    415,
    422,
    503,
    s404="`unknown_campaign`: a campaign has no episode",
    s413="Too large (`too_large`): over `max_utilities` utilities or `max_bid_campaigns` campaign ids, or the body "
    "over `max_body_bytes`",
    s415="Neither application/json nor application/octet-stream (`unsupported_media_type`)",
    s422="Invalid request (`invalid_request`): the detail says what (a cross-field rule included: one count per "
    "campaign id, adding up to the utilities; the binary form's `campaign_id` and multiple of 4 bytes)",
    s503="A campaign this process has not cached while the store is unreachable (`store_unavailable`)",
)
DOCUMENTED_MODELS = (BidRequest, ColumnarBidRequest, BidAnswer, ColumnarBidAnswer)
"""Registered as OpenAPI components by ``service.main`` (the route parses raw bodies itself)."""


def _utilities(values: Any, limit: int, body: bytes, what: str = "utilities") -> np.ndarray:
    if not isinstance(values, list) or not values:
        raise bad_request(f"{what} must be a non-empty array of numbers")
    if len(values) > limit:
        raise ApiError(413, "too_large", f"at most {limit} utilities per request")
    # numpy reads [true, 2.5] as [1.0, 2.5]. Checking every value's type costs nearly the conversion again, so it runs
    # only when the body could hold a boolean: `true` spells an r and `false` an f, which no number and no key of a
    # bid body does (one memchr each, ~10 us for 100k utilities; a campaign id with an r or f takes the check).
    if (b"r" in body or b"f" in body) and bool in set(map(type, values)):
        raise bad_request(f"{what} must be numbers, not booleans")
    try:
        array = np.asarray(values)
    except ValueError:  # ragged nesting ([1, [2]], [[1], [2, 3]]): numpy refuses an inhomogeneous shape
        raise bad_request(f"{what} must be an array of numbers") from None
    if array.ndim != 1 or array.dtype.kind not in "fiu":
        raise bad_request(f"{what} must be an array of numbers")
    array = array.astype(np.float64, copy=False)
    _check_values(array, what)
    return array


def _check_values(array: np.ndarray, what: str) -> None:
    # Finite, >= 0 and <= MAX_UTILITY, in two reductions and no temporary arrays: a NaN makes min() NaN (not >= 0),
    # -inf or any negative makes min() < 0, +inf or a huge value fails the max() bound. Empty arrays are refused by the
    # callers before.
    if not (array.min() >= 0 and array.max() <= MAX_UTILITY):
        raise bad_request(f"{what} must be finite, >= 0 and at most {MAX_UTILITY:g}")


def _campaign(value: Any) -> str:
    if not isinstance(value, str) or not CAMPAIGN_ID.fullmatch(value):
        raise bad_request("campaign_id must be 1-128 characters of letters, digits and . _ : -")
    return value


async def _entries(campaigns: list[str], cache: Any, store: Any) -> tuple[list[CachedRatio], bool]:
    try:
        entries, stale = await cache.get_many(campaigns, store)
    except StoreUnavailable as exc:
        raise store_unavailable(exc) from None
    unknown = [c for c, e in zip(campaigns, entries, strict=True) if e is None]
    if unknown:
        raise (
            unknown_campaign(unknown[0])
            if len(unknown) == 1
            else ApiError(
                404, "unknown_campaign", f"campaigns without an episode: {', '.join(sorted(set(unknown))[:20])}"
            )
        )
    return entries, stale


@router.post("/bid", openapi_extra=_OPENAPI, response_model=None, responses=_RESPONSES)
async def bid(request: Request) -> Response:
    """Score impressions: `bid = ratio x utility`, ratio from this process's cache (no store round trip)."""
    # The app's objects straight from app.state, not through service.deps: FastAPI runs each sync dependency in a
    # worker thread, and four thread hops cost several times the whole bid (see BENCHMARKS.md, Service).
    state = request.app.state
    cache, store, settings, metrics = state.cache, state.store, state.settings, state.metrics
    cache.bids_in_flight += 1
    cache.last_bid = time.monotonic()
    try:
        return await _bid(request, cache, store, settings, metrics)
    finally:
        cache.bids_in_flight -= 1


async def _bid(request: Request, cache: Any, store: Any, settings: Any, metrics: Any) -> Response:
    content_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if content_type not in (JSON, BINARY):
        raise ApiError(415, "unsupported_media_type", f"send {JSON} or {BINARY}, not {content_type or 'nothing'!r}")
    body = await request.body()
    if not body:
        raise bad_request("empty body")
    if content_type == BINARY:
        return await _binary(request, body, cache, store, settings, metrics)
    if request.scope.get("query_string"):  # the JSON forms name their campaigns in the body; one sent here is an id
        in_query = _query_campaign(request)
        if in_query is not None:
            _campaign(in_query)
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, "malformed_json", f"the body is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise bad_request("the body must be a JSON object")
    if "campaign_ids" in data:
        return await _columnar(data, body, cache, store, settings, metrics)
    extra = set(data) - {"campaign_id", "utilities"}
    if extra:
        raise bad_request(f"unknown fields: {', '.join(sorted(map(str, extra)))}")
    campaign = _campaign(data.get("campaign_id"))
    utilities = _utilities(data.get("utilities"), settings.max_utilities, body)
    (entry,), stale = await _entries([campaign], cache, store)
    metrics.impressions.inc(utilities.size)
    out = {
        "campaign_id": campaign,
        "bids": utilities * entry.ratio,
        "bid_ratio": entry.ratio,
        "slot": entry.slot,
        "stale": stale,
    }
    return Response(orjson.dumps(out, option=_OPTIONS), media_type=JSON)


def _query_campaign(request: Request) -> Any:
    """``?campaign_id=`` without building Starlette's QueryParams when it is the whole, unescaped query."""
    query: bytes = request.scope.get("query_string", b"")
    if query.startswith(b"campaign_id=") and not any(c in query for c in b"&%+;"):
        return query[12:].decode("latin-1")
    return request.query_params.get("campaign_id")


async def _binary(request: Request, body: bytes, cache: Any, store: Any, settings: Any, metrics: Any) -> Response:
    campaign = _campaign(_query_campaign(request))
    if len(body) % 4:
        raise bad_request(f"a float32 body has a multiple of 4 bytes, not {len(body)}")
    if len(body) // 4 > settings.max_utilities:
        raise ApiError(413, "too_large", f"at most {settings.max_utilities} utilities per request")
    utilities = np.frombuffer(body, dtype="<f4")
    _check_values(utilities, "utilities")
    (entry,), stale = await _entries([campaign], cache, store)
    metrics.impressions.inc(utilities.size)
    bids = (utilities * np.float32(entry.ratio)).astype("<f4", copy=False)
    headers = {"x-bid-ratio": repr(entry.ratio), "x-slot": str(entry.slot), "x-stale": "1" if stale else "0"}
    return Response(bids.tobytes(), media_type=BINARY, headers=headers)


def _a_count(value: Any) -> bool:
    if isinstance(value, float):
        return value.is_integer() and value >= 0
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


async def _columnar(data: dict[str, Any], body: bytes, cache: Any, store: Any, settings: Any, metrics: Any) -> Response:
    extra = set(data) - {"campaign_ids", "counts", "utilities"}
    if extra:
        raise bad_request(f"unknown fields: {', '.join(sorted(map(str, extra)))}")
    campaigns = data.get("campaign_ids")
    counts = data.get("counts")
    if not isinstance(campaigns, list) or not campaigns:
        raise bad_request("campaign_ids must be a non-empty array")
    if len(campaigns) > settings.max_bid_campaigns:
        raise ApiError(413, "too_large", f"at most {settings.max_bid_campaigns} campaign ids per request")
    campaigns = [_campaign(c) for c in campaigns]
    if not isinstance(counts, list) or len(counts) != len(campaigns):
        raise bad_request("counts must be an array with one count per campaign id")
    if not all(type(c) is int and c >= 0 for c in counts):  # `type(c) is int`: not a boolean
        # A whole float such as 4.0 is a count, as in every JSON body of the API.
        if not all(_a_count(c) for c in counts):
            raise bad_request("counts must be integers >= 0")
        counts = [int(c) for c in counts]
    values = data.get("utilities")
    # No utilities at all is a request for the ratios only, when every campaign has no impression.
    empty = values == [] and not any(counts)
    utilities = np.empty(0) if empty else _utilities(values, settings.max_utilities, body)
    if sum(counts) != utilities.size:
        raise bad_request(f"counts add up to {sum(counts)} but {utilities.size} utilities were sent")
    unique = list(dict.fromkeys(campaigns))
    entries, stale = await _entries(unique, cache, store)
    by_campaign = dict(zip(unique, entries, strict=True))
    ratios = np.array([by_campaign[c].ratio for c in campaigns])
    metrics.impressions.inc(utilities.size)
    out = {
        "bids": utilities * np.repeat(ratios, counts),
        "bid_ratios": ratios,
        "slots": [by_campaign[c].slot for c in campaigns],
        "stale": stale,
    }
    return Response(orjson.dumps(out, option=_OPTIONS), media_type=JSON)
