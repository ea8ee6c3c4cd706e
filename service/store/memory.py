"""In-process store: a dict in the order of the last write. The reference semantics and the embedded default.

State lives only as long as the process and is seen only by it (``subscribe`` delivers this instance's writes,
synchronously, right after each one). A state expires ``state_ttl_s`` after its last write, as on Redis; expired
states are dropped when read and, oldest first, on every write, so an embedded service does not grow without
bound. Every operation runs on the event loop without awaiting inside, so each is atomic as it stands: no lock.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

from service.store.base import (
    DEFAULT_STATE_TTL_S,
    CasItem,
    Notice,
    Stored,
    StoreError,
    Summary,
    UnknownCampaign,
    UpdateCallback,
    check_campaign,
    check_cas_items,
    check_write,
)

log = logging.getLogger(__name__)


class MemoryStore:
    """:class:`~service.store.base.EpisodeStore` over a dict; ``clock`` (seconds, monotonic) for tests."""

    def __init__(self, state_ttl_s: float = DEFAULT_STATE_TTL_S, clock: Callable[[], float] = time.monotonic) -> None:
        if state_ttl_s <= 0:
            raise ValueError(f"state_ttl_s must be > 0, got {state_ttl_s!r}")
        self.state_ttl_s = state_ttl_s
        self._clock = clock
        self._states: OrderedDict[str, tuple[Stored, float]] = OrderedDict()
        """Each campaign's state and when it expires, the least recently written first."""
        self._subscribers: list[UpdateCallback] = []

    def _live(self, campaign: str) -> Stored | None:
        entry = self._states.get(campaign)
        if entry is None:
            return None
        if entry[1] <= self._clock():
            del self._states[campaign]
            return None
        return entry[0]

    def _put(self, campaign: str, stored: Stored) -> None:
        now = self._clock()
        self._states[campaign] = (stored, now + self.state_ttl_s)
        self._states.move_to_end(campaign)
        while self._states:  # the oldest writes expire first: drop them while they are due
            oldest, (_, expires) = next(iter(self._states.items()))
            if expires > now:
                break
            del self._states[oldest]

    def _notify(self, notice: Notice) -> None:
        for callback in self._subscribers:
            try:
                callback(notice)
            except Exception:
                log.exception("store update callback failed for campaign %r", notice.campaign)

    async def get(self, campaign: str) -> Stored | None:
        return self._live(check_campaign(campaign))

    async def get_many(self, campaigns: Sequence[str]) -> list[Stored | None]:
        return [self._live(check_campaign(c)) for c in campaigns]

    async def get_each(self, campaigns: Sequence[str]) -> list[Stored | StoreError | None]:
        return list(await self.get_many(campaigns))  # nothing to fail

    async def register(
        self, campaign: str, episode: str, blob: bytes, summary: Summary | None = None
    ) -> tuple[Stored, bool]:
        check_campaign(campaign)
        check_write(episode, blob)
        current = self._live(campaign)
        if current is not None and current.episode == episode:
            return current, False  # a re-confirm writes nothing: its TTL is untouched, as on Redis
        new = Stored(episode, 0, bytes(blob))
        self._put(campaign, new)
        self._notify(Notice(campaign, episode, 0, summary))
        return new, True

    async def compare_and_set(
        self,
        campaign: str,
        episode: str,
        expected_slot: int,
        blob: bytes,
        expected: bytes | None = None,
        summary: Summary | None = None,
    ) -> Stored | None:
        check_campaign(campaign)
        check_write(episode, blob, expected_slot)
        return self._compare_and_set(campaign, episode, expected_slot, blob, expected, summary)

    def _compare_and_set(
        self,
        campaign: str,
        episode: str,
        expected_slot: int,
        blob: bytes,
        expected: bytes | None,
        summary: Summary | None = None,
    ) -> Stored | None:
        current = self._live(campaign)
        if current is None:
            raise UnknownCampaign(campaign)
        if current.episode != episode or current.slot != expected_slot:
            return current
        if expected is not None and current.blob != bytes(expected):
            return current
        self._put(campaign, Stored(episode, expected_slot + 1, bytes(blob)))
        self._notify(Notice(campaign, episode, expected_slot + 1, summary))
        return None

    async def compare_and_set_many(
        self, items: Sequence[CasItem], summaries: Sequence[Summary | None] | None = None, chunk: int = 256
    ) -> list[Stored | StoreError | None]:
        """:meth:`compare_and_set` of each item, in order; an item's error is its answer, not raised."""
        check_cas_items(items, summaries)
        out: list[Stored | StoreError | None] = []
        for k, item in enumerate(items):
            try:
                out.append(self._compare_and_set(*item, None if summaries is None else summaries[k]))
            except UnknownCampaign as exc:
                out.append(exc)
        return out

    async def delete(self, campaign: str) -> None:
        check_campaign(campaign)
        existed = self._live(campaign) is not None
        self._states.pop(campaign, None)
        if existed:
            self._notify(Notice(campaign))

    async def ping(self) -> bool:
        return True

    async def campaigns(self, limit: int = 200) -> list[str]:
        return sorted(c for c in list(self._states) if self._live(c) is not None)[:limit]

    async def subscribe(self, on_update: UpdateCallback) -> None:
        self._subscribers.append(on_update)

    @property
    def heard_updates(self) -> bool:
        return True  # one process: every write is this process's own

    async def aclose(self) -> None:
        self._subscribers.clear()
