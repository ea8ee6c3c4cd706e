"""The market zoo: generator configurations drawn at random over wide ranges, none of them tuned on.

The suite's presets (:mod:`training.market.suite`) each move one family of traits away from the benchmark; a
learner tuned on them can still fail on a market unlike any of them. A zoo draw moves every trait at once, each
over a range far wider than the presets span (:data:`TRAIT_RANGES`):

* **Deliveries per slot** (1 to 300 delivering impressions in an average slot): the traffic and the conversion
  rate together, each kept in its own range.
* **Whole or continuous conversions** (:attr:`MarketConfig.whole_conversions`, a fair coin).
* **With or without a daily cycle** (a fair coin): with one, a traffic day curve of drawn strength and a daily
  price wave; without, flat traffic and no wave.
* **The best constant ratio** (0.5 to 3): the bid ratio that reaches ROI = 1 on a median in-distribution day.
* **The win share** (2% to 70%): the share of impressions that ratio wins, from a thin slice of cheap traffic
  to most of it.
* **A miscalibrated value model**: utility / the true expected delivery, pooled over ID days. It follows from
  the two above: in a second-price auction ROI stays above 1 up to a bid of the true expected delivery, so a
  value model off by ``k`` has its best ratio above ``1 / k``, the further above the more it wins
  (best ratio x miscalibration = bid / average price paid). Over the ranges above it spans about 0.45 to 6.
* **Drift and shocks**: the per-slot random walk of the price level, the shock rate and the size of a price
  spike; the day-to-day spread of price level and conversion scale; how far OOD days shift.
* **Budget tightness**: the range of the MC recipe's budget fraction (:class:`ConstraintRecipe`).
* **Money unit**, the conversion model's bias and the shapes of values, conversion rates, prediction noise and
  competing prices.

The best ratio and the win share are reached through the price markup and :attr:`MarketConfig.utility_factor`,
solved by :func:`solve_markup` on a sample of the generator's own utility and price process at a median day.
What the draws deliver is measured, not assumed: :func:`measure` generates a few days of a draw and reads its
realized traits (``rcb market zoo --measure``).

Draw ``i`` is ``default_rng([ZOO_SEED, i])``'s alone, so a draw never changes when the zoo grows. ``zoo-00`` ..
``zoo-19`` are the zoo (:data:`ZOO_SIZE`); any index names a draw.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

import numpy as np

from model.contract import SLOTS_PER_DAY
from training.market.constraints import (
    ConstraintRecipe,
    DayCurve,
    constant_ratio_spend,
    curve_of,
    draw_market_constraints,
)
from training.market.generator import (
    ID_FAMILY,
    OOD_FAMILY,
    MarketConfig,
    generate_day,
    split_of_days,
    traffic_profile,
)
from training.replay.oracle import ORACLE_GRID
from training.replay.simulator import DayIndex

ZOO_SIZE = 20
"""Draws of the zoo: ``zoo-00`` .. ``zoo-19``."""

ZOO_SEED = 2022_08_14
"""First word of every draw's seed (``default_rng([ZOO_SEED, index])``)."""

TRAIT_RANGES: dict[str, tuple[float, float]] = {
    "deliveries_per_slot": (1.0, 300.0),
    "best_ratio": (0.5, 3.0),
    "win_share": (0.02, 0.7),
    "conversion_log_mean": (-0.6, 0.3),
    "impressions_per_day": (10_000, 1_000_000),
    "base_cvr": (0.001, 0.08),
    "diurnal_traffic": (0.5, 1.0),
    "diurnal_price_amplitude": (0.05, 0.3),
    "volatility_low": (0.01, 0.1),
    "volatility_spread": (1.5, 3.0),
    "shock_rate_high": (0.0, 0.1),
    "spike_scale": (0.5, 2.0),
    "budget_fraction_center": (0.2, 1.2),
    "value_scale": (0.1, 100.0),
    "value_dispersion": (0.4, 1.2),
    "cvr_dispersion": (0.5, 1.2),
    "prediction_noise": (0.2, 0.7),
    "price_noise": (0.8, 1.6),
    "price_utility_elasticity": (0.5, 1.0),
    "day_spread": (0.1, 0.35),
    "ood_price_shift": (0.1, 0.5),
}
"""Every drawn trait's range (log-uniform for the scales of :data:`LOG_UNIFORM`, uniform otherwise). The traffic
(first drawn from :data:`TRAFFIC_DRAW`) and the conversion rate follow from the deliveries per slot, each kept in
its range here; the price markup, the utility factor and the miscalibration follow from the best ratio and the
win share (:func:`solve_markup`); the whole-conversion and daily-cycle switches are fair coins. Both day-to-day
spreads (price level, conversion scale) are drawn from ``day_spread``."""

