"""The synthetic market: determinism, schema, and calibration (SC binds, regimes are learnable)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from model.contract import SLOTS_PER_DAY
from training.market.constraints import (
    ConstraintRecipe,
    DayCurve,
    curve_of,
    day_curve,
    draw_market_constraints,
    draw_paper_constraints,
    reference_spend,
)
from training.market.dataset import Market
from training.market.generator import (
    QUIET_OPTIONS,
    MarketConfig,
    check_config,
    config_with,
    diurnal_profile,
    generate_day,
    generate_market,
    traffic_profile,
)
from training.replay.oracle import ORACLE_GRID, slot_oracle
from training.replay.simulator import DayIndex

CALIBRATION = config_with(days_id=40, days_ood=12, impressions_per_day=60_000, seed=7)


@pytest.fixture(scope="module")
def calibration_days() -> list[tuple[int, bool, DayIndex, dict]]:
    days = []
    for day in range(CALIBRATION.days_id + CALIBRATION.days_ood):
        ood = day >= CALIBRATION.days_id
        log, regime = generate_day(day, ood, CALIBRATION)
        days.append((day, ood, DayIndex(log), regime))
    return days


def _best_constant_ratio(index: DayIndex, roi_target: float = 1.0) -> tuple[float, float, float]:
    """(ratio, delivery, roi at ratio 4) of the best feasible constant ratio (SC), from the grid."""
    delivery, cost = day_curve(index)
    roi = np.divide(delivery, cost, out=np.full_like(delivery, np.inf), where=cost > 0)
    feasible = (roi >= roi_target) & (delivery > 0)
    best = int(np.argmax(np.where(feasible, delivery, -1.0)))
    return (
        (float(ORACLE_GRID[best]) if feasible.any() else float("nan")),
        float(delivery[best] * feasible.any()),
        float(roi[-1]),
    )


def test_day_is_deterministic_and_independent_of_other_days():
    a, regime_a = generate_day(3, False, config_with(impressions_per_day=5000, seed=1))
    b, regime_b = generate_day(3, False, config_with(impressions_per_day=5000, seed=1, days_id=5, days_ood=0))
    c, _ = generate_day(3, False, config_with(impressions_per_day=5000, seed=2))
    assert regime_a == regime_b
    np.testing.assert_array_equal(a.market_price, b.market_price)
    np.testing.assert_array_equal(a.delivery, b.delivery)
    assert not np.array_equal(a.utility[:100], c.utility[:100])


def test_generated_values_respect_schema_and_are_float32_exact():
    log, regime = generate_day(0, False, config_with(impressions_per_day=20_000))
    assert np.all(log.utility > 0) and np.all(log.market_price >= 0) and np.all(log.delivery >= 0)
    assert np.array_equal(log.cost, log.market_price)
    assert log.slot_offsets[0] == 0 and log.slot_offsets[-1] == log.n_impressions
    for values in (log.utility, log.market_price, log.delivery):
        np.testing.assert_array_equal(values.astype(np.float32).astype(np.float64), values)
    assert {"price_level", "price_volatility", "conversion_scale", "shock_rate", "shocks"} <= set(regime)
    assert len(regime["log_price_path"]) == SLOTS_PER_DAY


def test_traffic_is_diurnal():
    log, regime = generate_day(0, False, config_with(impressions_per_day=200_000))
    counts = np.diff(log.slot_offsets) / np.asarray(regime["traffic_path"])
    night, evening = counts[4:10].mean(), counts[38:44].mean()
    assert evening > 3 * night
    assert diurnal_profile().sum() == pytest.approx(1.0)


def test_wins_and_delivery_are_sparse(calibration_days):
    for _, _, index, _ in calibration_days[:10]:
        ratio, _, _ = _best_constant_ratio(index)
        win_share = np.mean(ratio * index.log.utility > index.log.market_price)
        assert win_share < 0.35
        assert np.mean(index.log.delivery > 0) < 0.08


def test_sc_roi_constraint_binds_on_at_least_90_percent_of_days(calibration_days):
    binding = []
    for _, _, index, _ in calibration_days:
        _, delivery, roi_at_top = _best_constant_ratio(index)
        # Binding: the top ratio breaks ROI >= 1, yet some ratio is feasible with positive delivery
        # (so the slot-wise oracle, which can play that ratio in every slot, is too).
        binding.append(roi_at_top < 1.0 and delivery > 0)
    assert np.mean(binding) >= 0.9, f"ROI binds on only {np.mean(binding):.0%} of days"


def test_ood_days_are_shifted_to_higher_more_volatile_prices(calibration_days):
    regimes_id = [r for _, ood, _, r in calibration_days if not ood]
    regimes_ood = [r for _, ood, _, r in calibration_days if ood]
    assert np.mean([r["price_level"] for r in regimes_ood]) > np.mean([r["price_level"] for r in regimes_id]) + 0.1
    assert min(r["price_volatility"] for r in regimes_ood) >= max(r["price_volatility"] for r in regimes_id) - 1e-9
    assert sum(len(r["shocks"]) for r in regimes_ood) / len(regimes_ood) > sum(
        len(r["shocks"]) for r in regimes_id
    ) / len(regimes_id)


def test_day_regime_is_learnable_from_early_observations(calibration_days):
    """What a bidder sees in the morning at a fixed ratio predicts the day's optimal ratio.

    The slots 0..15 ROI at ratio 1.5 (observable: won delivery / cost) must rank days much like their
    hindsight-optimal constant ratio does, so inferring the regime online pays off.
    """
    observed, optimal = [], []
    for _, _, index, _ in calibration_days:
        got = [index.slot_outcome(t, np.array([1.5])) for t in range(16)]
        cost = sum(g.cost[0] for g in got)
        observed.append(sum(g.delivery[0] for g in got) / cost)
        optimal.append(_best_constant_ratio(index)[0])
    rank = lambda x: np.argsort(np.argsort(x))  # noqa: E731
    spearman = np.corrcoef(rank(np.array(observed)), rank(np.array(optimal)))[0, 1]
    assert spearman > 0.6, f"morning ROI barely predicts the optimal ratio (spearman {spearman:.2f})"
    spread = np.nanpercentile(optimal, 90) / np.nanpercentile(optimal, 10)
    assert spread > 1.4, "days must differ enough that one constant ratio cannot fit all"


def test_generate_market_writes_manifest_with_paper_split(tmp_path: Path):
    config = config_with(days_id=10, days_ood=4, impressions_per_day=3000, seed=3)
    market = generate_market(tmp_path / "m", config, workers=2)
    reopened = Market.open(tmp_path / "m")
    assert [len(reopened.split(s)) for s in ("train", "test", "ood")] == [5, 5, 4]
    assert [d.day for d in reopened.split("ood")] == [10, 11, 12, 13]
    for entry in reopened.days:
        assert entry.mc.roi_target > 0 and entry.mc.budget > 0
        assert "conversion_scale" in entry.regime and "budget_fraction" in entry.regime
        log = reopened.load(entry.day)
        assert log.n_impressions == entry.n_impressions
        assert market.fingerprint(entry.day) == entry.sha256
    # Same seed, fewer workers: byte-identical days.
    again = generate_market(tmp_path / "m2", config, workers=1)
    assert [d.sha256 for d in again.days] == [d.sha256 for d in market.days]


def test_more_ood_days_extend_a_market_and_keep_every_earlier_day(tmp_path: Path):
    """``--days-ood N`` with a larger N adds OOD days of the same process and changes none of the others (data,
    split, MC constraints): how a longer OOD evaluation of models trained on the shorter market is drawn."""
    short = generate_market(tmp_path / "short", config_with(days_id=8, days_ood=2, impressions_per_day=2000, seed=5))
    longer = generate_market(tmp_path / "long", config_with(days_id=8, days_ood=6, impressions_per_day=2000, seed=5))
    kept = {d.day: d for d in longer.days}
    assert len(longer.split("ood")) == 6 and [d.day for d in longer.split("train")] == [
        d.day for d in short.split("train")
    ]
    for entry in short.days:
        twin = kept[entry.day]
        assert (twin.split, twin.sha256, twin.mc) == (entry.split, entry.sha256, entry.mc)


def test_default_config_matches_the_paper_split():
    config = MarketConfig()
    assert (config.days_id, config.days_ood, config.train_fraction) == (60, 20, 0.5)


def test_paper_mc_constraints_let_both_constraints_bind(calibration_days):
    """Across days, the MC oracle is held back by the budget on some and by the ROI target on others."""
    budget_binds, roi_binds = [], []
    for day, _, index, _ in calibration_days[:30]:
        drawn = draw_paper_constraints(index, np.random.default_rng([CALIBRATION.seed, day, 1]))
        roi_target, budget, fraction = drawn.roi_target, drawn.budget, drawn.budget_fraction
        assert 0.8 <= roi_target <= 1.3 and budget > 0 and 0.3 <= fraction <= 1.5
        best = slot_oracle(index, roi_target, budget)
        assert best.delivery > 0 and best.cost <= budget and best.delivery >= roi_target * best.cost
        budget_binds.append(best.cost >= 0.98 * budget)
        roi_binds.append(best.delivery <= 1.02 * roi_target * best.cost)
    assert 0.2 <= np.mean(budget_binds) <= 0.9, f"budget binds on {np.mean(budget_binds):.0%} of days"
    assert 0.2 <= np.mean(roi_binds) <= 0.9, f"ROI binds on {np.mean(roi_binds):.0%} of days"


def _calibration_splits(calibration_days) -> dict[int, str]:
    return {day: ("ood" if ood else ("train" if day % 2 == 0 else "test")) for day, ood, _, _ in calibration_days}


def test_prior_mc_constraints_never_read_the_day_itself(calibration_days):
    """A day's (L, B) under the prior recipe are the same whatever its own impressions are: replace a test
    day's and a train day's curve by another day's, and only other days' budgets may move."""
    curves = {day: curve_of(index) for day, _, index, _ in calibration_days}
    splits = _calibration_splits(calibration_days)
    drawn = draw_market_constraints(curves, splits, CALIBRATION.seed)
    test_day, train_day = 1, 2
    for day in (test_day, train_day):
        altered = dict(curves)
        altered[day] = DayCurve(delivery=curves[day].delivery * 3.0, cost=curves[day].cost * 0.5)
        again = draw_market_constraints(altered, splits, CALIBRATION.seed)
        assert (again[day].roi_target, again[day].budget) == (drawn[day].roi_target, drawn[day].budget)
    # A test day's curve is nobody's history: no day moves. A train day's is everyone else's history.
    altered = dict(curves)
    altered[test_day] = DayCurve(delivery=curves[test_day].delivery * 3.0, cost=curves[test_day].cost * 0.5)
    assert draw_market_constraints(altered, splits, CALIBRATION.seed) == drawn
    # B = f * median over the other train days of the best constant ratio's spend at L.
    history = [curves[d] for d, s in splits.items() if s == "train" and d != test_day]
    reference = reference_spend(history, drawn[test_day].roi_target)
    assert drawn[test_day].budget == pytest.approx(drawn[test_day].budget_fraction * reference, rel=1e-6)


def test_prior_mc_constraints_draw_the_papers_numbers_without_its_hindsight(calibration_days):
    """Same L and f as the paper recipe wherever the paper did not lower L; B does not track the day's D*."""
    curves = {day: curve_of(index) for day, _, index, _ in calibration_days}
    splits = _calibration_splits(calibration_days)
    prior = draw_market_constraints(curves, splits, CALIBRATION.seed)
    log_b_prior, log_b_paper, log_d_star = [], [], []
    for day, _, index, _ in calibration_days[:24]:
        paper = draw_paper_constraints(index, np.random.default_rng([CALIBRATION.seed, day, 1]))
        assert prior[day].budget_fraction == paper.budget_fraction
        if paper.roi_reachable and prior[day].roi_reachable:
            assert prior[day].roi_target == paper.roi_target
        assert prior[day].budget > 0 and 0.8 <= prior[day].roi_target <= 1.3
        log_b_prior.append(np.log(prior[day].budget))
        log_b_paper.append(np.log(paper.budget))
        log_d_star.append(np.log(max(slot_oracle(index, paper.roi_target, paper.budget).delivery, 1e-9)))
    corr_paper = np.corrcoef(log_b_paper, log_d_star)[0, 1]
    corr_prior = np.corrcoef(log_b_prior, log_d_star)[0, 1]
    assert corr_prior < corr_paper - 0.2, (corr_prior, corr_paper)


