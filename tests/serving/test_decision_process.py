"""Slot batches decided in a child process (``RCB_DECISION_PROCESS``): the same answers as the batch thread, and a
child that dies or serves another model costs nothing but the thread's time (``service/decision_process.py``)."""

from __future__ import annotations

import os
import shutil
import signal
import time

from service import decision_process

from .app_fixtures import metric, rcb_serve, register, serving, update

CAMPAIGNS = [f"k{i}" for i in range(12)]


def _batch(client, slot: int) -> list[tuple[float, str, str]]:
    """One slot batch over CAMPAIGNS: each item's (ratio, decided_by, model_version)."""
    ups = [
        update(campaign=n, slot=slot, delivery=1.0 + i, cost=1.5 + 0.1 * slot, wins=3) for i, n in enumerate(CAMPAIGNS)
    ]
    r = client.post("/v1/slot-update/batch", json={"updates": ups})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert all(x["status"] == 200 for x in results), results
    return [(x["answer"]["bid_ratio"], x["answer"]["decided_by"], x["answer"]["model_version"]) for x in results]


def _registered(client) -> None:
    for name in CAMPAIGNS:
        assert register(client, campaign=name, roi_target=1.2).status_code == 201


def test_the_child_decides_as_the_batch_thread_does(models):
    with (
        serving(models.cbrl_model, shield=True) as thread,
        serving(models.cbrl_model, shield=True, decision_process=True) as child,
    ):
        process = child.app.state.runner.process
        assert process is not None and thread.app.state.runner.process is None
        assert process.child_pid() not in (None, os.getpid())
        _registered(thread)
        _registered(child)
        for slot in range(4):
            assert _batch(child, slot) == _batch(thread, slot)
        assert process.answered == 4 and process.failures == 0
        posterior = [child.get(f"/v1/campaigns/{n}").json()["posterior"] for n in CAMPAIGNS]
        assert all(p is not None for p in posterior)
        assert posterior == [thread.get(f"/v1/campaigns/{n}").json()["posterior"] for n in CAMPAIGNS]


def test_a_dead_child_costs_the_batch_the_thread_and_is_started_again(models, monkeypatch):
    monkeypatch.setattr(decision_process, "RESTART_AFTER_S", 0.5)
    with (
        serving(models.cbrl_model, shield=True) as thread,
        serving(models.cbrl_model, shield=True, decision_process=True) as child,
    ):
        process = child.app.state.runner.process
        _registered(thread)
        _registered(child)
        assert _batch(child, 0) == _batch(thread, 0)
        first = process.child_pid()
        os.kill(first, signal.SIGKILL)
        assert _batch(child, 1) == _batch(thread, 1)  # decided on the thread: nothing lost, nothing different
        assert process.failures == 1 and process.answered == 1
        assert metric(child.get("/metrics").text, "rcb_decision_process_failures_total") == 1
        assert _batch(child, 2) == _batch(thread, 2)  # within RESTART_AFTER_S: the thread again, no new child yet
        assert process.answered == 1
        time.sleep(0.6)
        assert _batch(child, 3) == _batch(thread, 3)
        assert process.answered == 2 and process.child_pid() not in (None, first)


def test_a_model_directory_rewritten_under_the_service_is_not_served_by_a_new_child(models, tmp_path, monkeypatch):
    monkeypatch.setattr(decision_process, "RESTART_AFTER_S", 0.0)
    served = tmp_path / "model"
    shutil.copytree(models.cbrl_model, served)
    with (
        serving(models.cbrl_model, shield=True) as thread,
        serving(served, shield=True, decision_process=True) as child,
    ):
        process = child.app.state.runner.process
        version = child.app.state.runner.version
        _registered(thread)
        _registered(child)
        shutil.rmtree(served)
        shutil.copytree(models.hard_model, served)  # another model where the service loaded its own
        assert _batch(child, 0) == _batch(thread, 0)  # the child loaded it at startup: it still holds the served one
        assert process.answered == 1
        os.kill(process.child_pid(), signal.SIGKILL)
        assert _batch(child, 1) == _batch(thread, 1)  # the thread decides; the child is gone
        assert _batch(child, 2) == _batch(thread, 2)  # a new child finds another model there: refused, the thread
        assert process.failures == 2 and process.answered == 1
        assert {v for _, _, v in _batch(child, 3)} == {version} and process.failures == 2  # not asked again


def test_the_child_follows_a_reload(models):
    with (
        serving(models.cbrl_model, shield=True) as thread,
        serving(models.cbrl_model, shield=True, decision_process=True) as child,
    ):
        process = child.app.state.runner.process
        _registered(thread)
        _registered(child)
        assert _batch(child, 0) == _batch(thread, 0)
        for service in (child, thread):
            r = service.post("/v1/admin/reload-model", json={"model_dir": str(models.hard_model)})
            assert r.status_code == 200, r.text
        moved = _batch(child, 1)
        assert moved == _batch(thread, 1)
        assert {v for _, _, v in moved} == {child.app.state.runner.version}
        assert process.answered == 2 and process.failures == 0


def test_rcb_serve_runs_the_child_beside_uvicorn(models, redis_server):
    """Spawned from a real ``rcb serve`` (its ``__main__`` is the CLI, on uvloop), over Redis: the batch answers
    are the thread's, and ``/metrics`` counts no failure."""
    import httpx

    prefix = f"dp{os.getpid()}"
    with (
        rcb_serve(models.cbrl_model, redis_server.url, "--decision-process", RCB_KEY_PREFIX=prefix) as server,
        httpx.Client(base_url=server.url, timeout=30) as http,
        serving(models.cbrl_model, shield=True) as thread,
    ):
        _registered(http)
        _registered(thread)
        for slot in range(2):
            assert _batch(http, slot) == _batch(thread, slot)
        assert metric(http.get("/metrics").text, "rcb_decision_process_failures_total") == 0
        assert metric(http.get("/metrics").text, "rcb_decisions_total") == 2 * len(CAMPAIGNS) + len(CAMPAIGNS)
