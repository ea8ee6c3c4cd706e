"""The open-loop load generator (loadtest/): correct counts against the floor app, honest latency under a stall
(measured from the intended send time, so a stalled server cannot hide its queue), bounded runs, CLI exit codes."""

from __future__ import annotations

import json
import threading
import time

import httpx
import numpy as np
import pytest

from loadtest.__main__ import main as cli_main
from loadtest.openloop import TIMEOUT, Stream, _Conn, build_request, run_open_loop, summarize
from loadtest.run_server import free_port, start_nullserver, start_uvicorn
from loadtest.scenarios import Target, bid_binary_requests, run_scenario


@pytest.fixture(scope="module")
def floor():
    with start_uvicorn("loadtest.floor:create_floor_app", cpu=0) as server:
        yield server


def test_floor_answers_like_the_hot_path(floor):
    u = np.linspace(0.5, 2.0, 1000, dtype="<f4")
    with httpx.Client(base_url=floor.url, timeout=5) as c:
        r = c.post("/v1/bid", params={"campaign_id": "c1"}, content=u.tobytes(),
                   headers={"content-type": "application/octet-stream"})  # fmt: skip
        assert r.status_code == 200
        np.testing.assert_allclose(np.frombuffer(r.content, "<f4"), u * np.float32(0.8), rtol=1e-6)
        r = c.post("/v1/bid", json={"campaign_id": "c1", "utilities": u.tolist()})
        assert r.status_code == 200 and r.json()["bid_ratio"] == 0.8
        np.testing.assert_allclose(r.json()["bids"], u.astype(float) * 0.8, rtol=1e-6)
        batch = {"updates": [{"campaign_id": "c1", "episode": "e1", "slot": 0}] * 3}
        assert c.post("/v1/slot-update/batch", json=batch).json()["applied"] == 3
        assert c.put("/v1/campaigns/c1", json={"episode": "e1", "roi_target": 1.0, "budget": None}).status_code == 200


def test_the_floor_routes_its_bid_as_the_service_does():
    """The floor's /v1/bid is matched first as a plain Starlette route, like the service's (service.main): a FastAPI
    route with a query parameter made the floor slower than the service it is the floor of."""
    from starlette.routing import Route

    from loadtest.floor import create_floor_app
    from service.main import create_app

    for app in (create_floor_app(), create_app()):
        first = app.router.routes[0]
        assert type(first) is Route and first.path == "/v1/bid" and first.methods == {"POST"}


def test_modest_rate_against_floor_has_no_errors(floor):
    res = run_scenario("bid-binary", floor.url, rate=300, duration=2.0, campaigns=50, connections=16)
    s = res.summary["streams"]["bid"]
    bid = res.run.streams["bid"]
    assert res.errors == 0 and s["errors"] == 0
    assert s["requests"] == 600 and s["sent"] == 600 and s["ok"] == 600
    assert np.all(bid.latency > 0) and np.all(np.isfinite(bid.latency))
    assert s["achieved_rate"] == pytest.approx(300, rel=0.05)
    assert 0 < s["latency_ms"]["p50"] <= s["latency_ms"]["p99"] <= s["latency_ms"]["max"]
    np.testing.assert_allclose(np.diff(bid.intended), 1 / 300)  # the schedule is fixed in advance
    assert np.all(bid.sent >= bid.intended - 1e-6)  # never sent early


def test_stall_shows_up_in_p99(floor):
    """SIGSTOP the server for 0.5 s mid-run: requests intended during the stall carry the wait in their latency
    (measured from the intended send time), so p99 and max are at least about the stall."""
    stall = 0.5

    def stall_server():
        time.sleep(0.7)
        floor.pause()
        time.sleep(stall)
        floor.resume()

    reqs = bid_binary_requests(Target.from_url(floor.url), [f"c{i}" for i in range(20)])
    t = threading.Thread(target=stall_server)
    t.start()
    try:
        run = run_open_loop(floor.url, [Stream.for_duration("bid", reqs, 300, 2.0, connections=16)], timeout=5)
    finally:
        t.join()
        floor.resume()
    s = summarize(run.streams["bid"])
    assert s["errors"] == 0
    assert s["latency_ms"]["max"] >= 0.9 * stall * 1e3
    assert s["latency_ms"]["p99"] >= 0.8 * stall * 1e3
    # 16 connections cannot hold the ~150 requests of the stall: the rest waited on the client, and that wait
    # is in their latency too (send lag), not hidden as it would be by a closed-loop tool.
    assert s["send_lag_ms"]["max"] >= 0.5 * stall * 1e3


def test_run_is_bounded_when_the_server_never_answers(floor):
    reqs = bid_binary_requests(Target.from_url(floor.url), ["c1"])
    floor.pause()
    try:
        t0 = time.perf_counter()
        run = run_open_loop(
            floor.url, [Stream.for_duration("bid", reqs, 100, 0.5, connections=4)], timeout=0.3, drain_timeout=0.5
        )
        elapsed = time.perf_counter() - t0
    finally:
        floor.resume()
    s = run.streams["bid"]
    assert elapsed < 3.0 and run.wall_s < 1.5
    assert s.errors == s.count == 50
    counts = s.error_counts()
    assert counts.get("timeout", 0) > 0 and set(counts) <= {"timeout", "not_sent"}
    assert (s.status == TIMEOUT).sum() == counts["timeout"]


