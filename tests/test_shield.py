"""model/shield.py and ``shield:METHOD``: runaway ratios capped, collapsing ones lifted, the band narrowing."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from artifact_fixtures import SETTING, exported_runs

from model.artifact import load_artifact
from model.contract import SLOTS_PER_DAY
from model.controller import ControllerGains, controller_ratios
from model.history import History, Registration
from model.shield import ShieldConfig, shield, threat_level
from training.bidders.base import play
from training.bidders.onnx import OnnxBidder
from training.bidders.shielded import ShieldedBidder
from training.dayset import DaySet
from training.evaluate import evaluate, parse_methods
from training.market.dataset import Market


def history_with(roi: float, slots: int = 10, budget: float | None = None, cost_per_slot: float = 10.0) -> History:
    registration = Registration.of(1.0, budget, n=1)
    history = History(registration)
    for _ in range(slots):
        history.record(
            np.array([1.0]),
            np.array([roi * cost_per_slot]),
            np.array([cost_per_slot]),
            np.array([5.0]),
            np.array([100.0]),
        )
    return history


def test_a_runaway_ratio_is_capped_and_a_collapsing_one_lifted():
    config = ShieldConfig()
    healthy = history_with(roi=1.5)
    reference = controller_ratios(healthy)[0]
    runaway = shield(healthy, np.array([4.0]), config=config)
    assert runaway.acted[0] and runaway.ratio[0] == pytest.approx(reference * np.exp(config.wide))
    losing = history_with(roi=0.6)
    collapsing = shield(losing, np.array([0.0]), config=config)
    assert collapsing.acted[0] and collapsing.ratio[0] > 0
    assert collapsing.ratio[0] == pytest.approx(controller_ratios(losing)[0] * np.exp(-config.tight))


def test_a_ratio_inside_the_band_is_left_alone():
    history = history_with(roi=1.5)
    inside = controller_ratios(history) * 1.1
    out = shield(history, inside)
    assert not out.acted[0] and out.ratio[0] == inside[0]


def test_the_band_narrows_as_the_roi_or_the_budget_comes_under_threat():
    gains, config = ControllerGains(), ShieldConfig()
    threats = [threat_level(history_with(roi=roi), gains, config)[0] for roi in (2.0, 1.1, 1.0, 0.85, 0.7, 0.5)]
    assert threats[0] == threats[1] == 0.0 and threats[-2] == threats[-1] == 1.0
    assert all(a <= b for a, b in itertools.pairwise(threats)) and 0 < threats[3] < 1
    # An alarm at the target itself: full threat from ROI = L down.
    assert threat_level(history_with(roi=1.0), gains, ShieldConfig(roi_alarm=0.0))[0] == 1.0
    with pytest.raises(ValueError, match="roi_slack"):
        ShieldConfig(roi_slack=0.0, roi_alarm=0.0)
    # The band's half-width follows the threat (where the controller's ratio leaves room on both sides).
    out = shield(history_with(roi=0.85), np.array([1.0]), gains, config)
    expected = config.wide * (1 - out.threat[0]) + config.tight * out.threat[0]
    assert np.log(out.high[0] / out.low[0]) / 2 == pytest.approx(expected)
    # Budget: 10 of 48 slots in, 100 of a 120 budget spent (83% vs ~21% planned): full threat.
    assert threat_level(history_with(roi=2.0, budget=120.0), gains, config)[0] == 1.0
    assert threat_level(history_with(roi=2.0, budget=10_000.0), gains, config)[0] == 0.0
    assert threat_level(history_with(roi=0.1, slots=1), gains, config)[0] == 0.0  # warm-up: one slot is noise


def test_the_shield_keeps_every_slot_in_range():
    rng = np.random.default_rng(0)
    for slots in (0, 1, 5, SLOTS_PER_DAY - 1):
        history = history_with(roi=float(rng.uniform(0.2, 3.0)), slots=slots, budget=float(rng.uniform(50, 500)))
        out = shield(history, np.array([float(rng.uniform(0, 4))]))
        assert 0.01 <= out.low[0] <= out.ratio[0] <= out.high[0] <= 4.0


def test_shield_methods_play_in_rcb_evaluate(tmp_path_factory: pytest.TempPathFactory):
    exported = exported_runs(tmp_path_factory)
    methods = parse_methods(f"rm,shield:rm,shield:onnx:{exported.cbrl_model}")
    result = evaluate(Market.open(exported.market), SETTING, "test", methods, seeds=1)
    assert set(result.summary) == {"rm", "shield:rm", f"shield:onnx:{exported.cbrl_model}"}
    shielded = result.meta["tuned"][f"shield:onnx:{exported.cbrl_model}"]
    assert shielded["algo"] == "cbrl" and 0.0 <= shielded["shield_acted_share"] <= 1.0
    # The shield of a model is the one its card describes (the PID tuned on its train days), as in the service.
    model = OnnxBidder(load_artifact(exported.cbrl_model))
    card = model.artifact.card.training
    assert card.controller is not None and card.controller != ControllerGains().tuned()
    bidder = ShieldedBidder(model, ControllerGains.with_profile(card.traffic_profile, card.controller))
    days = DaySet.load(Market.open(exported.market), "test", SETTING)
    outcome = play(bidder, days.indexes(bidder.traffic_buckets), days.episode_days(), days.registration(), 0)
    rows = result.episodes[result.episodes["method"] == f"shield:onnx:{exported.cbrl_model}"]
    np.testing.assert_array_equal(rows["delivery"].to_numpy(), outcome.delivery)
    np.testing.assert_array_equal(rows["cost"].to_numpy(), outcome.cost)
    with pytest.raises(ValueError, match="not bidders"):
        parse_methods("shield:oracle-day")
