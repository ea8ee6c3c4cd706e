"""model/planner.py and training/bidders/planner.py: the scenario model's price shift, its posterior, its choice."""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pandas as pd
import pytest
from planner_fixtures import sc_train_days, small_market

from model import planner as law
from model.contract import SLOTS_PER_DAY, Setting
from model.history import History, Registration
from training.bidders import planner
from training.bidders.base import play
from training.evaluation.evaluate import evaluate, split_days
from training.market.dataset import Market
from training.replay.dayset import DaySet, split_validation
from training.replay.simulator import DayIndex


@pytest.fixture(scope="module")
def market(tmp_path_factory: pytest.TempPathFactory) -> Market:
    return small_market(tmp_path_factory)


@pytest.fixture(scope="module")
def train(market: Market) -> DaySet:
    return sc_train_days(market)


@pytest.fixture(scope="module")
def scenarios(train: DaySet) -> law.Scenarios:
    return planner.scenarios_of(train)


def test_prices_scaled_by_p_win_at_r_what_r_over_p_won_at_p_times_the_cost(train: DaySet):
    """The identity the price multiplier rests on, checked against the simulator: one grid shift."""
    log = train.logs[0]
    k = 3
    p = np.exp(k * law.PRICE_STEPS * law.STEP)
    scaled = dataclasses.replace(log, market_price=log.market_price * p, cost=log.cost * p)
    here, there = DayIndex(log), DayIndex(scaled)
    cols = np.arange(law.SHIFT, law.SHIFT + 100)
    for t in (10, 30):
        shifted = there.slot_outcome(t, law.GRID[cols])
        original = here.slot_outcome(t, law.GRID[cols - k * law.PRICE_STEPS])
        assert np.allclose(shifted.delivery, original.delivery)
        assert np.allclose(shifted.cost, p * original.cost, rtol=1e-9)


def test_scenarios_hold_the_train_days_curves(train: DaySet, scenarios: law.Scenarios):
    days = len(train)
    assert scenarios.delivery.shape == scenarios.cost.shape == (days, SLOTS_PER_DAY, law.GRID.size)
    assert np.allclose(scenarios.delivery_after[:, 0], scenarios.delivery.sum(axis=1))
    assert not scenarios.cost_after[:, SLOTS_PER_DAY].any()
    assert scenarios.auctions.sum(axis=1).tolist() == [log.n_impressions for log in train.logs]
    assert scenarios.value_dispersion > 0 and scenarios.cost_floor > 0


def test_playing_a_train_day_the_market_posterior_finds_it(train: DaySet, scenarios: law.Scenarios):
    """With its own scenario allowed, a train day's slot costs single out that scenario at price multiplier 1;
    without it (``exclude``, as in tuning), it cannot."""
    day = 2
    bidder = planner.Planner(scenarios, margin=0.0, cost_sd=0.3)
    outcome = play(bidder, [train.indexes()[day]], np.zeros(2, dtype=int), Registration.of(1.0, None, n=2), 0)
    log_market, expected, _ = law.evidence(scenarios, outcome.history, np.full(2, 0.3), np.array([-1, day]))
    found = np.unravel_index(np.argmax(log_market[0]), log_market[0].shape)
    assert found == (day, law.PRICE_SPAN)  # k = 0 sits at PRICE_SPAN
    assert np.isneginf(log_market[1, day]).all()
    # at scale 1 the day's own scenario expects what the day delivered
    assert expected[0, day, law.PRICE_SPAN] == pytest.approx(outcome.delivery[0], rel=1e-9)


def test_scenario_curves_of_the_wrong_shape_are_refused(scenarios: law.Scenarios):
    with pytest.raises(ValueError, match="scenario curves"):
        law.Scenarios(scenarios.delivery[:, :10], scenarios.cost[:, :10], scenarios.auctions, 1.0, 1.0)


def test_it_bids_on_its_grid_a_margin_never_bids_higher_and_a_tight_budget_bids_lower(scenarios: law.Scenarios):
    bidder = planner.Planner(scenarios, margin=np.array([0.0, 0.3]), cost_sd=0.3)
    registration = Registration.of(1.0, None, n=2)
    bidder.start(registration, 0)
    first = bidder.bid(History(registration))
    assert np.isin(first, law.GRID[law.DECIDE]).all()
    assert first[1] <= first[0]
    # MC: a budget of a tenth of what the unbudgeted plan's scenarios would spend is paced, not run through.
    spend = np.median(scenarios.cost_after[:, 0, law.grid_index(first[:1])[0]])
    tight = Registration(roi_target=np.ones(1), budget=np.array([0.1 * spend]))
    bidder = planner.Planner(scenarios, margin=0.0, cost_sd=0.3)
    bidder.start(tight, 0)
    assert bidder.bid(History(tight))[0] < first[0]