LOG_UNIFORM = (
    "deliveries_per_slot",
    "best_ratio",
    "win_share",
    "impressions_per_day",
    "volatility_low",
    "budget_fraction_center",
    "value_scale",
)
"""Traits drawn uniformly on a log scale."""

TRAFFIC_DRAW = (20_000, 500_000)
"""Range the traffic is first drawn from, before the conversion rate is fitted to the deliveries per slot."""

_SAMPLE = 150_000
"""Impressions of the sample :func:`solve_markup` reads the price process from."""


def _sig(x: float, digits: int = 4) -> float:
    """``x`` rounded to ``digits`` significant digits (readable configs)."""
    return float(f"{x:.{digits}g}")


def _uniform(rng: np.random.Generator, name: str, bounds: tuple[float, float] | None = None) -> float:
    low, high = bounds or TRAIT_RANGES[name]
    if name in LOG_UNIFORM:
        return float(np.exp(rng.uniform(math.log(low), math.log(high))))
    return float(rng.uniform(low, high))


def _structure(traits: dict[str, Any]) -> MarketConfig:
    """A draw's config from its traits, its price markup 1 (:func:`zoo_draw` sets it)."""
    low = traits["volatility_low"]
    spike = traits["spike_scale"]
    id_family = replace(
        ID_FAMILY,
        price_level_std=_sig(traits["price_level_std"]),
        volatility=(_sig(low), _sig(low * traits["volatility_spread"])),
        conversion_log_mean=_sig(traits["conversion_log_mean"]),
        conversion_log_std=_sig(traits["conversion_log_std"]),
        shock_rate=(0.0, _sig(traits["shock_rate_high"])),
    )
    shift = traits["ood_price_shift"]
    ood_family = replace(
        OOD_FAMILY,
        price_level_mean=_sig(id_family.price_level_mean + shift),
        price_level_std=_sig(id_family.price_level_std * 1.5),
        volatility=(_sig(id_family.volatility[0] * 2), _sig(id_family.volatility[1] * 2)),
        conversion_log_mean=_sig(id_family.conversion_log_mean - shift / 3),
        conversion_log_std=_sig(id_family.conversion_log_std * 1.5),
        shock_rate=(_sig(id_family.shock_rate[1] / 2), _sig(id_family.shock_rate[1] * 2 + 0.02)),
    )
    center = traits["budget_fraction_center"]
    return MarketConfig(
        impressions_per_day=int(traits["impressions_per_day"]),
        base_cvr=_sig(traits["base_cvr"]),
        cvr_dispersion=_sig(traits["cvr_dispersion"]),
        value_dispersion=_sig(traits["value_dispersion"]),
        prediction_noise=_sig(traits["prediction_noise"]),
        price_markup=1.0,
        price_utility_elasticity=_sig(traits["price_utility_elasticity"]),
        price_noise=_sig(traits["price_noise"]),
        diurnal_price_amplitude=_sig(traits["diurnal_price_amplitude"]),
        price_spike=(_sig(0.3 * spike), _sig(0.8 * spike)),
        value_scale=_sig(traits["value_scale"], 2),
        id_family=id_family,
        ood_family=ood_family,
        constraints=ConstraintRecipe(budget_low=_sig(center / 2), budget_high=_sig(center * 2)),
        whole_conversions=traits["whole_conversions"],
        diurnal_traffic=_sig(traits["diurnal_traffic"]),
    )


