"""Rewards (Eq. 5, Eq. 7, USCB, RCPO) against hand-computed values, and the curriculum schedule."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model.contract import SLOTS_PER_DAY
from training.rl.curriculum import PAPER_CURRICULUM, SPARSE_ONLY, RegretCurriculum, stage_at
from training.rl.rewards import (
    DualAscent,
    constraint_gap,
    curriculum_limits,
    curriculum_reward,
    indicator_reward,
    lagrangian_reward,
    uscb_reward,
    violation,
)

T = SLOTS_PER_DAY


def _episode(delivery_per_slot: float, cost_per_slot: float, n_slots: int = T) -> tuple[np.ndarray, np.ndarray]:
    d = np.zeros((1, T))
    c = np.zeros((1, T))
    d[0, :n_slots] = delivery_per_slot
    c[0, :n_slots] = cost_per_slot
    return d, c


def test_indicator_reward_by_hand():
    # Feasible: D = 48 * 2 = 96, C = 48, ROI 2 >= L 1.5, C <= B 100; D* = 120 -> reward 0.8 at T only.
    d, c = _episode(2.0, 1.0)
    r = indicator_reward(d, c, np.array([1.5]), np.array([100.0]), np.array([120.0]))
    assert r[0, -1] == pytest.approx(0.8) and np.all(r[0, :-1] == 0)
    # Infeasible on ROI: ROI 1 vs L 1.5 -> -(0.5 / 1.5).
    d, c = _episode(1.0, 1.0)
    r = indicator_reward(d, c, np.array([1.5]), np.array([np.inf]), np.array([120.0]))
    assert r[0, -1] == pytest.approx(-1 / 3)
    # Infeasible on budget: C 48 vs B 40 -> -(8 / 40); ROI 2 fine.
    d, c = _episode(2.0, 1.0)
    r = indicator_reward(d, c, np.array([1.0]), np.array([40.0]), np.array([120.0]))
    assert r[0, -1] == pytest.approx(-0.2)
    # Spent nothing: feasible, worth 0.
    d, c = _episode(0.0, 0.0)
    assert indicator_reward(d, c, np.array([1.0]), np.array([np.inf]), np.array([5.0]))[0, -1] == 0.0


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0, 100), st.floats(0, 100), st.floats(0.5, 2.0), st.floats(1, 500)), min_size=2,
             max_size=12),
)  # fmt: skip
def test_every_feasible_episode_outranks_every_infeasible_one(episodes):
    """Eq. (5) needs no trade-off parameter: feasible rewards are >= 0, infeasible ones < 0."""
    delivery = np.zeros((len(episodes), T))
    cost = np.zeros((len(episodes), T))
    delivery[:, 5] = [e[0] for e in episodes]
    cost[:, 5] = [e[1] for e in episodes]
    roi_target = np.array([e[2] for e in episodes])
    budget = np.array([e[3] for e in episodes])
    reward = indicator_reward(delivery, cost, roi_target, budget, np.full(len(episodes), 50.0)).sum(axis=1)
    feasible = violation(delivery.sum(1), cost.sum(1), roi_target, budget) == 0
    if feasible.any() and (~feasible).any():
        assert reward[feasible].min() > reward[~feasible].max()
    assert np.all(reward[feasible] >= 0) and np.all(reward[~feasible] < 0)


def test_curriculum_limits_follow_the_power_law():
    roi_limit, reserve = curriculum_limits(0.1, 0.95, 3.0, np.array([2.0]), np.array([100.0]))
    t = 12  # after slot 12 of 48: (1 - 12/48)^3 = 0.421875
    assert roi_limit[0, t - 1] == pytest.approx((1 - 0.1 * 0.421875) * 2.0)
    assert reserve[0, t - 1] == pytest.approx(0.95 * 0.421875 * 100.0)
    assert roi_limit[0, -1] == pytest.approx(2.0) and reserve[0, -1] == 0.0  # the original constraints at T
    assert np.all(np.diff(roi_limit[0]) >= 0) and np.all(np.diff(reserve[0]) <= 0)


def test_curriculum_reward_by_hand():
    L, B, oracle = np.array([1.0]), np.array([100.0]), np.array([48.0])
    # A steady feasible episode: ROI 2 every slot, spend 1/slot leaves plenty of reserve -> credit d / D* each slot.
    d, c = _episode(2.0, 1.0)
    r = curriculum_reward(d, c, L, B, oracle, b=0.1)
    np.testing.assert_allclose(r[0], 2.0 / 48.0)
    assert r.sum() == pytest.approx(2.0)  # sums to D / D*
    # Slot 1 alone: ROI 0.95 against L_1 = (1 - 0.1 * (47/48)^3) * 1 = 0.90612 -> fine; ROI 0.85 -> broken.
    d, c = _episode(0.95, 1.0, n_slots=1)
    assert curriculum_reward(d, c, L, B, oracle, b=0.1)[0, 0] == pytest.approx(0.95 / 48)
    d, c = _episode(0.85, 1.0, n_slots=1)
    limit = 1 - 0.1 * (47 / 48) ** 3
    assert curriculum_reward(d, c, L, B, oracle, b=0.1)[0, 0] == pytest.approx(-(limit - 0.85))
    # Spending into the reserve: after slot 1, B_1 = 0.95 * (47/48)^3 * 100 = 89.19...; spending 20 breaks it by 9.19.
    d, c = _episode(40.0, 20.0, n_slots=1)
    reserve = 0.95 * (47 / 48) ** 3 * 100
    assert curriculum_reward(d, c, L, B, oracle, b=0.1)[0, 0] == pytest.approx(-(reserve + 20 - 100) / 100)
    # No budget: only the ROI limit matters.
    assert curriculum_reward(d, c, L, np.array([np.inf]), oracle, b=0.1)[0, 0] == pytest.approx(40 / 48)


def test_uscb_and_lagrangian_rewards_by_hand():
    d, c = _episode(1.0, 1.0)  # D = C = 48, L 1.5 -> L C / D - 1 = 0.5
    u = uscb_reward(d, c, np.array([1.5]), np.array([96.0]), gamma=3.0)
    assert u[0, -1] == pytest.approx(0.5 - (3**0.5 - 1))
    lag = lagrangian_reward(d, c, np.array([1.5]), np.array([np.inf]), np.array([96.0]), multiplier=2.0)
    assert lag[0, -1] == pytest.approx(0.5 - 2.0 * (0.5 / 1.5))
    dual = DualAscent(multiplier=1.0, learning_rate=0.5)
    assert dual.update(np.array([0.2, 0.0])) == pytest.approx(1.05)
    assert DualAscent(multiplier=0.01, learning_rate=1.0).update(np.array([0.0])) == 0.01
    assert DualAscent(multiplier=0.01, learning_rate=1.0, tolerance=0.1).update(np.array([0.0])) == 0.0


def test_paper_curriculum_schedule():
    names = [stage_at(e).name for e in range(9)]
    assert names == ["cold start"] * 3 + ["warm-up"] * 3 + ["original problem"] * 3
    assert stage_at(0).b == 0.1 and stage_at(3).b == 0.2 and stage_at(6).b is None
    assert stage_at(100, SPARSE_ONLY).b is None
    assert [s.epochs for s in PAPER_CURRICULUM] == [3, 3, None]
    with pytest.raises(ValueError):
        stage_at(-1)
    # The original-problem stage uses the sparse reward itself.
    d, c = _episode(2.0, 1.0)
    args = (d, c, np.array([1.0]), np.array([np.inf]), np.array([96.0]))
    np.testing.assert_array_equal(stage_at(6).rewards(*args), indicator_reward(*args))


def test_automated_curriculum_relaxes_b_where_the_proxy_punishes_feasible_days():
    # Feasible in the end (ROI 1.25 >= L = 1) but below L in the morning: the proxy of a tight curriculum
    # punishes the morning, so regret minimization loosens b; it stays in [0, 1].
    d = np.zeros((4, T))
    c = np.ones((4, T))
    d[:, :12] = 0.8
    d[:, 12:] = 1.4
    roi_target, budget, oracle = np.ones(4), np.full(4, np.inf), np.full(4, 60.0)
    assert violation(d.sum(1), c.sum(1), roi_target, budget).max() == 0
    auto = RegretCurriculum.of(PAPER_CURRICULUM)
    assert auto.b == {"cold start": 0.1, "warm-up": 0.2}
    stage = auto.stage(stage_at(0))
    before = stage.rewards(d, c, roi_target, budget, oracle).sum()
    learned = auto.update(stage, d, c, roi_target, budget, oracle)
    assert 0.1 < learned <= 1.0 and auto.b["cold start"] == learned and auto.b["warm-up"] == 0.2
    assert auto.stage(stage_at(0)).rewards(d, c, roi_target, budget, oracle).sum() > before
    # No feasible episode: nothing to learn from; the original problem has no b.
    assert auto.update(stage, d, c * 10, roi_target, budget, oracle) == learned
    assert np.isnan(auto.update(stage_at(6), d, c, roi_target, budget, oracle))
    assert auto.stage(stage_at(6)) == stage_at(6)


def test_constraint_gap_is_signed_and_takes_the_most_violated_constraint():
    delivery, cost = np.array([12.0, 8.0, 12.0, 0.0]), np.array([10.0, 10.0, 10.0, 0.0])
    roi_target, budget = np.full(4, 1.0), np.array([np.inf, np.inf, 8.0, 5.0])
    gap = constraint_gap(delivery, cost, roi_target, budget)
    # slack ROI 1.2 -> -0.2; ROI 0.8 -> +0.2; ROI fine but cost 10 > B 8 -> +0.25; nothing spent -> floor -1.
    np.testing.assert_allclose(gap, [-0.2, 0.2, 0.25, -1.0])
    assert ((gap > 0) == (violation(delivery, cost, roi_target, budget) > 0)).all()
    dual = DualAscent(multiplier=1.0, learning_rate=1.0)
    assert dual.update(np.array([-0.2, -0.4])) == pytest.approx(0.7)  # slack lowers lambda