def test_tuning_picks_from_its_grid_and_a_cached_plan_rebuilds_to_the_same_bids(train: DaySet):
    tuned, score = planner.tune(train)
    params = tuned.params()
    assert params["margin"] in planner.MARGINS and params["cost_sd"] in planner.COST_SDS
    assert 0.0 <= score <= 1.0
    again = planner.from_params(params, lambda: train)  # what rcb evaluate does with its tuning cache
    registration = Registration.of(1.0, None, n=1)
    one, two = (play(b, [train.indexes()[0]], np.zeros(1, dtype=int), registration, 0) for b in (tuned, again))
    assert np.array_equal(one.history.ratios, two.history.ratios)
    with pytest.raises(ValueError, match="train days"):
        planner.from_params(params)


def test_without_delivery_noise_the_noise_aware_count_is_the_indicator(train: DaySet, scenarios: law.Scenarios):
    """The noise-aware plan weighs a scenario by the chance its rest's delivery noise leaves the ROI on target; with
    no dispersion that chance is 0 or 1 and the plans agree. With the market's dispersion they differ somewhere."""
    outcome = play(
        planner.Planner(scenarios, 0.0, 0.3),
        train.indexes()[:3],
        np.arange(3),
        train.registration(1).take([0, 1, 2]),
        0,
    )
    quiet = dataclasses.replace(scenarios, value_dispersion=1e-30)
    differ = 0
    for slot in (0, 6, 20, 40):
        history = outcome.history.until(slot)
        plain = law.plan(quiet, history, 0.0, 0.3)
        assert np.array_equal(law.plan(quiet, history, 0.0, 0.3, noise_aware=True), plain)
        differ += int(
            (law.plan(scenarios, history, 0.0, 0.3, noise_aware=True) != law.plan(scenarios, history, 0.0, 0.3)).sum()
        )
    assert differ > 0


def test_a_day_with_its_prices_scaled_is_found_at_that_price_multiplier(train: DaySet, scenarios: law.Scenarios):
    """The shift's sign in the posterior: a train day whose competing prices (and so costs) are scaled by
    ``p = exp(3 * 0.08)`` is found as that day at ``k = +3``, not at ``k = -3``."""
    from training.bidders.rm import ConstantRatio

    day, k = 1, 3
    p = np.exp(k * law.PRICE_STEPS * law.STEP)
    log = train.logs[day]
    scaled = DayIndex(dataclasses.replace(log, market_price=log.market_price * p, cost=log.cost * p))
    outcome = play(ConstantRatio(1.2), [scaled], np.zeros(1, dtype=int), Registration.of(1.0, None), 0)
    log_market, _, _ = law.evidence(scenarios, outcome.history, np.full(1, 0.3), np.full(1, -1))
    assert np.unravel_index(np.argmax(log_market[0]), log_market[0].shape) == (day, law.PRICE_SPAN + k)


def test_a_scenario_that_expects_nothing_where_the_day_delivered_is_ruled_out(scenarios: law.Scenarios):
    """The delivery fit at ``E = 0``: two otherwise equal scenario sets, one of which expects no delivery at all;
    after a delivery the plan follows the one that explains it."""
    empty = dataclasses.replace(scenarios, delivery=np.zeros_like(scenarios.delivery))
    both = law.Scenarios(
        np.concatenate([scenarios.delivery, empty.delivery]),
        np.concatenate([scenarios.cost, scenarios.cost]),
        np.concatenate([scenarios.auctions, scenarios.auctions]),
        scenarios.value_dispersion,
        scenarios.cost_floor,
    )
    registration = Registration.of(1.0, None)
    history = History(registration)
    for t in range(12):  # a day that bids 1.0, costs what scenario 0 costs there and delivers twice that
        at = law.grid_index(np.array([1.0]))[0]
        history.record(
            np.ones(1),
            np.array([2.0 * scenarios.cost[0, t, at]]),
            np.array([scenarios.cost[0, t, at]]),
            np.ones(1),
            np.array([scenarios.auctions[0, t]]),
        )
    _, expected, _ = law.evidence(both, history, np.full(1, 0.3), np.full(1, -1))
    days = scenarios.days
    assert expected[0, days:].max() == 0 and expected[0, :days].max() > 0
    # the empty copies weigh nothing: the plan is the one on the real scenarios alone (with a fit of 0 at E = 0,
    # as in the first version, the empty copies took the posterior and the plan bid for days that deliver nothing)
    assert law.plan(both, history, 0.0, 0.3) == law.plan(scenarios, history, 0.0, 0.3)


