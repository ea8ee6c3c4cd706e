"""The per-campaign belief-state store: one opaque, versioned blob per campaign.

The store knows three things about a campaign's state: the episode id, the slot (how many slots have been
applied, 0..48) and the blob (bytes from ``model/state.py``, never decoded here). Every store (memory, Redis,
Redis Cluster) implements :class:`EpisodeStore` with the same semantics; ``tests/service/test_store_contract.py``
runs one test body on all of them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class Stored:
    """One campaign's state as stored: the episode it belongs to, the number of slots applied, the blob."""

    episode: str
    slot: int
    blob: bytes


DEFAULT_STATE_TTL_S = 7 * 24 * 3600
"""A campaign's state expires this long after its last write, in every store (``RCB_STATE_TTL_S``)."""

CasItem = tuple[str, str, int, bytes, bytes | None]
"""``(campaign, episode, expected_slot, blob, expected)``: one :meth:`EpisodeStore.compare_and_set` of a batch."""


class StoreError(Exception):
    """Base class of every error a store raises."""


class StoreUnavailable(StoreError):
    """The store could not be reached in time (timeout, connection refused, cluster down); nothing was written.

    A write that timed out after the request reached the server may still have been applied there; both writes are
    compare-and-set style, so a retry is safe: it either applies or reports the state it finds.
    """


class StoreBusy(StoreUnavailable):
    """Every connection this process may open to the store stayed busy past ``pool_timeout_s``: the process is
    overloaded, the store is not known to be down (``rcb_store_up`` stays as it was). Nothing was sent."""


class UnknownCampaign(StoreError, KeyError):
    """``compare_and_set`` on a campaign that has no state (never registered, deleted, or expired by TTL).

    It is also a ``KeyError`` so that callers may treat it like a missing mapping key. ``.campaign`` holds the id.
    """

    def __init__(self, campaign: str) -> None:
        super().__init__(campaign)
        self.campaign = campaign

    def __str__(self) -> str:
        return f"unknown campaign {self.campaign!r}: no state stored (register an episode first)"


@dataclass(frozen=True)
class Summary:
    """What a written state bids, carried in the write's notice so that every process sharing the store updates its
    cache from the notice itself, without reading (or decoding) the state: the ratio decided for the next slot and
    whether the budget is spent. The store never computes it (blobs stay opaque): the writer passes it."""

    ratio: float
    budget_exhausted: bool


@dataclass(frozen=True)
class Notice:
    """One write, as a store's notice tells it: the campaign, the state it left (``episode``, ``slot``; a delete:
    ``("", -1)``) and, where the writer gave one, its :class:`Summary` (None: the notice says only that the state
    changed, so a cached copy must be read again)."""

    campaign: str
    episode: str = ""
    slot: int = -1
    summary: Summary | None = None


UpdateCallback = Callable[[Notice], None]
"""Called with the :class:`Notice` of every successful write; must not block (it runs on the event loop)."""

NOTICE_SEPARATOR = "\x1f"
"""Between the fields of a published notice (ids cannot contain it)."""


def summary_suffix(summary: Summary | None) -> str:
    """The end of a notice that carries ``summary``: ``\\x1f<ratio>\\x1f<0|1>``, the ratio as ``repr`` writes it (so
    it reads back as the same float); empty for none. The write scripts append it to
    ``campaign\\x1fepisode\\x1fslot``."""
    if summary is None:
        return ""
    return f"{NOTICE_SEPARATOR}{float(summary.ratio)!r}{NOTICE_SEPARATOR}{int(bool(summary.budget_exhausted))}"


def format_notice(notice: Notice) -> str:
    """The text :func:`parse_notice` reads back (a delete: the bare campaign id)."""
    if notice.slot < 0:
        return notice.campaign
    head = NOTICE_SEPARATOR.join((notice.campaign, notice.episode, str(notice.slot)))
    return head + summary_suffix(notice.summary)


def parse_notice(notice: str) -> Notice:
    """``campaign\\x1fepisode\\x1fslot[\\x1fratio\\x1fexhausted]`` -> :class:`Notice`. A bare campaign id (a delete)
    leaves no state; a notice without the last two fields (a writer that sends none) or with unreadable ones carries
    no summary."""
    campaign, episode, slot_text, ratio_text, exhausted = (*notice.split(NOTICE_SEPARATOR, 4), "", "", "", "")[:5]
    try:
        slot = int(slot_text)
    except ValueError:
        return Notice(campaign)
    summary = None
    if exhausted in ("0", "1"):
        try:
            ratio = float(ratio_text)
        except ValueError:
            ratio = math.nan
        if math.isfinite(ratio):
            summary = Summary(ratio, exhausted == "1")
    return Notice(campaign, episode, slot, summary)


