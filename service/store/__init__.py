"""Per-campaign belief-state stores: in-process, Redis, Redis Cluster; one contract (:class:`EpisodeStore`)."""

from __future__ import annotations

from typing import TypedDict
from urllib.parse import urlsplit

from service.store.base import (
    DEFAULT_STATE_TTL_S,
    CasItem,
    EpisodeStore,
    Notice,
    StoreBusy,
    Stored,
    StoreError,
    StoreUnavailable,
    Summary,
    UnknownCampaign,
    redacted,
)
from service.store.cluster import RedisClusterStore, parse_cluster_url
from service.store.memory import MemoryStore
from service.store.redis import RedisStore

__all__ = [
    "CasItem",
    "EpisodeStore",
    "MemoryStore",
    "Notice",
    "RedisClusterStore",
    "RedisStore",
    "StoreBusy",
    "StoreError",
    "StoreUnavailable",
    "Stored",
    "Summary",
    "UnknownCampaign",
    "check_store_url",
    "open_store",
]


class StoreOptions(TypedDict):
    """The options every Redis-backed store takes beside its URL (:class:`RedisStore`'s keywords)."""

    prefix: str
    state_ttl_s: int
    pool_size: int
    pool_timeout_s: float
    timeout_s: float


async def open_store(
    url: str | None = None,
    *,
    prefix: str = "rcb",
    state_ttl_s: int = DEFAULT_STATE_TTL_S,
    pool_size: int = 32,
    pool_timeout_s: float = 0.5,
    timeout_s: float = 0.25,
) -> EpisodeStore:
    """Open the store named by ``url``.

    - ``None`` or ``"memory"``: :class:`MemoryStore` (only ``state_ttl_s`` applies);
    - ``redis://host:port/db`` or ``rediss://...``: :class:`RedisStore`;
    - ``redis+cluster://host:port[,host:port...]``: :class:`RedisClusterStore`.

    Raises ``ValueError`` for a URL it cannot use. Never fails because Redis is down: the store opens degraded
    (``ping()`` answers ``False``, other calls raise ``StoreUnavailable``) and recovers when Redis comes back.
    """
    if url is None or url.strip() in ("memory", "memory://"):
        return MemoryStore(state_ttl_s=state_ttl_s)
    url = url.strip()
    options = StoreOptions(
        prefix=prefix, state_ttl_s=state_ttl_s, pool_size=pool_size, pool_timeout_s=pool_timeout_s, timeout_s=timeout_s
    )
    scheme = check_store_url(url)
    if scheme == "redis+cluster":
        return RedisClusterStore(url, **options)
    return RedisStore(url, **options)


def check_store_url(url: str) -> str:
    """The scheme of a Redis store URL the store can open (``redis``, ``rediss`` or ``redis+cluster``); a
    ``ValueError`` naming what is wrong otherwise. The settings call it too, so a bad URL is a bad setting at startup
    rather than an error when the store opens."""
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme in ("redis", "rediss"):
        parts = urlsplit(url)
        try:
            parts.port  # noqa: B018 (raises ValueError on a malformed port)
        except ValueError as e:
            raise ValueError(f"bad port in store URL {redacted(url)!r}: {e}") from None
        if not parts.hostname:
            raise ValueError(f"store URL {redacted(url)!r} names no host (expected {scheme}://host:port/db)")
        db = parts.path.strip("/")
        if db and not db.isdigit():
            raise ValueError(f"store URL {redacted(url)!r}: the path must be a database number, got {db!r}")
        return scheme
    if scheme == "redis+cluster":
        parse_cluster_url(url)
        return scheme
    raise ValueError(
        f"unsupported store URL {redacted(url)!r}: expected 'memory' (or none), redis://host:port/db, "
        "rediss://host:port/db or redis+cluster://host:port[,host:port...]"
    )