def test_no_scenario_left_or_too_few_train_days_is_an_error(train: DaySet, scenarios: law.Scenarios):
    one = law.Scenarios(scenarios.delivery[:1], scenarios.cost[:1], scenarios.auctions[:1], 1.0, 1.0)
    with pytest.raises(ValueError, match="leaving none"):
        law.plan(one, History(Registration.of(1.0, None)), 0.0, 0.3, exclude=0)
    with pytest.raises(ValueError, match="naming none"):
        law.plan(scenarios, History(Registration.of(1.0, None)), 0.0, 0.3, exclude=scenarios.days)
    with pytest.raises(ValueError, match="at least 2 train days"):
        planner.tune_on(train.subset([0]), one)
    with pytest.raises(ValueError, match="positive value dispersion"):
        law.Scenarios(scenarios.delivery, scenarios.cost, scenarios.auctions, 1.0, 0.0)


def test_a_margin_moves_the_plan(train: DaySet, scenarios: law.Scenarios):
    """Somewhere in a played day a margin of 0.3 bids strictly lower than none (the margin is read)."""
    outcome = play(
        planner.Planner(scenarios, 0.0, 0.3), train.indexes()[:2], np.arange(2), train.registration(1).take([0, 1]), 0
    )
    lower = 0
    for slot in (0, 10, 24, 40):
        history = outcome.history.until(slot)
        zero, high = law.plan(scenarios, history, 0.0, 0.3), law.plan(scenarios, history, 0.3, 0.3)
        assert (high <= zero).all()
        lower += int((high < zero).sum())
    assert lower > 0


def test_rcb_evaluate_tunes_plan_once_reuses_its_cache_and_plays_its_own_days_leaving_each_out(
    market: Market, monkeypatch: pytest.MonkeyPatch
):
    first = evaluate(market, "sc", "test", ["plan", "shield:plan"], seeds=1)
    assert set(first.meta["tuned"]["plan"]) == {"margin", "cost_sd", "train_score"}

    def no_tuning(*args: object, **kwargs: object) -> None:
        raise AssertionError("plan re-tuned although its cache is valid")

    monkeypatch.setattr(planner, "tune", no_tuning)
    second = evaluate(market, "sc", "test", ["plan", "shield:plan"], seeds=1)
    pd.testing.assert_frame_equal(second.episodes, first.episodes)
    params = first.meta["tuned"]["plan"]
    # train days: each without its own scenario, as tuning plays them, so the mean score is the tuning's train score
    on_train = evaluate(market, "sc", "train", ["plan"], seeds=1)
    assert on_train.summary["plan"]["ans_mean"] == pytest.approx(params["train_score"], abs=1e-12)
    assert on_train.meta["tuned"]["plan"]["left_out"]
    # validation days: the same, each validation day without its own scenario
    days, train = split_days(market, "validation", Setting.SC)
    rows = split_validation(train())[1]
    scenarios = planner.scenarios_of(train())
    left_out = planner.Planner(scenarios, params["margin"], params["cost_sd"], exclude=rows)
    outcome = play(left_out, days.indexes(), days.episode_days(), days.registration(), 0)
    on_validation = evaluate(market, "sc", "validation", ["plan"], seeds=1).episodes
    np.testing.assert_array_equal(on_validation["delivery"], outcome.delivery)
    in_sample = play(
        planner.Planner(scenarios, params["margin"], params["cost_sd"]),
        days.indexes(),
        days.episode_days(),
        days.registration(),
        0,
    )
    assert not np.array_equal(in_sample.delivery, outcome.delivery)  # its own scenario would have told it the day


