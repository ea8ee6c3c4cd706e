"""Open-loop (constant arrival rate) HTTP/1.1 load generator, coordinated omission corrected.

Every request ``i`` of a stream has a fixed *intended* send time ``start + i / rate``, decided before the run.
Latency is measured from that intended time to the end of the response, so when the server stalls, the requests
that should have been sent during the stall (and are queued on the client because every connection is busy, or
sit in the server's queue) carry the whole delay -- the server cannot hide its queue by slowing the client down
(what wrk2 and vegeta do; closed-loop tools such as wrk and hey measure from the actual send and hide it).

The client is a minimal asyncio/uvloop HTTP/1.1 keep-alive client: a pool of K connections per stream, one
request in flight per connection, requests pre-encoded as raw bytes, responses framed by Content-Length only
(a response without it, other than 1xx/204/304, is counted as a ``bad_response`` error). This keeps the per-request
cost low enough for >= 5,000 requests/s on one core.

Per request it records the intended time, the actual send time, the latency and the status. Errors: non-2xx,
``timeout`` (no response ``timeout`` seconds after the send), ``conn_error`` (connection lost mid-request),
``not_sent`` (still queued on the client when the drain deadline passed), ``bad_response`` (unparseable framing).
The run stops at the last intended time plus ``drain_timeout``, whatever the server does.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import numpy as np

# Status codes below zero are client-side errors (no HTTP status).
TIMEOUT = -1
CONN_ERROR = -2
NOT_SENT = -3
BAD_RESPONSE = -4
ERROR_NAMES = {TIMEOUT: "timeout", CONN_ERROR: "conn_error", NOT_SENT: "not_sent", BAD_RESPONSE: "bad_response"}

_MAX_HEAD = 65536


def parse_url(url: str) -> tuple[str, int, str]:
    """``http://host:port/prefix`` -> (host, port, prefix without trailing slash). Only plain http."""
    parts = urlsplit(url)
    if parts.scheme != "http":
        raise ValueError(f"only http:// URLs are supported, got {url!r}")
    host = parts.hostname or "127.0.0.1"
    return host, parts.port or 80, parts.path.rstrip("/")


def build_request(
    method: str,
    path: str,
    host: str,
    body: bytes = b"",
    content_type: str | None = None,
    headers: dict[str, str] | None = None,
) -> bytes:
    """One raw HTTP/1.1 keep-alive request (request line, headers, body) ready to write to a socket."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}"]
    if content_type:
        lines.append(f"Content-Type: {content_type}")
    if body or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(body)}")
    for k, v in (headers or {}).items():
        lines.append(f"{k}: {v}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


@dataclass
class Stream:
    """A constant-rate stream of requests: request ``i`` is ``requests[i % len(requests)]``, intended at
    ``start + i / rate`` seconds after the run's start, sent over its own pool of ``connections`` connections."""

    name: str
    requests: Sequence[bytes]
    rate: float
    count: int
    start: float = 0.0
    connections: int = 64

    def __post_init__(self) -> None:
        if self.rate <= 0 or self.count < 0 or self.connections < 1 or not self.requests:
            raise ValueError(f"stream {self.name!r}: need rate > 0, count >= 0, connections >= 1, requests")

    @classmethod
    def for_duration(cls, name: str, requests: Sequence[bytes], rate: float, duration: float, **kw) -> Stream:
        return cls(name, requests, rate, round(rate * duration), **kw)

    def intended(self) -> np.ndarray:
        return self.start + np.arange(self.count, dtype=np.float64) / self.rate


