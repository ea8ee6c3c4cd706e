"""POST /v1/bid: JSON, float32 binary and columnar forms; budget stop; bad input."""

from __future__ import annotations

import numpy as np
import pytest

from .app_fixtures import register, serving, update

pytestmark = pytest.mark.usefixtures("models")

BINARY = {"content-type": "application/octet-stream"}


def test_json_bids_are_ratio_times_utility(client):
    ratio = register(client).json()["bid_ratio"]
    r = client.post("/v1/bid", json={"campaign_id": "c1", "utilities": [0.0, 1.0, 2.5, 1e6]})
    assert r.status_code == 200
    body = r.json()
    np.testing.assert_allclose(body["bids"], np.array([0.0, 1.0, 2.5, 1e6]) * ratio, rtol=1e-15)
    assert body["bid_ratio"] == ratio and body["slot"] == 0 and body["stale"] is False


def test_bids_follow_the_latest_slot_update(client):
    register(client)
    new_ratio = client.post("/v1/slot-update", json=update()).json()["bid_ratio"]
    body = client.post("/v1/bid", json={"campaign_id": "c1", "utilities": [2.0]}).json()
    assert body["bid_ratio"] == new_ratio and body["slot"] == 1 and body["bids"] == [2.0 * new_ratio]


def test_binary_float32_in_and_out(client):
    ratio = register(client).json()["bid_ratio"]
    utilities = np.linspace(0, 5, 1000, dtype="<f4")
    r = client.post("/v1/bid?campaign_id=c1", content=utilities.tobytes(), headers=BINARY)
    assert r.status_code == 200 and r.headers["content-type"] == "application/octet-stream"
    bids = np.frombuffer(r.content, dtype="<f4")
    np.testing.assert_array_equal(bids, utilities * np.float32(ratio))
    assert float(r.headers["x-bid-ratio"]) == ratio and r.headers["x-slot"] == "0"


def test_columnar_multi_campaign(client):
    ra = register(client, campaign="a").json()["bid_ratio"]
    rb = register(client, campaign="b").json()["bid_ratio"]
    r = client.post("/v1/bid", json={"campaign_ids": ["a", "b", "a"], "counts": [2, 1, 1], "utilities": [1, 2, 3, 4]})
    assert r.status_code == 200, r.text
    body = r.json()
    np.testing.assert_allclose(body["bids"], [ra, 2 * ra, 3 * rb, 4 * ra])
    assert body["bid_ratios"] == [ra, rb, ra] and body["slots"] == [0, 0, 0]


def test_a_columnar_bid_without_impressions_answers_the_ratios(client):
    """Every count 0 and no utilities: the ratios only. A whole float is a count, as everywhere in the API."""
    ra = register(client, campaign="a").json()["bid_ratio"]
    r = client.post("/v1/bid", json={"campaign_ids": ["a"], "counts": [0], "utilities": []})
    assert r.status_code == 200 and r.json()["bids"] == [] and r.json()["bid_ratios"] == [ra], r.text
    r = client.post("/v1/bid", json={"campaign_ids": ["a", "a"], "counts": [1.0, 0], "utilities": [2.0]})
    assert r.status_code == 200 and r.json()["bids"] == [2.0 * ra], r.text
    for counts, utilities in (([1], []), ([1.5], [2.0]), ([True], [2.0])):
        r = client.post("/v1/bid", json={"campaign_ids": ["a"], "counts": counts, "utilities": utilities})
        assert r.status_code == 422 and r.json()["error"] == "invalid_request", (counts, r.text)


def test_a_campaign_id_in_the_query_of_a_json_bid_must_be_an_id(client):
    """The JSON forms name their campaigns in the body; a `?campaign_id=` beside it is still held to the pattern."""
    register(client)
    body = {"campaign_id": "c1", "utilities": [1.0]}
    assert client.post("/v1/bid?campaign_id=c2", json=body).status_code == 200
    for query in ("campaign_id=", "campaign_id=a%7Bb%7D", "campaign_id"):
        r = client.post(f"/v1/bid?{query}", json=body)
        assert r.status_code == 422 and r.json()["error"] == "invalid_request", query


def test_a_campaign_out_of_budget_bids_zero(client):
    register(client, budget=5.0)
    answered = client.post("/v1/slot-update", json=update(cost=5.0, wins=10)).json()
    # the slot-update's own answer says so too: an engine that bids the answer's ratio stops spending
    assert answered["budget_exhausted"] is True and answered["bid_ratio"] == 0.0
    body = client.post("/v1/bid", json={"campaign_id": "c1", "utilities": [1.0, 2.0]}).json()
    assert body["bids"] == [0.0, 0.0] and body["bid_ratio"] == 0.0
    view = client.get("/v1/campaigns/c1").json()
    assert view["budget_exhausted"] is True and view["bid_ratio"] == 0.0
    again = client.post("/v1/slot-update", json=update(cost=5.0, wins=10)).json()
    assert again == {**answered, "replayed": True}


