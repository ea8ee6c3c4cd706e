"""In-process store: a dict plus a per-key ``asyncio.Lock``. The reference semantics and the embedded default.

State lives only as long as the process and is seen only by it (``subscribe`` delivers this instance's writes,
synchronously, right after each one).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from service.store.base import Stored, UnknownCampaign, UpdateCallback, check_campaign, check_write

log = logging.getLogger(__name__)


class MemoryStore:
    """:class:`~service.store.base.EpisodeStore` over a dict. No TTL: states stay until deleted or the process ends."""

    def __init__(self) -> None:
        self._states: dict[str, Stored] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._subscribers: list[UpdateCallback] = []

    def _lock(self, campaign: str) -> asyncio.Lock:
        lock = self._locks.get(campaign)
        if lock is None:
            lock = self._locks[campaign] = asyncio.Lock()
        return lock

    def _notify(self, campaign: str, episode: str = "", slot: int = -1) -> None:
        for callback in self._subscribers:
            try:
                callback(campaign, episode, slot)
            except Exception:
                log.exception("store update callback failed for campaign %r", campaign)

    async def get(self, campaign: str) -> Stored | None:
        return self._states.get(check_campaign(campaign))

    async def get_many(self, campaigns: Sequence[str]) -> list[Stored | None]:
        return [self._states.get(check_campaign(c)) for c in campaigns]

    async def register(self, campaign: str, episode: str, blob: bytes) -> tuple[Stored, bool]:
        check_campaign(campaign)
        check_write(episode, blob)
        async with self._lock(campaign):
            current = self._states.get(campaign)
            if current is not None and current.episode == episode:
                return current, False
            new = self._states[campaign] = Stored(episode, 0, bytes(blob))
        self._notify(campaign, episode, 0)
        return new, True

    async def compare_and_set(
        self, campaign: str, episode: str, expected_slot: int, blob: bytes, expected: bytes | None = None
    ) -> Stored | None:
        check_campaign(campaign)
        check_write(episode, blob, expected_slot)
        async with self._lock(campaign):
            current = self._states.get(campaign)
            if current is None:
                raise UnknownCampaign(campaign)
            if current.episode != episode or current.slot != expected_slot:
                return current
            if expected is not None and current.blob != bytes(expected):
                return current
            self._states[campaign] = Stored(episode, expected_slot + 1, bytes(blob))
        self._notify(campaign, episode, expected_slot + 1)
        return None

    async def delete(self, campaign: str) -> None:
        check_campaign(campaign)
        async with self._lock(campaign):
            existed = self._states.pop(campaign, None) is not None
        if existed:
            self._notify(campaign)

    async def ping(self) -> bool:
        return True

    async def campaigns(self, limit: int = 200) -> list[str]:
        return sorted(self._states)[:limit]

    async def subscribe(self, on_update: UpdateCallback) -> None:
        self._subscribers.append(on_update)

    async def aclose(self) -> None:
        self._subscribers.clear()