def test_prior_mc_constraints_flag_unreachable_days_and_keep_their_target():
    """A day where no constant ratio reaches L keeps L (not lowered) and says roi_reachable = False."""
    grid = np.linspace(0.01, 4.0, 400)
    easy = DayCurve(delivery=2.0 * grid, cost=grid)  # ROI 2 at every ratio
    hard = DayCurve(delivery=0.5 * grid, cost=grid)  # ROI 0.5: L >= 0.8 is out of reach
    drawn = draw_market_constraints({0: easy, 1: easy, 2: hard}, {0: "train", 1: "train", 2: "test"}, seed=0)
    assert not drawn[2].roi_reachable and drawn[0].roi_reachable
    assert 0.8 <= drawn[2].roi_target <= 1.3
    assert drawn[2].budget == pytest.approx(drawn[2].budget_fraction * 4.0)  # the easy days' best spend: ratio 4
    with pytest.raises(ValueError, match="unknown constraint recipe"):
        ConstraintRecipe(kind="hindsight")


def test_generated_market_uses_the_named_recipe(tmp_path: Path):
    """The default writes prior constraints with their analysis fields; paper is one option away."""
    small = config_with(days_id=6, days_ood=2, impressions_per_day=4_000, seed=3)
    prior = generate_market(tmp_path / "prior", small, workers=1)
    curves = {e.day: curve_of(DayIndex(prior.load(e.day))) for e in prior.days}
    expected = draw_market_constraints(curves, {e.day: e.split for e in prior.days}, small.seed)
    for entry in prior.days:
        assert (entry.mc.roi_target, entry.mc.budget) == (expected[entry.day].roi_target, expected[entry.day].budget)
        assert {"budget_fraction", "budget_reference", "roi_reachable"} <= set(entry.regime)
    assert prior.source["config"]["constraints"]["kind"] == "prior"
    paper = generate_market(tmp_path / "paper", replace(small, constraints=ConstraintRecipe(kind="paper")), workers=2)
    assert [d.sha256 for d in paper.days] == [d.sha256 for d in prior.days]  # same impressions
    for entry in paper.days:
        drawn = draw_paper_constraints(
            DayIndex(paper.load(entry.day)), np.random.default_rng([small.seed, entry.day, 1])
        )
        assert (entry.mc.roi_target, entry.mc.budget) == (drawn.roi_target, drawn.budget)


