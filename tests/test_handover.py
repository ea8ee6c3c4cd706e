"""The hand-over rule (model/handover.py) and its flag in the stored campaign state (model/state.py)."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest

from model.controller import ControllerGains
from model.handover import HandoverConfig, due, handed_over
from model.history import History, Registration
from model.state import CampaignState
from training.bidders.handover import HandoverBidder
from training.bidders.rm import ConstantRatio


def day(slots: int, delivery: float, cost: float, roi_target: float = 1.0, budget: float | None = 100.0) -> History:
    history = History(Registration.of(roi_target, budget))
    for _ in range(slots):
        history.record(np.array([1.0]), np.array([delivery]), np.array([cost]), np.array([5.0]), np.array([50.0]))
    return history


def fires(history: History, bid: float = 2.0, controller: float = 0.5, **config: float) -> bool:
    return bool(due(history, np.array([bid]), np.array([controller]), HandoverConfig(**config))[0])  # type: ignore[arg-type]


def test_with_a_budget_it_fires_once_the_spent_share_is_reached_and_the_roi_is_below_the_margin():
    assert not fires(day(7, delivery=1.0, cost=4.0))  # 28% of B spent: not yet
    assert fires(day(8, delivery=1.0, cost=4.0))  # 32%, ROI 0.25 < 0.9
    assert not fires(day(8, delivery=3.7, cost=4.0))  # ROI 0.925: within the margin
    assert fires(day(8, delivery=3.5, cost=4.0))  # ROI 0.875
    assert not fires(day(8, delivery=1.0, cost=4.0), bid=0.5, controller=0.5)  # the controller is no more cautious
    assert not fires(day(8, delivery=1.0, cost=4.0), spent_share=0.5)


def test_without_a_budget_it_needs_enough_slots_with_cost():
    assert not fires(day(15, delivery=1.0, cost=4.0, budget=None))
    assert fires(day(16, delivery=1.0, cost=4.0, budget=None))
    assert not fires(day(20, delivery=0.0, cost=0.0, budget=None))  # nothing spent: no ROI to read
    history = day(10, delivery=0.0, cost=0.0, budget=None)
    for _ in range(7):
        history.record(np.array([1.0]), np.array([1.0]), np.array([4.0]), np.array([5.0]), np.array([50.0]))
    assert not fires(history)  # 17 slots, only 7 with cost


def test_an_episode_over_is_never_handed_over_and_a_handed_one_stays():
    assert not fires(day(48, delivery=1.0, cost=1.0))
    recovered = day(20, delivery=5.0, cost=1.0)
    ratio, handed = handed_over(recovered, np.array([2.0]), np.array([3.0]), np.array([True]))
    assert handed[0] and ratio[0] == 3.0  # handed over before: the controller bids, whatever the ROI now


def test_the_config_refuses_thresholds_that_cannot_work():
    for bad in ({"spent_share": 0.0}, {"margin": 1.0}, {"sc_slots": 4, "sc_cost_slots": 8}):
        with pytest.raises(ValueError):
            HandoverConfig(**bad)  # type: ignore[arg-type]


def test_the_flag_is_part_of_the_stored_state_and_an_old_blob_reads_as_not_handed_over():
    state = CampaignState.new("c1", "e1", 1.0, 100.0, 0).decided(1.0, "v1")
    for _ in range(3):
        state = state.reported(1.0, 4.0, 5, 50).decided(1.0, "v1")
    assert not state.handed_over and CampaignState.from_bytes(state.to_bytes()).handover_slot is None
    handed = state.reported(1.0, 4.0, 5, 50).decided(0.3, "v1", "handover")
    assert handed.handover_slot == 4 and handed.decided_by_at(4) == "handover"
    later = handed.reported(9.0, 1.0, 5, 50).decided(0.4, "v1", "handover")
    assert later.handover_slot == 4  # the first hand-over's decision is kept
    assert CampaignState.from_bytes(later.to_bytes()) == later
    body = msgpack.unpackb(later.to_bytes(), raw=False)
    del body["ho"]  # a blob written before the flag existed
    assert not CampaignState.from_bytes(msgpack.packb(body, use_bin_type=True)).handed_over
    fresh = CampaignState.new("c1", "e2", 1.0, 100.0, 0)
    assert not fresh.handed_over


def test_the_offline_wrapper_hands_over_a_runaway_bidder_and_keeps_it_with_the_controller():
    gains = ControllerGains()
    bidder = HandoverBidder(ConstantRatio(4.0), gains)
    registration = Registration.of(1.0, 100.0, n=2)
    bidder.start(registration, 0)
    history = History(registration)
    for slot in range(20):
        ratios = bidder.bid(history)
        delivery = np.array([1.0, 20.0]) if slot < 10 else np.array([20.0, 20.0])  # episode 0 recovers later
        history.record(ratios, delivery, np.array([4.0, 4.0]), np.array([5.0, 5.0]), np.array([50.0, 50.0]))
    assert bidder.handed.tolist() == [8, -1]  # 32 of 100 spent after 8 slots at ROI 0.25; episode 1 holds its ROI
    assert np.all(history.ratios[0, 8:20] < 4.0) and np.all(history.ratios[1, :20] == 4.0)
