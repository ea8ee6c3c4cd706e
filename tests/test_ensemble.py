"""training/bidders/ensemble.py and ``ensemble:LABEL=GLOB``: K policies bidding the median of their log-ratios."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pytest
from artifact_fixtures import SETTING, exported_runs

from model.history import History, Registration
from training.bidders.base import Bidder
from training.bidders.ensemble import ENSEMBLE_SEED_STRIDE, EnsembleBidder
from training.evaluate import evaluate, parse_methods
from training.market.dataset import Market


class Fixed(Bidder):
    """Bids ``ratio`` (per bucket when ``buckets`` > 1); records the seed it was started with."""

    name: ClassVar[str] = "fixed"

    def __init__(self, ratio: float, buckets: int = 1):
        self.ratio, self.traffic_buckets, self.seed = ratio, buckets, None

    def start(self, registration: Registration, seed: int) -> None:
        self.seed = seed

    def bid(self, history: History) -> np.ndarray:
        shape = (history.n,) if self.traffic_buckets == 1 else (history.n, self.traffic_buckets)
        return np.full(shape, self.ratio)


def test_the_median_log_ratio_outvotes_a_runaway_member():
    members = [Fixed(0.5), Fixed(1.0), Fixed(4.0)]
    ensemble = EnsembleBidder(members)
    registration = Registration.of(1.0, None, n=3)
    ensemble.start(registration, seed=2)
    assert [m.seed for m in members] == [2 * ENSEMBLE_SEED_STRIDE + k for k in range(3)]
    np.testing.assert_allclose(ensemble.bid(History(registration)), [1.0, 1.0, 1.0])
    # An even count takes the geometric mean of the middle two; an abstaining member is floored, not -inf.
    np.testing.assert_allclose(EnsembleBidder([Fixed(1.0), Fixed(4.0)]).bid(History(registration)), 2.0)
    assert np.isfinite(EnsembleBidder([Fixed(0.0), Fixed(1.0)]).bid(History(registration))).all()
    with pytest.raises(ValueError, match="different traffic buckets"):
        EnsembleBidder([Fixed(1.0), Fixed(1.0, buckets=4)])
    with pytest.raises(ValueError, match="at least one member"):
        EnsembleBidder([])


def test_an_ensemble_of_one_run_plays_as_that_run(tmp_path_factory: pytest.TempPathFactory):
    exported = exported_runs(tmp_path_factory)
    run = exported.cbrl_run
    methods = parse_methods(f"{run},ensemble:one={run},shield:ensemble:one={run}")
    result = evaluate(Market.open(exported.market), SETTING, "test", methods, seeds=1)
    assert set(result.summary) == {str(run), "ensemble:one", "shield:ensemble:one"}
    episodes = result.episodes
    alone = episodes[episodes["method"] == str(run)]
    one = episodes[episodes["method"] == "ensemble:one"]
    np.testing.assert_allclose(one["delivery"].to_numpy(), alone["delivery"].to_numpy(), rtol=1e-12)
    np.testing.assert_allclose(one["cost"].to_numpy(), alone["cost"].to_numpy(), rtol=1e-12)
    assert result.meta["tuned"]["ensemble:one"]["runs"] == [str(run)]
    assert 0.0 <= result.meta["tuned"]["shield:ensemble:one"]["shield_acted_share"] <= 1.0


def test_the_validation_split_is_the_days_training_held_out(tmp_path_factory: pytest.TempPathFactory):
    """``--split validation`` plays the train days the runs' model selection read (how a run and an ensemble
    are compared without test days)."""
    from training.dayset import DaySet, split_validation

    exported = exported_runs(tmp_path_factory)
    market = Market.open(exported.market)
    result = evaluate(market, SETTING, "validation", parse_methods("pid"), seeds=1)
    train = DaySet.load(market, "train", SETTING)
    held_out = [train.days[i] for i in split_validation(train)[1]]
    assert sorted(result.episodes["day"]) == sorted(held_out) and 0 < len(held_out) < len(train)