def _market_digest(market: Market) -> str:
    """sha256 over every day's arrays, split, MC constraints and regime (what a market holds, not how Parquet
    encodes it)."""
    digest = hashlib.sha256()
    for entry in market.days:
        log = market.load(entry.day)
        for values in (log.utility, log.market_price, log.delivery, log.cost, log.slot_offsets):
            digest.update(np.ascontiguousarray(values).tobytes())
        digest.update(
            json.dumps([entry.split, entry.mc.roi_target, entry.mc.budget, entry.regime], sort_keys=True).encode()
        )
    return digest.hexdigest()


# What the default config and the presets draw for tiny markets (4 ID + 2 OOD days of 3,000 impressions, seed 11):
# the options of QUIET_OPTIONS at their defaults leave each of these markets as it is without them.
GOLDEN_DIGESTS = {
    "default": "110d64f2f139f7f5a72c7fa2d7bb96581344dc43702c12ad0883dc0e5775a430",
    "bench": "110d64f2f139f7f5a72c7fa2d7bb96581344dc43702c12ad0883dc0e5775a430",
    "sparse": "7af49a5be0af6b68ca288e4097cc064101fc3cbdf2fce25d933591c3193cf075",
    "shifted": "c25254e35a78ccf007e09115843fc61077177cf54f381f3b34aee2915f65dbba",
    "volatile": "3a4eeb958e85d9f40bffd9abde373e0e75e17435e542fb9edccbc143cc2e6469",
}
CONFIG_KEYS = [
    "base_cvr",
    "constraints",
    "cvr_dispersion",
    "days_id",
    "days_ood",
    "diurnal_price_amplitude",
    "id_family",
    "impressions_per_day",
    "ood_family",
    "outage_traffic",
    "prediction_noise",
    "price_markup",
    "price_noise",
    "price_spike",
    "price_utility_elasticity",
    "seed",
    "shock_max_slots",
    "train_fraction",
    "value_dispersion",
    "value_scale",
]