def _price_sample(config: MarketConfig) -> tuple[np.ndarray, np.ndarray]:
    """(native utility, competing price) of a sample of a median ID day's impressions, in units of the median
    utility.

    A median day: price level at the family's mean, the random walk at its mid volatility (its variance averaged
    over the day), the daily wave at the slots traffic arrives in, and price spikes at the share of slots the
    family's mean shock rate puts in one. Seeded by a constant: the same config gives the same sample."""
    rng = np.random.default_rng([ZOO_SEED, 0x5A])
    family = config.id_family
    n = _SAMPLE
    value = rng.lognormal(0.0, config.value_dispersion, n)
    cvr = np.minimum(config.base_cvr * rng.lognormal(0.0, config.cvr_dispersion, n), 0.5) / config.base_cvr
    utility = value * cvr
    slot = rng.choice(SLOTS_PER_DAY, n, p=traffic_profile(config))
    t = np.arange(SLOTS_PER_DAY)
    wave = config.diurnal_price_amplitude * np.sin(2 * np.pi * (t - 24) / SLOTS_PER_DAY)
    walk_std = float(np.mean(family.volatility)) * math.sqrt(SLOTS_PER_DAY / 6)
    offset = family.price_level_mean + wave[slot] + rng.normal(0.0, walk_std, n)
    mean_length = (config.shock_max_slots + 1) / 2
    in_shock = float(np.mean(family.shock_rate)) * mean_length
    spiked = rng.random(n) < 0.5 * in_shock / (1 + in_shock)
    offset = offset + spiked * rng.uniform(*config.price_spike, n)
    price = (
        config.price_markup
        * utility**config.price_utility_elasticity
        * np.exp(offset + rng.normal(0.0, config.price_noise, n))
    )
    return utility, price


@dataclass(frozen=True)
class PriceCurve:
    """What bidding ``x`` times the generator's own utility wins at price markup 1 on a median ID day: the sample's
    critical ratios ``x`` (ascending; the rank of one over the sample size is the share of impressions it wins)
    and, at each, ``U(x) / M(x)``, the utility of what it wins over the price paid."""

    critical: np.ndarray
    utility_per_price: np.ndarray

    @classmethod
    def of(cls, config: MarketConfig) -> PriceCurve:
        utility, price = _price_sample(replace(config, price_markup=1.0))
        critical = price / utility
        order = np.argsort(critical)
        return cls(critical[order], np.cumsum(utility[order]) / np.cumsum(price[order]))

    def margin(self) -> np.ndarray:
        """``x * U(x) / M(x)``: bid over average price paid, at each critical ratio (above 1, rising)."""
        return self.critical * self.utility_per_price

    def at_margin(self, margin: float) -> int:
        """The index of the first critical ratio whose margin reaches ``margin``."""
        k = int(np.searchsorted(self.margin(), margin))
        return min(max(k, 1), len(self.critical) - 1)


def solve_markup(curve: PriceCurve, config: MarketConfig, best_ratio: float, win_share: float) -> dict[str, float]:
    """The price markup and utility factor that put a median ID day's best constant ratio (ROI >= 1, expected
    deliveries) at ``best_ratio``, winning ``win_share`` of the impressions; with the miscalibration that follows
    (utility / true expected delivery, pooled over ID days).

    With ``q`` the true expected delivery per unit of the generator's own utility on a median day (from the
    conversion bias), bidding ``rho`` times that utility against prices of markup ``K`` wins the impressions of
    critical ratio ``x = rho / K`` and below, at ROI = ``q * U(x) / (K * M(x))``. The win share fixes ``x``;
    ROI = 1 gives ``K = q * U(x) / M(x)``; the logged ratio ``rho / utility_factor`` = ``best_ratio`` gives the
    utility factor; and the miscalibration on the median day is ``x * U(x) / M(x) / best_ratio``, above
    ``1 / best_ratio`` (second price).
    """
    family = config.id_family
    q = math.exp(family.conversion_log_mean + config.prediction_noise**2 / 2)
    k = min(max(int(win_share * len(curve.critical)), 1), len(curve.critical) - 1)
    x, utility_per_price = float(curve.critical[k]), float(curve.utility_per_price[k])
    markup = q * utility_per_price
    at_median = x * utility_per_price / best_ratio
    return {
        "price_markup": markup,
        "utility_factor": x * markup / best_ratio,
        "miscalibration": at_median / math.exp(family.conversion_log_std**2 / 2),
    }


def _cvr_mean(config: MarketConfig) -> float:
    """The mean predicted conversion rate relative to ``base_cvr`` (the cap at 0.5 included), from a constant-seeded
    sample."""
    draws = np.random.default_rng([ZOO_SEED, 0x5B]).lognormal(0.0, config.cvr_dispersion, _SAMPLE)
    return float(np.minimum(config.base_cvr * draws, 0.5).mean() / config.base_cvr)


