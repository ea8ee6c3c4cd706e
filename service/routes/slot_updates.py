"""``POST /v1/slot-update`` (one campaign's slot just ended) and its batch form for a slot boundary."""

from __future__ import annotations

from fastapi import APIRouter

from service.deps import Authorized, EpisodesDep, SettingsDep
from service.errors import ERROR_RESPONSES, ApiError
from service.schemas import SlotAnswer, SlotUpdate, SlotUpdateBatch, SlotUpdateBatchAnswer

router = APIRouter(prefix="/v1", tags=["slot updates"], responses=ERROR_RESPONSES, dependencies=[Authorized])


@router.post("/slot-update", response_model=SlotAnswer)
async def slot_update(update: SlotUpdate, episodes: EpisodesDep) -> SlotAnswer:
    """Report slot `slot`'s stats; answers the ratio for the next slot.

    Re-sending the same update answers the same with `replayed: true`. Other stats for an applied slot, a
    skipped slot, or another episode: 409 with `expected_slot`. Concurrent senders never apply a slot twice.
    """
    return await episodes.apply(update)


@router.post("/slot-update/batch", response_model=SlotUpdateBatchAnswer)
async def slot_update_batch(
    batch: SlotUpdateBatch, episodes: EpisodesDep, settings: SettingsDep
) -> SlotUpdateBatchAnswer:
    """A slot boundary of many campaigns: one model call for all. One result per update, in order, each with its
    own status (200, or the 404/409/422/503 the single form would answer): one bad item fails only itself."""
    if len(batch.updates) > settings.max_batch_updates:
        raise ApiError(413, "too_large", f"at most {settings.max_batch_updates} updates per batch")
    return await episodes.apply_batch(batch.updates)
