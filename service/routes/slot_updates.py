"""``POST /v1/slot-update`` (one campaign's slot just ended) and its batch form for a slot boundary."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import ValidationError

from service.deps import Authorized, EpisodesDep, JsonBody, SettingsDep
from service.errors import ApiError, error_responses, validation_problems
from service.schemas import (
    BatchItem,
    SlotAnswer,
    SlotUpdate,
    SlotUpdateBatch,
    SlotUpdateBatchAnswer,
)

router = APIRouter(prefix="/v1", tags=["slot updates"], dependencies=[Authorized, JsonBody])


@router.post(
    "/slot-update",
    response_model=SlotAnswer,
    responses=error_responses(
        401,
        404,
        409,
        413,
        415,
        422,
        503,
        s404="`unknown_campaign`: the campaign has no episode (register it with PUT first)",
        s409="`slot_skipped`, `slot_conflict` or `wrong_episode` (with `detail.expected_slot`), `contended` (the "
        "state kept changing: resend) or `unreadable_state` (register again)",
    ),
)
async def slot_update(update: SlotUpdate, episodes: EpisodesDep) -> SlotAnswer:
    """Report slot `slot`'s stats; answers the ratio for the next slot.

    Re-sending the same update answers the same with `replayed: true`. Other stats for an applied slot, a
    skipped slot, or another episode: 409 with `expected_slot`. Concurrent senders never apply a slot twice.
    """
    return await episodes.apply(update)


_VALIDATE_CHUNK = 1024
"""Updates validated between two turns of the bids in flight (a batch of 20,000 validated at once held the loop for
about 180 ms)."""


@router.post(
    "/slot-update/batch",
    response_model=SlotUpdateBatchAnswer,
    responses=error_responses(
        401,
        413,
        415,
        422,
        503,
        s413="Too large (`too_large`): over `max_batch_updates` updates, or the body over `max_body_bytes`",
        s422="Invalid request (`invalid_request`): the body is not JSON or not `{updates: [...]}` with at least one "
        "update (an update that does not validate is a 422 item of a 200 answer)",
        s503="No read of the batch answered (`store_unavailable`): nothing was written, resend",
    ),
)
async def slot_update_batch(
    batch: SlotUpdateBatch, episodes: EpisodesDep, settings: SettingsDep
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