def _fit_traffic(traits: dict[str, Any], config: MarketConfig) -> tuple[float, int]:
    """``(base_cvr, impressions_per_day)`` giving the drawn deliveries per slot at the draw's conversion bias,
    each within its range (the traffic moves where the conversion rate alone cannot)."""
    cvr_mean = _cvr_mean(config)
    family = config.id_family
    scale = math.exp(family.conversion_log_mean + family.conversion_log_std**2 / 2 + config.prediction_noise**2 / 2)
    per_impression = cvr_mean * scale  # conversions per impression at base_cvr = 1
    daily = traits["deliveries_per_slot"] * SLOTS_PER_DAY
    low, high = TRAIT_RANGES["base_cvr"]
    base = min(max(daily / (traits["impressions_per_day"] * per_impression), low), high)
    low_n, high_n = TRAIT_RANGES["impressions_per_day"]
    traffic = min(max(daily / (base * per_impression), low_n), high_n)
    return base, int(round(traffic, -2))


@dataclass(frozen=True)
class ZooDraw:
    """One draw of the zoo: its declared traits and the config that realizes them."""

    index: int
    traits: dict[str, Any]
    config: MarketConfig

    @property
    def name(self) -> str:
        return zoo_name(self.index)

    def summary(self) -> dict[str, Any]:
        """The traits a table lists (declared, not measured: :func:`measure`)."""
        c = self.config
        return {
            "name": self.name,
            "impressions_per_day": c.impressions_per_day,
            "base_cvr": c.base_cvr,
            "deliveries_per_slot": round(self.traits["deliveries_per_slot"], 2),
            "whole_conversions": c.whole_conversions,
            "diurnal": self.traits["diurnal"],
            "best_ratio": round(self.traits["best_ratio"], 3),
            "miscalibration": round(self.traits["miscalibration"], 3),
            "win_share": round(self.traits["win_share"], 3),
            "price_markup": c.price_markup,
            "volatility": list(c.id_family.volatility),
            "shock_rate": list(c.id_family.shock_rate),
            "budget_fraction": [c.constraints.budget_low, c.constraints.budget_high],
            "value_scale": c.value_scale,
        }


def zoo_name(index: int) -> str:
    return f"zoo-{index:02d}"


def parse_zoo_name(name: str) -> int:
    """The index of ``zoo-NN`` (or of a bare number)."""
    text = name.removeprefix("zoo-")
    if not text.isdigit():
        raise ValueError(f"not a zoo draw: {name!r} (expected zoo-00 .. zoo-{ZOO_SIZE - 1:02d})")
    return int(text)


def draw_traits(rng: np.random.Generator) -> dict[str, Any]:
    """Every drawn trait, from ``rng`` in a fixed order (the miscalibration and price markup follow from them)."""
    traits: dict[str, Any] = {}
    traits["deliveries_per_slot"] = _uniform(rng, "deliveries_per_slot")
    traits["best_ratio"] = _uniform(rng, "best_ratio")
    traits["win_share"] = _uniform(rng, "win_share")
    traits["impressions_per_day"] = _uniform(rng, "impressions_per_day", TRAFFIC_DRAW)
    traits["conversion_log_mean"] = _uniform(rng, "conversion_log_mean")
    traits["whole_conversions"] = bool(rng.random() < 0.5)
    traits["diurnal"] = bool(rng.random() < 0.5)
    for name in (
        "diurnal_traffic",
        "diurnal_price_amplitude",
        "volatility_low",
        "volatility_spread",
        "shock_rate_high",
        "spike_scale",
        "budget_fraction_center",
        "value_scale",
        "value_dispersion",
        "cvr_dispersion",
        "prediction_noise",
        "price_noise",
        "price_utility_elasticity",
        "ood_price_shift",
    ):
        traits[name] = _uniform(rng, name)
    traits["price_level_std"] = _uniform(rng, "day_spread")
    traits["conversion_log_std"] = _uniform(rng, "day_spread")
    if not traits["diurnal"]:
        traits["diurnal_traffic"] = traits["diurnal_price_amplitude"] = 0.0
    traits["base_cvr"] = 0.02
    return traits


@lru_cache(maxsize=256)
def zoo_draw(index: int) -> ZooDraw:
    """Draw ``index`` of the zoo: its traits and its :class:`MarketConfig` (seed 0; the CLI's ``--seed`` sets the
    days), from ``default_rng([ZOO_SEED, index])`` alone."""
    if index < 0:
        raise ValueError(f"a zoo index is >= 0, not {index}")
    rng = np.random.default_rng([ZOO_SEED, index])
    traits = draw_traits(rng)
    for _ in range(2):  # the conversion rate moves the cap of predicted rates, hence (a little) their mean
        traits["base_cvr"], traits["impressions_per_day"] = _fit_traffic(traits, _structure(traits))
    config = _structure(traits)
    solved = solve_markup(PriceCurve.of(config), config, traits["best_ratio"], traits["win_share"])
    traits["miscalibration"] = solved["miscalibration"]
    config = replace(config, price_markup=_sig(solved["price_markup"]), utility_factor=_sig(solved["utility_factor"]))
    return ZooDraw(index=index, traits=traits, config=config)


