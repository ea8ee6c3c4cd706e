"""A synthetic, non-stationary ad market in the impression-log schema (docs/data-schema.md; ``rcb market generate``).

Every realism trait is a documented field of :class:`MarketConfig`:

* **Diurnal traffic**: the expected impressions per slot follow a day curve (night trough, noon and
  evening peaks), or a flatter one (``diurnal_traffic``); counts are Poisson around it.
* **Utility is a noisy prediction of a sparse delivery**: an impression has a value ``v`` (order
  value) and a predicted conversion rate ``p``; ``utility = v * p``. It converts with probability
  ``p * conversion_scale * exp(noise)``, and ``delivery = v`` if it converts, else 0. With
  ``whole_conversions`` the delivery is instead a whole number of conversions, each worth ``value_scale``.
* **A miscalibrated value model** (``utility_factor``): the logged utility is off by a constant factor
  from the one prices and deliveries follow.
* **Sparse wins**: competing prices sit a few times above the utility (``price_markup``), so at
  sensible ratios a campaign wins a small share of the traffic.
* **Drifting price level**: the log market price has a day level, a diurnal wave and a random walk
  from slot to slot (the day's ``price_volatility``).
* **Shocks**: windows of slots where prices jump (an adversary) or traffic collapses (an outage).
* **ID vs OOD**: every day draws latent regime parameters (price level and volatility, conversion
  scale, shock rate, traffic scale) from a family; ID days from one, OOD days ("festivals") from a
  shifted one with higher, more volatile prices and more shocks.

The regime persists through the day, so a bidder that infers it from what it has won so far
(win rate and price paid reveal the price level; delivery per cost reveals the conversion scale)
can beat one that does not. Regimes are written to the manifest for analysis, never as features.

Determinism: day ``k`` of seed ``s`` draws from ``numpy.random.default_rng([s, k])`` alone, so a day
is the same whatever the worker count or the number of other days. A *twin* of a day (:func:`generate_twin`) keeps
its regime and redraws its impressions from ``default_rng([s, k, TWIN_STREAM, j])``: what the regime alone lets one
expect of the day (``research/headroom.py``).
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from model.contract import SLOTS_PER_DAY
from training.market.constraints import (
    ConstraintRecipe,
    DayCurve,
    curve_of,
    draw_market_constraints,
    draw_paper_constraints,
)
from training.market.dataset import DayEntry, Market, MCConstraints, clear_market, file_sha256
from training.market.logs import write_day
from training.market.schema import DayLog
from training.replay.simulator import DayIndex


@dataclass(frozen=True)
class RegimeFamily:
    """Distribution of a day's latent market regime."""

    price_level_mean: float = 0.0
    """Mean of the day's log price level (0 = competing prices at ``price_markup`` x utility)."""
    price_level_std: float = 0.2
    """Day-to-day spread of the log price level."""
    volatility: tuple[float, float] = (0.02, 0.06)
    """Range of the per-slot random-walk std of the log price (drawn uniformly per day)."""
    conversion_log_mean: float = -0.3
    """Mean log of the conversion scale (true / predicted conversion rate; < 0: the model over-predicts)."""
    conversion_log_std: float = 0.2
    """Day-to-day spread of the log conversion scale."""
    shock_rate: tuple[float, float] = (0.0, 0.03)
    """Range of the per-slot probability that a shock starts (drawn uniformly per day)."""
    traffic_scale: tuple[float, float] = (0.9, 1.1)
    """Range of the day's traffic multiplier."""


ID_FAMILY = RegimeFamily()
OOD_FAMILY = RegimeFamily(
    price_level_mean=0.3,
    price_level_std=0.3,
    volatility=(0.06, 0.12),
    conversion_log_mean=-0.4,
    conversion_log_std=0.3,
    shock_rate=(0.03, 0.08),
    traffic_scale=(1.1, 1.5),
)


