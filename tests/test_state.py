"""model/state.py: the campaign state blob (round trips, versioning, what a retried report compares against)."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model.contract import SLOTS_PER_DAY
from model.features import observe
from model.state import STATE_FORMAT_VERSION, CampaignState, StateError, stack_histories

finite = st.floats(min_value=0.0, max_value=1e9, allow_nan=False, allow_infinity=False)


@st.composite
def states(draw: st.DrawFn) -> CampaignState:
    budget = draw(st.one_of(st.none(), st.floats(min_value=1e-3, max_value=1e9)))
    state = CampaignState.new(
        draw(st.text(min_size=1, max_size=40)),
        draw(st.text(min_size=1, max_size=40)),
        draw(st.floats(min_value=1e-3, max_value=100.0)),
        budget,
        draw(st.integers(0, 2**62)),
    )
    for _ in range(draw(st.integers(0, SLOTS_PER_DAY))):
        ratio = draw(st.floats(0.0, 4.0))
        state = state.decided(ratio, "m1").reported(draw(finite), draw(finite), draw(finite), draw(finite))
    mean = draw(st.one_of(st.none(), st.lists(st.floats(-5, 5), min_size=8, max_size=8)))
    return state.decided(draw(st.floats(0.0, 4.0)), "m2", mean=None if mean is None else np.array(mean))


@settings(max_examples=60, deadline=None)
@given(state=states())
def test_bytes_round_trip_exactly(state: CampaignState):
    blob = state.to_bytes()
    back = CampaignState.from_bytes(blob)
    assert back == state
    assert back.to_bytes() == blob


def test_a_full_day_blob_is_compact():
    state = CampaignState.new("campaign-000001", "2026-11-26", 1.2, 5000.0, 0)
    for s in range(SLOTS_PER_DAY):
        state = state.decided(1.0 + s / 100, "model-v2", mean=np.zeros(8), std=np.ones(8)).reported(1.5, 1.0, 3, 400)
    assert len(state.to_bytes()) < 2500


def test_other_versions_and_garbage_are_refused():
    state = CampaignState.new("c", "e", 1.0, None, 0)
    body = msgpack.unpackb(state.to_bytes())
    body["v"] = STATE_FORMAT_VERSION + 1
    with pytest.raises(StateError, match="format version"):
        CampaignState.from_bytes(msgpack.packb(body))
    with pytest.raises(StateError, match="not a campaign state"):
        CampaignState.from_bytes(b"\x00garbage")
    body["v"] = STATE_FORMAT_VERSION
    body["t"] = 3  # claims 3 slots, holds 0
    with pytest.raises(StateError, match="malformed"):
        CampaignState.from_bytes(msgpack.packb(body))


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("L", 0.0, "roi_target must be finite and > 0"),
        ("L", float("nan"), "roi_target must be finite and > 0"),
        ("B", -5.0, "budget must be None or finite and > 0"),
        ("r", 99.0, "next_ratio must be in"),
        ("r", float("nan"), "next_ratio must be in"),
        ("c", b"zz", "must be strings"),
        ("pm", "abc", "malformed"),
    ],
)
def test_a_blob_the_api_would_never_write_is_refused(field: str, value: object, message: str):
    """A foreign or corrupt blob must not serve a ratio of 99 or run a campaign with L = 0: a StateError, as the
    store's callers expect, not a state that breaks later."""
    body = msgpack.unpackb(CampaignState.new("c", "e", 1.0, 100.0, 0).to_bytes())
    body[field] = value
    with pytest.raises(StateError, match=message):
        CampaignState.from_bytes(msgpack.packb(body, use_bin_type=True))


def test_a_noise_seed_beyond_msgpack_is_refused_when_the_state_is_made():
    with pytest.raises(StateError, match="seed must be in"):
        CampaignState.new("c", "e", 1.0, None, 2**64)


