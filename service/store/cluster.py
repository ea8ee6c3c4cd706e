"""Redis Cluster store: :class:`RedisStore` with a cluster client; keys, scripts and semantics are unchanged.

Each campaign is one key whose hash tag is the campaign id, so every script touches one slot. ``get_many`` runs a
cluster pipeline (HMGETs grouped per node, nodes in parallel; no scripts in it). Updates are PUBLISHed with classic
pub/sub, which the cluster broadcasts to every node, so the listener subscribes on one node (rotating through the
configured nodes when it reconnects).

URL: ``redis+cluster://[[user]:password@]host:port[,host:port...]``: the startup nodes; any reachable one suffices.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any
from urllib.parse import unquote

from redis.asyncio import ConnectionPool, Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import NoScriptError

from service.store.base import Stored, StoreError, StoreUnavailable, redacted
from service.store.redis import _FIELDS, RedisStore, _decode

SCHEME = "redis+cluster"


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


class RedisClusterStore(RedisStore):
    """:class:`~service.store.base.EpisodeStore` on a Redis Cluster (``redis+cluster://`` URL).

    Same parameters as :class:`RedisStore`; ``pool_size`` bounds the commands in flight to each primary, as the
    cluster client's pools are per node (it raises instead of waiting when one is full, so a semaphore per node waits
    in front of it, up to the command's deadline: :meth:`_limiter_for`).
    """

    def _make_client(self) -> Any:
        nodes, username, password = parse_cluster_url(self.url)
        self.nodes = nodes
        self._username, self._password = username, password
        self.where = f"{SCHEME}://" + ",".join(f"{h}:{p}" for h, p in nodes)
        self._limiters: dict[str, asyncio.Semaphore] = {}
        self._ready = False
        self._ready_lock = asyncio.Lock()
        return RedisCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in nodes],
            max_connections=self.pool_size,
            socket_timeout=self.timeout_s,
            socket_connect_timeout=self.connect_timeout_s,
            # One retry after a connection error or MOVED storm: the client refreshes the slot map first.
            retry=Retry(NoBackoff(), 1),
            decode_responses=False,
            username=self._username,
            password=self._password,
        )

    async def _ensure_ready(self) -> None:
        # Discover the cluster once, before the first command, one task at a time: redis-py 8.1's RedisCluster
        # breaks connections (AttributeError on a None writer, "Connection closed by server") when a burst of
        # commands is the first use of a client and each of them initializes it. Retried on the next call if the
        # cluster is down now; after that the client refreshes its slot map itself (MOVED, connection errors).
        # Also after a failed refresh of the slot map: redis-py 8.1 then closes its node manager, whose default node
        # becomes None, and routes the next keyed commands to a random primary (a stalled one, now and then) instead
        # of the key's; discovering again first, inside this command's deadline, keeps them on the key's node.
        if self._ready and self._client.get_default_node() is not None:
            return
        async with self._ready_lock:
            if not self._ready or self._client.get_default_node() is None:
                await self._client.initialize()
                self._ready = True

    def _limiter_for(self, key: str | None, node: str | None) -> asyncio.Semaphore | None:
        """``pool_size`` commands in flight per primary, as the client's pools are: a stalled node's commands, each
        holding its turn up to the deadline, never queue the other nodes' (one limit for all did). Commands of no one
        key (ping, scan, publish, the slot map's lookup) go unlimited: few, and a full pool fails them at once."""
        if node is None:
            if key is None:
                return None
            node = self._client.get_node_from_key(key).name
        limiter = self._limiters.get(node)
        if limiter is None:
            limiter = self._limiters[node] = asyncio.Semaphore(self.pool_size)
        return limiter

    async def _run_script(self, script: Any, key: str, args: Sequence[Any]) -> Any:
        """EVALSHA on the key's node, else EVAL there: redis-py's own fallback loads the script on every primary
        (SCRIPT LOAD fans out), so one stalled node would fail writes to all of them."""
        try:
            return await self._client.evalsha(script.sha, 1, key, *args)
        except NoScriptError:
            return await self._client.eval(script.script, 1, key, *args)

    async def ping(self) -> bool:
        """Every primary answers: a plain PING reaches one node, which answers while another primary is down and
        the campaigns it holds answer 503 (readiness and ``rcb_store_up`` would say the store is fine)."""
        try:
            return bool(await self._call("ping", lambda: self._client.ping(target_nodes=RedisCluster.PRIMARIES)))
        except StoreError:
            return False

    def _make_pubsub_client(self, attempt: int) -> Redis:
        host, port = self.nodes[attempt % len(self.nodes)]
        pool = ConnectionPool(
            host=host,
            port=port,
            max_connections=2,
            socket_timeout=self.timeout_s,
            socket_connect_timeout=self.connect_timeout_s,
            health_check_interval=5,
            decode_responses=False,
            username=self._username,
            password=self._password,
        )
        return Redis.from_pool(pool)

    async def get_many(self, campaigns: Sequence[str]) -> list[Stored | None]:
        found: list[Stored | None] = []
        for item in await self.get_each(campaigns):
            if isinstance(item, StoreError):
                raise item
            found.append(item)
        return found

    async def get_each(self, campaigns: Sequence[str]) -> list[Stored | StoreError | None]:
        """One pipeline per node, the nodes in parallel, each under its own deadline: a stalled node fails the
        campaigns it holds, not the others (one cluster pipeline would fail them all)."""
        keys = [self.key(c) for c in campaigns]
        if not keys:
            return []
        try:
            groups = await self._call("get_many", lambda: self._by_node(keys))
        except StoreUnavailable as exc:
            return [exc] * len(keys)

        async def read(node: str, group: list[int]) -> list[Any]:
            async def fetch() -> list[Any]:
                async with self._client.pipeline() as pipe:  # ClusterPipeline, here of one node's keys
                    for i in group:
                        pipe.hmget(keys[i], *_FIELDS)
                    return await pipe.execute()

            return await self._call("get_many", fetch, node=node)

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

    async def _by_node(self, keys: Sequence[str]) -> list[tuple[str, list[int]]]:
        """``(node name, indices of keys)`` by the primary the client's slot map puts each key on."""
        groups: dict[str, list[int]] = {}
        for i, key in enumerate(keys):
            groups.setdefault(self._client.get_node_from_key(key).name, []).append(i)
        return list(groups.items())