@dataclass(frozen=True)
class MarketConfig:
    """Everything that shapes a synthetic market. Defaults give the project's benchmark market."""

    days_id: int = 60
    """In-distribution days (split i.i.d. into train and test)."""
    days_ood: int = 20
    """Out-of-distribution days (split ``ood``), drawn from ``ood_family``."""
    impressions_per_day: int = 1_000_000
    """Expected impressions of a day at traffic scale 1 (actual counts are Poisson)."""
    train_fraction: float = 0.5
    """Share of ID days that go to ``train`` (the paper: 30 of 60); the rest are ``test``."""
    seed: int = 0
    """Seeds everything: day ``k`` uses ``default_rng([seed, k])``."""
    base_cvr: float = 0.02
    """Median predicted conversion rate."""
    cvr_dispersion: float = 0.9
    """Log-std of predicted conversion rates across impressions."""
    value_dispersion: float = 0.8
    """Log-std of impression values (order values)."""
    prediction_noise: float = 0.4
    """Log-std of the error of the conversion prediction, per impression."""
    price_markup: float = 8.0
    """Median competing price as a multiple of a median-utility impression's utility."""
    price_utility_elasticity: float = 0.7
    """How competing prices scale with utility (< 1: high-utility impressions are relatively cheaper)."""
    price_noise: float = 1.3
    """Log-std of competing prices around their mean, per impression."""
    diurnal_price_amplitude: float = 0.1
    """Amplitude of the daily wave of the log price level (evening competition)."""
    shock_max_slots: int = 6
    """Longest shock window, in slots."""
    price_spike: tuple[float, float] = (0.3, 0.8)
    """Range of the log-price jump of an adversary shock."""
    outage_traffic: tuple[float, float] = (0.05, 0.3)
    """Range of the traffic multiplier during an outage."""
    value_scale: float = 1.0
    """Money unit: multiplies order values, hence utility, delivery, prices and budgets alike."""
    id_family: RegimeFamily = ID_FAMILY
    ood_family: RegimeFamily = OOD_FAMILY
    constraints: ConstraintRecipe = field(default_factory=ConstraintRecipe)
    whole_conversions: bool = False
    """Deliveries in whole conversions: an impression's expected conversions are its value in units of
    ``value_scale`` times its true conversion rate, it converts a Poisson number of times, and each conversion
    delivers ``value_scale`` (the value of one conversion). The expected delivery is the same as without it
    (up to the cap of the true conversion rate at 1, which a count does not have). False: an impression converts
    at most once and delivers its own order value (continuous)."""
    diurnal_traffic: float = 1.0
    """Strength of the traffic's day curve, in [0, 1]: 1 = :func:`diurnal_profile`, 0 = the same expected
    traffic in every slot; in between, a mix of the two."""
    utility_factor: float = 1.0
    """Multiplies the utility written to the log, and nothing else: prices and deliveries follow the unscaled
    utility. A value model off by a constant factor; it scales the best constant ratio by ``1 / utility_factor``."""

    def to_dict(self) -> dict[str, Any]:
        """The config as plain data. The options of :data:`QUIET_OPTIONS` are left out at their defaults, where
        they leave the market process as it is without them: such a market's manifest reads the same to a reader
        that does not know them."""
        out = asdict(self)
        for name, default in QUIET_OPTIONS.items():
            if out[name] == default:
                del out[name]
        return out

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> MarketConfig:
        """Inverse of :meth:`to_dict` (a generated market's manifest ``source.config``); unknown keys are an error."""

        def tuples(d: dict[str, Any]) -> dict[str, Any]:
            return {k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}

        body = tuples(raw)
        for name in ("id_family", "ood_family"):
            if name in body:
                body[name] = RegimeFamily(**tuples(body[name]))
        if "constraints" in body:
            body["constraints"] = ConstraintRecipe(**tuples(body["constraints"]))
        return cls(**body)


QUIET_OPTIONS: dict[str, Any] = {"whole_conversions": False, "diurnal_traffic": 1.0, "utility_factor": 1.0}
"""Options of :class:`MarketConfig` whose defaults draw exactly the market drawn without them (same random
draws, same bytes), by name with their defaults; :meth:`MarketConfig.to_dict` writes them only when set."""


def diurnal_profile() -> np.ndarray:
    """Share of a day's traffic in each slot: a night trough, a noon peak and a larger evening peak."""
    hour = (np.arange(SLOTS_PER_DAY) + 0.5) / 2.0
    curve = 0.15 + 0.8 * np.exp(-(((hour - 11.5) / 3.0) ** 2)) + 1.0 * np.exp(-(((hour - 20.5) / 2.5) ** 2))
    curve += 0.3 * np.exp(-(((hour - 15.0) / 4.0) ** 2))
    return curve / curve.sum()


