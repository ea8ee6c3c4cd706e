"""Schemathesis hooks: the rules JSON Schema cannot state, applied to the requests schemathesis generates as valid.

The OpenAPI document states every constraint of one field (types, ranges, id patterns, required and unknown
fields). Three rules relate fields to each other, so the schema states them in prose only, and the service answers
422 when they are broken:

* a slot's ``wins`` cannot exceed its ``auctions``;
* a columnar bid has one count per campaign id, and the counts add up to the number of utilities;
* a binary bid names its campaign in ``?campaign_id=`` and sends finite float32 utilities in [0, 1e30], a
  multiple of 4 bytes.

A request generated as valid (positive mode) is brought within them, deterministically from what was drawn;
requests generated as invalid (negative mode) are left as they are, so every refusal is still probed. Loaded by
``test_schemathesis.py``, and by the CLI with ``SCHEMATHESIS_HOOKS=tests/serving/schemathesis_hooks.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import schemathesis

MAX_UTILITY = 1e30
BINARY = "application/octet-stream"
CAMPAIGN = "shop-42"
"""The campaign a binary bid drawn without one names (the test registers it)."""


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _slot_stats(body: Any) -> Any:
    wins, auctions = (body.get("wins"), body.get("auctions")) if isinstance(body, dict) else (None, None)
    if _number(wins) and _number(auctions) and wins > auctions:
        return {**body, "wins": auctions, "auctions": wins}
    return body


def _columnar(body: Any) -> Any:
    if not isinstance(body, dict) or not all(isinstance(body.get(k), list) for k in ("campaign_ids", "utilities")):
        return body
    n, total = len(body["campaign_ids"]), len(body["utilities"])
    if n == 0:
        return body
    # The utilities split as evenly as they go, campaign after campaign.
    return {**body, "counts": [total // n + (1 if k < total % n else 0) for k in range(n)]}


def _float32_utilities(data: Any) -> bytes:
    raw = data if isinstance(data, bytes) else getattr(data, "data", b"")
    values = np.frombuffer(raw[: len(raw) // 4 * 4], dtype="<f4")
    values = np.clip(np.nan_to_num(np.abs(values), nan=0.0, posinf=MAX_UTILITY), 0.0, MAX_UTILITY)
    return (values if values.size else np.zeros(1)).astype("<f4").tobytes()


@schemathesis.hook
def map_case(context: Any, case: Any) -> Any:
    if case.meta is None or not case.meta.generation.mode.is_positive:
        return case
    method, path = case.method.upper(), case.operation.path
    if (method, path) == ("POST", "/v1/slot-update"):
        case.body = _slot_stats(case.body)
    elif (method, path) == ("POST", "/v1/bid"):
        if case.media_type == BINARY:
            case.body = _float32_utilities(case.body)
            case.query = {**(case.query or {}), "campaign_id": (case.query or {}).get("campaign_id", CAMPAIGN)}
        elif isinstance(case.body, dict) and "campaign_ids" in case.body:
            case.body = _columnar(case.body)
    return case