@runtime_checkable
class EpisodeStore(Protocol):
    """What the service needs from a belief-state store. Every method is a coroutine.

    Redis-backed stores raise :class:`StoreUnavailable` (never a raw redis error) when the server cannot be reached
    within their timeout; ``ping`` answers ``False`` instead of raising.
    """

    async def get(self, campaign: str) -> Stored | None:
        """The campaign's state, or ``None`` if it has none."""
        ...

    async def get_many(self, campaigns: Sequence[str]) -> list[Stored | None]:
        """States of ``campaigns``, in order, ``None`` for missing ones (one round trip on a single Redis)."""
        ...

    async def get_each(self, campaigns: Sequence[str]) -> list[Stored | StoreError | None]:
        """:meth:`get_many` with its failures per item, as :meth:`compare_and_set_many` answers: per campaign, in
        order, its state, None (no state) or the error its read raised, as a value. On a Redis Cluster a stalled or
        lost node fails its own campaigns only; on one server a failure is every item's."""
        ...

    async def register(
        self, campaign: str, episode: str, blob: bytes, summary: Summary | None = None
    ) -> tuple[Stored, bool]:
        """Atomically start ``episode`` unless it is the stored one.

        No state, or a different stored episode: store ``(episode, 0, blob)`` and return it with ``True``.
        The same episode already stored: write nothing and return the stored state with ``False`` (an idempotent
        re-confirm, whatever slot it has reached). A write's notice carries ``summary`` (what the new state bids).
        """
        ...

    async def compare_and_set(
        self,
        campaign: str,
        episode: str,
        expected_slot: int,
        blob: bytes,
        expected: bytes | None = None,
        summary: Summary | None = None,
    ) -> Stored | None:
        """Atomically apply one slot: if the stored ``(episode, slot)`` is ``(episode, expected_slot)`` (and, given
        ``expected``, the stored blob is exactly ``expected``: the state the new one was computed from), store
        ``(episode, expected_slot + 1, blob)`` and return ``None``. Otherwise write nothing and return the stored
        state. ``expected`` catches what the pair cannot: a re-registration A -> B -> A between the read and the
        write leaves ``(A, 0)`` stored again, with the new registration's constraints. Raises
        :class:`UnknownCampaign` if the campaign has no state. A write's notice carries ``summary``.
        """
        ...

    async def compare_and_set_many(
        self, items: Sequence[CasItem], summaries: Sequence[Summary | None] | None = None, chunk: int = 256
    ) -> list[Stored | StoreError | None]:
        """:meth:`compare_and_set` of many ``(campaign, episode, expected_slot, blob, expected)``, each checked and
        written on its own, as alone (a batch of slot updates); ``summaries``, one per item where given, go into the
        writes' notices; ``chunk`` items a round trip where the store has round trips. Per item, in order: None
        (written), the :class:`Stored` state found instead, or the error the single call would raise, as a
        value."""
        ...

    async def delete(self, campaign: str) -> None:
        """Forget the campaign's state (no error if it has none)."""
        ...

    async def campaigns(self, limit: int = 200) -> list[str]:
        """Up to ``limit`` campaign ids that have a state, sorted (for status pages; a scan, not for hot paths)."""
        ...

    async def ping(self) -> bool:
        """Whether the store answers within its timeout; ``False`` rather than an exception when it does not."""
        ...

    async def subscribe(self, on_update: UpdateCallback) -> None:
        """Deliver to ``on_update`` the :class:`Notice` of every write (a register that wrote, an applied
        compare_and_set, a delete of an existing state), made by any process sharing the store. May be called more
        than once."""
        ...

    @property
    def heard_updates(self) -> bool:
        """Whether the subscription has been confirmed once since :meth:`subscribe` (the in-process store: always),
        so that the writes of other processes reach this one. It stays true through a later loss, which reconnects
        in the background: one stalled node of a cluster does not make every process unready."""
        ...

    async def aclose(self) -> None:
        """Stop delivering updates and release connections."""
        ...


def check_prefix(prefix: str, name: str = "prefix") -> str:
    """A key prefix Redis Cluster can shard under: non-empty and without hash-tag braces (``name`` for messages)."""
    if not prefix or any(ch in prefix for ch in "{}"):
        raise ValueError(f"{name} must be non-empty and free of '{{' and '}}' (hash tags), got {prefix!r}")
    return prefix


def check_campaign(campaign: str) -> str:
    if not isinstance(campaign, str) or not campaign:
        raise ValueError(f"campaign id must be a non-empty str, got {campaign!r}")
    return campaign


def check_write(episode: str, blob: bytes, expected_slot: int | None = None) -> None:
    """Refuse arguments that no store could round-trip (raised before anything is sent)."""
    if not isinstance(episode, str) or not episode:
        raise ValueError(f"episode id must be a non-empty str, got {episode!r}")
    if not isinstance(blob, bytes | bytearray | memoryview):
        raise TypeError(f"blob must be bytes, got {type(blob).__name__}")
    if expected_slot is not None and (
        isinstance(expected_slot, bool) or not isinstance(expected_slot, int) or expected_slot < 0
    ):
        raise ValueError(f"expected_slot must be an int >= 0, got {expected_slot!r}")


def check_cas_items(items: Sequence[CasItem], summaries: Sequence[Summary | None] | None = None) -> None:
    """:func:`check_campaign` and :func:`check_write` of every item of a ``compare_and_set_many`` (and one summary
    per item, where given), before any write."""
    if summaries is not None and len(summaries) != len(items):
        raise ValueError(f"{len(summaries)} summaries for {len(items)} items")
    for campaign, episode, expected_slot, blob, _ in items:
        check_campaign(campaign)
        check_write(episode, blob, expected_slot)


def redacted(url: str) -> str:
    """``url`` with its password masked, for error messages and logs: the user part's (``redis://:secret@h:6379`` ->
    ``redis://:***@h:6379``, up to the last ``@``, so an unencoded ``@`` or ``/`` in it is masked too), with or
    without a scheme, and a ``password=`` query parameter's."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    userinfo, at, hosts = rest.rpartition("@")
    if at:
        user, colon, _ = userinfo.partition(":")
        rest = f"{user}{colon}{'***' if colon else ''}@{hosts}"
    return scheme + sep + re.sub(r"(?i)(password=)[^&#]*", r"\1***", rest)