def traffic_profile(config: MarketConfig) -> np.ndarray:
    """Share of a day's traffic in each slot: :func:`diurnal_profile` mixed with a flat day by
    ``config.diurnal_traffic`` (1 = the day curve itself, computed as it is, so the default draws the same)."""
    if config.diurnal_traffic == 1.0:
        return diurnal_profile()
    return config.diurnal_traffic * diurnal_profile() + (1.0 - config.diurnal_traffic) / SLOTS_PER_DAY


def draw_regime(rng: np.random.Generator, family: RegimeFamily, config: MarketConfig) -> dict[str, Any]:
    """The day's latent regime and its slot-level paths (price offsets, traffic factors, shocks)."""
    level = rng.normal(family.price_level_mean, family.price_level_std)
    volatility = rng.uniform(*family.volatility)
    conversion_scale = float(np.exp(rng.normal(family.conversion_log_mean, family.conversion_log_std)))
    shock_rate = rng.uniform(*family.shock_rate)
    traffic_scale = rng.uniform(*family.traffic_scale)

    t = np.arange(SLOTS_PER_DAY)
    wave = config.diurnal_price_amplitude * np.sin(2 * np.pi * (t - 24) / SLOTS_PER_DAY)
    walk = np.cumsum(rng.normal(0.0, volatility, SLOTS_PER_DAY))
    log_price = level + wave + walk - walk.mean()
    traffic = np.ones(SLOTS_PER_DAY)
    shocks = []
    slot = 0
    while slot < SLOTS_PER_DAY:
        if rng.random() < shock_rate:
            length = int(rng.integers(1, config.shock_max_slots + 1))
            end = min(slot + length, SLOTS_PER_DAY)
            if rng.random() < 0.5:
                jump = rng.uniform(*config.price_spike)
                log_price[slot:end] += jump
                shocks.append({"kind": "price_spike", "start": slot, "end": end, "log_jump": round(float(jump), 4)})
            else:
                factor = rng.uniform(*config.outage_traffic)
                traffic[slot:end] *= factor
                shocks.append({"kind": "outage", "start": slot, "end": end, "traffic_factor": round(float(factor), 4)})
            slot = end
        else:
            slot += 1
    return {
        "price_level": round(float(level), 6),
        "price_volatility": round(float(volatility), 6),
        "conversion_scale": round(conversion_scale, 6),
        "shock_rate": round(float(shock_rate), 6),
        "traffic_scale": round(float(traffic_scale), 6),
        "shocks": shocks,
        "log_price_path": [round(float(x), 5) for x in log_price],
        "traffic_path": [round(float(x), 5) for x in traffic],
    }


def _float32_exact(x: np.ndarray) -> np.ndarray:
    """Round to float32 precision (kept as float64) so the Parquet files hold the values exactly."""
    return x.astype(np.float32).astype(np.float64)


TWIN_STREAM = 2
"""Third word of a twin day's seed (``[seed, day, TWIN_STREAM, twin]``); 1 is the paper recipe's constraint stream."""


def generate_day(day: int, ood: bool, config: MarketConfig) -> tuple[DayLog, dict[str, Any]]:
    """One day's impressions and its regime, from ``default_rng([seed, day])`` alone."""
    rng = np.random.default_rng([config.seed, day])
    regime = draw_regime(rng, config.ood_family if ood else config.id_family, config)
    return draw_impressions(day, rng, regime, config), regime


REGIME_PARTS: dict[str, tuple[str, ...]] = {
    "market": (
        "price_level",
        "price_volatility",
        "shock_rate",
        "shocks",
        "log_price_path",
        "traffic_scale",
        "traffic_path",
    ),
    "conversion": ("conversion_scale",),
}
"""A regime's fields by what reveals them: ``market`` (prices and traffic, read from auctions won and lost) and
``conversion`` (the conversion scale, read from deliveries alone)."""


