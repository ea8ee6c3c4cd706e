"""Real redis-server processes for the service tests (pytest-redis style: free port, temp dir, no persistence).

``RedisServer`` is one process with fault injection (pause/resume/kill/restart); ``RedisClusterProcs`` is three
cluster-enabled masters joined with ``redis-cli --cluster create``. conftest.py wraps them in session fixtures.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
import redis.asyncio
from redis.asyncio.cluster import RedisCluster
from redis.backoff import NoBackoff
from redis.retry import Retry

HOST = "127.0.0.1"
START_TIMEOUT_S = 10.0
PORT_ATTEMPTS = 5
"""Ports a first start tries before it gives up (each taken between its choice and the bind)."""


class RedisNotInstalled(RuntimeError):
    pass


def find_binary(name: str) -> str:
    path = shutil.which(name) or (f"/usr/bin/{name}" if os.access(f"/usr/bin/{name}", os.X_OK) else None)
    if path is None:
        raise RedisNotInstalled(
            f"{name} not found on PATH: the redis/cluster service tests need a real Redis "
            f"(install redis-server, e.g. `apt-get install redis-server`; CI does this in .ci/run), "
            f"or deselect them with -m 'not redis and not cluster'"
        )
    return path


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port the OS reports free right now (bind port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _ephemeral_ports() -> tuple[int, int]:
    """The range the OS hands out to outgoing connections (Linux's default where it cannot be read)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_cluster_port(taken: set[int]) -> int:
    """A free port P whose cluster bus port P + 10000 is free too, both outside the ephemeral range where it leaves
    room: a port chosen there can be taken by any test's outgoing connection before the node binds it (seen in CI:
    "Address already in use")."""
    low, high = _ephemeral_ports()
    below, above = (10000, low - 10001), (high + 1, 55535)  # P and P + 10000 both under, or both over, the range
    roomy = [span for span in (below, above) if span[1] - span[0] >= 1000]
    first, last = roomy[0] if roomy else (20000, 55535)
    for _ in range(1000):
        port = random.randint(first, last)
        if port in taken or port + 10000 in taken:
            continue
        if _bindable(port) and _bindable(port + 10000):
            return port
    raise RuntimeError("no free port pair (P, P + 10000) found for a cluster node")


class RedisServer:
    """One ``redis-server`` on 127.0.0.1, persistence off, data dir ``directory``.

    Attributes: ``port``, ``url`` (``redis://127.0.0.1:P/0``), ``pid`` (of the running process), ``directory``.
    Fault injection: ``pause()`` (SIGSTOP), ``resume()`` (SIGCONT), ``kill()`` (SIGKILL, data lost),
    ``restart()`` (start again on the same port, empty), ``ensure_running()`` (undo whichever of those happened).
    """

    def __init__(
        self,
        directory: Path,
        port: int | None = None,
        extra_args: tuple[str, ...] = (),
        pick_port: Callable[[], int] | None = None,
    ) -> None:
        self.binary = find_binary("redis-server")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.pick_port = pick_port if pick_port is not None else (free_port if port is None else None)
        """Where a port the first start finds taken is replaced from (None: the port was given, keep it)."""
        self.port = port if port is not None else free_port()
        self.extra_args = extra_args
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False
        self.started = False

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError("redis-server is not running")
        return self.proc.pid

    @property
    def log_path(self) -> Path:
        return self.directory / "redis.log"

    def client(self, timeout_s: float = 1.0) -> redis.Redis:
        # No retries: redis-py's default (3, with backoff) turns every refused PING or SHUTDOWN into seconds.
        return redis.Redis(
            host=HOST,
            port=self.port,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            retry=Retry(NoBackoff(), 0),
        )

    def start(self) -> RedisServer:
        """Start and wait for PING. A first start whose port was taken since it was chosen moves to another port
        (a restart keeps its port: the tests that kill a server reconnect to it there)."""
        for attempt in range(PORT_ATTEMPTS):
            try:
                self._start_once()
            except RuntimeError as exc:
                taken = "Address already in use" in str(exc)
                if not taken or self.started or self.pick_port is None or attempt == PORT_ATTEMPTS - 1:
                    raise
                self.stop()
                self.port = self.pick_port()
                continue
            self.started = True
            return self
        raise AssertionError("unreachable")

    def _start_once(self) -> None:
        args = [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            HOST,
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.directory),
            "--logfile",
            str(self.log_path),
            *self.extra_args,
        ]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.paused = False
        self.wait_ready()

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(
                    f"redis-server on port {self.port} exited with {self.proc.returncode}: {self._tail()}"
                )
            try:
                with contextlib.closing(self.client(0.5)) as c:
                    if c.ping():
                        return
            except redis.RedisError as e:
                last = e
            time.sleep(0.02)
        raise RuntimeError(
            f"redis-server on port {self.port} did not answer PING in {timeout_s}s ({last}): {self._tail()}"
        )

    def _tail(self) -> str:
        text = ""
        if self.proc is not None and self.proc.stderr is not None and self.proc.poll() is not None:
            text = self.proc.stderr.read().decode(errors="replace")
        with contextlib.suppress(OSError):
            text += self.log_path.read_text(errors="replace")
        return text[-2000:]

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
        self.paused = False

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.paused = False

    def restart(self) -> None:
        """Start again on the same port (stopping the running process first, if any); the data is gone."""
        self.stop()
        self.start()

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def ensure_running(self) -> None:
        """Undo a test's fault injection: resume if paused, restart if killed."""
        if self.paused:
            self.resume()
        if not self.running():
            self.start()

    def stop(self) -> None:
        """SHUTDOWN NOSAVE and wait for the process (kill it if it does not go)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.resume()
            with contextlib.suppress(redis.RedisError), contextlib.closing(self.client(2.0)) as c:
                c.shutdown(nosave=True)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        self.proc = None
        self.paused = False


class RedisClusterProcs:
    """Three cluster-enabled masters (no replicas) on free ports whose bus ports (P + 10000) are free too.

    Attributes: ``servers`` (the three :class:`RedisServer`), ``ports``, ``url``
    (``redis+cluster://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3``). ``ensure_running()`` resumes paused nodes and
    waits for ``cluster_state:ok``.
    """

    def __init__(self, directory: Path, size: int = 3, node_timeout_ms: int = 2000) -> None:
        self.directory = Path(directory)
        taken: set[int] = set()

        def pick() -> int:  # a node's port and bus port, apart from every other node's
            port = free_cluster_port(taken)
            taken.update((port, port + 10000))
            return port

        self.servers: list[RedisServer] = []
        for i in range(size):
            port = pick()
            node_dir = self.directory / f"node{i}"
            extra = (
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                str(node_dir / "nodes.conf"),
                "--cluster-node-timeout",
                str(node_timeout_ms),
            )
            self.servers.append(RedisServer(node_dir, port=port, extra_args=extra, pick_port=pick))

    @property
    def ports(self) -> list[int]:
        return [s.port for s in self.servers]

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"{HOST}:{p}" for p in self.ports)

    def start(self) -> RedisClusterProcs:
        for server in self.servers:
            server.start()
        cli = find_binary("redis-cli")
        nodes = [f"{HOST}:{p}" for p in self.ports]
        done = subprocess.run(
            [cli, "--cluster", "create", *nodes, "--cluster-replicas", "0", "--cluster-yes"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if done.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
        self.wait_ok()
        return self

    def wait_ok(self, timeout_s: float = 20.0) -> None:
        """Wait until every node reports ``cluster_state:ok`` and knows every other node."""
        deadline = time.monotonic() + timeout_s
        states: dict[int, str] = {}
        while time.monotonic() < deadline:
            for server in self.servers:
                try:
                    with contextlib.closing(server.client(0.5)) as c:
                        info = c.execute_command("CLUSTER", "INFO")
                    info = info.decode() if isinstance(info, bytes) else str(info)
                    ok = "cluster_state:ok" in info and f"cluster_known_nodes:{len(self.servers)}" in info
                    states[server.port] = "ok" if ok else "not ok"
                except redis.RedisError as e:
                    states[server.port] = repr(e)
            if all(state == "ok" for state in states.values()) and len(states) == len(self.servers):
                return
            time.sleep(0.05)
        raise RuntimeError(f"cluster not ok after {timeout_s}s: {states}")

    def ensure_running(self) -> None:
        touched = False
        for server in self.servers:
            if server.paused or not server.running():
                touched = True
                server.ensure_running()
        if touched:
            self.wait_ok()

    def stop(self) -> None:
        for server in self.servers:
            server.stop()


@contextlib.contextmanager
def running_cluster(directory: Path, node_timeout_ms: int = 2000) -> Iterator[RedisClusterProcs]:
    """A started local cluster in ``directory``, stopped on exit (also when it fails to start); a missing
    redis-server fails the test with its message."""
    try:
        cluster = RedisClusterProcs(directory, node_timeout_ms=node_timeout_ms)
    except RedisNotInstalled as e:
        pytest.fail(str(e), pytrace=False)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def raw_client(url: str) -> redis.asyncio.Redis | RedisCluster:
    """A plain redis-py asyncio client for ``url`` (a redis:// or redis+cluster:// URL), for checks in tests."""
    if url.startswith("redis+cluster://"):
        host, _, port = url.removeprefix("redis+cluster://").split(",")[0].rpartition(":")
        return RedisCluster(host=host, port=int(port), socket_timeout=2.0)
    return redis.asyncio.Redis.from_url(url, socket_timeout=2.0)


async def delete_prefix(url: str, prefix: str) -> None:
    """Delete every key under ``prefix:`` (on every primary of a cluster)."""
    if url == "memory":
        return
    client = raw_client(url)
    try:
        async for key in client.scan_iter(match=f"{prefix}:*", count=1000):
            await client.delete(key)
    finally:
        await client.aclose()
