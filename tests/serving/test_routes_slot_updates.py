"""POST /v1/slot-update and its batch form: order, replays, conflicts, bad input, one answer per item."""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import pytest

from .app_fixtures import metric, register, update

pytestmark = pytest.mark.usefixtures("models")


def test_slots_apply_in_order_and_answer_the_next_ratio(client):
    register(client)
    for slot in range(5):
        r = client.post("/v1/slot-update", json=update(slot=slot))
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["slot"] == slot + 1 and body["replayed"] is False and body["decided_by"] == "model"
        assert 0 <= body["bid_ratio"] <= 4
        assert client.get("/v1/campaigns/c1").json()["bid_ratio"] == body["bid_ratio"]


def test_a_resent_update_answers_the_same_and_changes_nothing(client):
    register(client)
    first = client.post("/v1/slot-update", json=update(slot=0)).json()
    client.post("/v1/slot-update", json=update(slot=1))
    again = client.post("/v1/slot-update", json=update(slot=0)).json()
    assert again["replayed"] is True and again["bid_ratio"] == first["bid_ratio"] and again["slot"] == 1
    assert client.get("/v1/campaigns/c1").json()["slot"] == 2


def test_a_replayed_older_slot_answers_as_it_was_answered(models):
    """Who decided, which model and the budget flag are the applied answer's, not the campaign's latest."""
    from .app_fixtures import serving

    with serving(models.cbrl_model) as c:
        register(c, budget=5.0)
        first = c.post("/v1/slot-update", json=update(slot=0, cost=2.0)).json()
        assert first["budget_exhausted"] is False
        # another model decides the next slot, and the budget runs out
        assert c.post("/v1/admin/reload-model", json={"model_dir": str(models.hard_model)}).status_code == 200
        second = c.post("/v1/slot-update", json=update(slot=1, cost=4.0)).json()
        assert second["budget_exhausted"] is True and second["model_version"] != first["model_version"]
        again = c.post("/v1/slot-update", json=update(slot=0, cost=2.0)).json()
        assert again == {**first, "replayed": True}
        assert c.post("/v1/slot-update", json=update(slot=1, cost=4.0)).json() == {**second, "replayed": True}


def test_the_answer_to_the_last_slot_bids_nothing(client):
    register(client)
    for slot in range(48):
        last = client.post("/v1/slot-update", json=update(slot=slot)).json()
    assert last["slot"] == 48 and last["bid_ratio"] == 0
    assert client.get("/v1/campaigns/c1").json()["bid_ratio"] == 0
    assert client.post("/v1/slot-update", json=update(slot=47)).json() == {**last, "replayed": True}


def test_other_stats_for_an_applied_slot_and_a_skipped_slot_are_409_with_the_expected_slot(client):
    register(client)
    client.post("/v1/slot-update", json=update(slot=0))
    other = client.post("/v1/slot-update", json=update(slot=0, cost=9.0))
    assert other.status_code == 409 and other.json()["error"] == "slot_conflict"
    assert other.json()["detail"]["expected_slot"] == 1 and other.json()["detail"]["applied"]["cost"] == 2.0
    skipped = client.post("/v1/slot-update", json=update(slot=3))
    assert skipped.status_code == 409 and skipped.json()["error"] == "slot_skipped"
    assert skipped.json()["detail"]["expected_slot"] == 1
    assert client.get("/v1/campaigns/c1").json()["cost"] == 2.0


def test_an_unknown_campaign_is_404(client):
    r = client.post("/v1/slot-update", json=update(campaign="ghost"))
    assert r.status_code == 404 and r.json()["error"] == "unknown_campaign"


