"""Redis store: one HASH per campaign, writes through Lua scripts, updates broadcast on a pub/sub channel.

Layout: key ``f"{prefix}:{{{campaign}}}"`` (the campaign id in a hash tag, so Redis Cluster can shard by campaign)
holds the fields ``e`` (episode id), ``s`` (slot, decimal), ``b`` (the opaque blob) and ``w`` (the last write's
random token, which tells a re-send of that write from a repeat: :func:`_write_token`). ``register`` and
``compare_and_set`` run ``lua/register.lua`` and ``lua/compare_and_set.lua``: each checks, writes, refreshes the
TTL (``state_ttl_s``) and PUBLISHes the write's notice on ``f"{prefix}:updates"``, in one round trip. The notice
(:func:`~service.store.base.parse_notice`) names the state written and carries the writer's
:class:`~service.store.base.Summary` of it, so subscribers update their caches without reading the state.

Failure model: every command runs under the socket timeout ``timeout_s`` and an overall deadline
(``pool_timeout_s + 3 * timeout_s``); any redis or socket error becomes
:class:`~service.store.base.StoreUnavailable`. A refused connection is retried once (to get past a stale pooled
connection after a server restart, a re-send that answers as the first send did); a timeout is not retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib.resources
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

from redis import exceptions as redis_errors
from redis.asyncio import BlockingConnectionPool, ConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from service.store.base import (
    DEFAULT_STATE_TTL_S,
    CasItem,
    Notice,
    StoreBusy,
    Stored,
    StoreError,
    StoreUnavailable,
    Summary,
    UnknownCampaign,
    UpdateCallback,
    check_campaign,
    check_cas_items,
    check_prefix,
    check_write,
    format_notice,
    parse_notice,
    summary_suffix,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

_FIELDS = ("e", "s", "b")
_REDIS_FAILURES = (redis_errors.RedisError, redis_errors.RedisClusterException, OSError)
_RESUBSCRIBE_BACKOFF_S = (0.05, 5.0)  # first and largest wait before the listener reconnects


def lua_source(name: str) -> str:
    """The text of ``service/store/lua/<name>`` (package data)."""
    return importlib.resources.files("service.store").joinpath("lua", name).read_text(encoding="utf-8")


def _connection_retry() -> Retry:
    # One immediate retry, on connection errors only: gets past a pooled connection that died with the server.
    # Timeouts are not retried, so a stalled server costs one timeout_s, not several.
    return Retry(NoBackoff(), 1, supported_errors=(redis_errors.ConnectionError,))


def _fingerprint(expected: bytes | None) -> str:
    """What compare_and_set.lua compares the stored blob with (its SHA-1, as ``redis.sha1hex`` writes it); empty:
    no check."""
    return "" if expected is None else hashlib.sha1(bytes(expected), usedforsecurity=False).hexdigest()


def _write_token() -> bytes:
    """A fresh token per write call, stored with the state it writes: redis-py re-sends a call whose reply was lost
    (the connection retry above) with the same arguments, and the scripts answer a re-send that finds its own token
    as the first send did (written) instead of as a repeat (``replayed``) or a stale write."""
    return os.urandom(8)


def _decode(fields: Sequence[Any]) -> Stored | None:
    episode, slot, blob = fields
    if episode is None:
        return None
    return Stored(episode.decode("utf-8"), int(slot), bytes(blob) if blob is not None else b"")


def _pool_wait_timed_out(error: BaseException) -> bool:
    """Whether ``error`` is redis-py's BlockingConnectionPool giving up its wait for a free connection (a
    ConnectionError raised from the wait's timeout; nothing was sent)."""
    return (
        isinstance(error, redis_errors.ConnectionError)
        and isinstance(error.__cause__, TimeoutError)
        and str(error) == "No connection available."
    )


_REDIS_PY = os.path.dirname(redis_errors.__file__)