def test_the_rest_of_a_price_scaled_day_is_its_scenario_shifted(train: DaySet, scenarios: law.Scenarios):
    """The shift's sign in the plan: what the plan expects a day with prices scaled by ``p`` to win from slot ``t``
    at each ratio it may choose is, exactly, what the simulator replays on that day."""
    day, k = 1, 3
    p = np.exp(k * law.PRICE_STEPS * law.STEP)
    log = train.logs[day]
    scaled = DayIndex(dataclasses.replace(log, market_price=log.market_price * p, cost=log.cost * p))
    pair = np.array([day]), np.array([law.PRICE_SPAN + k])
    ratios = law.GRID[law.DECIDE]
    for t in (0, 20):
        delivery, cost = law.rest_of_day(scenarios, *pair, t, np.ones(1))
        outcomes = [scaled.slot_outcome(s, ratios) for s in range(t, SLOTS_PER_DAY)]
        np.testing.assert_allclose(delivery[0], np.sum([o.delivery for o in outcomes], axis=0), rtol=1e-9)
        np.testing.assert_allclose(cost[0], np.sum([o.cost for o in outcomes], axis=0), rtol=1e-9)


def test_the_threshold_sum_is_the_direct_sum(train: DaySet, scenarios: law.Scenarios):
    """feasible_value (suffix sums at a threshold on s) equals feasible_value_dense (the (Q, S, J) sum): on random
    inputs, zeros and ties included, and on every decision of days played."""
    rng = np.random.default_rng(0)
    scales = np.exp(law.LOG_SCALES)
    for _ in range(200):
        q, j = rng.integers(1, 40), rng.integers(1, 30)
        rest_d = rng.exponential(5.0, (q, j)) * (rng.random((q, j)) < 0.8)
        rest_c = rng.exponential(5.0, (q, j)) * (rng.random((q, j)) < 0.9)
        weights = rng.random((q, scales.size)) * (rng.random((q, scales.size)) < 0.7)
        args = (
            rng.choice([0.0, rng.exponential(3.0)]),
            rng.exponential(3.0),
            rng.uniform(0.5, 2.0),
            scales,
            rest_d,
            rest_c,
            weights,
        )
        fast, dense = law.feasible_value(*args), law.feasible_value_dense(*args)
        np.testing.assert_allclose(fast, dense, rtol=1e-9, atol=1e-12)
    outcome = play(
        planner.Planner(scenarios, 0.0, 0.3),
        train.indexes()[:3],
        np.arange(3),
        train.registration(1).take([0, 1, 2]),
        0,
    )
    real = 0
    for slot in range(0, SLOTS_PER_DAY, 6):
        history = outcome.history.until(slot)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(law, "feasible_value", law.feasible_value_dense)
            dense = law.plan(scenarios, history, 0.0, 0.3)
        assert np.array_equal(law.plan(scenarios, history, 0.0, 0.3), dense)
        real += history.n
    assert real > 0


def test_the_served_form_plans_what_plan_does_in_chunks_and_shares_slot_0(
    train: DaySet, scenarios: law.Scenarios, monkeypatch: pytest.MonkeyPatch
):
    """:class:`law.TunedPlanner` (what an exported planner runs): slot 0 once per registration, later slots in chunks
    of campaigns; the same ratios as :func:`law.plan` on the whole batch, to the bit."""
    monkeypatch.setattr(law.TunedPlanner, "CHUNK", 3)
    served = law.TunedPlanner(scenarios, 0.05, 0.3)
    registration = Registration(np.array([1.0, 1.2, 1.0, 1.2, 0.9]), np.array([np.inf, 50.0, np.inf, 50.0, 20.0]))
    first = History(registration)
    assert np.array_equal(served.ratios(first), law.plan(scenarios, first, 0.05, 0.3))
    assert len(served._first) == 3  # three distinct registrations, planned once each
    served._first[(1.0, np.inf)] = (9.0, 0.0, 0.0)  # a cached plan is what it answers (no replanning)
    assert served.ratios(first)[0] == 9.0
    monkeypatch.setattr(law.TunedPlanner, "FIRST_CACHE", 3)
    assert served.ratios(History(Registration.of(0.8, None)))[0] != 9.0 and len(served._first) == 1  # full: cleared
    n = 2 * len(train)
    played = play(
        planner.Planner(scenarios, 0.05, 0.3), train.indexes(), train.episode_days(2), train.registration(2), 0
    )
    assert n > law.TunedPlanner.CHUNK
    for slot in (1, 10, 47):
        history = played.history.until(slot)
        ratio, depth = served.decide(history)
        whole_ratio, whole_depth = law.plan_and_depth(scenarios, history, 0.05, 0.3)
        assert np.array_equal(ratio, law.plan(scenarios, history, 0.05, 0.3)) and np.array_equal(ratio, whole_ratio)
        assert np.array_equal(depth.edge, whole_depth.edge) and np.array_equal(depth.misfit, whole_depth.misfit)
    # one batch of more distinct registrations than the cache holds leaves it within its bound
    many = Registration(np.linspace(0.8, 1.2, 7), np.full(7, np.inf))
    assert np.array_equal(served.ratios(History(many)), law.plan(scenarios, History(many), 0.05, 0.3))
    assert len(served._first) <= law.TunedPlanner.FIRST_CACHE == 3


