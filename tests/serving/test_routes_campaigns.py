"""PUT / GET /v1/campaigns/{id}: registration, idempotent re-confirmation, resets, conflicts, auth."""

from __future__ import annotations

import pytest

from .app_fixtures import TOKEN, register, serving, update

pytestmark = pytest.mark.usefixtures("models")


def test_register_answers_the_first_ratio_and_reconfirming_changes_nothing(client):
    first = register(client, budget=500.0)
    assert first.status_code == 201
    body = first.json()
    assert body["created"] is True and body["slot"] == 0 and 0 < body["bid_ratio"] <= 4
    assert body["decided_by"] == "model" and body["posterior"] is not None and len(body["posterior"]["std"]) == 8
    client.post("/v1/slot-update", json=update(slot=0))
    again = register(client, budget=500.0)
    assert again.status_code == 200 and again.json()["created"] is False and again.json()["slot"] == 1


def test_a_new_episode_resets_the_state(client):
    register(client)
    client.post("/v1/slot-update", json=update(slot=0))
    fresh = register(client, episode="e2")
    assert fresh.status_code == 201 and fresh.json()["slot"] == 0 and fresh.json()["cost"] == 0
    stale = client.post("/v1/slot-update", json=update(episode="e1", slot=1))
    assert stale.status_code == 409 and stale.json()["error"] == "wrong_episode"
    assert stale.json()["detail"]["episode"] == "e2" and stale.json()["detail"]["expected_slot"] == 0


def test_other_constraints_for_the_same_episode_conflict(client):
    register(client, roi_target=1.0)
    r = register(client, roi_target=1.5)
    assert r.status_code == 409 and r.json()["error"] == "episode_exists"
    assert client.get("/v1/campaigns/c1").json()["roi_target"] == 1.0


def test_read_reports_where_the_campaign_stands(client):
    register(client, budget=100.0)
    client.post("/v1/slot-update", json=update(slot=0, delivery=6.0, cost=4.0))
    view = client.get("/v1/campaigns/c1").json()
    assert view["slot"] == 1 and view["delivery"] == 6.0 and view["cost"] == 4.0 and view["roi"] == 1.5
    assert view["model_version"].startswith("cbrl-sc-") and view["budget_exhausted"] is False
    missing = client.get("/v1/campaigns/nobody")
    assert missing.status_code == 404 and missing.json()["error"] == "unknown_campaign"


@pytest.mark.parametrize(
    "body, status",
    [
        ({"episode": "e", "roi_target": 0}, 422),
        ({"episode": "e", "roi_target": -1}, 422),
        ({"episode": "e", "roi_target": 1, "budget": 0}, 422),
        ({"episode": "e", "roi_target": 1, "slots": 24}, 422),
        ({"episode": "e{x}", "roi_target": 1}, 422),
        ({"episode": "", "roi_target": 1}, 422),
        ({"roi_target": 1}, 422),
        ({"episode": "e", "roi_target": "high"}, 422),
        ({"episode": "e", "roi_target": True, "budget": True}, 422),  # lax mode registered L = 1, B = 1
        ({"episode": "e", "roi_target": "1.5"}, 422),
        ({"episode": "e", "roi_target": 1, "budget": "100"}, 422),
        ({"episode": "e", "roi_target": 1, "surprise": True}, 422),
        ({"episode": "e", "roi_target": 1, "model": "other-model"}, 409),
        ({"episode": "e", "roi_target": 1, "model": ""}, 422),  # no model has an empty version
    ],
)
def test_bad_registrations_are_refused_and_store_nothing(client, body, status):
    r = client.put("/v1/campaigns/c9", json=body)
    assert r.status_code == status, r.text
    assert set(r.json()) == {"error", "detail"}
    assert client.get("/v1/campaigns/c9").status_code == 404


@pytest.mark.parametrize("campaign", ["a{b}", "x" * 129, "sp ace", "é"])
def test_odd_campaign_ids_are_refused(client, campaign):
    r = client.put(f"/v1/campaigns/{campaign}", json={"episode": "e", "roi_target": 1})
    assert r.status_code in (404, 422) and set(r.json()) == {"error", "detail"}


def test_malformed_json_and_wrong_types_are_4xx(client):
    r = client.put("/v1/campaigns/c1", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["error"] == "invalid_request"
    r = client.put("/v1/campaigns/c1", content=b"", headers={"content-type": "application/json"})
    assert r.status_code == 422
    # Bytes that are not UTF-8 are a body that is not JSON too, on every route that lets FastAPI parse its body.
    for method, path in (("PUT", "/v1/campaigns/c1"), ("POST", "/v1/slot-update"), ("POST", "/v1/slot-update/batch")):
        r = client.request(method, path, content=b"T$B\xff", headers={"content-type": "application/json"})
        assert r.status_code == 422 and r.json()["error"] == "invalid_request", (path, r.text)


def test_a_method_the_path_does_not_take_names_every_method_it_takes(client):
    for method in ("DELETE", "OPTIONS", "PATCH"):
        r = client.request(method, "/v1/campaigns/c1")
        assert r.status_code == 405 and r.headers["allow"] == "GET, PUT", method
        assert r.json()["error"] == "method_not_allowed"
    assert client.options("/v1/bid").headers["allow"] == "POST"


def test_write_endpoints_need_the_token_when_one_is_set(models):
    with serving(models.cbrl_model, api_token=TOKEN) as c:
        assert register(c).status_code == 401
        assert register(c, authorization="Bearer wrong-token-xxxxxxxx").status_code == 401
        assert register(c, authorization=f"Bearer {TOKEN}").status_code == 201
        assert c.post("/v1/slot-update", json=update()).status_code == 401
        assert c.get("/v1/campaigns/c1").status_code == 200  # reads stay open
        assert c.post("/v1/bid", json={"campaign_id": "c1", "utilities": [1.0]}).status_code == 200
