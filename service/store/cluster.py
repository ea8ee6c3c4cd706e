"""Redis Cluster store: :class:`RedisStore`'s keys, scripts and semantics on a cluster, each command sent to the node
that holds its key, and no node of the URL special.

Routing. Each campaign is one key whose hash tag is the campaign id, so every script touches one slot. The store
sends every command straight to its key's primary (a redis-py ``ClusterNode``), by the slot map of redis-py's
``NodesManager``: reads as one pipeline per node (the nodes in parallel, each under its own deadline), writes as one
EVALSHA each, or a pipeline of them per node for a batch. It does not go through ``RedisCluster.execute_command``
or the cluster pipeline: after a timeout or a lost connection on any node, redis-py 8.1 marks the whole client for
rediscovery, and the next command to *any* node first rediscovers the cluster under one lock: it asks the startup
nodes for the slot map (a stalled one among them costs a timeout) and then runs ``COMMAND`` on its default node,
the first primary of the map, which holds slot 0 (the first node of the URL, for a cluster created from that list).
With that node stalled, every rediscovery fails, and with it every command to every node (a slot batch answers 503
for all its campaigns); with another node stalled, the healthy nodes' commands queue behind rediscoveries, and the
cluster pipeline's retry closes every node's connections. Here no command waits for a rediscovery: a MOVED or ASK
reply is followed for the command that met it (a MOVED patches the slot map), and a refresh of the whole map runs
in the background (at most one each ``_REFRESH_INTERVAL_S``, the node that failed asked last) after a redirect, a
lost connection or a timeout.

Notices. The write scripts SPUBLISH their notices (sharded pub/sub, Redis 7.0 or later) on a channel in the key's
own slot (:func:`slot_channel`: ``{prefix}:updates:{<tag>}``, one channel per hash slot), so a notice goes out from
the node that made the write, to that node's subscribers only (a classic PUBLISH in a cluster is broadcast to every
node over the cluster bus, and a subscriber connected to a stalled node hears nothing at all). The listener keeps
one connection per primary, SSUBSCRIBEd to the channels of the slots that primary holds: a stalled or lost node
stops only its own notices, those of writes it cannot make, and every other node's still arrive. It follows the
slot map: after a failover or a slot migration (Redis then SUNSUBSCRIBEs the moved slots' channels) it subscribes
where the slots are now.

URL: ``redis+cluster://[[user]:password@]host:port[,host:port...]``: the startup nodes; any reachable one suffices.
"""

from __future__ import annotations

import asyncio
import binascii
import contextlib
import functools
import itertools
import logging
import math
import string
from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from urllib.parse import unquote

from redis import exceptions as redis_errors
from redis.asyncio.cluster import ClusterNode, PipelineCommand, RedisCluster
from redis.asyncio.connection import Connection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.cluster import PRIMARY, REDIS_CLUSTER_HASH_SLOTS

from service.store.base import (
    CasItem,
    Notice,
    StoreBusy,
    Stored,
    StoreError,
    StoreUnavailable,
    Summary,
    check_cas_items,
    format_notice,
    redacted,
)
from service.store.redis import _FIELDS, _RESUBSCRIBE_BACKOFF_S, RedisStore, _decode

log = logging.getLogger(__name__)

SCHEME = "redis+cluster"

_REFRESH_INTERVAL_S = 1.0
"""Least time between two background refreshes of the slot map (asked for meanwhile: run when it has passed)."""
_REDIRECTS = 3
"""MOVED or ASK replies one command follows (a failover, a slot migrating) before it fails."""
_SPARE_CONNECTIONS = 2
"""Connections per node beyond ``pool_size``: pings and redirected commands, which take no turn of the node's."""
_LISTENER_IDLE_S = 5.0
"""A node's listener PINGs after this long without a message, and reconnects after a second silence as long."""