@pytest.mark.parametrize(
    "change",
    [
        {"delivery": -1.0},
        {"cost": -0.5},
        {"wins": -1},
        {"wins": 101},  # more wins than auctions
        {"delivery": "lots"},
        {"wins": 1.5},
        {"wins": True},
        {"delivery": True},  # lax mode read true as 1.0 ...
        {"cost": False},
        {"slot": True},
        {"delivery": "1e3"},  # ... and a numeric string as its number
        {"auctions": "100"},
        {"slot": "0"},
        {"slot": 48},
        {"slot": -1},
        {"campaign_id": "bad id"},
        {"campaign_id": "c1\n"},
        {"extra": 1},
        {"delivery": 1.1e15},  # above MAX_AMOUNT: a day's sums must not overflow
        {"cost": 1e308},
    ],
)
def test_bad_stats_are_422_and_leave_the_state_alone(client, change):
    register(client)
    r = client.post("/v1/slot-update", json={**update(), **change})
    assert r.status_code == 422, r.text
    assert r.json()["error"] == "invalid_request"
    assert client.get("/v1/campaigns/c1").json()["slot"] == 0


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None, "application/xml"])
def test_a_body_that_is_not_declared_json_is_415(client, content_type):
    """curl -d sends form encoding: it was a 422 saying the body should be a dictionary."""
    import json

    register(client)
    headers = {} if content_type is None else {"content-type": content_type}
    body = json.dumps(update()).encode()
    for path in ("/v1/slot-update", "/v1/slot-update/batch", "/v1/campaigns/c2", "/v1/admin/reload-model"):
        send = client.put if path.startswith("/v1/campaigns") else client.post
        r = send(path, content=body, headers=headers)
        assert r.status_code == 415 and r.json()["error"] == "unsupported_media_type", (path, r.text)
    assert client.get("/v1/campaigns/c1").json()["slot"] == 0
    ok = {"content-type": "application/json; charset=utf-8"}
    assert client.post("/v1/slot-update", content=body, headers=ok).status_code == 200
    assert client.post("/v1/admin/reload-model").status_code == 200  # no body: the configured model


@pytest.mark.parametrize("token", [b"NaN", b"Infinity", b"-Infinity", b"1e999"])
def test_non_finite_numbers_are_refused(client, token):
    register(client)
    body = b'{"campaign_id":"c1","episode":"e1","slot":0,"delivery":%s,"cost":1,"wins":1,"auctions":2}' % token
    r = client.post("/v1/slot-update", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert client.get("/v1/campaigns/c1").json()["slot"] == 0


def test_concurrent_identical_updates_apply_once(client):
    register(client)
    decisions = metric(client.get("/metrics").text, "rcb_decisions_total")  # the registration's
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda _: client.post("/v1/slot-update", json=update(slot=0)), range(50)))
    assert all(a.status_code == 200 for a in answers)
    assert sum(not a.json()["replayed"] for a in answers) == 1
    assert len({a.json()["bid_ratio"] for a in answers}) == 1
    assert client.get("/v1/campaigns/c1").json()["slot"] == 1
    # a decision that lost the compare-and-set never served: one slot applied, one decision counted
    assert metric(client.get("/metrics").text, "rcb_decisions_total") == decisions + 1


def test_extreme_but_valid_numbers_never_leave_a_non_finite_ratio(client):
    r = client.put("/v1/campaigns/big", json={"episode": "e1", "roi_target": 1e-6, "budget": 1e15})
    assert r.status_code == 201, r.text
    for slot in range(48):
        big = {"delivery": 1e15 if slot % 2 else 0.0, "cost": 1e15, "wins": 2**53, "auctions": 2**53}
        answer = client.post("/v1/slot-update", json=update(campaign="big", slot=slot, **big))
        assert answer.status_code == 200, answer.text
        assert 0 <= answer.json()["bid_ratio"] <= 4
    view = client.get("/v1/campaigns/big").json()
    assert view["cost"] == 48e15 and view["bid_ratio"] == 0
    for registration in ({"roi_target": 1e-300}, {"roi_target": 1e7}, {"roi_target": 1.0, "budget": 1e16}):
        r = client.put("/v1/campaigns/tiny", json={"episode": "e1", **registration})
        assert r.status_code == 422 and r.json()["error"] == "invalid_request", r.text


def test_concurrent_different_updates_one_wins_the_rest_409(client):
    register(client)
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda k: client.post("/v1/slot-update", json=update(slot=0, cost=1.0 + k)), range(50)))
    codes = sorted(a.status_code for a in answers)
    assert codes.count(200) == 1 and codes.count(409) == 49
    winner = next(a for a in answers if a.status_code == 200)
    assert winner.json()["replayed"] is False


