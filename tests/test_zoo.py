"""The market zoo: draws deterministic and distinct, traits in their declared ranges and spanning them, the
calibration reaching the declared best ratio, and the CLI that lists and generates draws."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from rcb.cli import app
from training.market.constraints import curve_of
from training.market.dataset import Market
from training.market.generator import MarketConfig, generate_day
from training.market.suite import preset
from training.market.zoo import (
    LOG_UNIFORM,
    TRAIT_RANGES,
    ZOO_SIZE,
    best_constant_ratio,
    measure,
    parse_zoo_name,
    zoo,
    zoo_config,
    zoo_draw,
)
from training.replay.simulator import DayIndex

runner = CliRunner()

SWITCHES = ("whole_conversions", "diurnal")
"""Traits that are coins, not ranges."""

DERIVED = ("miscalibration", "price_level_std", "conversion_log_std")
"""Traits whose range is not a TRAIT_RANGES key of their own (the day spreads share ``day_spread``)."""


@pytest.fixture(scope="module")
def draws():
    return zoo()


def test_draws_are_deterministic_and_distinct(draws):
    first = [d.config for d in draws]
    zoo_draw.cache_clear()
    assert [d.config for d in zoo()] == first
    assert len({json.dumps(c.to_dict(), sort_keys=True) for c in first}) == ZOO_SIZE
    assert [d.name for d in draws] == [f"zoo-{i:02d}" for i in range(ZOO_SIZE)]
    # a draw is its own seed's: asking for a later one first changes nothing
    zoo_draw.cache_clear()
    assert zoo_draw(7).config == first[7]
    assert zoo_config(7, seed=3, days_id=4) == replace(first[7], seed=3, days_id=4)
    assert preset("zoo-07") == first[7] and parse_zoo_name("7") == parse_zoo_name("zoo-07") == 7
    with pytest.raises(ValueError):
        parse_zoo_name("bench")


def test_traits_lie_in_their_declared_ranges(draws):
    day_low, day_high = TRAIT_RANGES["day_spread"]
    for draw in draws:
        traits, config = draw.traits, draw.config
        for name, value in traits.items():
            if name in SWITCHES or name in DERIVED:
                continue
            if name in ("diurnal_traffic", "diurnal_price_amplitude") and not traits["diurnal"]:
                assert value == 0.0
                continue
            low, high = TRAIT_RANGES[name]
            assert low * (1 - 1e-9) <= value <= high * (1 + 1e-9), (draw.name, name, value)
        assert day_low <= traits["price_level_std"] <= day_high and day_low <= traits["conversion_log_std"] <= day_high
        # the config holds the traits
        assert config.whole_conversions == traits["whole_conversions"]
        assert (config.diurnal_traffic > 0) == traits["diurnal"] == (config.diurnal_price_amplitude > 0)
        assert TRAIT_RANGES["base_cvr"][0] <= config.base_cvr <= TRAIT_RANGES["base_cvr"][1]
        assert (
            TRAIT_RANGES["impressions_per_day"][0]
            <= config.impressions_per_day
            <= TRAIT_RANGES["impressions_per_day"][1]
        )
        assert config.price_markup > 0 and config.utility_factor > 0
        # second price: the best ratio times the miscalibration is above 1 (ROI stays above 1 up to true value)
        assert traits["best_ratio"] * traits["miscalibration"] > 1.0
        low, high = config.constraints.budget_low, config.constraints.budget_high
        assert high == pytest.approx(4 * low, rel=1e-3)


def test_the_zoo_spans_what_it_declares(draws):
    """Twenty draws reach across every range asked for, not a corner of it."""

    def values(name):
        return np.array([d.traits[name] for d in draws])

    deliveries = values("deliveries_per_slot")
    assert deliveries.max() / deliveries.min() >= 100  # two orders of magnitude
    ratio = values("best_ratio")
    assert ratio.min() < 0.7 and ratio.max() > 2.5
    miscalibration = values("miscalibration")
    assert miscalibration.min() < 0.7 and miscalibration.max() > 2.5
    assert 0 < values("whole_conversions").sum() < ZOO_SIZE and 0 < values("diurnal").sum() < ZOO_SIZE
    centers = values("budget_fraction_center")
    assert centers.max() / centers.min() > 3
    for name in ("volatility_low", "shock_rate_high", "win_share", "value_scale"):
        low, high = TRAIT_RANGES[name]
        got = values(name)
        if name in LOG_UNIFORM:
            spread = np.log(got.max() / got.min()) / np.log(high / low)
        else:
            spread = (got.max() - got.min()) / (high - low)
        assert spread > 0.5, (name, got.min(), got.max())


@pytest.mark.parametrize("index", [1, 8, 17])
def test_a_median_day_has_the_declared_best_ratio(index):
    """On a day at the family's median (no day-to-day spread) with expected deliveries, the best constant ratio
    is the declared one: the calibration solves for the generator itself, not for a model of it."""
    draw = zoo_draw(index)
    config = draw.config
    median = replace(config.id_family, price_level_std=0.0, conversion_log_std=0.0)
    log, regime = generate_day(0, False, replace(config, id_family=median, impressions_per_day=40_000))
    expected = (
        log.utility / config.utility_factor * regime["conversion_scale"] * math.exp(config.prediction_noise**2 / 2)
    )
    ratio = best_constant_ratio(curve_of(DayIndex(replace(log, delivery=expected))))
    assert ratio == pytest.approx(draw.traits["best_ratio"], rel=0.1)
    win_share = np.mean(ratio * log.utility > log.market_price)
    assert win_share == pytest.approx(draw.traits["win_share"], rel=0.25, abs=0.01)


def test_measure_reads_whole_and_continuous_conversions(draws):
    whole = next(d for d in draws if d.config.whole_conversions)
    value = next(d for d in draws if not d.config.whole_conversions)
    for draw, share in ((whole, 1.0), (value, 0.0)):
        got = measure(replace(draw.config, impressions_per_day=20_000), train_days=2)
        assert got["whole_share"] == pytest.approx(share, abs=0.01)
        assert got["deliveries_per_slot"] >= 0 and got["miscalibration"] > 0
        assert 0 <= got["budget_binds"] <= 1
    flat = next(d for d in draws if not d.traits["diurnal"])
    assert measure(replace(flat.config, impressions_per_day=50_000), train_days=1)["evening_to_night"] < 1.5


def test_cli_lists_the_zoo_and_generates_a_draw(tmp_path: Path):
    listed = runner.invoke(app, ["market", "zoo", "--count", "3", "--json"])
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.stdout)
    assert [r["declared"]["name"] for r in rows] == ["zoo-00", "zoo-01", "zoo-02"]
    table = runner.invoke(app, ["market", "zoo", "--count", "2"])
    assert table.exit_code == 0 and "zoo-01" in table.stdout and "best ratio" in table.stdout

    out = tmp_path / "zoo-02"
    args = ["market", "generate", "--out", str(out), "--days-id", "2", "--days-ood", "1"]
    made = runner.invoke(app, [*args, "--zoo", "zoo-02", "--impressions-per-day", "2000", "--seed", "3", "--json"])
    assert made.exit_code == 0, made.output
    market = Market.open(out)
    expected = zoo_config(2, days_id=2, days_ood=1, impressions_per_day=2000, seed=3)
    assert MarketConfig.from_dict(market.source["config"]) == expected
    assert len(market.days) == 3
    both = runner.invoke(app, [*args, "--zoo", "2", "--preset", "sparse", "--force"])
    assert both.exit_code == 2 and "give one" in both.output
