"""model.features and model.sampling: online-computable features, counter-based posterior noise."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import random_day_log

from model.contract import SLOTS_PER_DAY
from model.features import FEATURE_NAMES, FEATURES, N_FEATURES, observation_sequence, observe
from model.history import History, Registration
from model.sampling import noise, noise_batch, sample_posterior
from training.bidders.base import play
from training.bidders.rm import ConstantRatio
from training.replay.simulator import DayIndex


def _history_by_hand() -> History:
    history = History(Registration.of(roi_target=2.0, budget=100.0))
    history.record(np.array([1.0]), np.array([6.0]), np.array([4.0]), np.array([2]), np.array([10]))
    history.record(np.array([2.0]), np.array([2.0]), np.array([4.0]), np.array([1]), np.array([20]))
    return history


def test_features_by_hand():
    history = _history_by_hand()
    f = dict(zip(FEATURE_NAMES, observe(history)[0], strict=True))
    # After 2 slots: D = 8, C = 8, ROI 1 vs L 2; last slot D 2, C 4, 1 win of 20, 4 per win vs 8/3 per win so far.
    assert f["time"] == pytest.approx(2 / 48)
    assert f["prev_ratio"] == pytest.approx(0.5)
    assert f["roi_gap"] == pytest.approx((1.0 - 2.0) / 2.0)
    assert f["budget_spent"] == pytest.approx(0.08)
    assert f["slot_roi_gap"] == pytest.approx((0.5 - 2.0) / 2.0)
    assert f["slot_win_rate"] == pytest.approx(1 / 20)
    assert f["slot_price"] == pytest.approx(np.log(4.0 / (8.0 / 3.0)))
    assert f["has_budget"] == 1.0


def test_first_slot_features_are_neutral_and_everything_is_clipped():
    history = History(Registration.of(roi_target=1.0, budget=None, n=3))
    first = observe(history)
    assert first.shape == (3, N_FEATURES)
    assert np.all(first == 0.0)
    history.record(np.full(3, 4.0), np.array([1e9, 0.0, 5.0]), np.array([1.0, 1e9, 0.0]), np.ones(3), np.ones(3))
    values = observe(history)
    low = np.array([f.low for f in FEATURES])
    high = np.array([f.high for f in FEATURES])
    assert np.all((values >= low) & (values <= high)) and np.all(np.isfinite(values))


def test_features_never_read_the_future():
    """Features for slot t from the full history equal those from a history cut at t."""
    log = random_day_log(np.random.default_rng(5), n=4000)
    registration = Registration.of(roi_target=1.1, budget=500.0, n=2)
    outcome = play(ConstantRatio(np.array([1.3, 2.5])), [DayIndex(log)], np.zeros(2, np.int64), registration, 0)
    full = outcome.history
    for t in (0, 1, 17, SLOTS_PER_DAY):
        cut = History(registration)
        for s in range(t):
            cut.record(full.ratios[:, s], full.delivery[:, s], full.cost[:, s], full.wins[:, s], full.auctions[:, s])
        np.testing.assert_array_equal(observe(full, slot=t), observe(cut))
    with pytest.raises(ValueError, match="not observed"):
        observe(cut, slot=SLOTS_PER_DAY + 1)


def test_features_match_a_replay_of_reported_stats():
    """The simulator's history and one rebuilt from JSON slot reports (what an ad engine sends) agree exactly."""
    log = random_day_log(np.random.default_rng(6), n=4000)
    registration = Registration.of(roi_target=1.0, budget=None)
    simulated = play(ConstantRatio(1.7), [DayIndex(log)], np.zeros(1, np.int64), registration, 0).history
    reports = [
        json.dumps({"slot": t, "delivery": simulated.delivery[0, t], "cost": simulated.cost[0, t],
                    "wins": int(simulated.wins[0, t]), "auctions": int(simulated.auctions[0, t])})
        for t in range(SLOTS_PER_DAY)
    ]  # fmt: skip
    rebuilt = History(registration)
    for t, raw in enumerate(reports):
        r = json.loads(raw)
        rebuilt.record(np.array([1.7]), np.array([r["delivery"]]), np.array([r["cost"]]), np.array([r["wins"]]),
                       np.array([r["auctions"]]))  # fmt: skip
        np.testing.assert_array_equal(observe(rebuilt), observe(simulated, slot=t + 1))