def test_a_batch_answers_each_update_on_its_own(client):
    for c in ("a", "b", "c"):
        register(client, campaign=c)
    client.post("/v1/slot-update", json=update(campaign="c", slot=0))
    batch = [
        update(campaign="a", slot=0),
        update(campaign="b", slot=2),  # skipped
        update(campaign="ghost"),  # unknown
        update(campaign="c", slot=0),  # replayed
        update(campaign="a", slot=1),  # duplicate campaign in one batch
    ]
    r = client.post("/v1/slot-update/batch", json={"updates": batch})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [x["status"] for x in results] == [200, 409, 404, 200, 422]
    assert results[0]["answer"]["replayed"] is False and results[3]["answer"]["replayed"] is True
    assert results[1]["detail"]["expected_slot"] == 0 and results[4]["error"] == "duplicate_campaign"
    assert r.json()["applied"] == 1 and r.json()["replayed"] == 1 and r.json()["failed"] == 3


def test_an_invalid_item_fails_only_itself(client):
    for c in ("a", "b"):
        register(client, campaign=c)
    batch = [update(campaign="a", slot=0), {**update(campaign="b", slot=0), "cost": -1.0}, 7, {"campaign_id": "x"}]
    r = client.post("/v1/slot-update/batch", json={"updates": batch})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [x["status"] for x in results] == [200, 422, 422, 422]
    assert results[1]["error"] == "invalid_request" and results[1]["campaign_id"] == "b"
    assert any(p["loc"][-1] == "cost" for p in results[1]["detail"])
    assert results[2]["campaign_id"] is None and results[3]["campaign_id"] == "x"
    assert r.json()["applied"] == 1 and r.json()["failed"] == 3
    assert client.get("/v1/campaigns/a").json()["slot"] == 1 and client.get("/v1/campaigns/b").json()["slot"] == 0
    assert client.post("/v1/slot-update/batch", json={"updates": []}).status_code == 422


def test_a_batch_decides_like_single_updates(models):
    from .app_fixtures import serving

    with serving(models.cbrl_model) as one, serving(models.cbrl_model) as many:
        names = [f"k{i}" for i in range(12)]
        for name in names:
            register(one, campaign=name)
            register(many, campaign=name)
        singles, batched = [], []
        for slot in range(3):
            ups = [update(campaign=n, slot=slot, delivery=1.0 + i, cost=1.5, wins=3) for i, n in enumerate(names)]
            singles.append([one.post("/v1/slot-update", json=u).json()["bid_ratio"] for u in ups])
            answer = many.post("/v1/slot-update/batch", json={"updates": ups}).json()
            batched.append([x["answer"]["bid_ratio"] for x in answer["results"]])
        for s, b in zip(singles, batched, strict=True):
            assert all(math.isclose(x, y, abs_tol=1e-6) for x, y in zip(s, b, strict=True))


def test_batch_limits(models):
    from .app_fixtures import serving

    with serving(models.cbrl_model, max_batch_updates=3) as c:
        r = c.post("/v1/slot-update/batch", json={"updates": [update(campaign=f"x{i}") for i in range(4)]})
        assert r.status_code == 413
        assert c.post("/v1/slot-update/batch", json={"updates": []}).status_code == 422


@pytest.mark.redis
def test_decisions_that_lose_the_compare_and_set_are_not_counted(models, redis_server):
    """On Redis concurrent identical updates interleave: every sender decides, one write lands, one is counted."""
    from .app_fixtures import serving

    with serving(models.cbrl_model, store=redis_server.url) as c:
        for k in range(10):
            register(c, campaign=f"m{k}")
        before = metric(c.get("/metrics").text, "rcb_decisions_total")
        with ThreadPoolExecutor(16) as pool:
            jobs = [update(campaign=f"m{k % 10}", slot=0) for k in range(120)]
            answers = list(pool.map(lambda body: c.post("/v1/slot-update", json=body), jobs))
        assert all(a.status_code == 200 for a in answers)
        assert sum(not a.json()["replayed"] for a in answers) == 10
        assert metric(c.get("/metrics").text, "rcb_decisions_total") == before + 10


def test_an_unreadable_state_is_409_and_reregistering_the_episode_starts_it_anew(client):
    from service.store.base import Stored

    register(client)
    store = client.app.state.store
    store._put("c1", Stored("e1", 3, b"\x00damaged"))  # a damaged blob (or another format's)
    r = client.post("/v1/slot-update", json=update(slot=3))
    assert r.status_code == 409 and r.json()["error"] == "unreadable_state" and "re-register" in r.json()["detail"]
    again = register(client)
    assert again.status_code == 201, again.text  # as the error says: the episode starts anew
    assert client.get("/v1/campaigns/c1").json()["slot"] == 0
    assert client.post("/v1/slot-update", json=update(slot=0)).status_code == 200
