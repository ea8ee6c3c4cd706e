"""training/rl/domain_randomization.py: per-episode regimes for training's collection, and what they change."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from model.contract import RATIO_MAX, Setting
from model.controller import RATIO_FLOOR, ControllerGains, controller_sequence
from model.history import History, Registration
from rcb.cli import app
from training.bidders.rm import ConstantRatio
from training.market.dataset import Market
from training.replay.dayset import DaySet
from training.rl.domain_randomization import ScaledReference, draw_reference_scales, draw_regimes
from training.rl.sac import SACConfig, play_days


def test_regimes_are_log_uniform_within_the_spread_and_off_at_zero():
    rng = np.random.default_rng(0)
    assert draw_regimes(rng, 10, 0.0) is None
    price, value = draw_regimes(rng, 20_000, 0.3)
    for scale in (price, value):
        assert scale.shape == (20_000,)
        assert np.exp(-0.3) <= scale.min() and scale.max() <= np.exp(0.3)
        assert abs(float(np.mean(np.log(scale)))) < 0.01  # centred on the log's own market
    assert abs(float(np.corrcoef(np.log(price), np.log(value))[0, 1])) < 0.03  # drawn independently
    # The stream runs' regimes were drawn from: n price scales, then n value scales, from the same generator.
    again, fresh = draw_regimes(np.random.default_rng(7), 5, 0.3), np.random.default_rng(7)
    assert again is not None
    np.testing.assert_array_equal(again[0], np.exp(fresh.uniform(-0.3, 0.3, 5)))
    np.testing.assert_array_equal(again[1], np.exp(fresh.uniform(-0.3, 0.3, 5)))
    with pytest.raises(ValueError, match=">= 0"):
        draw_regimes(rng, 3, -0.1)
    with pytest.raises(ValueError, match="regime_spread"):
        SACConfig(algo="cbrl", regime_spread=-0.2)


def test_collection_plays_each_episode_in_its_regime_and_scales_its_normalizer(tiny_market: Market):
    days = DaySet.load(tiny_market, "train", Setting.MC)
    chosen = np.arange(len(days))
    bidder = ConstantRatio(1.2)
    plain, plain_oracle = play_days(bidder, days, chosen, repeats=3, seed=5)
    scaled, scaled_oracle = play_days(bidder, days, chosen, repeats=3, seed=5, regime_spread=0.3)
    again, _ = play_days(bidder, days, chosen, repeats=3, seed=5, regime_spread=0.3)
    np.testing.assert_array_equal(scaled.cost, again.cost)  # the regimes are drawn from the seed
    assert not np.allclose(scaled.cost, plain.cost)
    # The normalizer is the day's D* times the episode's delivery scale (within the drawn bounds).
    factor = scaled_oracle / plain_oracle
    assert np.all((factor >= np.exp(-0.3) - 1e-12) & (factor <= np.exp(0.3) + 1e-12))
    assert np.unique(np.round(factor, 12)).size == factor.size
    # The registration stays the day's own: a regime is also a tighter or looser constraint.
    np.testing.assert_array_equal(scaled.history.registration.roi_target, plain.history.registration.roi_target)


FAST = ["--epochs", "1", "--updates-per-epoch", "2", "--json"]
"""A one-epoch run of two gradient steps."""


def train_args(market: Market, algo: str, out: Path) -> list[str]:
    """``rcb train``'s arguments for an MC run of ``algo`` on ``market`` into ``out``."""
    return ["train", "--data", str(market.root), "--setting", "mc", "--algo", algo, "--out", str(out)]


def test_train_records_the_spread_and_a_resumed_run_keeps_it(tiny_market: Market, tmp_path: Path):
    out = tmp_path / "run"
    args = train_args(tiny_market, "crl", out)
    result = CliRunner().invoke(app, [*args, *FAST, "--regime-spread", "0.25"])
    assert result.exit_code == 0, result.output
    assert json.loads((out / "run.json").read_text())["config"]["regime_spread"] == 0.25
    result = CliRunner().invoke(app, [*args, "--epochs", "2", "--updates-per-epoch", "2", "--json", "--resume"])
    assert result.exit_code == 0, result.output
    body = json.loads((out / "run.json").read_text())
    assert body["config"]["regime_spread"] == 0.25 and len(body["history"]) == 2
    bad = CliRunner().invoke(app, [*args, *FAST, "--regime-spread", "2"])
    assert bad.exit_code == 2 and "regime-spread" in bad.output


def test_a_scaled_reference_is_the_controller_times_each_episodes_factor():
    gains = ControllerGains()
    history = History(Registration.of(1.0, 50.0, n=3))
    for _ in range(5):
        history.record(*(np.array([value] * 3) for value in (1.0, 6.0, 5.0, 2.0, 40.0)))
    scale = np.array([0.5, 1.0, 40.0])
    scaled = ScaledReference(gains, scale).sequence(history)
    plain = controller_sequence(history, gains)
    np.testing.assert_allclose(scaled[:2], plain[:2] * scale[:2, None])
    np.testing.assert_allclose(scaled[2], np.clip(plain[2] * 40.0, RATIO_FLOOR, RATIO_MAX))
    assert scaled[2, 0] == RATIO_MAX  # clipped to the controller's range
    with pytest.raises(ValueError, match="3 scales for 2 episodes"):
        ScaledReference(gains, scale).sequence(history.until(5, episodes=[0, 1]))
    rng = np.random.default_rng(0)
    assert draw_reference_scales(rng, 4, 0.0) is None
    drawn = draw_reference_scales(rng, 20_000, 0.4)
    assert drawn is not None and np.exp(-0.4) <= drawn.min() and drawn.max() <= np.exp(0.4)
    assert abs(float(np.mean(np.log(drawn)))) < 0.01
    with pytest.raises(ValueError, match="reference_spread"):
        SACConfig(algo="crl", reference_spread=0.3)  # not residual: there is no reference to scale
    with pytest.raises(ValueError, match="reference_spread"):
        SACConfig(algo="cbrl", reference_spread=-0.1)


def test_a_residual_run_trains_on_scaled_references_and_records_the_spread(tiny_market: Market, tmp_path: Path):
    out = tmp_path / "run"
    result = CliRunner().invoke(app, [*train_args(tiny_market, "cbrl", out), *FAST, "--reference-spread", "0.4"])
    assert result.exit_code == 0, result.output
    assert json.loads((out / "run.json").read_text())["config"]["reference_spread"] == 0.4
    crl = train_args(tiny_market, "crl", tmp_path / "crl")
    refused = CliRunner().invoke(app, [*crl, *FAST, "--reference-spread", "0.4"])
    assert refused.exit_code == 2 and "reference_spread" in refused.output and "Traceback" not in refused.output