def test_posterior_noise_is_reproducible_and_keyed():
    a = noise(7, "campaign-1", "2026-11-25", 3, 16)
    np.testing.assert_array_equal(a, noise(7, "campaign-1", "2026-11-25", 3, 16))
    others = [
        noise(8, "campaign-1", "2026-11-25", 3, 16),
        noise(7, "campaign-2", "2026-11-25", 3, 16),
        noise(7, "campaign-1", "2026-11-26", 3, 16),
        noise(7, "campaign-1", "2026-11-25", 4, 16),
    ]
    for other in others:
        assert not np.allclose(a, other)
    # The first draws of a longer vector are the same draws (a slot's stream does not depend on dim).
    np.testing.assert_array_equal(noise(7, "campaign-1", "2026-11-25", 3, 4), a[:4])
    batch = noise_batch(7, ["campaign-1", "campaign-2"], ["2026-11-25"] * 2, [3, 5], 16)
    np.testing.assert_array_equal(batch[0], a)
    np.testing.assert_array_equal(batch[1], noise(7, "campaign-2", "2026-11-25", 5, 16))


def test_posterior_noise_is_standard_normal_across_slots():
    draws = np.concatenate([noise(0, "c", "e", slot, 8) for slot in range(2000)])
    assert abs(draws.mean()) < 0.05 and abs(draws.std() - 1.0) < 0.05
    consecutive = np.corrcoef(draws[:-8], draws[8:])[0, 1]  # slot s vs slot s+1, same position
    assert abs(consecutive) < 0.05
    z = sample_posterior(np.array([1.0, -1.0]), np.array([0.5, 2.0]), np.array([2.0, 0.5]))
    np.testing.assert_allclose(z, [2.0, 0.0])


@pytest.mark.parametrize("seed", range(20))
def test_the_observation_sequence_is_observe_at_every_prefix_bit_for_bit(seed: int):
    """observation_sequence (what acting and the replay buffer read) computes the formulas once over all prefixes;
    it must give exactly what observe gives one prefix at a time."""
    rng = np.random.default_rng(seed)
    n, slot = 5, int(rng.integers(0, SLOTS_PER_DAY + 1))
    budget = np.where(rng.random(n) < 0.5, np.inf, rng.uniform(10, 1000, n))
    history = History(Registration(roi_target=rng.uniform(0.5, 2.0, n), budget=budget))
    for _ in range(slot):
        auctions = rng.integers(0, 500, n).astype(float)
        wins = np.floor(auctions * rng.random(n) * (rng.random(n) < 0.8))
        cost = wins * rng.lognormal(0, 1, n)
        history.record(
            rng.uniform(0, 4, n), cost * rng.lognormal(0, 0.7, n) * (rng.random(n) < 0.6), cost, wins, auctions
        )
    expected = np.stack([observe(history, slot=s) for s in range(slot + 1)], axis=1).astype(np.float32)
    assert observation_sequence(history).tobytes() == expected.tobytes()


@pytest.mark.parametrize("seed", range(5))
def test_the_controller_feature_is_the_reference_controllers_ratio_over_4(seed: int):
    """A residual model's extra feature: ``c_t / 4`` after the base features, which it leaves unchanged; the
    sequence (training's buffer, the encoder's trajectory) equals observe at every prefix, bit for bit."""
    from model.controller import ControllerGains, controller_ratios

    rng = np.random.default_rng(100 + seed)
    n, slot = 4, int(rng.integers(1, SLOTS_PER_DAY + 1))
    budget = np.where(rng.random(n) < 0.5, np.inf, rng.uniform(10, 1000, n))
    history = History(Registration(roi_target=rng.uniform(0.5, 2.0, n), budget=budget))
    for _ in range(slot):
        auctions = rng.integers(0, 500, n).astype(float)
        wins = np.floor(auctions * rng.random(n))
        cost = wins * rng.lognormal(0, 1, n)
        history.record(rng.uniform(0, 4, n), cost * rng.lognormal(0, 0.7, n), cost, wins, auctions)
    gains = ControllerGains(initial_ratio=1.3, kp=1.2, ki=0.1, kd=0.2, kp_budget=2.0, ki_budget=0.1)
    for s in (0, 1, slot):
        with_controller = observe(history, slot=s, controller=gains)
        assert with_controller.shape == (n, N_FEATURES + 1)
        assert np.array_equal(with_controller[:, :N_FEATURES], observe(history, slot=s))
        expected = controller_ratios(history.until(s), gains) / 4
        assert np.array_equal(with_controller[:, N_FEATURES], expected) and np.all(expected > 0)
    assert observe(history, slot=0, controller=gains)[0, N_FEATURES] == pytest.approx(1.3 / 4)
    sequence = observation_sequence(history, gains)
    expected_sequence = np.stack([observe(history, s, gains) for s in range(slot + 1)], axis=1).astype(np.float32)
    assert sequence.tobytes() == expected_sequence.tobytes()