@dataclass
class StreamResult:
    """Per-request records of one stream; times in seconds from the run's start (the clock's zero)."""

    name: str
    rate: float
    connections: int
    intended: np.ndarray  # float64, intended send time
    sent: np.ndarray  # float64, actual send time (nan: never sent)
    latency: np.ndarray  # float64, response end - intended send time (nan: no response)
    status: np.ndarray  # int32, HTTP status or one of the negative error codes
    connect_errors: int = 0

    @property
    def count(self) -> int:
        return len(self.status)

    @property
    def ok(self) -> np.ndarray:
        return (self.status >= 200) & (self.status < 300)

    @property
    def responded(self) -> np.ndarray:
        return self.status > 0

    @property
    def errors(self) -> int:
        return int(self.count - self.ok.sum())

    def error_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        codes, counts = np.unique(self.status[~self.ok], return_counts=True)
        for c, n in zip(codes.tolist(), counts.tolist(), strict=True):
            out[ERROR_NAMES.get(c, f"http_{c}")] = n
        return out

    def completed_at(self) -> np.ndarray:
        """Absolute response-end times (seconds from the run's start) of the requests that got a response."""
        return (self.intended + self.latency)[self.responded]


@dataclass
class RunResult:
    streams: dict[str, StreamResult]
    wall_s: float  # from the clock's zero to the end of the run (all responses in, or the drain deadline)
    started_at: float = field(default_factory=time.time)  # epoch seconds at the clock's zero