def _raised_in_redis_py(error: BaseException) -> bool:
    """Whether ``error`` was raised inside the redis package (its traceback's innermost frame is there)."""
    tb = error.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    where = os.path.dirname(tb.tb_frame.f_code.co_filename)
    return where == _REDIS_PY or where.startswith(_REDIS_PY + os.sep)  # not a sibling package such as redis_om


def describe_url(url: str) -> str:
    """``scheme://host:port/db`` without credentials, for messages and logs."""
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    return f"{parts.scheme}://{netloc}{parts.path}"


class RedisStore:
    """:class:`~service.store.base.EpisodeStore` on one Redis server (``redis://`` or ``rediss://`` URL).

    :param url: ``redis://[[user]:password@]host:port/db`` or ``rediss://...`` (TLS).
    :param prefix: key prefix; keys are ``{prefix}:{{campaign}}``, updates go to ``{prefix}:updates``.
    :param state_ttl_s: every write sets the campaign's key to expire this many seconds later.
    :param pool_size: most connections open at once; further commands wait up to ``pool_timeout_s`` for one.
    :param pool_timeout_s: how long a command may wait for a free connection.
    :param timeout_s: socket read timeout for every command (connect: ``max(timeout_s, 1 s)``); every call also
        gives up after ``pool_timeout_s + 3 * timeout_s`` in all.

    Construction opens no connection: a server that is down at start makes ``ping()`` answer ``False`` and the
    other methods raise ``StoreUnavailable`` until it is back.
    """

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "rcb",
        state_ttl_s: int = DEFAULT_STATE_TTL_S,
        pool_size: int = 32,
        pool_timeout_s: float = 0.5,
        timeout_s: float = 0.25,
    ) -> None:
        check_prefix(prefix)
        if state_ttl_s <= 0:
            raise ValueError(f"state_ttl_s must be > 0, got {state_ttl_s!r}")
        if pool_size < 1:
            raise ValueError(f"pool_size must be >= 1, got {pool_size!r}")
        if timeout_s <= 0 or pool_timeout_s < 0:
            raise ValueError(
                f"timeouts must be positive, got timeout_s={timeout_s!r}, pool_timeout_s={pool_timeout_s!r}"
            )
        self.url = url
        self.prefix = prefix
        self.channel = f"{prefix}:updates"
        self.state_ttl_ms = int(state_ttl_s * 1000)
        self.pool_size = pool_size
        self.pool_timeout_s = pool_timeout_s
        self.timeout_s = timeout_s
        # A burst of new connections on a busy event loop can take longer than one command's budget to connect; a
        # stalled (SIGSTOPped) server still accepts TCP connections, so the read timeout catches it anyway.
        self.connect_timeout_s = max(timeout_s, 1.0)
        self.deadline_s = pool_timeout_s + 3 * timeout_s
        self.where = describe_url(url)
        self._client = self._make_client()
        self._register = self._client.register_script(lua_source("register.lua"))
        self._compare_and_set = self._client.register_script(lua_source("compare_and_set.lua"))
        self._subscribers: list[UpdateCallback] = []
        self._listener: asyncio.Task[None] | None = None
        self._subscribed = asyncio.Event()
        self._heard_updates = False
        self._closed = False

    # -- construction hooks (RedisClusterStore overrides these) ------------------------------------------------

    def _make_client(self) -> Any:
        pool = BlockingConnectionPool.from_url(
            self.url,
            max_connections=self.pool_size,
            timeout=self.pool_timeout_s,
            socket_timeout=self.timeout_s,
            socket_connect_timeout=self.connect_timeout_s,
            retry=_connection_retry(),
            decode_responses=False,
        )
        return Redis.from_pool(pool)

    def _make_pubsub_client(self, attempt: int) -> Redis:
        """A client of its own for the update listener (``attempt`` counts reconnects, for rotating nodes)."""
        pool = ConnectionPool.from_url(
            self.url,
            max_connections=2,
            socket_timeout=self.timeout_s,
            socket_connect_timeout=self.connect_timeout_s,
            health_check_interval=5,
            decode_responses=False,
        )
        return Redis.from_pool(pool)

    async def _ensure_ready(self) -> None:
        """Called before every command, inside its deadline. A single-server client needs nothing."""

    def _limiter_for(self, key: str | None, node: str | None) -> asyncio.Semaphore | None:
        """What bounds the commands in flight to where ``key`` (or the node named ``node``) lives, where the client
        cannot wait for a connection itself (RedisClusterStore); None: nothing here (the pool waits)."""
        return None

    async def _run_script(self, script: Any, key: str, args: Sequence[Any]) -> Any:
        """``script`` on ``key`` (EVALSHA; redis-py loads it first where the server lacks it)."""
        return await script(keys=[key], args=args)

    publish_command = "PUBLISH"
    """How the write scripts publish their notices (RedisClusterStore: SPUBLISH, on the key's own slot)."""

    def channel_for(self, key: str) -> str:
        """The channel a write of ``key`` publishes its notice on: one for the whole server."""
        return self.channel

    async def _publish(self, key: str, notice: Notice) -> None:
        """Publish ``notice`` (of a write of ``key`` made without a script: a delete) where the scripts publish."""
        channel = self.channel_for(key)
        text = format_notice(notice)
        await self._call("delete", lambda: self._client.execute_command(self.publish_command, channel, text), key)

    # -- plumbing -----------------------------------------------------------------------------------------------

    def key(self, campaign: str) -> str:
        return f"{self.prefix}:{{{check_campaign(campaign)}}}"

    async def _call(
        self, what: str, command: Callable[[], Awaitable[T]], key: str | None = None, node: str | None = None
    ) -> T:
        """Run ``command`` (on ``key``, or on the node named ``node``, where it has one) under the deadline; turn every
        redis/socket failure into StoreUnavailable, a wait for a free connection past it into StoreBusy."""
        waiting_for_a_turn = False
        try:
            async with asyncio.timeout(self.deadline_s):
                await self._ensure_ready()
                limiter = self._limiter_for(key, node)
                if limiter is None:
                    return await command()
                waiting_for_a_turn = True
                async with limiter:
                    waiting_for_a_turn = False
                    return await command()
        except TimeoutError as e:  # the overall deadline (asyncio.timeout raises the builtin TimeoutError)
            if waiting_for_a_turn:
                raise StoreBusy(f"{self.where}: {what} found every connection busy for {self.deadline_s:.2f}s") from e
            raise StoreUnavailable(f"{self.where}: no answer to {what} within {self.deadline_s:.2f}s") from e
        except _REDIS_FAILURES as e:
            if _pool_wait_timed_out(e) or isinstance(e, redis_errors.MaxConnectionsError):
                raise StoreBusy(
                    f"{self.where}: {what} found every connection busy for {self.pool_timeout_s:.2f}s"
                ) from e
            raise StoreUnavailable(f"{self.where}: {what} failed: {type(e).__name__}: {e}") from e
        except AttributeError as e:
            if not _raised_in_redis_py(e):
                raise
            # redis-py 8.1's cluster client can use a connection another task is tearing down after a node timed
            # out ('NoneType' object has no attribute 'writelines'): a lost connection, not a bug of ours.
            raise StoreUnavailable(f"{self.where}: {what} failed: connection lost in the client ({e})") from e

    # -- EpisodeStore -------------------------------------------------------------------------------------------

    async def get(self, campaign: str) -> Stored | None:
        key = self.key(campaign)
        return _decode(await self._call("get", lambda: self._client.hmget(key, *_FIELDS), key))

    async def get_many(self, campaigns: Sequence[str]) -> list[Stored | None]:
        keys = [self.key(c) for c in campaigns]
        if not keys:
            return []

        async def fetch() -> list[Any]:
            async with self._client.pipeline(transaction=False) as pipe:
                for key in keys:
                    pipe.hmget(key, *_FIELDS)
                return await pipe.execute()

        return [_decode(fields) for fields in await self._call("get_many", fetch)]

    async def get_each(self, campaigns: Sequence[str]) -> list[Stored | StoreError | None]:
        try:
            return list(await self.get_many(campaigns))
        except StoreUnavailable as exc:  # one server: one pipeline, one failure for all
            return [exc] * len(campaigns)

    async def register(
        self, campaign: str, episode: str, blob: bytes, summary: Summary | None = None
    ) -> tuple[Stored, bool]:
        key = self.key(campaign)
        check_write(episode, blob)
        args = [
            *(episode, bytes(blob), self.state_ttl_ms, self.channel_for(key), campaign, _write_token()),
            *(summary_suffix(summary), self.publish_command),
        ]
        reply = await self._call("register", lambda: self._run_script(self._register, key, args), key)
        if int(reply[0]) == 1:
            return Stored(episode, 0, bytes(blob)), True
        stored = _decode(reply[1:])
        assert stored is not None
        return stored, False

    async def compare_and_set(
        self,
        campaign: str,
        episode: str,
        expected_slot: int,
        blob: bytes,
        expected: bytes | None = None,
        summary: Summary | None = None,
    ) -> Stored | None:
        key = self.key(campaign)
        check_write(episode, blob, expected_slot)
        args = self._cas_args(key, campaign, episode, expected_slot, blob, expected, summary)
        reply = await self._call("compare_and_set", lambda: self._run_script(self._compare_and_set, key, args), key)
        status = int(reply[0])
        if status == 1:
            return None
        if status == -1:
            raise UnknownCampaign(campaign)
        return _decode(reply[1:])

    def _cas_args(
        self,
        key: str,
        campaign: str,
        episode: str,
        expected_slot: int,
        blob: bytes,
        expected: bytes | None,
        summary: Summary | None,
    ) -> list[Any]:
        """``compare_and_set.lua``'s ARGV for one write (a fresh token each call)."""
        return [
            *(episode, expected_slot, bytes(blob), self.state_ttl_ms, self.channel_for(key), campaign),
            *(_fingerprint(expected), _write_token(), summary_suffix(summary), self.publish_command),
        ]

    @staticmethod
    def _cas_reply(campaign: str, reply: Any) -> Stored | StoreError | None:
        """What one ``compare_and_set.lua`` reply means: None (written), UnknownCampaign, or the state found."""
        status = int(reply[0])
        return None if status == 1 else UnknownCampaign(campaign) if status == -1 else _decode(reply[1:])

    async def compare_and_set_many(
        self, items: Sequence[CasItem], summaries: Sequence[Summary | None] | None = None, chunk: int = 256
    ) -> list[Stored | StoreError | None]:
        """:meth:`compare_and_set` of many ``(campaign, episode, expected_slot, blob, expected)``, one pipelined round
        trip per ``chunk`` items (the same script, no MULTI: each item is checked and written on its own, as alone).

        Per item, in order: None (written), the :class:`Stored` state found instead, or the error the single call
        would raise (:class:`UnknownCampaign`, or :class:`StoreUnavailable` for every item of a chunk that failed).
        """
        check_cas_items(items, summaries)
        out: list[Stored | StoreError | None] = []
        for start in range(0, len(items), chunk):
            part = items[start : start + chunk]
            notes = [None] * len(part) if summaries is None else summaries[start : start + chunk]

            async def run(part: Sequence[CasItem] = part, notes: Sequence[Summary | None] = notes) -> list[Any]:
                script = self._compare_and_set
                async with self._client.pipeline(transaction=False) as pipe:
                    pipe.scripts.add(script)  # execute() loads it first if the server lacks it (NOSCRIPT)
                    for (campaign, episode, expected_slot, blob, expected), summary in zip(part, notes, strict=True):
                        key = self.key(campaign)
                        args = self._cas_args(key, campaign, episode, expected_slot, blob, expected, summary)
                        pipe.evalsha(script.sha, 1, key, *args)
                    return await pipe.execute(raise_on_error=False)

            try:
                replies = await self._call("compare_and_set", run)
            except StoreUnavailable as exc:
                out.extend(exc for _ in part)
                continue
            for (campaign, *_), reply in zip(part, replies, strict=True):
                if isinstance(reply, Exception):
                    error = StoreUnavailable(f"{self.where}: compare_and_set failed: {type(reply).__name__}: {reply}")
                    out.append(error)
                    continue
                out.append(self._cas_reply(campaign, reply))
        return out

    async def delete(self, campaign: str) -> None:
        key = self.key(campaign)
        if await self._call("delete", lambda: self._client.delete(key), key):
            await self._publish(key, Notice(campaign))

    async def campaigns(self, limit: int = 200) -> list[str]:
        """Up to ``limit`` campaign ids with a state, sorted (a SCAN: for status pages, not for the hot path)."""
        start = len(self.prefix) + 2  # "{prefix}:{" ... "}"

        async def scan() -> list[str]:
            found: set[str] = set()
            async for key in self._client.scan_iter(match=f"{self.prefix}:{{*}}", count=1000):
                found.add(key.decode()[start:-1])
                if len(found) >= limit:
                    break
            return sorted(found)

        return await self._call("campaigns", scan)

    async def ping(self) -> bool:
        try:
            return bool(await self._call("ping", self._client.ping))
        except StoreError:
            return False

    async def subscribe(self, on_update: UpdateCallback) -> None:
        """Deliver every write's :class:`~service.store.base.Notice` to ``on_update`` from a background task.

        Returns once the channel is subscribed, or after ``max(1 s, 4 * timeout_s)`` if Redis is down (the task
        keeps reconnecting with backoff; updates published while it was disconnected are not delivered).
        """
        if self._closed:
            raise StoreError("store is closed")
        self._subscribers.append(on_update)
        if self._listener is None:
            self._listener = asyncio.create_task(self._listen(), name=f"rcb-store-updates:{self.channel}")
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(1.0, 4 * self.timeout_s)):
                await self._subscribed.wait()

    @property
    def heard_updates(self) -> bool:
        return self._heard_updates

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener
            self._listener = None
        self._subscribers.clear()
        await self._client.aclose()

    # -- the update listener ------------------------------------------------------------------------------------

    def _dispatch(self, text: str) -> None:
        notice = parse_notice(text)
        for callback in list(self._subscribers):
            try:
                callback(notice)
            except Exception:
                log.exception("store update callback failed for campaign %r", notice.campaign)

    async def _listen(self) -> None:
        backoff, max_backoff = _RESUBSCRIBE_BACKOFF_S
        wait = backoff
        attempt = 0
        while not self._closed:
            client = self._make_pubsub_client(attempt)
            pubsub = client.pubsub()
            try:
                await pubsub.subscribe(self.channel)
                while True:  # the confirmation, so that subscribe() returns only once writes will be seen
                    message = await pubsub.get_message(timeout=1.0)
                    if message is not None and message["type"] == "subscribe":
                        break
                self._subscribed.set()
                self._heard_updates = True
                if attempt:
                    log.info("store updates: resubscribed to %s on %s", self.channel, self.where)
                wait = backoff
                while True:
                    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=5.0)
                    if message is not None and message["type"] == "message":
                        self._dispatch(message["data"].decode("utf-8"))
            except asyncio.CancelledError:
                raise
            except Exception as e:  # never let the task die: log, back off, reconnect
                log.warning(
                    "store updates: lost %s on %s (%s: %s); reconnecting in %.2fs",
                    self.channel,
                    self.where,
                    type(e).__name__,
                    e,
                    wait,
                )
            finally:
                self._subscribed.clear()
                with contextlib.suppress(Exception):
                    await pubsub.aclose()
                with contextlib.suppress(Exception):
                    await client.aclose()
            await asyncio.sleep(wait)
            wait = min(2 * wait, max_backoff)
            attempt += 1