def test_reports_append_the_decided_ratio_and_answers_are_recoverable():
    state = CampaignState.new("c", "e", 1.0, 10.0, 0).decided(1.5, "m")
    state = state.reported(4.0, 3.0, 2, 50).decided(1.7, "m").reported(5.0, 8.0, 4, 60).decided(0.9, "m")
    assert state.slot == 2 and state.column("ratios").tolist() == [1.5, 1.7]
    assert state.slot_stats(0) == {"delivery": 4.0, "cost": 3.0, "wins": 2.0, "auctions": 50.0}
    assert state.ratio_after(0) == 1.7 and state.ratio_after(1) == 0.9
    assert state.total_cost == 11.0 and state.budget_exhausted and state.roi == pytest.approx(9 / 11)
    with pytest.raises(IndexError):
        state.slot_stats(2)


def test_ratios_are_clipped_and_a_full_day_refuses_more_reports():
    state = CampaignState.new("c", "e", 1.0, None, 0).decided(9.0, "m")
    assert state.next_ratio == 4.0
    for _ in range(SLOTS_PER_DAY):
        state = state.reported(0, 0, 0, 0).decided(1.0, "m")
    with pytest.raises(StateError, match="already reported"):
        state.reported(0, 0, 0, 0)


def test_a_decision_keeps_the_posterior_as_exact_python_floats_and_refuses_a_nan_ratio():
    rng = np.random.default_rng(3)
    mean, std = rng.normal(size=40).astype(np.float32), rng.random(40).astype(np.float64)
    state = CampaignState.new("c", "e", 1.0, None, 0).decided(np.float32(-0.5), "m", "model", mean, std)
    assert state.next_ratio == 0.0 and type(state.next_ratio) is float
    assert state.posterior_mean == tuple(float(v) for v in mean) and state.posterior_std == tuple(std.tolist())
    assert all(type(v) is float for v in (*state.posterior_mean, *state.posterior_std))
    assert CampaignState.from_bytes(state.to_bytes()) == state
    with pytest.raises(StateError, match="next_ratio"):
        state.decided(float("nan"), "m")


def test_invalid_registrations_are_refused():
    with pytest.raises(ValueError):
        CampaignState.new("c", "e", 0.0, None, 0)
    with pytest.raises(ValueError):
        CampaignState.new("c", "e", 1.0, -5.0, 0)


def test_stacked_histories_observe_like_each_campaign_alone():
    a = CampaignState.new("a", "e", 1.0, None, 0).decided(1.2, "m").reported(3, 2, 1, 10).decided(1.1, "m")
    b = CampaignState.new("b", "e", 2.0, 50.0, 0).decided(0.7, "m").reported(1, 4, 2, 30).decided(1.0, "m")
    both = observe(stack_histories([a, b]))
    np.testing.assert_array_equal(both[0], observe(a.history())[0])
    np.testing.assert_array_equal(both[1], observe(b.history())[0])
    with pytest.raises(ValueError, match="same slot"):
        stack_histories([a, a.reported(0, 0, 0, 0)])


def test_each_decision_keeps_who_decided_it_and_which_model_and_older_blobs_still_read():
    state = CampaignState.new("c", "e", 1.0, 10.0, 0).decided(1.5, "v1")
    state = state.reported(4.0, 3.0, 2, 50).decided(1.7, "v1", "shield").reported(5.0, 8.0, 4, 60)
    state = state.decided(0.9, "v2", "fallback")
    assert [state.decided_by_at(k) for k in range(3)] == ["model", "shield", "fallback"]
    assert [state.model_version_at(k) for k in range(3)] == ["v1", "v1", "v2"]
    assert state.deciders == "msf" and state.versions == ((0, "v1"), (2, "v2"))
    assert [state.budget_exhausted_after(s) for s in range(2)] == [False, True]
    # a blob written before these were kept: every decision reads as the latest's
    body = msgpack.unpackb(state.to_bytes())
    del body["dby"], body["mvs"]
    legacy = CampaignState.from_bytes(msgpack.packb(body))
    assert [legacy.decided_by_at(k) for k in range(3)] == ["fallback"] * 3
    assert legacy.model_version_at(0) == "v2"
    # and the next decision on it starts its own record without inventing the past
    later = legacy.reported(1.0, 1.0, 1, 10).decided(1.0, "v2")
    assert later.decided_by_at(3) == "model" and later.decided_by_at(0) == "model"  # unknown past: the latest