def generate_twin(
    day: int, ood: bool, config: MarketConfig, twin: int, known: tuple[str, ...] = tuple(REGIME_PARTS)
) -> DayLog:
    """Day ``day``'s regime (its price path, conversion scale, traffic and shocks) with fresh impression draws.

    What a bidder told the day's regime, but not its luck, could plan on (``research/headroom.py``): the regime is
    drawn from the day's own stream, the impressions from ``default_rng([seed, day, TWIN_STREAM, twin])``. With
    ``known`` a subset of :data:`REGIME_PARTS`, only those parts are the day's; the others come from another
    regime of the same family, drawn first from the twin's stream.
    """
    unknown = set(known) - set(REGIME_PARTS)
    if unknown:
        raise ValueError(f"unknown regime parts {sorted(unknown)}; known: {', '.join(REGIME_PARTS)}")
    family = config.ood_family if ood else config.id_family
    regime = draw_regime(np.random.default_rng([config.seed, day]), family, config)
    rng = np.random.default_rng([config.seed, day, TWIN_STREAM, twin])
    if set(known) != set(REGIME_PARTS):
        kept = {field: regime[field] for part in known for field in REGIME_PARTS[part]}
        regime = draw_regime(rng, family, config) | kept
    return draw_impressions(day, rng, regime, config)


def draw_impressions(day: int, rng: np.random.Generator, regime: dict[str, Any], config: MarketConfig) -> DayLog:
    """A day's impressions under ``regime``: counts, values, predictions, conversions and prices from ``rng``."""
    expected = (
        config.impressions_per_day
        * regime["traffic_scale"]
        * traffic_profile(config)
        * np.array(regime["traffic_path"])
    )
    counts = rng.poisson(expected)
    n = int(counts.sum())
    slot = np.repeat(np.arange(SLOTS_PER_DAY), counts)

    value = config.value_scale * rng.lognormal(0.0, config.value_dispersion, n)
    predicted_cvr = np.minimum(config.base_cvr * rng.lognormal(0.0, config.cvr_dispersion, n), 0.5)
    utility = _float32_exact(value * predicted_cvr)
    utility = np.maximum(utility, np.float32(1e-9))  # float32 rounding must never reach 0
    if config.whole_conversions:
        unit = _float32_exact(np.asarray(config.value_scale, dtype=np.float64))
        rate = (value / config.value_scale) * predicted_cvr * regime["conversion_scale"]
        conversions = rng.poisson(rate * rng.lognormal(0.0, config.prediction_noise, n))
        delivery = _float32_exact(unit * conversions)
    else:
        true_cvr = np.minimum(
            predicted_cvr * regime["conversion_scale"] * rng.lognormal(0.0, config.prediction_noise, n), 1.0
        )
        delivery = _float32_exact(value * (rng.random(n) < true_cvr))

    reference_utility = config.value_scale * config.base_cvr  # median of value * predicted_cvr (both lognormal)
    relative = utility / reference_utility
    log_price = np.asarray(regime["log_price_path"])[slot]
    market_price = _float32_exact(
        config.price_markup
        * reference_utility
        * relative**config.price_utility_elasticity
        * np.exp(log_price + rng.normal(0.0, config.price_noise, n))
    )
    if config.utility_factor != 1.0:  # after the prices, which follow the value model's own utility
        utility = np.maximum(_float32_exact(utility * config.utility_factor), np.float32(1e-9))
    log = DayLog(
        day=day,
        utility=utility,
        market_price=market_price,
        delivery=delivery,
        cost=market_price,
        slot_offsets=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
    )
    return log


def split_of_days(config: MarketConfig) -> dict[int, str]:
    """ID days 0..days_id-1 split train/test by a seeded i.i.d. permutation; OOD days follow them."""
    rng = np.random.default_rng([config.seed, 2**31 - 1])
    order = rng.permutation(config.days_id)
    n_train = round(config.train_fraction * config.days_id)
    split = {int(d): ("train" if rank < n_train else "test") for rank, d in enumerate(order)}
    split.update({config.days_id + k: "ood" for k in range(config.days_ood)})
    return split