def parse_cluster_url(url: str) -> tuple[list[tuple[str, int]], str | None, str | None]:
    """``redis+cluster://[[user]:password@]h1:p1,h2:p2`` -> ([(h1, p1), (h2, p2)], user, password).

    Raises ``ValueError`` naming the problem.
    """
    head = f"{SCHEME}://"
    if not url.startswith(head):
        raise ValueError(f"a cluster URL starts with {head!r}: {redacted(url)!r}")
    rest = url[len(head) :]
    if any(ch in rest for ch in "?#"):
        raise ValueError(f"a cluster URL takes no query or fragment: {redacted(url)!r}")
    rest = rest.rstrip("/")
    if "/" in rest:
        raise ValueError(f"a cluster URL has no database path (a cluster has only db 0): {redacted(url)!r}")
    userinfo, _, hosts = rest.rpartition("@")
    username = password = None
    if userinfo:
        user, sep, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if sep else None
    nodes: list[tuple[str, int]] = []
    for item in hosts.split(","):
        host, sep, port = item.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"cluster URL node {item!r} is not host:port (in {redacted(url)!r})")
        nodes.append((host.strip("[]"), int(port)))
    return nodes, username, password


@functools.cache
def slot_tags() -> tuple[str, ...]:
    """A hash tag per hash slot: ``slot_tags()[s]`` hashes to slot ``s`` (CRC16 mod 16384, as Redis hashes a key's
    tag), 3 letters or digits at most. Built once per process (about 80 ms)."""
    alphabet = (string.ascii_letters + string.digits).encode()
    tags: list[str | None] = [None] * REDIS_CLUSTER_HASH_SLOTS
    left = len(tags)
    for size in (1, 2, 3):
        for letters in itertools.product(alphabet, repeat=size):
            tag = bytes(letters)
            slot = binascii.crc_hqx(tag, 0) % REDIS_CLUSTER_HASH_SLOTS
            if tags[slot] is None:
                tags[slot] = tag.decode()
                left -= 1
                if not left:
                    return tuple(t for t in tags if t is not None)
    raise AssertionError("a hash slot without a tag of 3 characters")  # never: every slot has one


def slot_channel(prefix: str, slot: int) -> str:
    """The shard channel of hash slot ``slot``'s notices: ``{prefix}:updates:{<tag>}``, in that slot."""
    return f"{prefix}:updates:{{{slot_tags()[slot]}}}"


def _lost_connection(error: object) -> bool:
    """A connection that dropped (retried once, at once); not a full pool, which is this process's own limit."""
    return isinstance(error, redis_errors.ConnectionError) and not isinstance(error, redis_errors.MaxConnectionsError)


