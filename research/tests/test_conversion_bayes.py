"""research/conversion_bayes.py: the twins at conversion scale 1, the posterior, and the bayes rows of headroom."""

from __future__ import annotations

import numpy as np
import pytest

from model.contract import SLOTS_PER_DAY, Setting
from model.history import History, Registration
from research import headroom
from research.conversion_bayes import GRID, BayesConversion, DayTwins, bayes_prior, day_twins
from training.evaluation.evaluate import EvaluationError
from training.market.dataset import Market
from training.market.generator import config_with, draw_regime, generate_market, generate_twin
from training.replay.oracle.oracles import slot_curves
from training.replay.simulator import DayIndex

SMALL = config_with(days_id=8, days_ood=2, impressions_per_day=20_000, seed=3)


@pytest.fixture(scope="module")
def market(tmp_path_factory: pytest.TempPathFactory) -> Market:
    return generate_market(tmp_path_factory.mktemp("bayes") / "market", SMALL, workers=1)


@pytest.fixture(scope="module")
def twins() -> DayTwins:
    return day_twins(2, False, SMALL, range(4))


def test_the_twins_are_rescaled_to_conversion_scale_one(twins: DayTwins):
    scale = draw_regime(np.random.default_rng([SMALL.seed, 2]), SMALL.id_family, SMALL)["conversion_scale"]
    delivery, cost = slot_curves(DayIndex(generate_twin(2, False, SMALL, 1)), GRID)
    assert np.allclose(twins.delivery_after[1, 0], delivery.sum(axis=0) / scale, rtol=1e-5)
    assert np.allclose(twins.cost_after[1, 5], cost[5:].sum(axis=0), rtol=1e-5)
    assert not twins.delivery_after[:, SLOTS_PER_DAY].any() and not twins.cost_after[:, SLOTS_PER_DAY].any()
    assert twins.mean.shape == twins.var.shape == (SLOTS_PER_DAY, GRID.size)
    assert (twins.var >= 0).all() and twins.var.max() > 0


def test_the_posterior_is_the_prior_before_any_evidence_and_finds_the_scale_with_it(twins: DayTwins):
    bidder = BayesConversion([twins], np.zeros(1), prior_mean=-0.3, prior_sd=0.2)
    prior = bidder.posterior(0.0, 0.0, 0.0)
    assert bidder.log_scales[np.argmax(prior)] == pytest.approx(-0.3)
    assert prior.sum() == pytest.approx(1.0)
    # Much evidence (expected 10,000 at scale 1, a tight variance) of a scale of exp(-0.8): far from the prior.
    strong = bidder.posterior(10_000 * np.exp(-0.8), 10_000.0, 10_000.0)
    assert bidder.log_scales[np.argmax(strong)] == pytest.approx(-0.8, abs=0.1)
    # Little evidence moves it less.
    weak = bidder.posterior(10 * np.exp(-0.8), 10.0, 10.0)
    mean = lambda w: float(w @ bidder.log_scales)  # noqa: E731
    assert mean(strong) < mean(weak) < mean(prior)


def test_it_bids_on_the_grid_closed_loop_and_refuses_budgets(twins: DayTwins):
    bidder = BayesConversion([twins, twins], np.array([0.0, 0.3]), *bayes_prior(SMALL))
    registration = Registration.of(1.0, None, n=2)
    bidder.start(registration, 0)
    history = History(registration)
    first = bidder.bid(history)
    assert np.isin(first, GRID).all()
    assert first[1] <= first[0]  # a larger ROI margin never bids higher on the same belief
    for _ in range(6):  # (the first slots of this small night-time day deliver nothing on any twin)
        history.record(bidder.bid(history), np.array([50.0, 50.0]), np.array([5.0, 5.0]), np.ones(2), np.ones(2) * 10)
    expected, _ = bidder.booked(history)
    assert (expected > 0).all()  # the slots played were booked at what scale 1 expects
    again = bidder.bid(history)
    assert np.array_equal(again, bidder.bid(history)) and np.array_equal(bidder.booked(history)[0], expected)
    with pytest.raises(ValueError, match="SC episodes only"):
        bidder.start(Registration.of(1.0, 100.0, n=2), 0)


def test_headroom_adds_the_bayes_rows_in_sc_only(market: Market):
    _, summary, figures = headroom.headroom(market.root, Setting.SC, "test", twins=2, from_slots=(), bayes=True)
    rows = [headroom.bayes_row(m) for m in headroom.MARGINS]
    assert set(rows) <= set(summary)
    assert figures["bayes"]["row"] in (*rows, None)
    with pytest.raises(EvaluationError, match="SC only"):
        headroom.headroom(market.root, Setting.MC, "test", twins=2, bayes=True)