def zoo_config(index: int, **overrides: Any) -> MarketConfig:
    """Draw ``index``'s config with some fields replaced (the CLI's --days-id, --seed, ...)."""
    return replace(zoo_draw(index).config, **overrides)


def zoo(count: int = ZOO_SIZE) -> list[ZooDraw]:
    """The first ``count`` draws."""
    return [zoo_draw(i) for i in range(count)]


def best_constant_ratio(curve: DayCurve, roi_target: float = 1.0) -> float:
    """The constant ratio of the oracle grid delivering most over the day with ROI >= ``roi_target`` (NaN: none
    reaches it)."""
    roi = np.divide(curve.delivery, curve.cost, out=np.full_like(curve.delivery, np.inf), where=curve.cost > 0)
    feasible = (roi >= roi_target) & (curve.delivery > 0)
    if not feasible.any():
        return float("nan")
    return float(ORACLE_GRID[np.flatnonzero(feasible)[np.argmax(curve.delivery[feasible])]])


def measure(config: MarketConfig, train_days: int = 4) -> dict[str, float]:
    """What a config's market realizes on ``train_days`` train days (the config's own traffic, seed and split):

    * ``deliveries_per_slot``: the median over the days' slots of impressions with a positive delivery;
    * ``best_ratio``: the median over the days of the best constant ratio (ROI >= 1, the day-wise oracle);
    * ``win_share``: the median share of impressions that ratio wins;
    * ``whole_share``: the share of positive deliveries that are whole multiples of ``value_scale``;
    * ``miscalibration``: total utility / total delivery (read through the sparse deliveries);
    * ``evening_to_night``: mean traffic of slots 38-43 over slots 4-9 (median over the days);
    * ``price_volatility``: the mean per-slot std of the log price walk, and ``shocks_per_day``, from the regimes;
    * ``budget_binds``: the share of days whose MC budget (``prior`` recipe over these days) is below the spend
      of the best constant ratio at the day's ROI target.
    """
    probe = replace(config, days_id=2 * train_days, days_ood=0, train_fraction=0.5)
    days = sorted(d for d, s in split_of_days(probe).items() if s == "train")
    unit = float(np.float32(config.value_scale))
    per_slot: list[int] = []
    ratios, wins, cycles, vols, shocks = [], [], [], [], []
    whole: list[bool] = []
    utility = delivery = 0.0
    curves = {}
    for day in days:
        log, regime = generate_day(day, False, probe)
        index = DayIndex(log)
        curves[day] = curve_of(index)
        per_slot.extend(np.bincount(log.slot[log.delivery > 0], minlength=SLOTS_PER_DAY).tolist())
        ratio = best_constant_ratio(curves[day])
        ratios.append(ratio)
        if math.isfinite(ratio):
            wins.append(float(np.mean(ratio * log.utility > log.market_price)))
        positive = log.delivery[log.delivery > 0] / unit
        whole.extend((np.abs(positive - np.round(positive)) <= 1e-5 * np.maximum(positive, 1.0)).tolist())
        utility += float(log.utility.sum())
        delivery += float(log.delivery.sum())
        traffic = np.diff(log.slot_offsets)
        cycles.append(float(traffic[38:44].mean() / max(traffic[4:10].mean(), 1.0)))
        vols.append(regime["price_volatility"])
        shocks.append(len(regime["shocks"]))
    drawn = draw_market_constraints(curves, dict.fromkeys(days, "train"), probe.seed, probe.constraints)
    binds = [drawn[d].budget < constant_ratio_spend(curves[d], drawn[d].roi_target) for d in days]
    finite = [r for r in ratios if math.isfinite(r)]
    return {
        "deliveries_per_slot": float(np.median(per_slot)),
        "best_ratio": float(np.median(finite)) if finite else float("nan"),
        "win_share": float(np.median(wins)) if wins else 0.0,
        "whole_share": float(np.mean(whole)) if whole else float("nan"),
        "miscalibration": utility / delivery if delivery > 0 else float("inf"),
        "evening_to_night": float(np.median(cycles)),
        "price_volatility": float(np.mean(vols)),
        "shocks_per_day": float(np.mean(shocks)),
        "budget_binds": float(np.mean(binds)),
    }