def test_default_config_and_presets_draw_the_markets_they_always_drew(tmp_path: Path):
    """Options added to MarketConfig leave every existing market as it was: same days, constraints and regimes, and
    a manifest config with the same keys (the new options are written only when set)."""
    from training.market.suite import PRESETS

    for name, config in [("default", MarketConfig()), *PRESETS.items()]:
        tiny = replace(config, days_id=4, days_ood=2, impressions_per_day=3000, seed=11)
        market = generate_market(tmp_path / name, tiny, workers=1)
        assert _market_digest(market) == GOLDEN_DIGESTS[name], name
        assert sorted(market.source["config"]) == CONFIG_KEYS, name


def test_quiet_options_are_written_only_when_set_and_read_back():
    assert set(QUIET_OPTIONS) <= set(MarketConfig().__dataclass_fields__)
    for name, default in QUIET_OPTIONS.items():
        assert getattr(MarketConfig(), name) == default
    plain = MarketConfig()
    assert not set(QUIET_OPTIONS) & set(plain.to_dict())
    assert MarketConfig.from_dict(json.loads(json.dumps(plain.to_dict()))) == plain
    custom = config_with(whole_conversions=True, diurnal_traffic=0.3, utility_factor=2.0)
    raw = json.loads(json.dumps(custom.to_dict()))
    assert {k: raw[k] for k in QUIET_OPTIONS} == {
        "whole_conversions": True,
        "diurnal_traffic": 0.3,
        "utility_factor": 2.0,
    }
    assert MarketConfig.from_dict(raw) == custom