def test_the_slot_0_cache_answers_right_from_many_threads(scenarios: law.Scenarios, monkeypatch: pytest.MonkeyPatch):
    """The service decides from several threads: with a cache small enough to be cleared all the time, every thread
    still gets exactly the plan of its registrations."""
    monkeypatch.setattr(law.TunedPlanner, "FIRST_CACHE", 4)
    served = law.TunedPlanner(scenarios, 0.0, 0.3)
    targets = np.linspace(0.7, 1.5, 12)
    expected = {float(x): law.plan(scenarios, History(Registration.of(float(x), None)), 0.0, 0.3)[0] for x in targets}
    failures: list[str] = []

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(30):
            chosen = rng.choice(targets, size=3)
            got = served.ratios(History(Registration(chosen, np.full(3, np.inf))))
            if [expected[float(x)] for x in chosen] != got.tolist():
                failures.append(f"{chosen} -> {got}")

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


def test_the_posterior_on_its_grids_edge_says_the_day_is_out_of_its_depth(train: DaySet, scenarios: law.Scenarios):
    """A train day played (its own scenario excluded) leaves the posterior inside the grids, its costs explained; the
    same day with its costs 20x (far pricier than any scenario times the largest price multiplier, e^1.04) puts it
    on the edge, and no scenario explains its costs (misfit)."""
    played = play(
        planner.Planner(scenarios, 0.0, 0.3, exclude=0),
        train.indexes()[:1],
        np.zeros(1, int),
        train.registration(1).take([0]),
        0,
    ).history
    prior = law.plan_and_depth(scenarios, History(played.registration), 0.0, 0.3)[1]
    assert prior.edge[0] < 0.01 and prior.misfit[0] == 0 and not prior.out[0]  # the prior's own mass there
    for slot in (8, 24):
        history = played.until(slot)
        ratio, depth = law.plan_and_depth(scenarios, history, 0.0, 0.3, exclude=0)
        assert ratio[0] == law.plan(scenarios, history, 0.0, 0.3, exclude=0)[0] and not depth.out[0]
        history.cost[:, :slot] *= 20.0
        pricier = law.plan_and_depth(scenarios, history, 0.0, 0.3, exclude=0)[1]
        assert pricier.edge[0] >= law.EDGE_ALERT and pricier.misfit[0] >= law.MISFIT_ALERT and pricier.out[0]
        assert depth.misfit[0] < law.MISFIT_ALERT  # some scenario explains the day (on this tiny market, within 2 sds)


def test_at_slot_0_a_batch_plans_each_row_as_it_would_alone(scenarios: law.Scenarios):
    """Slot 0 shares the posterior and the rest of the day between rows with the same excluded scenario: each row's
    ratio and depth are still what it would get alone (budgets, targets, exclusions and the noise-aware count mixed)."""
    n = 8
    registration = Registration(np.linspace(0.8, 1.4, n), np.array([np.inf, 5.0, 50.0, np.inf, 0.5, 20.0, np.inf, 8.0]))
    exclude = np.array([-1, 0, -1, 0, 1, -1, 1, 0])
    noisy = np.arange(n) % 3 == 0
    margin = np.linspace(0.0, 0.2, n)
    ratio, depth = law.plan_and_depth(scenarios, History(registration), margin, 0.3, exclude, noisy)
    for i in range(n):
        alone, alone_depth = law.plan_and_depth(
            scenarios, History(registration.take([i])), margin[i], 0.3, exclude[i], noisy[i]
        )
        assert ratio[i] == alone[0] and depth.edge[i] == alone_depth.edge[0]
    assert len(set(ratio.tolist())) > 1  # the registrations do change the plan