class _Conn(asyncio.Protocol):
    """One keep-alive connection, at most one request in flight, Content-Length framing."""

    __slots__ = ("alive", "buf", "close_after", "idx", "need", "pool", "sent_at", "status", "transport")

    def __init__(self, pool: _Pool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.need = -1  # body bytes still expected; -1 while reading the head
        self.status = 0
        self.close_after = False
        self.idx = -1  # request in flight, -1 when idle
        self.sent_at = 0.0
        self.alive = False

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport
        self.alive = True

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        while buf:
            if self.need < 0:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    if len(buf) > _MAX_HEAD:
                        self._bad()
                    return
                head = bytes(buf[:end]).lower()
                try:
                    status = int(head[9:12])
                    p = head.find(b"\r\ncontent-length:")
                    if p >= 0:
                        e = head.find(b"\r\n", p + 2)
                        length = int(head[p + 17 : e if e >= 0 else len(head)])
                    elif status < 200 or status in (204, 304):
                        length = 0
                    else:
                        raise ValueError("no content-length")
                except ValueError:
                    self._bad()
                    return
                self.status = status
                self.close_after = b"\r\nconnection: close" in head
                del buf[: end + 4]
                self.need = length
            if len(buf) < self.need:
                return
            del buf[: self.need]
            self.need = -1
            if self.status < 200:  # interim response (100 Continue): the final one follows
                continue
            if self.close_after:
                self.alive = False
                self.transport.close()
            self.pool.runner.on_response(self, self.status)

    def _bad(self) -> None:
        self.alive = False
        if self.idx >= 0:
            self.pool.runner.record_error(self, BAD_RESPONSE)
        self.transport.abort()

    def connection_lost(self, exc) -> None:  # type: ignore[override]
        self.alive = False
        if self.idx >= 0:
            self.pool.runner.record_error(self, CONN_ERROR)
        self.pool.runner.on_lost(self)


class _Pool:
    """Connections, idle stack, client-side queue and records of one stream."""

    def __init__(self, runner: _Runner, stream: Stream) -> None:
        self.runner = runner
        self.stream = stream
        self.requests = list(stream.requests)
        self.nreq = len(self.requests)
        n = stream.count
        self.intended = stream.intended().tolist()
        self.sent = [float("nan")] * n
        self.latency = [float("nan")] * n
        self.status = [NOT_SENT] * n
        self.conns: list[_Conn] = []
        self.idle: list[_Conn] = []
        self.pending: deque[int] = deque()
        self.connect_errors = 0

    def result(self) -> StreamResult:
        s = self.stream
        return StreamResult(
            name=s.name,
            rate=s.rate,
            connections=s.connections,
            intended=np.asarray(self.intended, dtype=np.float64),
            sent=np.asarray(self.sent, dtype=np.float64),
            latency=np.asarray(self.latency, dtype=np.float64),
            status=np.asarray(self.status, dtype=np.int32),
            connect_errors=self.connect_errors,
        )


class _Runner:
    def __init__(self, host: str, port: int, streams: Sequence[Stream], timeout: float, drain_timeout: float) -> None:
        names = [s.name for s in streams]
        if len(set(names)) != len(names):
            raise ValueError(f"stream names must be unique: {names}")
        if not (timeout > 0 and drain_timeout >= 0):  # a zero timeout made the sweeper spin and time out everything
            raise ValueError(f"timeout must be > 0 and drain_timeout >= 0, not {timeout} and {drain_timeout}")
        self.host, self.port = host, port
        self.timeout = timeout
        self.drain_timeout = drain_timeout
        self.pools = [_Pool(self, s) for s in streams]
        self.remaining = sum(s.count for s in streams)
        self.base = 0.0
        self.stopping = False
        self.all_done: asyncio.Event | None = None

    # --- hot path -------------------------------------------------------------------------------------------------
    def send(self, conn: _Conn, i: int, now: float) -> None:
        pool = conn.pool
        conn.idx = i
        conn.sent_at = now
        pool.sent[i] = now - self.base
        conn.transport.write(pool.requests[i % pool.nreq])

    def dispatch(self, pool: _Pool, i: int) -> None:
        if pool.idle:
            self.send(pool.idle.pop(), i, time.perf_counter())
        else:
            pool.pending.append(i)

    def on_response(self, conn: _Conn, status: int) -> None:
        now = time.perf_counter()
        i = conn.idx
        if i < 0:  # a response nobody asked for
            return
        pool = conn.pool
        pool.latency[i] = now - self.base - pool.intended[i]
        pool.status[i] = status
        conn.idx = -1
        self._finish_one()
        if conn.alive:
            if pool.pending:
                self.send(conn, pool.pending.popleft(), now)
            else:
                pool.idle.append(conn)

    # --- errors and reconnection ----------------------------------------------------------------------------------
    def record_error(self, conn: _Conn, code: int) -> None:
        i = conn.idx
        conn.idx = -1
        conn.pool.status[i] = code
        self._finish_one()

    def _finish_one(self) -> None:
        self.remaining -= 1
        if self.remaining == 0 and self.all_done is not None:
            self.all_done.set()

    def on_lost(self, conn: _Conn) -> None:
        pool = conn.pool
        if conn in pool.idle:
            pool.idle.remove(conn)
        if conn in pool.conns:
            pool.conns.remove(conn)
            if not self.stopping:
                asyncio.get_running_loop().create_task(self._reconnect(pool))

    async def _open(self, pool: _Pool) -> _Conn:
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(lambda: _Conn(pool), self.host, self.port)
        pool.conns.append(conn)
        return conn

    async def _reconnect(self, pool: _Pool) -> None:
        while not self.stopping:
            try:
                conn = await asyncio.wait_for(self._open(pool), timeout=max(self.timeout, 0.1))
            except (TimeoutError, OSError):
                pool.connect_errors += 1
                await asyncio.sleep(0.05)
                continue
            if pool.pending:
                self.send(conn, pool.pending.popleft(), time.perf_counter())
            else:
                pool.idle.append(conn)
            return

    async def _sweep_timeouts(self) -> None:
        period = min(0.05, self.timeout / 4)
        while not self.stopping:
            await asyncio.sleep(period)
            limit = time.perf_counter() - self.timeout
            for pool in self.pools:
                for conn in list(pool.conns):
                    if conn.idx >= 0 and conn.sent_at < limit:
                        self.record_error(conn, TIMEOUT)
                        conn.alive = False
                        conn.transport.abort()

    # --- the run --------------------------------------------------------------------------------------------------
    async def run(self) -> RunResult:
        self.all_done = asyncio.Event()
        for pool in self.pools:  # connect before the clock starts: connection setup is not part of the load
            conns = await asyncio.gather(*(self._open(pool) for _ in range(pool.stream.connections)))
            pool.idle.extend(conns)
        schedule = sorted(
            (t, k, i) for k, pool in enumerate(self.pools) for i, t in enumerate(pool.intended)
        )  # merged intended send times of all streams
        times = [t for t, _, _ in schedule]
        which = [(self.pools[k], i) for _, k, i in schedule]
        del schedule
        total = len(times)
        sweeper = asyncio.get_running_loop().create_task(self._sweep_timeouts())
        perf = time.perf_counter
        started_at = time.time()
        self.base = base = perf()
        k = 0
        dispatch = self.dispatch
        try:
            while k < total:
                now = perf() - base
                while k < total and times[k] <= now:
                    pool, i = which[k]
                    dispatch(pool, i)
                    k += 1
                if k < total:
                    delay = times[k] - (perf() - base)
                    await asyncio.sleep(delay if delay > 0 else 0)
            if self.remaining:
                deadline = (times[-1] if times else 0.0) + self.drain_timeout
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.all_done.wait(), timeout=max(0.0, deadline - (perf() - base)))
            wall = perf() - base
        finally:
            self.stopping = True
            sweeper.cancel()
            for pool in self.pools:  # requests still out at the drain deadline: timeouts; still queued: not sent
                for conn in list(pool.conns):
                    if conn.idx >= 0:
                        self.record_error(conn, TIMEOUT)
                    conn.transport.abort()
            await asyncio.sleep(0)
        return RunResult(streams={p.stream.name: p.result() for p in self.pools}, wall_s=wall, started_at=started_at)