def test_whole_conversions_deliver_whole_multiples_of_the_conversion_value():
    value_scale = 2.5
    whole, _ = generate_day(
        0, False, config_with(impressions_per_day=40_000, whole_conversions=True, value_scale=value_scale)
    )
    plain, _ = generate_day(0, False, config_with(impressions_per_day=40_000, value_scale=value_scale))
    conversions = whole.delivery / value_scale
    np.testing.assert_array_equal(conversions, np.round(conversions))
    assert conversions.max() >= 2  # a Poisson count, not a coin
    positive = plain.delivery[plain.delivery > 0] / value_scale
    assert np.mean(positive == np.round(positive)) < 0.01  # the default delivers continuous order values
    # same impressions and prices (the same draws up to the conversions), about the same expected delivery
    np.testing.assert_array_equal(whole.utility, plain.utility)
    assert whole.delivery.sum() == pytest.approx(plain.delivery.sum(), rel=0.15)
    assert 0.002 < np.mean(whole.delivery > 0) < 0.08


def test_utility_factor_scales_the_logged_utility_and_nothing_else():
    base = config_with(impressions_per_day=20_000, seed=4)
    plain, regime = generate_day(2, False, base)
    scaled, regime_scaled = generate_day(2, False, replace(base, utility_factor=2.5))
    assert regime == regime_scaled
    np.testing.assert_array_equal(scaled.market_price, plain.market_price)
    np.testing.assert_array_equal(scaled.delivery, plain.delivery)
    np.testing.assert_allclose(scaled.utility, 2.5 * plain.utility, rtol=1e-6)
    # a bid ratio r on the scaled log wins what 2.5 r wins on the plain one (up to float32 rounding at the edge)
    for ratio in (0.5, 1.0, 2.0):
        differ = (ratio / 2.5 * scaled.utility > scaled.market_price) != (ratio * plain.utility > plain.market_price)
        assert np.mean(differ) < 1e-3


def test_diurnal_traffic_zero_is_flat_and_out_of_range_is_refused():
    log, regime = generate_day(0, False, config_with(impressions_per_day=200_000, diurnal_traffic=0.0))
    counts = np.diff(log.slot_offsets) / np.asarray(regime["traffic_path"])
    assert counts[38:44].mean() / counts[4:10].mean() == pytest.approx(1.0, abs=0.1)
    assert traffic_profile(config_with(diurnal_traffic=0.5)).sum() == pytest.approx(1.0)
    np.testing.assert_array_equal(traffic_profile(MarketConfig()), diurnal_profile())
    for bad in (dict(diurnal_traffic=1.5), dict(utility_factor=0.0), dict(value_scale=-1.0)):
        with pytest.raises(ValueError):
            check_config(config_with(**bad))