def test_percentiles_over_every_request_count_the_unanswered_as_slowest():
    """98 answers in 1-98 ms and 2 timeouts: over the answers p99 reads about 98 ms, over every request the p99
    falls among the timeouts (None: beyond the client's timeout), and the p90 is a real request's."""
    from loadtest.openloop import StreamResult

    n = 100
    latency = np.concatenate([np.arange(1, 99) / 1e3, [np.nan, np.nan]])
    status = np.concatenate([np.full(98, 200), [TIMEOUT, TIMEOUT]]).astype(np.int32)
    stream = StreamResult("bid", 100.0, 4, np.arange(n) / 100, np.arange(n) / 100, latency, status)
    s = summarize(stream)
    assert s["unanswered"] == 2 and s["errors"] == 2
    assert s["latency_ms"]["p99"] == pytest.approx(97.03, abs=0.01)  # the answered requests alone
    assert s["latency_all_ms"]["p99"] is None and s["latency_all_ms"]["max"] is None
    assert s["latency_all_ms"]["p90"] == 90.0 and s["latency_all_ms"]["p50"] == 50.0
    answered = summarize(StreamResult("bid", 100.0, 4, np.arange(98) / 100, np.arange(98) / 100,
                                      latency[:98], status[:98]))  # fmt: skip
    assert answered["unanswered"] == 0  # nothing unanswered: the two blocks agree to the digit
    assert answered["latency_all_ms"] == {k: answered["latency_ms"][k] for k in answered["latency_all_ms"]}


def test_a_window_whose_p99_timed_out_does_not_look_fast():
    """The per-window p99 in latency.png was taken over the answered requests only: a window with 2 timeouts in 100
    plotted the p99 of the other 98."""
    from loadtest.openloop import StreamResult, windows

    latency = np.concatenate([np.arange(1, 99) / 1e3, [np.nan, np.nan], np.arange(1, 101) / 1e3])
    status = np.concatenate([np.full(98, 200), [TIMEOUT, TIMEOUT], np.full(100, 200)]).astype(np.int32)
    intended = np.concatenate([np.arange(100) / 100, 1 + np.arange(100) / 100])
    w = windows(StreamResult("bid", 100.0, 4, intended, intended, latency, status))
    assert w["count"] == [100, 100] and w["unanswered"] == [2, 0]
    assert np.isnan(w["p99"][0]) and w["p50"][0] == 50.0  # the p50 is a real request's
    assert w["p99"][1] == pytest.approx(99.01)  # all answered: as before


def test_a_timeout_that_is_not_positive_is_refused(floor):
    """--timeout 0 made the timeout sweeper spin and reported every request as a timeout."""
    assert cli_main(["--url", floor.url, "--scenario", "bid-binary", "--rate", "10", "--duration", "0.2",
                     "--timeout", "0", "--no-setup"]) == 2  # fmt: skip


def test_cli_writes_outputs_and_exits_zero(floor, tmp_path):
    rc = cli_main(["--url", floor.url, "--scenario", "mixed", "--rate", "200", "--duration", "1.5", "--campaigns",
                   "100", "--burst-rate", "400", "--connections", "8", "--out", str(tmp_path), "--json"])  # fmt: skip
    assert rc == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["scenario"] == "mixed"
    assert summary["streams"]["bid"]["requests"] == 300 and summary["streams"]["burst"]["requests"] == 100
    assert summary["streams"]["burst"]["burst_wall_s"] > 0
    assert summary["bid_during_burst"]["requests"] + summary["bid_outside_burst"]["requests"] == 300
    assert summary["setup"]["requests"] == 100
    assert (tmp_path / "latency.png").stat().st_size > 1000


def test_cli_exits_nonzero_on_errors(tmp_path):
    with start_nullserver(cpu=0, fail_every=10) as server:
        rc = cli_main(["--url", server.url, "--scenario", "slot-burst-batch", "--rate", "400", "--campaigns",
                       "2000", "--batch-size", "10", "--no-setup", "--out", str(tmp_path), "--json"])  # fmt: skip
    assert rc == 1
    s = json.loads((tmp_path / "summary.json").read_text())["streams"]["burst"]
    assert s["requests"] == 200 and s["error_counts"] == {"http_500": 20}


def test_cli_exits_nonzero_when_nothing_listens():
    assert cli_main(["--url", f"http://127.0.0.1:{free_port()}", "--rate", "10", "--duration", "0.2"]) == 2


def test_cli_refuses_what_it_cannot_run_with_exit_2(capsys):
    """An unusable --cpu and a capacity search that cannot climb are exit 2 ("could not run"), not a traceback or
    a search that steps forever."""
    url = f"http://127.0.0.1:{free_port()}"
    assert cli_main(["--url", url, "--cpu", "4096", "--rate", "10", "--duration", "0.2"]) == 2
    assert cli_main(["--url", url, "--find-capacity", "--factor", "1", "--scenario", "bid-binary"]) == 2
    said = capsys.readouterr().out
    assert "CPU 4096" in said and "factor must be above 1" in said


class _FakeRunner:
    def __init__(self):
        self.got = []

    def on_response(self, conn, status):
        self.got.append(status)
        conn.idx = -1


class _FakePool:
    def __init__(self):
        self.runner = _FakeRunner()


class _FakeTransport:
    def close(self):
        pass

    def abort(self):
        pass


def test_response_framing_split_anywhere():
    """Content-Length framing survives responses arriving a byte at a time, and back to back."""
    body = b'{"bids":[1.0,2.0]}'
    one = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    two = b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n"
    pool = _FakePool()
    conn = _Conn(pool)
    conn.connection_made(_FakeTransport())
    for chunk in [one[i : i + 1] for i in range(len(one))]:
        conn.idx = 0
        conn.data_received(chunk)
    conn.idx = 0
    conn.data_received(two)
    assert pool.runner.got == [200, 503]
    assert build_request("POST", "/v1/bid", "h", b"ab", "text/plain").endswith(b"Content-Length: 2\r\n\r\nab")