async def run_open_loop_async(
    url: str, streams: Sequence[Stream], *, timeout: float = 10.0, drain_timeout: float = 10.0
) -> RunResult:
    """Run the streams against ``url``'s host:port on the running event loop (paths come from the requests)."""
    host, port, _ = parse_url(url)
    return await _Runner(host, port, streams, timeout, drain_timeout).run()


def run_open_loop(
    url: str,
    streams: Sequence[Stream],
    *,
    timeout: float = 10.0,
    drain_timeout: float = 10.0,
    use_uvloop: bool = True,
    disable_gc: bool = True,
) -> RunResult:
    """Run the streams on a fresh (uv)loop and return the per-request records. Bounded: it returns at the last
    intended send time plus ``drain_timeout`` at the latest. The cyclic GC is paused during the run (its pauses
    would otherwise show up as latency that is the generator's, not the server's)."""
    loop_factory = None
    if use_uvloop:
        try:
            import uvloop

            loop_factory = uvloop.new_event_loop
        except ImportError:  # pragma: no cover
            pass
    was_enabled = gc.isenabled()
    if disable_gc:
        gc.collect()
        gc.disable()
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            return runner.run(run_open_loop_async(url, streams, timeout=timeout, drain_timeout=drain_timeout))
    finally:
        if was_enabled:
            gc.enable()


# --- statistics -------------------------------------------------------------------------------------------------------
PERCENTILES = (50.0, 90.0, 99.0, 99.9)


def latency_stats_ms(latency_s: np.ndarray) -> dict[str, float | None]:
    """p50/p90/p99/p99.9/max/mean in milliseconds of the finite latencies (None when there are none)."""
    lat = latency_s[np.isfinite(latency_s)] * 1e3
    keys = [f"p{p:g}" for p in PERCENTILES] + ["max", "mean"]
    if lat.size == 0:
        return dict.fromkeys(keys)
    vals = [*np.percentile(lat, PERCENTILES).tolist(), float(lat.max()), float(lat.mean())]
    return {k: round(v, 4) for k, v in zip(keys, vals, strict=True)}


def latency_all_ms(latency_s: np.ndarray, answered: np.ndarray) -> dict[str, float | None]:
    """p50/p90/p99/p99.9/max in milliseconds over *every* request, the unanswered (timeouts, connection errors,
    never sent) counted as slower than any answer: a percentile that falls among them is None (beyond the client's
    timeout), so a run that drops 2% of its requests cannot show a p99 taken over the other 98%. Where some are
    unanswered, percentiles are of actual requests (inverted CDF), never interpolated towards an unanswered one;
    where all are answered they are :func:`latency_stats_ms`'s (linear interpolation), the same figures."""
    keys = [f"p{p:g}" for p in PERCENTILES] + ["max"]
    if latency_s.size == 0:
        return dict.fromkeys(keys)
    if answered.all() and np.isfinite(latency_s).all():  # nothing unanswered: exactly latency_ms's figures
        answered_stats = latency_stats_ms(latency_s)
        return {k: answered_stats[k] for k in keys}
    lat = np.where(answered & np.isfinite(latency_s), latency_s * 1e3, np.inf)
    vals = [*np.percentile(lat, PERCENTILES, method="inverted_cdf").tolist(), float(lat.max())]
    return {k: (round(v, 4) if np.isfinite(v) else None) for k, v in zip(keys, vals, strict=True)}


