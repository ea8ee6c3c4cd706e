"""Start a server process on a free 127.0.0.1 port pinned to one CPU, wait until it answers, stop it.

    with start_uvicorn("loadtest.floor:create_floor_app", cpu=0) as server:
        result = run_scenario("bid-binary", server.url, rate=2000, duration=5)

The load generator then pins itself to another CPU (``pin_current_process(1)``; the CLI's ``--cpu 1``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

_REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pin_current_process(cpu: int | None) -> None:
    """Pin this process to ``cpu`` (no-op for None). Raises ValueError if the CPU is not available to us."""
    if cpu is None:
        return
    allowed = os.sched_getaffinity(0)
    if cpu not in allowed:
        raise ValueError(f"CPU {cpu} is not in this process's affinity set {sorted(allowed)}")
    os.sched_setaffinity(0, {cpu})


def _http_ready(host: str, port: int, path: str, timeout: float = 0.5) -> bool:
    """True once a GET of ``path`` gets an HTTP response whose status is below 500."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
            data = s.recv(64)
    except OSError:
        return False
    try:
        return data.startswith(b"HTTP/1.") and int(data[9:12]) < 500
    except ValueError:
        return False


def _answering_process(url: str) -> int | None:
    """The ``process`` a 200 answer of ``url`` names, on a new connection (so each probe lands on whichever worker
    accepts it); None for any other answer or none."""
    try:
        with urllib.request.urlopen(url, timeout=5.0) as reply:
            return int(json.loads(reply.read())["process"])
    except (OSError, ValueError, KeyError, TypeError):  # refused, 503 (HTTPError is an OSError), not JSON
        return None


@dataclass
class ServerProcess:
    proc: subprocess.Popen
    host: str
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def pause(self) -> None:
        """SIGSTOP the server (a stall: connections stay open, nothing is answered)."""
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self, timeout: float = 5.0) -> None:
        if self.proc.poll() is None:
            self.resume()
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:  # the whole session (start_new_session): uvicorn's workers too
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout)

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def start_process(
    cmd: Sequence[str],
    port: int,
    *,
    host: str = "127.0.0.1",
    cpu: int | None = 0,
    ready_path: str = "/healthz",
    ready_timeout: float = 30.0,
    env: dict[str, str] | None = None,
    cwd: str | os.PathLike | None = None,
    workers: int = 1,
) -> ServerProcess:
    """Start ``cmd`` (which must listen on ``host:port``), pin it to ``cpu`` and wait until ``ready_path``
    answers with a status below 500; with ``workers`` > 1, until it has answered 200 from that many processes (its
    JSON names the one answering, ``process``, as rcb's ``/readyz`` does). Its output goes to a temporary log file
    (``ServerProcess.log_tail``)."""
    log_fd, log_name = tempfile.mkstemp(prefix="loadtest-server-", suffix=".log")
    full_env = {**os.environ, **(env or {})}
    full_env.setdefault("PYTHONPATH", str(_REPO))
    proc = subprocess.Popen(
        list(cmd), stdout=log_fd, stderr=subprocess.STDOUT, env=full_env, cwd=cwd or _REPO, start_new_session=True
    )
    os.close(log_fd)
    server = ServerProcess(proc, host, port, Path(log_name))
    try:
        if cpu is not None:
            os.sched_setaffinity(proc.pid, {cpu})  # OSError (EINVAL) if this CPU does not exist / is not allowed
        deadline = time.monotonic() + ready_timeout
        while not _http_ready(host, port, ready_path):
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}:\n{server.log_tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"server not ready after {ready_timeout}s:\n{server.log_tail()}")
            time.sleep(0.05)
        ready: set[int] = set()
        while workers > 1 and len(ready) < workers:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(ready)} of {workers} workers ready after {ready_timeout}s")
            process = _answering_process(f"{server.url}{ready_path}")
            if process is None:
                time.sleep(0.05)
            else:
                ready.add(process)
    except BaseException:
        server.stop()
        raise
    return server


def start_uvicorn(
    app: str = "loadtest.floor:create_floor_app",
    *,
    factory: bool = True,
    cpu: int | None = 0,
    port: int | None = None,
    ready_path: str = "/healthz",
    workers: int = 1,
    extra_args: Sequence[str] = (),
    env: dict[str, str] | None = None,
    ready_timeout: float = 30.0,
) -> ServerProcess:
    """uvicorn (uvloop + httptools, no access log) serving ``app`` on a free port pinned to ``cpu``."""
    port = port or free_port()
    cmd = [sys.executable, "-m", "uvicorn", app, "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--loop", "uvloop", "--http", "httptools", "--no-access-log", "--log-level", "warning"]
    cmd += ["--workers", str(workers)] if workers > 1 else []
    cmd += ["--factory"] if factory else []
    cmd += list(extra_args)
    return start_process(cmd, port, cpu=cpu, ready_path=ready_path, env=env, ready_timeout=ready_timeout)


def start_nullserver(*, cpu: int | None = 0, port: int | None = None, fail_every: int = 0) -> ServerProcess:
    """The raw responder of loadtest.nullserver (generator self-check, failing stand-in)."""
    port = port or free_port()
    cmd = [sys.executable, "-m", "loadtest.nullserver", "--port", str(port), "--fail-every", str(fail_every)]
    return start_process(cmd, port, cpu=cpu, ready_path="/")