def test_the_controller_sequence_is_the_law_on_each_prefix():
    """One vectorized pass over all prefixes answers what the law answers on each prefix alone, with and without
    a budget: the ROI loop's PID terms and the budget loop's PI terms, written out for a 3-slot history."""
    from model.controller import ControllerGains, controller_ratios, controller_sequence

    gains = ControllerGains(initial_ratio=1.2, kp=0.5, ki=0.1, kd=0.3, kp_budget=2.0, ki_budget=0.2)
    history = History(Registration(roi_target=np.array([2.0, 2.0]), budget=np.array([np.inf, 30.0])))
    for delivery, cost in ((6.0, 4.0), (2.0, 4.0), (0.0, 4.0)):
        history.record(np.ones(2), np.full(2, delivery), np.full(2, cost), np.ones(2), np.full(2, 10.0))
    sequence = controller_sequence(history, gains)
    assert sequence.shape == (2, 4) and np.all(sequence[:, 0] == 1.2)
    errors = [(6 / 4 - 2) / 2, (8 / 8 - 2) / 2, (8 / 12 - 2) / 2]  # cumulative ROI gaps after slots 1, 2, 3
    for k in range(1, 4):
        e, previous = errors[k - 1], errors[k - 2] if k >= 2 else 0.0
        roi_loop = np.log(1.2) + 0.5 * e + 0.1 * sum(errors[:k]) + 0.3 * (e - previous)
        planned = np.arange(1, k + 1) / SLOTS_PER_DAY
        pace = np.clip((planned - 4.0 * np.arange(1, k + 1) / 30.0) / np.maximum(planned, 0.02), -1, 1)
        budget_loop = np.log(1.2) + 2.0 * pace[-1] + 0.2 * pace.sum()
        assert sequence[0, k] == pytest.approx(np.exp(roi_loop))
        assert sequence[1, k] == pytest.approx(np.exp(min(roi_loop, budget_loop)))
        cut = history.until(k)
        assert np.array_equal(controller_ratios(cut, gains), sequence[:, k])
    with pytest.raises(ValueError, match="not observed yet"):
        controller_sequence(history, gains, until=4)


def test_a_history_until_a_slot_is_what_a_bidder_saw_then():
    """``History.until``: the first ``slot`` slots of some episodes, the rest unreported, as :meth:`History.of_stats`
    rebuilds them (benchmarks and tests cut played days with it)."""
    rng = np.random.default_rng(3)
    history = History(Registration(roi_target=np.array([1.0, 1.5]), budget=np.array([np.inf, 50.0])))
    for _ in range(12):
        history.record(rng.uniform(0, 4, 2), rng.random(2), rng.random(2), np.ones(2), np.full(2, 10.0))
    one = history.until(10, [1])
    assert one.slot == 10 and one.n == 1
    assert one.registration.roi_target[0] == 1.5 and one.registration.budget[0] == 50.0
    assert np.array_equal(one.ratios[0, :10], history.ratios[1, :10]) and not one.ratios[0, 10:].any()
    assert one.total_cost[0] == history.cost[1, :10].sum()
    assert np.array_equal(history.until(12).delivery, history.delivery)
    with pytest.raises(ValueError, match="not reported yet"):
        history.until(10).until(11)