class RedisClusterStore(RedisStore):
    """:class:`~service.store.base.EpisodeStore` on a Redis Cluster (``redis+cluster://`` URL).

    Same parameters as :class:`RedisStore`; ``pool_size`` bounds the commands in flight to each primary (a semaphore
    per node waits in front of its pool, up to the command's deadline: :meth:`_limiter_for`).
    """

    publish_command = "SPUBLISH"

    def _make_client(self) -> Any:
        nodes, username, password = parse_cluster_url(self.url)
        self.nodes = nodes
        self._username, self._password = username, password
        self.where = f"{SCHEME}://" + ",".join(f"{h}:{p}" for h, p in nodes)
        self._limiters: dict[str, asyncio.Semaphore] = {}
        self._ready = False
        self._ready_lock = asyncio.Lock()
        self._refresh_task: asyncio.Task[None] | None = None
        self._refresh_again = False
        self._refresh_failed: str | None = None
        self._last_refresh = -math.inf
        self._map_changed = asyncio.Event()
        """Set after each discovery or refresh of the slot map (the listener follows it)."""
        self._listening: set[str] = set()
        """Primaries whose listener has every channel of its slots subscribed."""
        self._to_listen: set[str] = set()
        """Primaries of the slot map the listener follows."""
        # The client holds the slot map (its NodesManager) and each node's connections; its own command path, which
        # rediscovers the whole cluster after one node's timeout, is never used (the module's docstring says why).
        return RedisCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in nodes],
            max_connections=self.pool_size + _SPARE_CONNECTIONS,
            socket_timeout=self.timeout_s,
            socket_connect_timeout=self.connect_timeout_s,
            retry=Retry(NoBackoff(), 0),
            decode_responses=False,
            username=self._username,
            password=self._password,
        )

    # -- the slot map -------------------------------------------------------------------------------------------

    async def _ensure_ready(self) -> None:
        # Discover the cluster once, before the first command, one task at a time (retried by the next command if
        # the cluster is down now). Afterwards the map is patched by MOVED replies and refreshed in the background,
        # never in front of a command.
        if self._ready:
            return
        async with self._ready_lock:
            if not self._ready:
                await self._client.nodes_manager.initialize()
                self._ready = True
                self._map_changed.set()

    def _refresh_soon(self, failed: str | None = None) -> None:
        """Refresh the slot map in a task of its own, ``failed`` (a node name) asked last; at most one refresh each
        ``_REFRESH_INTERVAL_S``, so a stalled node's stream of timeouts costs one refresh a second, not one each."""
        if self._closed or not self._ready:
            return
        if failed is not None:
            self._refresh_failed = failed
        if self._refresh_task is not None and not self._refresh_task.done():
            self._refresh_again = True
            return
        self._refresh_task = asyncio.get_running_loop().create_task(self._refresh(), name="rcb-cluster-slot-map")

    async def _refresh(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            wait = self._last_refresh + _REFRESH_INTERVAL_S - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            self._refresh_again = False
            failed, self._refresh_failed = self._refresh_failed, None
            self._last_refresh = loop.time()
            try:
                # each startup node asked costs at most a connect and a read timeout; a stalled one is asked last
                async with asyncio.timeout(len(self.nodes) * (self.connect_timeout_s + self.timeout_s) + 1.0):
                    await self._client.nodes_manager.initialize(last_failed_node_name=failed)
            except Exception as e:  # the commands go on with the map they have; the next failure asks again
                log.warning("%s: refreshing the slot map failed (%s: %s)", self.where, type(e).__name__, e)
            else:
                self._map_changed.set()
            if not self._refresh_again:
                return

    def _limiter_for(self, key: str | None, node: str | None) -> asyncio.Semaphore | None:
        """``pool_size`` commands in flight per primary: a stalled node's commands, each holding its turn up to the
        deadline, never queue the other nodes' (as one limit for all would). Commands of no one key or node (ping, scan)
        go unlimited: few, on the spare connections."""
        if node is None:
            if key is None:
                return None
            node = self._client.get_node_from_key(key).name
        limiter = self._limiters.get(node)
        if limiter is None:
            limiter = self._limiters[node] = asyncio.Semaphore(self.pool_size)
        return limiter

    def _primaries(self) -> list[ClusterNode]:
        return list(self._client.nodes_manager.get_nodes_by_server_type(PRIMARY))

    async def _by_node(self, keys: Sequence[str]) -> list[tuple[ClusterNode, list[int]]]:
        """``(primary, indices of keys)`` by the primary the slot map puts each key on."""
        groups: dict[str, tuple[ClusterNode, list[int]]] = {}
        for i, key in enumerate(keys):
            node = self._client.get_node_from_key(key)
            groups.setdefault(node.name, (node, []))[1].append(i)
        return list(groups.values())

    # -- sending ------------------------------------------------------------------------------------------------

    def _node_at(self, host: str, port: int) -> ClusterNode:
        """The node at ``host:port`` (an ASK target), added to the map's nodes if it is new to it."""
        manager = self._client.nodes_manager
        node = manager.get_node(host=host, port=port)
        if node is None:
            node = ClusterNode(host, port, PRIMARY, **manager.connection_kwargs)
            manager.set_nodes(manager.nodes_cache, {node.name: node})
        return node

    async def _on_key(self, key: str, *args: Any) -> Any:
        """``args`` on the primary holding ``key``. MOVED is followed and patches the slot map, ASK is followed for
        this command; a dropped connection is tried again once, at once (a re-send of a write answers as the first
        send did: the scripts' tokens); a timeout is not (a stalled node costs one ``timeout_s``)."""
        node = self._client.get_node_from_key(key)
        asking = retried = False
        for _ in range(_REDIRECTS + 1):
            try:
                if asking:
                    return await self._asking(node, args)
                return await node.execute_command(*args)
            except redis_errors.MovedError as e:  # (a subclass of AskError)
                await self._client.nodes_manager.move_slot(e)
                self._map_changed.set()
                self._refresh_soon()
                node, asking = self._client.get_node_from_key(key), False
            except redis_errors.AskError as e:
                node, asking = self._node_at(e.host, e.port), True
            except redis_errors.TryAgainError:  # a multi-key command during a migration: not ours, but harmless
                await asyncio.sleep(0.05)
            except redis_errors.ClusterDownError:
                self._refresh_soon()
                raise
            except redis_errors.TimeoutError:
                self._refresh_soon(node.name)
                raise
            except redis_errors.ConnectionError as e:
                if not _lost_connection(e):
                    raise
                self._refresh_soon(node.name)
                if retried:
                    raise
                retried = True
        raise redis_errors.ClusterError(f"{args[0]} on {key!r}: still redirected after {_REDIRECTS} redirects")

    @staticmethod
    async def _asking(node: ClusterNode, args: Sequence[Any]) -> Any:
        """ASKING then ``args``, on one connection of ``node`` (the ASK target)."""
        commands = [PipelineCommand(0, "ASKING"), PipelineCommand(1, *args)]
        await node.execute_pipeline(commands)
        for command in commands:
            if isinstance(command.result, BaseException):
                raise command.result
        return commands[1].result

    async def _on_node(
        self, node: ClusterNode, commands: Sequence[tuple[Any, ...]], one: Callable[[int], Awaitable[Any]]
    ) -> list[Any]:
        """``commands`` as one pipeline on ``node``: per command, its reply or the error it met, in order. Commands
        the node redirects (MOVED, ASK) run again one by one where they are sent (``one(k)``: command ``k`` alone);
        those a dropped connection lost are sent again once, at once, unless the node also timed out."""
        results: list[Any] = [None] * len(commands)
        todo = list(range(len(commands)))
        for attempt in range(2):
            batch = [PipelineCommand(k, *commands[k]) for k in todo]
            try:
                await node.execute_pipeline(batch)
            except (redis_errors.ConnectionError, redis_errors.TimeoutError) as e:  # the connect or the send failed
                for k in todo:
                    results[k] = e
            else:
                for command in batch:
                    results[command.position] = command.result
            if any(isinstance(r, redis_errors.TimeoutError) for r in results):
                self._refresh_soon(node.name)
                break
            lost = [k for k in todo if _lost_connection(results[k])]
            if not lost:
                break
            self._refresh_soon(node.name)
            if attempt:
                break
            todo = lost
        for k, result in enumerate(results):
            if isinstance(result, redis_errors.AskError | redis_errors.TryAgainError):  # MOVED included: rare
                try:
                    results[k] = await one(k)
                except Exception as e:
                    results[k] = e
        return results

    # -- EpisodeStore -------------------------------------------------------------------------------------------

    async def _run_script(self, script: Any, key: str, args: Sequence[Any]) -> Any:
        """EVALSHA on the key's node, else EVAL there: a node without the script (restarted, a replica promoted)
        loads it itself, and no other node is asked (redis-py's own fallback loads it on every primary)."""
        try:
            return await self._on_key(key, "EVALSHA", script.sha, 1, key, *args)
        except redis_errors.NoScriptError:
            return await self._on_key(key, "EVAL", script.script, 1, key, *args)

    async def _publish(self, key: str, notice: Notice) -> None:
        channel, text = self.channel_for(key), format_notice(notice)
        await self._call("delete", lambda: self._on_key(key, self.publish_command, channel, text), key)

    def channel_for(self, key: str) -> str:
        """The shard channel in ``key``'s own slot: a script may publish on it, and its node is the key's."""
        return slot_channel(self.prefix, self._client.keyslot(key))

    async def get(self, campaign: str) -> Stored | None:
        key = self.key(campaign)
        return _decode(await self._call("get", lambda: self._on_key(key, "HMGET", key, *_FIELDS), key))

    async def get_many(self, campaigns: Sequence[str]) -> list[Stored | None]:
        found: list[Stored | None] = []
        for item in await self.get_each(campaigns):
            if isinstance(item, StoreError):
                raise item
            found.append(item)
        return found

    async def get_each(self, campaigns: Sequence[str]) -> list[Stored | StoreError | None]:
        """One pipeline per node, the nodes in parallel, each under its own deadline: a stalled node fails the
        campaigns it holds, not the others."""
        keys = [self.key(c) for c in campaigns]
        if not keys:
            return []
        try:
            groups = await self._call("get_many", lambda: self._by_node(keys))
        except StoreUnavailable as exc:
            return [exc] * len(keys)

        async def read(node: ClusterNode, group: list[int]) -> list[Any]:
            commands = [("HMGET", keys[i], *_FIELDS) for i in group]

            async def fetch() -> list[Any]:
                replies = await self._on_node(node, commands, lambda k: self._on_key(keys[group[k]], *commands[k]))
                failed = next((r for r in replies if isinstance(r, BaseException)), None)
                if failed is not None:
                    raise failed
                return replies

            return await self._call("get_many", fetch, node=node.name)

        answers = await asyncio.gather(*(read(node, group) for node, group in groups), return_exceptions=True)
        out: list[Stored | StoreError | None] = [None] * len(keys)
        for (_, group), answer in zip(groups, answers, strict=True):
            if isinstance(answer, StoreError):
                for i in group:
                    out[i] = answer
            elif isinstance(answer, BaseException):
                raise answer
            else:
                for i, fields in zip(group, answer, strict=True):
                    out[i] = _decode(fields)
        return out

    async def compare_and_set_many(
        self, items: Sequence[CasItem], summaries: Sequence[Summary | None] | None = None, chunk: int = 256
    ) -> list[Stored | StoreError | None]:
        """:meth:`compare_and_set` of many items: per node, a pipeline of EVALSHAs per ``chunk`` items (the same
        script, no MULTI: each item is checked and written on its own, as alone, in the order given), the nodes in
        parallel. A node that does not answer fails its own items only, and the rest of them at once (not one
        deadline per chunk); a node without the script loads it (there only) and runs the items again."""
        check_cas_items(items, summaries)
        if not items:
            return []
        keys = [self.key(item[0]) for item in items]
        out: list[Stored | StoreError | None] = [None] * len(items)
        try:
            groups = await self._call("compare_and_set", lambda: self._by_node(keys))
        except StoreUnavailable as exc:
            return [exc] * len(items)
        script = self._compare_and_set

        def args_of(i: int) -> list[Any]:
            return self._cas_args(keys[i], *items[i], None if summaries is None else summaries[i])

        async def write(node: ClusterNode, group: list[int]) -> None:
            for start in range(0, len(group), chunk):
                part = group[start : start + chunk]
                commands = [("EVALSHA", script.sha, 1, keys[i], *args) for i, args in ((i, args_of(i)) for i in part)]

                async def run(part: list[int] = part, commands: list[tuple[Any, ...]] = commands) -> list[Any]:
                    def one(k: int) -> Awaitable[Any]:
                        return self._run_script(script, keys[part[k]], commands[k][4:])

                    replies = await self._on_node(node, commands, one)
                    missing = [k for k, r in enumerate(replies) if isinstance(r, redis_errors.NoScriptError)]
                    if missing:
                        await node.execute_command("SCRIPT", "LOAD", script.script)
                        again = await self._on_node(node, [commands[k] for k in missing], lambda j: one(missing[j]))
                        for k, reply in zip(missing, again, strict=True):
                            replies[k] = reply
                    return replies

                try:
                    replies = await self._call("compare_and_set", run, node=node.name)
                except StoreUnavailable as exc:
                    rest = part if isinstance(exc, StoreBusy) else group[start:]
                    for i in rest:
                        out[i] = exc
                    if isinstance(exc, StoreBusy):
                        continue
                    return
                for i, reply in zip(part, replies, strict=True):
                    if isinstance(reply, BaseException):
                        text = f"{self.where}: compare_and_set failed: {type(reply).__name__}: {reply}"
                        out[i] = StoreUnavailable(text)
                    else:
                        out[i] = self._cas_reply(items[i][0], reply)
                timed_out = next((r for r in replies if isinstance(r, redis_errors.TimeoutError)), None)
                if timed_out is not None:  # the node stalled: its other chunks fail now, not one timeout each
                    for i in group[start + chunk :]:
                        out[i] = StoreUnavailable(f"{self.where}: compare_and_set failed: TimeoutError: {timed_out}")
                    return

        await asyncio.gather(*(write(node, group) for node, group in groups))
        return out

    async def delete(self, campaign: str) -> None:
        key = self.key(campaign)
        if await self._call("delete", lambda: self._on_key(key, "DEL", key), key):
            await self._publish(key, Notice(campaign))

    async def campaigns(self, limit: int = 200) -> list[str]:
        """Up to ``limit`` campaign ids with a state, sorted (a SCAN of each primary in turn: for status pages)."""
        start = len(self.prefix) + 2  # "{prefix}:{" ... "}"
        pattern = f"{self.prefix}:{{*}}"

        async def scan() -> list[str]:
            found: set[str] = set()
            for node in self._primaries():
                cursor = 0
                while len(found) < limit:
                    cursor, keys = await node.execute_command("SCAN", cursor, "MATCH", pattern, "COUNT", 1000)
                    for key in keys:
                        found.add(key.decode()[start:-1])
                        if len(found) >= limit:
                            break
                    if not cursor:
                        break
            return sorted(found)

        return await self._call("campaigns", scan)

    async def ping(self) -> bool:
        """Every primary answers: one node's answer says nothing of another primary that is down, whose campaigns
        answer 503 (readiness and ``rcb_store_up`` would say the store is fine)."""

        async def every_primary() -> bool:
            nodes = self._primaries()
            answers = await asyncio.gather(*(node.execute_command("PING") for node in nodes))
            return bool(nodes) and all(answers)

        try:
            return await self._call("ping", every_primary)
        except StoreError:
            return False

    async def aclose(self) -> None:
        if self._closed:
            return
        await super().aclose()
        if self._refresh_task is not None:
            self._refresh_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._refresh_task
        manager = self._client.nodes_manager
        for where in ("nodes_cache", "startup_nodes"):
            with contextlib.suppress(Exception):
                await manager.aclose(where)

    # -- the update listener ------------------------------------------------------------------------------------

    def _plan(self) -> dict[str, tuple[ClusterNode, tuple[int, ...]]]:
        """Per primary of the slot map, the slots it holds: where each slot's notices come from."""
        held: dict[str, tuple[ClusterNode, list[int]]] = {}
        slots = self._client.nodes_manager.slots_cache
        for slot in range(REDIS_CLUSTER_HASH_SLOTS):
            nodes = slots.get(slot)
            if nodes:
                held.setdefault(nodes[0].name, (nodes[0], []))[1].append(slot)
        return {name: (node, tuple(own)) for name, (node, own) in held.items()}

    def _listening_changed(self) -> None:
        if self._to_listen and self._to_listen <= self._listening:
            self._subscribed.set()
            self._heard_updates = True  # every primary's channels confirmed once
        else:
            self._subscribed.clear()

    async def _listen(self) -> None:
        """One listener per primary (:meth:`_listen_to`), each on the channels of the slots it holds; started,
        stopped and restarted as the slot map changes."""
        backoff, max_backoff = _RESUBSCRIBE_BACKOFF_S
        wait = backoff
        listeners: dict[str, tuple[tuple[int, ...], asyncio.Task[None]]] = {}
        await asyncio.to_thread(slot_tags)  # the channels' table, built once, off the event loop
        try:
            while not self._closed:
                try:
                    async with asyncio.timeout(self.deadline_s):
                        await self._ensure_ready()
                except Exception as e:  # the cluster is not reachable yet: try again, backing off
                    log.warning("store updates: no slot map from %s (%s: %s)", self.where, type(e).__name__, e)
                    await asyncio.sleep(wait)
                    wait = min(2 * wait, max_backoff)
                    continue
                wait = backoff
                self._map_changed.clear()
                plan = self._plan()
                for name in list(listeners):
                    if name not in plan or listeners[name][0] != plan[name][1]:
                        _, task = listeners.pop(name)
                        task.cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await task
                for name, (node, slots) in plan.items():
                    if name not in listeners:
                        task = asyncio.create_task(self._listen_to(node, slots), name=f"rcb-store-updates:{name}")
                        listeners[name] = (slots, task)
                self._to_listen = set(plan)
                self._listening_changed()
                await self._map_changed.wait()
        finally:
            for _, task in listeners.values():
                task.cancel()
            await asyncio.gather(*(task for _, task in listeners.values()), return_exceptions=True)

    async def _listen_to(self, node: ClusterNode, slots: tuple[int, ...]) -> None:
        """SSUBSCRIBE to the channels of ``slots`` on ``node`` and deliver their notices; reconnect with backoff
        after a failure, which also refreshes the slot map (a failover may have moved the slots elsewhere)."""
        backoff, max_backoff = _RESUBSCRIBE_BACKOFF_S
        wait = backoff
        channels = [slot_channel(self.prefix, slot) for slot in slots]
        attempt = 0
        while not self._closed:
            connection = Connection(
                host=node.host,
                port=node.port,
                username=self._username,
                password=self._password,
                socket_timeout=self.timeout_s,
                socket_connect_timeout=self.connect_timeout_s,
                retry=Retry(NoBackoff(), 0),
                decode_responses=False,
            )
            try:
                # connected and every channel confirmed in time, else try again later
                async with asyncio.timeout(max(1.0, 4 * self.timeout_s)):
                    await connection.connect()
                    await connection.send_packed_command(
                        connection.pack_commands([("SSUBSCRIBE", channel) for channel in channels]), check_health=False
                    )
                    confirmed = 0
                    while confirmed < len(channels):
                        reply = await connection.read_response(timeout=math.inf, push_request=True)
                        confirmed += self._heard(reply) == b"ssubscribe"
                self._listening.add(node.name)
                self._listening_changed()
                if attempt:
                    log.info("store updates: subscribed again on %s", node.name)
                wait = backoff
                pinged = False
                while True:
                    reply = await connection.read_response(timeout=_LISTENER_IDLE_S, push_request=True)
                    if reply is None:  # silence: the node is idle, stalled or gone; a PING tells
                        if pinged:
                            raise redis_errors.ConnectionError(f"no answer to PING in {2 * _LISTENER_IDLE_S:.0f}s")
                        await connection.send_command("PING", check_health=False)
                        pinged = True
                        continue
                    pinged = False
                    if self._heard(reply) == b"sunsubscribe":  # a slot moved off the node: follow the slot map
                        self._refresh_soon()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # never let the task die: log, back off, reconnect
                log.warning(
                    "store updates: lost %s on %s (%s: %s); reconnecting in %.2fs",
                    f"{len(channels)} slot channels",
                    node.name,
                    type(e).__name__,
                    e,
                    wait,
                )
                self._refresh_soon(node.name)
            finally:
                self._listening.discard(node.name)
                self._listening_changed()
                with contextlib.suppress(Exception):
                    await connection.disconnect(nowait=True)
            await asyncio.sleep(wait)
            wait = min(2 * wait, max_backoff)
            attempt += 1

    def _heard(self, reply: Any) -> bytes:
        """Deliver ``reply`` if it is a notice; its kind (``smessage``, ``ssubscribe``, ``sunsubscribe``, ``pong``).
        The reads ask for pushes as replies (``push_request``): else the hiredis parser skips each by reading the
        next in a recursive call, and thousands of confirmations in a row exceed Python's recursion limit."""
        if not isinstance(reply, list) or not reply:
            return b""
        kind = bytes(reply[0])
        if kind == b"smessage" and len(reply) == 3:
            self._dispatch(bytes(reply[2]).decode("utf-8"))
        return kind
