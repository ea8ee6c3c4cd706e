"""``POST /v1/slot-update`` (one campaign's slot just ended) and its batch form for a slot boundary."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import ValidationError

from service.deps import Authorized, EpisodesDep, JsonBody, SettingsDep
from service.errors import ERROR_RESPONSES, ApiError, validation_problems
from service.schemas import (
    BatchItem,
    SlotAnswer,
    SlotUpdate,
    SlotUpdateBatchAnswer,
    SlotUpdateBatchItems,
)

router = APIRouter(prefix="/v1", tags=["slot updates"], responses=ERROR_RESPONSES, dependencies=[Authorized, JsonBody])


@router.post("/slot-update", response_model=SlotAnswer)
async def slot_update(update: SlotUpdate, episodes: EpisodesDep) -> SlotAnswer:
    """Report slot `slot`'s stats; answers the ratio for the next slot.

    Re-sending the same update answers the same with `replayed: true`. Other stats for an applied slot, a
    skipped slot, or another episode: 409 with `expected_slot`. Concurrent senders never apply a slot twice.
    """
    return await episodes.apply(update)


_VALIDATE_CHUNK = 1024
"""Updates validated between two turns of the bids in flight (a batch of 20,000 validated at once held the loop for
about 180 ms)."""

# The request body is documented as SlotUpdateBatch and parsed with each update raw (SlotUpdateBatchItems).
_BATCH_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/SlotUpdateBatch"}}},
    }
}


@router.post("/slot-update/batch", response_model=SlotUpdateBatchAnswer, openapi_extra=_BATCH_BODY)
async def slot_update_batch(
    batch: SlotUpdateBatchItems, episodes: EpisodesDep, settings: SettingsDep
) -> SlotUpdateBatchAnswer:
    """A slot boundary of many campaigns: one model call for all. One result per update, in order, each with its
    own status (200, or the 404/409/422/503 the single form would answer): one bad item fails only itself."""
    if len(batch.updates) > settings.max_batch_updates:
        raise ApiError(413, "too_large", f"at most {settings.max_batch_updates} updates per batch")
    results: list[BatchItem | None] = [None] * len(batch.updates)
    valid: list[tuple[int, SlotUpdate]] = []
    for i, raw in enumerate(batch.updates):
        try:
            valid.append((i, SlotUpdate.model_validate(raw)))
        except ValidationError as exc:
            results[i] = _invalid_item(raw, exc)
            episodes.metrics.slot_updates.labels(result="invalid").inc()
        if (i + 1) % _VALIDATE_CHUNK == 0:  # ~10 ms of validation at most between two turns of the bids
            await episodes.yield_to_bids()
    if valid:
        answered = await episodes.apply_batch([u for _, u in valid])
        for (i, _), item in zip(valid, answered.results, strict=True):
            results[i] = item
    return SlotUpdateBatchAnswer.of([r for r in results if r is not None])


def _invalid_item(raw: Any, exc: ValidationError) -> BatchItem:
    """The 422 of one update that does not validate, as the single form words it."""
    campaign = raw.get("campaign_id") if isinstance(raw, dict) else None
    return BatchItem(
        status=422,
        campaign_id=campaign if isinstance(campaign, str) else None,
        error="invalid_request",
        detail=validation_problems(exc.errors(), where=["updates"]),
    )