def _build_day(args: tuple[int, str, MarketConfig, str]) -> tuple[dict[str, Any], DayCurve]:
    """Write one day; return its manifest row and its constant-ratio curve.

    Under the ``paper`` recipe the row carries the day's constraints already (they read the day's own
    oracle); under ``prior`` they are placeholders that :func:`generate_market` fills in from the train days.
    """
    day, split, config, out = args
    log, regime = generate_day(day, split == "ood", config)
    index = DayIndex(log)
    curve = curve_of(index)
    if config.constraints.kind == "paper":
        drawn = draw_paper_constraints(index, np.random.default_rng([config.seed, day, 1]), config.constraints)
        mc = MCConstraints(roi_target=drawn.roi_target, budget=drawn.budget)
        regime.update(drawn.regime_fields())
    else:
        mc = MCConstraints(roi_target=float("nan"), budget=float("nan"))
    name = f"day_{day:03d}.parquet"
    write_day(log, Path(out) / name)
    entry = DayEntry(
        day=day,
        split=split,
        file=name,
        n_impressions=log.n_impressions,
        mc=mc,
        sha256=file_sha256(Path(out) / name),
        regime=regime,
    )
    return entry.to_dict(), curve


def min_days_id(train_fraction: float) -> int | None:
    """The fewest ID days whose split has at least one train and one test day (None: no count does)."""
    for n in range(2, 1001):
        n_train = round(train_fraction * n)
        if 1 <= n_train <= n - 1:
            return n
    return None


def check_config(config: MarketConfig) -> None:
    """Refuse a config that makes an unusable market (ValueError naming the minimum), before any day is drawn."""
    if config.days_id < 0 or config.days_ood < 0 or config.days_id + config.days_ood == 0:
        raise ValueError("need at least one day (days_id + days_ood > 0, both >= 0)")
    if config.impressions_per_day < SLOTS_PER_DAY:
        raise ValueError(f"impressions_per_day must be >= {SLOTS_PER_DAY}")
    if not 0.0 <= config.diurnal_traffic <= 1.0:
        raise ValueError(f"diurnal_traffic must be in [0, 1], not {config.diurnal_traffic}")
    if not (np.isfinite(config.utility_factor) and config.utility_factor > 0):
        raise ValueError(f"utility_factor must be a positive number, not {config.utility_factor}")
    if not config.value_scale > 0:
        raise ValueError(f"value_scale must be positive, not {config.value_scale}")
    n_train = round(config.train_fraction * config.days_id)
    if n_train < 1 or config.days_id - n_train < 1:
        least = min_days_id(config.train_fraction)
        minimum = f"days_id >= {least}" if least else "another train_fraction"
        raise ValueError(
            f"days_id = {config.days_id} splits into {n_train} train and {config.days_id - n_train} test days;"
            f" a market needs at least 1 train and 1 test day ({minimum} with train_fraction {config.train_fraction})"
        )


def generate_market(out: Path, config: MarketConfig, workers: int | None = None, progress=None) -> Market:
    """Write ``config``'s market into ``out`` (one Parquet per day + manifest.json); return it.

    ``progress`` is an optional callable invoked once per finished day.
    """
    check_config(config)
    # A market already there goes first, manifest before its days (as import does): an interrupted rewrite leaves
    # no manifest pointing at other files, and a rewrite with fewer days no stale day files.
    clear_market(out)
    splits = split_of_days(config)
    jobs = [(day, split, config, str(out)) for day, split in sorted(splits.items())]
    workers = workers or min(len(jobs), os.cpu_count() or 1)
    entries, curves = [], {}
    if workers <= 1:
        built = map(_build_day, jobs)
        for entry, curve in built:
            entries.append(entry)
            curves[entry["day"]] = curve
            if progress:
                progress()
    else:
        # spawn, not fork: a forked child inherits HiGHS's thread-pool state without its threads and
        # spins forever once the parent has solved an oracle (the paper recipe solves one per day).
        with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            for entry, curve in pool.map(_build_day, jobs):
                entries.append(entry)
                curves[entry["day"]] = curve
                if progress:
                    progress()
    if config.constraints.kind == "prior":
        drawn = draw_market_constraints(curves, splits, config.seed, config.constraints)
        for entry in entries:
            day = drawn[entry["day"]]
            entry["mc"] = asdict(MCConstraints(roi_target=day.roi_target, budget=day.budget))
            entry.setdefault("regime", {}).update(day.regime_fields())
    source = {"kind": "synthetic", "generator": "rcb.training.market.generator", "config": config.to_dict()}
    market = Market(root=out, days=[DayEntry.from_dict(e) for e in entries], source=source)
    market.save()
    return market


def config_with(**overrides: Any) -> MarketConfig:
    """The default config with some fields replaced (what the CLI passes)."""
    return replace(MarketConfig(), **overrides)