@pytest.mark.parametrize(
    "body, status, error",
    [
        ({"campaign_id": "c1", "utilities": []}, 422, "invalid_request"),
        ({"campaign_id": "c1", "utilities": [1, -2]}, 422, "invalid_request"),
        ({"campaign_id": "c1", "utilities": ["a"]}, 422, "invalid_request"),
        ({"campaign_id": "c1", "utilities": [[1, 2]]}, 422, "invalid_request"),
        ({"campaign_id": "c1", "utilities": [1, None]}, 422, "invalid_request"),
        ({"campaign_id": "c1", "utilities": [True, 2.5]}, 422, "invalid_request"),  # numpy reads it as [1.0, 2.5]
        ({"campaign_ids": ["c1"], "counts": [2], "utilities": [1.5, False]}, 422, "invalid_request"),
        ({"campaign_id": "c1", "utilities": [1e308]}, 422, "invalid_request"),  # x ratio: not a finite bid
        ({"campaign_id": "c1", "utilities": [1, [2]]}, 422, "invalid_request"),  # ragged: numpy refuses the shape
        ({"campaign_id": "c1", "utilities": [[1], [1, 2]]}, 422, "invalid_request"),
        ({"campaign_ids": ["c1"], "counts": [2], "utilities": [[1], [2, 3]]}, 422, "invalid_request"),
        ({"campaign_id": "c1\n", "utilities": [1]}, 422, "invalid_request"),  # an id ends at its last character
        ({"campaign_id": "c1", "utilities": "1,2"}, 422, "invalid_request"),
        ({"campaign_id": 7, "utilities": [1]}, 422, "invalid_request"),
        ({"campaign_id": "nobody", "utilities": [1]}, 404, "unknown_campaign"),
        ({"campaign_id": "c1", "utilities": [1], "x": 1}, 422, "invalid_request"),
        ({"campaign_ids": ["c1"], "counts": [2], "utilities": [1]}, 422, "invalid_request"),
        ({"campaign_ids": ["c1"], "counts": [-1], "utilities": []}, 422, "invalid_request"),
        ([1, 2], 422, "invalid_request"),
    ],
)
def test_bad_bid_bodies(client, body, status, error):
    register(client)
    r = client.post("/v1/bid", json=body)
    assert r.status_code == status and r.json()["error"] == error, r.text


def test_bad_bid_transport(client):
    register(client)
    assert client.post("/v1/bid", content=b"{oops", headers={"content-type": "application/json"}).status_code == 400
    assert client.post("/v1/bid", content=b"", headers={"content-type": "application/json"}).status_code == 422
    assert client.post("/v1/bid", content=b"x", headers={"content-type": "text/plain"}).status_code == 415
    odd = client.post("/v1/bid?campaign_id=c1", content=b"\x00" * 6, headers=BINARY)
    assert odd.status_code == 422
    nan = client.post("/v1/bid?campaign_id=c1", content=np.array([1, np.nan], "<f4").tobytes(), headers=BINARY)
    assert nan.status_code == 422
    assert client.post("/v1/bid", content=b"\x00" * 8, headers=BINARY).status_code == 422  # no campaign_id


def test_a_campaign_id_spelling_true_or_false_is_not_a_boolean(client):
    """The boolean check runs where the body holds an r or an f (true, false); a campaign id may hold them too."""
    for campaign in ("is-true", "false"):
        register(client, campaign=campaign)
        r = client.post("/v1/bid", json={"campaign_id": campaign, "utilities": [1.0, 2.0]})
        assert r.status_code == 200 and len(r.json()["bids"]) == 2
    columnar = {"campaign_ids": ["is-true", "false"], "counts": [1, 1], "utilities": [1.0, True]}
    assert client.post("/v1/bid", json=columnar).status_code == 422


def test_size_limits(models):
    with serving(models.cbrl_model, max_utilities=10, max_body_bytes=4096, max_bid_campaigns=2) as c:
        register(c)
        columnar = {"campaign_ids": ["c1"] * 3, "counts": [1, 0, 0], "utilities": [1.0]}
        assert c.post("/v1/bid", json=columnar).json()["error"] == "too_large"
        assert c.post("/v1/bid", json={**columnar, "campaign_ids": ["c1"] * 2, "counts": [1, 0]}).status_code == 200
        assert c.post("/v1/bid", json={"campaign_id": "c1", "utilities": [1.0] * 11}).status_code == 413
        big = c.post("/v1/bid?campaign_id=c1", content=b"\x00" * 8192, headers=BINARY)
        assert big.status_code == 413 and big.json()["error"] == "too_large"
        assert c.post("/v1/bid", json={"campaign_id": "c1", "utilities": [1.0] * 10}).status_code == 200
        # a chunked body (no Content-Length) found too large while it streams into a JSON route: 413 too
        pad = b'{"updates": [' + b" " * 8192 + b"]}"
        for path in ("/v1/slot-update/batch", "/v1/campaigns/c2"):
            send = c.post if path.endswith("batch") else c.put
            streamed = send(path, content=iter([pad[:4000], pad[4000:]]), headers={"content-type": "application/json"})
            assert streamed.status_code == 413 and streamed.json()["error"] == "too_large", streamed.text