def summarize(s: StreamResult, mask: np.ndarray | None = None) -> dict:
    """JSON-able summary of a stream (or of the requests selected by ``mask``).

    ``achieved_rate``: requests actually sent per second over the sending span; ``throughput``: 2xx responses per
    second from the first intended send to the last response; ``latency_ms``: from the intended send time, over all
    requests that got a response (any status); ``latency_all_ms``: over every request, the unanswered counted as
    slower than any answer (:func:`latency_all_ms`); ``unanswered``: how many got no response; ``send_lag_ms``:
    actual - intended send time, the generator's own (or its connection pool's) lateness, already included in the
    latency. With ``mask`` (a subset, maybe not contiguous in time) the two rates are None."""
    subset = mask is not None
    if mask is None:
        mask = np.ones(s.count, dtype=bool)
    status, intended, sent, latency = s.status[mask], s.intended[mask], s.sent[mask], s.latency[mask]
    n = int(status.size)
    ok = (status >= 200) & (status < 300)
    was_sent = np.isfinite(sent)
    n_sent = int(was_sent.sum())
    span = float(sent[was_sent].max() - sent[was_sent].min()) if n_sent > 1 else 0.0
    responded = status > 0
    end = float((intended + latency)[responded].max()) if responded.any() else float("nan")
    first = float(intended.min()) if n else float("nan")
    errors: dict[str, int] = {}
    codes, counts = np.unique(status[~ok], return_counts=True)
    for c, m in zip(codes.tolist(), counts.tolist(), strict=True):
        errors[ERROR_NAMES.get(c, f"http_{c}")] = m
    lag = (sent - intended)[was_sent]
    return {
        "requests": n,
        "sent": n_sent,
        "ok": int(ok.sum()),
        "errors": n - int(ok.sum()),
        "error_counts": errors,
        "target_rate": s.rate,
        "connections": s.connections,
        "achieved_rate": round((n_sent - 1) / span, 2) if span > 0 and not subset else None,
        "throughput": round(int(ok.sum()) / (end - first), 2) if n and end > first and not subset else None,
        "first_intended_s": round(first, 6) if n else None,
        "last_response_s": round(end, 6) if responded.any() else None,
        "latency_ms": latency_stats_ms(latency[responded]),
        "unanswered": n - int(responded.sum()),
        "latency_all_ms": latency_all_ms(latency, responded),
        "send_lag_ms": {
            "p50": round(float(np.percentile(lag, 50)) * 1e3, 4) if lag.size else None,
            "p99": round(float(np.percentile(lag, 99)) * 1e3, 4) if lag.size else None,
            "max": round(float(lag.max()) * 1e3, 4) if lag.size else None,
        },
    }


def windows(s: StreamResult, width: float = 1.0) -> dict[str, list[float]]:
    """Per-window (by intended send time) p50/p99 latency in ms, request counts and unanswered counts, for plots.

    As :func:`latency_all_ms`, over every request of the window, the unanswered slower than any answer: a window
    whose p99 (or p50) falls among its unanswered requests reads NaN there, with ``unanswered`` saying why, rather
    than a p99 of the answered ones only (a window that timed out looked fast)."""
    keys = ("t", "p50", "p99", "count", "unanswered")
    if s.count == 0:
        return {k: [] for k in keys}
    idx = np.floor(s.intended / width).astype(np.int64)
    out: dict[str, list[float]] = {k: [] for k in keys}
    for w in range(int(idx.min()), int(idx.max()) + 1):
        window = idx == w
        latency, responded = s.latency[window], s.responded[window]
        stats = latency_all_ms(latency, responded)
        out["t"].append(w * width)
        out["count"].append(int(window.sum()))
        out["unanswered"].append(int((~(responded & np.isfinite(latency))).sum()))
        for name in ("p50", "p99"):
            out[name].append(float("nan") if stats[name] is None else stats[name])
    return out
