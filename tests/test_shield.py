"""model/shield.py and ``shield:METHOD``: runaway ratios capped, collapsing ones lifted, the band narrowing."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest
from artifact_fixtures import SETTING, exported_runs

from model.artifact import load_artifact
from model.contract import SLOTS_PER_DAY
from model.controller import ControllerGains, controller_ratios
from model.history import History, Registration
from model.shield import ShieldConfig, shield, threat_level
from training.bidders.onnx import OnnxBidder
from training.bidders.shielded import ShieldedBidder
from training.evaluation.evaluate import evaluate, split_days
from training.evaluation.methods import method_label, parse_methods, run_bidder
from training.evaluation.shielding import market_shield_gains, shield_gains
from training.market.dataset import Market
from training.market.generator import config_with, generate_market
from training.replay.dayset import DaySet


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
    # A ramp from L * 1.1 (no threat) down to L * 0.7 (full threat).
    ramp = ShieldConfig(roi_slack=0.1, roi_alarm=0.3, tight=0.1, tight_above=0.1)
    threats = [threat_level(history_with(roi=roi), gains, ramp)[0] for roi in (2.0, 1.1, 1.0, 0.85, 0.7, 0.5)]
    assert threats[0] == threats[1] == 0.0 and threats[-2] == threats[-1] == 1.0
    assert all(a <= b for a, b in itertools.pairwise(threats)) and 0 < threats[3] < 1
    # The default alarm is the target itself: full threat from ROI = L down, part of it just above.
    assert threat_level(history_with(roi=1.0), gains, config)[0] == pytest.approx(1.0)
    assert 0 < threat_level(history_with(roi=1.05), gains, config)[0] < 1
    with pytest.raises(ValueError, match="roi_slack"):
        ShieldConfig(roi_slack=0.0, roi_alarm=0.0)
    # The band's half-width follows the threat (where the controller's ratio leaves room on both sides).
    out = shield(history_with(roi=0.85), np.array([1.0]), gains, ramp)
    expected = ramp.wide * (1 - out.threat[0]) + ramp.tight * out.threat[0]
    assert np.log(out.high[0] / out.low[0]) / 2 == pytest.approx(expected)
    # Budget: 10 of 48 slots in, 100 of a 120 budget spent (83% vs ~21% planned): full threat.
    assert threat_level(history_with(roi=2.0, budget=120.0), gains, config)[0] == 1.0
    assert threat_level(history_with(roi=2.0, budget=10_000.0), gains, config)[0] == 0.0
    # Warm-up: the first slots' ROI is noise.
    assert threat_level(history_with(roi=0.1, slots=config.warmup_slots - 1), gains, config)[0] == 0.0
    assert threat_level(history_with(roi=0.1, slots=config.warmup_slots), gains, config)[0] == 1.0
    # Spend ahead of the traffic plan is not: two slots of a uniform day (4% of its traffic) with 40% of B already
    # spent is a full budget threat inside the warm-up, however well the ROI looks.
    rushed = history_with(roi=3.0, slots=2, budget=50.0)
    assert config.warmup_slots > 2 and threat_level(rushed, gains, config)[0] == 1.0
    assert threat_level(history_with(roi=3.0, slots=2, budget=10_000.0), gains, config)[0] == 0.0
    assert threat_level(history_with(roi=3.0, slots=0, budget=100.0), gains, config)[0] == 0.0


def test_the_band_can_close_above_the_controller_while_it_still_lifts_a_collapse():
    """``tight_above``: under full threat the upper edge closes to its own width, the lower edge to ``tight``."""
    gains, config = ControllerGains(), ShieldConfig(tight_above=0.0, tight=0.3, roi_alarm=0.3)
    losing = history_with(roi=0.6)
    reference = controller_ratios(losing, gains)[0]
    out = shield(losing, np.array([4.0]), gains, config)
    assert out.threat[0] == 1.0 and out.acted[0] and out.ratio[0] == pytest.approx(reference)
    assert shield(losing, np.array([0.0]), gains, config).ratio[0] == pytest.approx(reference * np.exp(-0.3))
    assert not shield(losing, np.array([reference * 0.9]), gains, config).acted[0]
    # Half-way: each edge at its own interpolated width.
    half = shield(history_with(roi=0.9), np.array([1.0]), gains, config)
    w = half.threat[0]
    assert 0 < w < 1
    ref = controller_ratios(history_with(roi=0.9), gains)[0]
    assert half.high[0] == pytest.approx(ref * np.exp(config.wide * (1 - w)))
    assert half.low[0] == pytest.approx(ref * np.exp(-(config.wide * (1 - w) + 0.3 * w)))
    with pytest.raises(ValueError, match="tight_above"):
        ShieldConfig(tight_above=-0.3)  # the band would be empty under full threat
    with pytest.raises(ValueError, match="tight_above"):
        ShieldConfig(tight_above=0.8)


def test_a_negative_upper_width_keeps_a_threatened_policy_below_the_controller():
    gains, config = ControllerGains(), ShieldConfig(tight_above=-0.1, tight=0.3)
    losing = history_with(roi=0.6)
    reference = controller_ratios(losing, gains)[0]
    out = shield(losing, np.array([reference]), gains, config)
    assert out.threat[0] == 1.0 and out.acted[0]
    assert out.ratio[0] == pytest.approx(reference * np.exp(-0.1)) and out.low[0] < out.ratio[0]
    # Safe: the band is as wide as ever above the controller.
    healthy = history_with(roi=1.5)
    assert shield(healthy, np.array([4.0]), gains, config).high[0] == pytest.approx(
        controller_ratios(healthy, gains)[0] * np.exp(config.wide)
    )


def test_a_deficit_on_a_sliver_of_the_budget_is_a_threat_in_proportion():
    """``roi_min_spend``: the ROI threat is weighed by the spent share of B, up to that share."""
    gains, config = ControllerGains(), ShieldConfig(roi_min_spend=0.02)
    # ROI 0 after 6 slots, 1.2 spent of a 600 budget (0.2%, a tenth of the 2%): a tenth of the threat.
    sliver = history_with(roi=0.0, slots=6, budget=600.0, cost_per_slot=0.2)
    assert threat_level(sliver, gains, config)[0] == pytest.approx(0.1)
    assert threat_level(sliver, gains, ShieldConfig(roi_min_spend=0.0))[0] == 1.0
    # The same ROI on 2% or more of B: the whole threat; without a budget (SC) too.
    assert threat_level(history_with(roi=0.0, slots=6, budget=60.0, cost_per_slot=0.2), gains, config)[0] == 1.0
    assert threat_level(history_with(roi=0.0, slots=6, cost_per_slot=0.2), gains, config)[0] == 1.0
    # A capped policy under a sliver's threat: the band stays nearly wide.
    out = shield(sliver, np.array([4.0]), gains, config)
    above = config.wide * 0.9 + config.tight_above * 0.1
    assert out.high[0] == pytest.approx(controller_ratios(sliver, gains)[0] * np.exp(above))
    with pytest.raises(ValueError, match="roi_min_spend"):
        ShieldConfig(roi_min_spend=1.5)


def test_the_band_is_the_half_widths_around_the_controller_and_nothing_more():
    """``[c exp(-below), c exp(above)]``, each half-width from ``wide`` to ``tight`` / ``tight_above`` as the threat
    grows, clipped to [0.01, 4]: the formula and its figures for the default band (safe, part and full threat, and a
    budget overspent), and no ``trust`` to widen it."""
    gains, config = ControllerGains(), ShieldConfig()
    figures = {  # (roi, budget): (low, high, threat) behind the default band
        (1.5, None): (0.8743528967283339, 3.545675837823285, 0.0),
        (1.05, None): (0.6853495952903552, 1.1299504556209334, 0.75),
        (0.6, None): (0.4398237445815102, 0.5372019347361906, 1.0),
        (1.0, 150.0): (0.018569752849751014, 0.02268114734903856, 1.0),
    }
    for (roi, budget), (low, high, threat) in figures.items():
        history = history_with(roi=roi, budget=budget)
        out = shield(history, np.array([1.0]), gains, config)
        assert (out.low[0], out.high[0], out.threat[0]) == pytest.approx((low, high, threat), rel=1e-12, abs=1e-15)
        c, t = controller_ratios(history, gains)[0], out.threat[0]
        below = config.wide * (1 - t) + config.tight * t
        above = config.wide * (1 - t) + config.tight_above * t
        assert out.low[0] == pytest.approx(np.clip(c * np.exp(-below), 0.01, 4.0), rel=1e-14)
        assert out.high[0] == pytest.approx(np.clip(c * np.exp(above), 0.01, 4.0), rel=1e-14)
    assert "trust" not in ShieldConfig.__dataclass_fields__
    with pytest.raises(TypeError, match="trust"):
        ShieldConfig(trust=0.2)  # type: ignore[call-arg]


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
    outcome = days.play(bidder, 0)
    rows = result.episodes[result.episodes["method"] == f"shield:onnx:{exported.cbrl_model}"]
    np.testing.assert_array_equal(rows["delivery"].to_numpy(), outcome.delivery)
    np.testing.assert_array_equal(rows["cost"].to_numpy(), outcome.cost)
    with pytest.raises(ValueError, match="not bidders"):
        parse_methods("shield:oracle-day")


def test_a_residual_runs_shield_is_centred_on_its_own_reference(tmp_path_factory: pytest.TempPathFactory):
    """``shield:RUN`` and ``shield:ensemble:`` centre the band where the run's export does (its card's controller, the
    one it was trained around), whichever market they play: not on the played market's PID, which a served model
    never reads."""
    exported = exported_runs(tmp_path_factory)
    market = Market.open(exported.market)
    days, train = split_days(market, "test", SETTING)
    bidder, _ = run_bidder(exported.residual_run, SETTING)
    own = bidder.controller
    assert isinstance(own, ControllerGains)
    assert own == OnnxBidder(load_artifact(exported.residual_model)).artifact.controller_gains()  # its card's
    # On the market it was trained on, its reference is that market's PID: the same gains, the same traffic profile
    # (the card's to 8 digits, the PID's tuning record to 6).
    pid = market_shield_gains(market, SETTING, train)
    assert shield_gains(bidder, market, SETTING, train).tuned() == pid.tuned()
    np.testing.assert_allclose(own.traffic_profile, pid.traffic_profile, rtol=0, atol=5e-7)
    # Its reference, not the market's, is what the band follows (played elsewhere they differ).
    bidder.controller = elsewhere = replace(own, initial_ratio=own.initial_ratio * 1.5)
    assert shield_gains(bidder, market, SETTING, train) is elsewhere
    # A baseline and a non-residual run have no reference of their own: the market's PID.
    hard, _ = run_bidder(exported.hard_run, SETTING)
    assert shield_gains(hard, market, SETTING, train) == market_shield_gains(market, SETTING, train)
    # rcb evaluate plays the run and its one-run ensemble behind exactly that band, on a market it was not trained
    # on too (where the market's PID, which it centred on before, is another controller and plays other days).
    foreign_dir = tmp_path_factory.mktemp("foreign") / "market"
    generate_market(foreign_dir, config_with(days_id=6, days_ood=0, impressions_per_day=3000, seed=9), workers=1)
    foreign = Market.open(foreign_dir)
    foreign_days, foreign_train = split_days(foreign, "test", SETTING)
    theirs = market_shield_gains(foreign, SETTING, foreign_train)
    assert theirs.tuned() != own.tuned()
    methods = parse_methods(f"shield:{exported.residual_run},shield:ensemble:one={exported.residual_run}")
    for played_market, played_days in ((market, days), (foreign, foreign_days)):
        direct = played_days.play(ShieldedBidder(run_bidder(exported.residual_run, SETTING)[0], own))
        result = evaluate(played_market, SETTING, "test", methods, seeds=1)
        for label in map(method_label, methods):
            rows = result.episodes[result.episodes["method"] == label]
            np.testing.assert_array_equal(rows["delivery"].to_numpy(), direct.delivery, err_msg=label)
            np.testing.assert_array_equal(rows["cost"].to_numpy(), direct.cost, err_msg=label)
    behind_theirs = foreign_days.play(ShieldedBidder(run_bidder(exported.residual_run, SETTING)[0], theirs))
    assert not np.array_equal(behind_theirs.cost, direct.cost)  # the band's centre decides: the test can tell
