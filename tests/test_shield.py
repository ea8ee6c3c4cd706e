"""model/shield.py and ``shield:METHOD``: runaway ratios capped, collapsing ones lifted, the band narrowing."""

from __future__ import annotations

import itertools
from dataclasses import asdict

import numpy as np
import pytest
import typer
from artifact_fixtures import SETTING, exported_runs
from typer.testing import CliRunner

from model.artifact import load_artifact
from model.contract import SLOTS_PER_DAY
from model.controller import ControllerGains, controller_ratios
from model.history import History, Registration
from model.shield import ShieldConfig, roi_upper_reading, shield, threat_level
from training.bidders.base import play
from training.bidders.onnx import OnnxBidder
from training.bidders.shielded import ShieldedBidder
from training.dayset import DaySet
from training.evaluate import EvaluationError, evaluate, parse_methods
from training.market.dataset import Market
from training.shield_sweep import main as shield_sweep_main
from training.shield_sweep import parse_config, sweep


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
    ramp = ShieldConfig(roi_alarm=0.3, tight=0.1, tight_above=0.1)
    threats = [threat_level(history_with(roi=roi), gains, ramp)[0] for roi in (2.0, 1.1, 1.0, 0.85, 0.7, 0.5)]
    assert threats[0] == threats[1] == 0.0 and threats[-2] == threats[-1] == 1.0
    assert all(a <= b for a, b in itertools.pairwise(threats)) and 0 < threats[3] < 1
    # The default alarm is the target itself: full threat from ROI = L down, part of it just above.
    assert threat_level(history_with(roi=1.0), gains, config)[0] == 1.0
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
        ShieldConfig(tight_above=-0.1)
    with pytest.raises(ValueError, match="tight_above"):
        ShieldConfig(tight_above=0.8)


def history_of(delivery: list[float], cost: list[float]) -> History:
    history = History(Registration.of(1.0, None, n=1))
    for d, c in zip(delivery, cost, strict=True):
        history.record(np.array([1.0]), np.array([d]), np.array([c]), np.array([5.0]), np.array([100.0]))
    return history


def test_the_noise_aware_reading_is_the_roi_plus_z_standard_errors_of_the_ratio_estimator():
    delivery, cost = [12.0, 4.0, 9.0, 7.0], [10.0, 10.0, 5.0, 15.0]
    history = history_of(delivery, cost)
    d, c = np.array(delivery), np.array(cost)
    estimate = d.sum() / c.sum()
    se = np.sqrt(4 / 3 * np.sum((d - estimate * c) ** 2)) / c.sum()
    assert roi_upper_reading(history, 0.0)[0] == pytest.approx(estimate)
    assert roi_upper_reading(history, 1.5)[0] == pytest.approx(estimate + 1.5 * se)
    # No scatter (every slot at the same ROI): nothing to add; one slot or no spend: the estimate as it is.
    assert roi_upper_reading(history_with(roi=0.8), 2.0)[0] == pytest.approx(0.8)
    assert roi_upper_reading(history_of([3.0], [4.0]), 2.0)[0] == pytest.approx(0.75)
    assert roi_upper_reading(history_of([0.0, 0.0], [0.0, 0.0]), 2.0)[0] == np.inf


def test_a_dip_the_noise_explains_is_no_threat_and_a_sustained_one_still_is():
    gains = ControllerGains()
    noisy = ShieldConfig(roi_noise_z=1.0)
    # Sparse deliveries: ROI 0.96 over 6 slots, but two slots carry it all.
    dip = history_of([0.0, 30.0, 0.0, 0.0, 27.6, 0.0], [10.0] * 6)
    assert threat_level(dip, gains, ShieldConfig())[0] == 1.0
    assert threat_level(dip, gains, noisy)[0] == 0.0
    # The same ROI every slot: read as it is, a full threat either way.
    steady = history_with(roi=0.96, slots=6)
    assert threat_level(steady, gains, noisy)[0] == 1.0
    with pytest.raises(ValueError, match="roi_noise_z"):
        ShieldConfig(roi_noise_z=-1.0)


def test_a_recorded_setting_matches_with_the_fields_it_predates_at_their_defaults():
    config = ShieldConfig()
    recorded = asdict(config)
    assert config.same_as(recorded)
    del recorded["roi_noise_z"]  # a card measured before the field existed
    assert config.same_as(recorded)
    assert not ShieldConfig(roi_noise_z=1.0).same_as(recorded)
    assert not config.same_as({**recorded, "tight": 0.2})
    assert not config.same_as({**recorded, "unknown": 1.0})
    assert not config.same_as({**recorded, "tight": -1.0})


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


def test_the_shield_sweep_plays_each_setting_beside_the_pid(tmp_path_factory: pytest.TempPathFactory):
    """``python -m training.shield_sweep``: the default config's row is ``shield:onnx:MODEL`` of rcb evaluate."""
    exported = exported_runs(tmp_path_factory)
    model = f"onnx:{exported.cbrl_model}"
    assert parse_config("wide")[1] == ShieldConfig()
    assert parse_config("asym:tight_above=0,warmup_slots=3")[1] == ShieldConfig(tight_above=0.0, warmup_slots=3)
    for bad in ("x:nosuch=1", "x:tight", "x:tight_above=2", "x:tight=wide", "pid", "unshielded:tight=0.2", ":wide=1"):
        with pytest.raises(typer.BadParameter):
            parse_config(bad)
    # The command line: clear errors, exit 2, for a repeated name, an unknown split or a directory that is no market.
    app = typer.Typer()
    app.command()(shield_sweep_main)
    base = [str(exported.market), "--method", model, "--setting", SETTING]
    for args, said in (
        (["--config", "a", "--config", "a"], "repeat"),
        (["--config", "a", "--split", "tomorrow"], "tomorrow"),
    ):
        result = CliRunner().invoke(app, base + args)
        assert result.exit_code == 2 and said in result.output
    result = CliRunner().invoke(app, [str(exported.cbrl_run), "--method", model, "--config", "a"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    configs = [parse_config("default"), parse_config("open:roi_slack=0,roi_alarm=1,tight=0.7,tight_above=0.7")]
    summary = sweep(exported.market, "test", SETTING, model, configs, seeds=2)
    assert list(summary) == ["pid", "unshielded", "default", "open"]
    played = evaluate(Market.open(exported.market), SETTING, "test", parse_methods(f"shield:{model}"), seeds=2)
    assert summary["default"]["ans_median"] == played.summary[f"shield:{model}"]["ans_median"]
    assert summary["default"]["csr"] == played.summary[f"shield:{model}"]["csr"]
    assert summary["default"]["config"] == asdict(ShieldConfig())
    # A band as wide as the default's widest in every state never acts more often than the default.
    assert summary["open"]["shield_acted_share"] <= summary["default"]["shield_acted_share"]
    with pytest.raises(EvaluationError, match="onnx:MODEL_DIR or ensemble"):
        sweep(exported.market, "test", SETTING, str(exported.cbrl_run), configs, seeds=1)
