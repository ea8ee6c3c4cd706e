"""A second-price auction market against a population of pacing bidders (``rcb market simulate-auction``).

The generator (:mod:`training.market.generator`) draws prices from a fixed process around the utility. Here the
price our campaign faces is made by other bidders, each with its own budget and ROI target, pacing slot by slot
from its own spend, so prices respond to how the competition paces (budgets running out, a busy morning
spending ahead of plan) rather than to a drawn path:

* **Impressions** arrive Poisson in every 30-minute slot around a day curve (:func:`diurnal_profile`), scaled by
  the day's traffic. Each has latent features ``z`` (``latent_dims`` standard normals) that every bidder reads
  through its own loadings: its conversion rate is ``cvr_k * exp(z . w_k + cvr_dispersion * eps_k)``, mean-one
  normalized (capped at 0.9). The first feature is shared intent that every bidder's loading leans on, so the
  impressions our campaign values most tend to be the contested ones.
* **Competitors** ``k = 1..agents`` have a value per conversion ``V_k``, a ROI target ``L_k``, a daily budget
  ``B_k`` and a pacing gain, drawn once per seed (the population); a day redraws who takes part and how much
  budget each brings. A competitor bids ``alpha_k * V_k * cvr_ik``. ``B_k`` is ``budget_share`` times what it
  spends in a day of bidding ``V_k * cvr_ik / L_k`` without a budget, and a day starts from the multipliers a
  day of pacing ends with (:func:`draw_population`).
* **Pacing**: after every slot a competitor compares its spend with its plan (the budget spread over the day by
  the traffic curve) and its realized ROI (conversion value over spend, with a small prior spend at a ROI above
  target) with ``L_k``, and moves ``log alpha_k`` by its gain times the tighter of the two errors
  (:func:`pace`): spending ahead of plan or below the ROI target lowers the bid, behind plan and above target
  raises it. A competitor stops at the first win that would take it over its budget, and is out for the day.
* **The auction** is second price with a reserve: the highest competing bid wins and pays the larger of the
  second-highest bid and the reserve. The price our campaign faces is the highest competing bid (or the reserve
  where it is higher): ``market_price``, with ``cost = market_price`` (what a win pays at second price).
* **Our campaign** does not move the market (the logs are replayed offline): its utility is its predicted value
  ``conversion_value * cvr_i0 * exp(prediction_noise * xi)`` (mean-one noise), its delivery
  ``conversion_value * Poisson(cvr_i0)`` conversions: sparse whole counts.

Logs are written in the project's schema (docs/data-schema.md: ``day, slot, utility, market_price, delivery,
cost``), one or many days per Parquet or CSV file, with ``expected_delivery`` (``conversion_value * cvr_i0``)
beside them, so ``rcb market import --format rcb`` reads them like any logs. ``auction.json`` beside the logs
holds the config and what each day's competition did (for analysis, not a log file).

Determinism: the population is ``default_rng([seed, POPULATION_STREAM])``'s, day ``d``
``default_rng([seed, d])``'s alone, so a day is the same whatever the number of days.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from model.contract import SLOTS_PER_DAY
from training.files import atomic_write, atomic_write_text
from training.market.generator import diurnal_profile
from training.market.schema import DayLog

POPULATION_STREAM = 0xA0C7
"""Second word of the population's seed (``default_rng([seed, POPULATION_STREAM])``)."""

LOG_FORMATS = ("parquet", "csv")
DESCRIPTION = "auction.json"
"""The file beside the logs that describes the run (its config and per-day competition); not a log."""


@dataclass(frozen=True)
class AuctionConfig:
    """Everything that shapes an auction market. Money is in units of our campaign's ``conversion_value``."""

    days: int = 10
    impressions_per_day: int = 200_000
    """Expected impressions of a day at traffic scale 1 (counts are Poisson)."""
    agents: int = 30
    """Competing bidders in the population (at least 2)."""
    seed: int = 0
    latent_dims: int = 4
    """Latent features of an impression that every bidder's conversion rate reads."""
    shared_intent: float = 1.0
    """How much every bidder's loading leans on the first latent feature (0: tastes independent)."""
    taste: tuple[float, float] = (0.4, 1.0)
    """Range of the norm of a bidder's loading (how much the features move its conversion rate)."""
    cvr_dispersion: float = 0.5
    """Log-std of the idiosyncratic part of every bidder's conversion rate."""
    conversion_value: float = 1.0
    """Our campaign's value of one conversion."""
    campaign_cvr: float = 0.01
    """Our campaign's mean conversion rate."""
    prediction_noise: float = 0.3
    """Log-std of the error of our campaign's value prediction (mean-one)."""
    competitor_cvr: tuple[float, float] = (0.005, 0.02)
    """Range of the competitors' mean conversion rates (log-uniform)."""
    competitor_value: tuple[float, float] = (0.6, 2.0)
    """Range of the competitors' value per conversion, in units of ours (log-uniform)."""
    roi_target: tuple[float, float] = (0.8, 1.6)
    """Range of the competitors' ROI targets."""
    budget_share: tuple[float, float] = (0.2, 2.0)
    """Range of a competitor's budget over what it spends in a day of bidding ``value / target`` without one
    (log-uniform): below 1 the budget tends to bind, above it the ROI target does."""
    pacing_gain: tuple[float, float] = (0.1, 0.5)
    """Range of the competitors' pacing gains (log-multiplier step per unit of error, per slot)."""
    participation: float = 0.9
    """Chance that a competitor takes part on a day."""
    budget_day_std: float = 0.25
    """Log-std of a competitor's budget from day to day."""
    traffic_scale: tuple[float, float] = (0.85, 1.15)
    """Range of a day's traffic multiplier (the competitors plan on 1)."""
    reserve: float = 0.2
    """Reserve price, in units of our campaign's mean value per impression (``conversion_value * campaign_cvr``)."""

    def __post_init__(self) -> None:
        if self.days < 1:
            raise ValueError(f"days must be >= 1, not {self.days}")
        if self.agents < 2:
            raise ValueError(f"agents must be >= 2 (a second price needs two bidders), not {self.agents}")
        if self.impressions_per_day < SLOTS_PER_DAY:
            raise ValueError(f"impressions_per_day must be >= {SLOTS_PER_DAY}, not {self.impressions_per_day}")
        if self.latent_dims < 1:
            raise ValueError(f"latent_dims must be >= 1, not {self.latent_dims}")
        if not self.conversion_value > 0 or not 0 < self.campaign_cvr < 1:
            raise ValueError("conversion_value must be > 0 and campaign_cvr in (0, 1)")
        if not 0 < self.participation <= 1:
            raise ValueError(f"participation must be in (0, 1], not {self.participation}")
        if self.reserve < 0:
            raise ValueError(f"reserve must be >= 0, not {self.reserve}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Population:
    """The competitors' lasting traits (arrays over the agents) and every bidder's loading (column 0: ours)."""

    cvr: np.ndarray
    value: np.ndarray
    roi_target: np.ndarray
    budget: np.ndarray
    """Daily budget before the day's own draw."""
    gain: np.ndarray
    initial_multiplier: np.ndarray
    """The multiplier a competitor starts a day with (where it ended a warm-up day: yesterday's)."""
    loadings: np.ndarray
    """``(latent_dims, agents + 1)``."""


def _log_uniform(rng: np.random.Generator, bounds: tuple[float, float], n: int) -> np.ndarray:
    return np.exp(rng.uniform(math.log(bounds[0]), math.log(bounds[1]), n))


CALIBRATION_IMPRESSIONS = 40_000
"""Impressions of the two calibration days of a population (budgets and starting multipliers scale to the real
traffic)."""


def draw_population(config: AuctionConfig) -> Population:
    """The population of ``config.seed``, from ``default_rng([seed, POPULATION_STREAM])`` (its traits) and
    ``default_rng([seed, POPULATION_STREAM, j])`` (its two calibration days) alone.

    A competitor's budget is ``budget_share`` times what it spends in a day of bidding ``value / target`` without
    a budget (the first calibration day); its starting multiplier is where it ends a day of pacing to that budget
    (the second), as a bidder starts a day from yesterday's multiplier.
    """
    rng = np.random.default_rng([config.seed, POPULATION_STREAM])
    k = config.agents
    cvr = _log_uniform(rng, config.competitor_cvr, k)
    value = config.conversion_value * _log_uniform(rng, config.competitor_value, k)
    roi_target = rng.uniform(*config.roi_target, k)
    share = _log_uniform(rng, config.budget_share, k)
    gain = _log_uniform(rng, config.pacing_gain, k)
    direction = rng.standard_normal((config.latent_dims, k + 1))
    direction[0] += config.shared_intent
    norm = rng.uniform(*config.taste, k + 1)
    loadings = direction / np.linalg.norm(direction, axis=0) * norm
    truthful = 1.0 / roi_target
    unbounded = Population(cvr, value, roi_target, np.full(k, np.inf), gain, truthful, loadings)
    scale = config.impressions_per_day / min(config.impressions_per_day, CALIBRATION_IMPRESSIONS)
    free = _simulate(
        np.random.default_rng([config.seed, POPULATION_STREAM, 1]),
        config,
        unbounded,
        impressions=config.impressions_per_day / scale,
        present=np.ones(k, dtype=bool),
        budget=np.full(k, np.inf),
        multiplier=truthful,
        traffic=1.0,
        pacing=False,
    )
    unconstrained = free.spend[-1] * scale
    floor = float(np.min(unconstrained[unconstrained > 0], initial=1.0))
    budget = share * np.maximum(unconstrained, floor)
    warm = _simulate(
        np.random.default_rng([config.seed, POPULATION_STREAM, 2]),
        config,
        replace(unbounded, budget=budget),
        impressions=config.impressions_per_day / scale,
        present=np.ones(k, dtype=bool),
        budget=budget / scale,
        multiplier=truthful,
        traffic=1.0,
        pacing=True,
    )
    return replace(unbounded, budget=budget, initial_multiplier=warm.multiplier[-1])


@dataclass(frozen=True)
class SlotAuction:
    """One slot's auctions: per impression the price our campaign faces (highest competing bid or the reserve),
    the winning competitor (-1: unsold) and what it pays; per competitor whether it bid to the end of the slot."""

    market_price: np.ndarray
    winner: np.ndarray
    cost: np.ndarray
    stopped_at: np.ndarray
    """Per competitor, the first impression of the slot it no longer bids on (n: bid on all)."""


def run_auctions(bids: np.ndarray, reserve: float, remaining: np.ndarray) -> SlotAuction:
    """Second-price auctions with a reserve over ``bids`` ``(impressions, competitors)`` in arrival order.

    A competitor bids until its next win would take its spend over ``remaining``: from that impression on its bid
    is withdrawn and the slot's auctions are re-run, until no competitor's stop moves (each re-run can only move
    stops earlier, so it ends).
    """
    n, k = bids.shape
    stopped_at = np.full(k, n, dtype=np.int64)
    arrival = np.arange(n)[:, None]
    for _ in range(k + 1):
        live = np.where(arrival < stopped_at[None, :], bids, 0.0)
        winner = np.argmax(live, axis=1) if k else np.zeros(n, dtype=np.int64)
        high = live[np.arange(n), winner]
        second = np.partition(live, k - 2, axis=1)[:, k - 2] if n else np.zeros(0)
        sold = high > reserve
        cost = np.where(sold, np.maximum(second, reserve), 0.0)
        paid = np.zeros((n, k))
        paid[np.arange(n)[sold], winner[sold]] = cost[sold]
        over = np.cumsum(paid, axis=0) > remaining[None, :]
        first_over = np.where(over.any(axis=0), np.argmax(over, axis=0), n)
        moved = first_over < stopped_at
        if not moved.any():
            break
        stopped_at = np.minimum(stopped_at, first_over)
    return SlotAuction(
        market_price=np.maximum(high, reserve),
        winner=np.where(sold, winner, -1),
        cost=cost,
        stopped_at=stopped_at,
    )


PRIOR_ROI = 1.25
"""A competitor's ROI before it has spent, over its target (:func:`pace`)."""


def pace(
    multiplier: np.ndarray,
    spend: np.ndarray,
    planned: np.ndarray,
    won_value: np.ndarray,
    budget: np.ndarray,
    roi_target: np.ndarray,
    gain: np.ndarray,
) -> np.ndarray:
    """Every competitor's next bid multiplier from its own spend so far.

    Budget error ``log(spend / planned)`` and ROI error ``log(roi / target)``, both softened: half a slot's share
    of the budget added to spend and plan, and a prior spend of 5% of the budget at ROI ``PRIOR_ROI`` x target
    (optimistic, so a competitor that has not won yet raises its bid while behind plan). Then
    ``log multiplier += gain * min(-budget error, ROI error)``: the tighter constraint steers. Spending ahead of
    plan, or below the ROI target, lowers the multiplier. Kept within ``[0.05, 20] / target``.
    """
    slack = 0.5 * budget / SLOTS_PER_DAY
    budget_error = np.log((spend + slack) / (planned + slack))
    prior = 0.05 * budget
    roi = (won_value + PRIOR_ROI * roi_target * prior) / (spend + prior)
    roi_error = np.log(roi / roi_target)
    step = gain * np.minimum(-budget_error, roi_error)
    return np.clip(multiplier * np.exp(step), 0.05 / roi_target, 20.0 / roi_target)


@dataclass(frozen=True)
class AuctionDay:
    """One simulated day: our campaign's log and what the competition did."""

    log: DayLog
    expected_delivery: np.ndarray
    """``conversion_value * cvr_i0``: our campaign's true expected delivery of each impression."""
    multiplier: np.ndarray
    """``(SLOTS_PER_DAY + 1, agents)``: every competitor's bid multiplier before each slot, and after the last."""
    spend: np.ndarray
    """``(SLOTS_PER_DAY, agents)``: cumulative spend after each slot."""
    planned: np.ndarray
    """``(SLOTS_PER_DAY, agents)``: the planned cumulative spend after each slot."""
    budget: np.ndarray
    won_value: np.ndarray
    """Per competitor, the value of its conversions over the day."""
    present: np.ndarray
    out_slot: np.ndarray
    """Per competitor, the slot in which its budget stopped it (``SLOTS_PER_DAY``: it bid all day)."""
    traffic_scale: float

    def summary(self) -> dict[str, Any]:
        """What the day's competition did (``auction.json``)."""
        present = self.present
        spent = self.spend[-1][present]
        budget = self.budget[present]
        return {
            "day": self.log.day,
            "impressions": self.log.n_impressions,
            "traffic_scale": round(self.traffic_scale, 4),
            "competitors": int(present.sum()),
            "budget_exhausted": int(np.sum(self.out_slot[present] < SLOTS_PER_DAY)),
            "spend_over_budget": round(float(spent.sum() / budget.sum()), 4),
            "median_multiplier_start_end": [
                round(float(np.median(self.multiplier[0][present])), 4),
                round(float(np.median(self.multiplier[-1][present])), 4),
            ],
            "deliveries": int(np.count_nonzero(self.log.delivery)),
            "median_market_price": round(float(np.median(self.log.market_price)), 6),
        }


def _f32(x: np.ndarray) -> np.ndarray:
    """Round to float32 precision (kept as float64): the files hold the values exactly."""
    return x.astype(np.float32).astype(np.float64)


@dataclass(frozen=True)
class _Run:
    log: DayLog
    expected_delivery: np.ndarray
    multiplier: np.ndarray
    spend: np.ndarray
    planned: np.ndarray
    won_value: np.ndarray
    out_slot: np.ndarray


def _simulate(
    rng: np.random.Generator,
    config: AuctionConfig,
    pop: Population,
    impressions: float,
    present: np.ndarray,
    budget: np.ndarray,
    multiplier: np.ndarray,
    traffic: float,
    pacing: bool,
    day: int = 0,
) -> _Run:
    """A day of auctions: ``impressions`` expected at traffic scale 1, the competitors ``present`` with these
    budgets and starting multipliers (held fixed without ``pacing``)."""
    k = config.agents
    profile = diurnal_profile()
    counts = rng.poisson(impressions * traffic * profile)
    planned_share = np.cumsum(profile)
    log_cvr = np.log(np.concatenate([[config.campaign_cvr], pop.cvr]))
    # mean-one normalisation of exp(z . w + dispersion * eps) for each bidder
    centre = -0.5 * (np.sum(pop.loadings**2, axis=0) + config.cvr_dispersion**2)
    reserve = config.reserve * config.conversion_value * config.campaign_cvr
    noise = config.prediction_noise

    spend = np.zeros(k)
    out_slot = np.full(k, SLOTS_PER_DAY)
    won_value = np.zeros(k)
    trace_multiplier = np.empty((SLOTS_PER_DAY + 1, k))
    trace_spend = np.empty((SLOTS_PER_DAY, k))
    utility, price, delivery, expected = [], [], [], []
    for t in range(SLOTS_PER_DAY):
        trace_multiplier[t] = multiplier
        n = int(counts[t])
        z = rng.standard_normal((n, config.latent_dims))
        spread = config.cvr_dispersion * rng.standard_normal((n, k + 1))
        cvr = np.minimum(np.exp(log_cvr + centre + z @ pop.loadings + spread), 0.9)
        bidding = present & (out_slot == SLOTS_PER_DAY)
        bids = np.where(bidding, multiplier * pop.value * cvr[:, 1:], 0.0)
        auction = run_auctions(bids, reserve, np.where(bidding, budget - spend, 0.0))
        sold = auction.winner >= 0
        converted = np.zeros(n, dtype=bool)
        converted[sold] = rng.random(int(sold.sum())) < cvr[np.flatnonzero(sold), 1 + auction.winner[sold]]
        np.add.at(spend, auction.winner[sold], auction.cost[sold])
        out_slot = np.where((auction.stopped_at < n) & (out_slot == SLOTS_PER_DAY), t, out_slot)
        np.add.at(won_value, auction.winner[converted], pop.value[auction.winner[converted]])
        trace_spend[t] = spend

        ours = config.conversion_value * cvr[:, 0]
        utility.append(ours * np.exp(noise * rng.standard_normal(n) - 0.5 * noise**2))
        expected.append(ours)
        delivery.append(config.conversion_value * rng.poisson(cvr[:, 0]))
        price.append(auction.market_price)
        if pacing:  # a competitor out of budget is out for the day: its multiplier stays where it ran out
            paced = pace(multiplier, spend, budget * planned_share[t], won_value, budget, pop.roi_target, pop.gain)
            multiplier = np.where(out_slot == SLOTS_PER_DAY, paced, multiplier)
    trace_multiplier[SLOTS_PER_DAY] = multiplier
    market_price = _f32(np.concatenate(price))
    log = DayLog(
        day=day,
        utility=np.maximum(_f32(np.concatenate(utility)), np.float32(1e-9)),
        market_price=market_price,
        delivery=_f32(np.concatenate(delivery)),
        cost=market_price,
        slot_offsets=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
    )
    return _Run(
        log=log,
        expected_delivery=_f32(np.concatenate(expected)),
        multiplier=trace_multiplier,
        spend=trace_spend,
        planned=budget[None, :] * planned_share[:, None],
        won_value=won_value,
        out_slot=out_slot,
    )


def simulate_day(day: int, config: AuctionConfig, population: Population | None = None) -> AuctionDay:
    """Day ``day`` of ``config``'s market, from ``default_rng([seed, day])`` and the population alone."""
    pop = population or draw_population(config)
    rng = np.random.default_rng([config.seed, day])
    k = config.agents
    traffic = float(rng.uniform(*config.traffic_scale))
    present = rng.random(k) < config.participation
    budget = pop.budget * np.exp(rng.normal(0.0, config.budget_day_std, k))
    multiplier = pop.initial_multiplier * np.exp(rng.normal(0.0, 0.1, k))
    run = _simulate(
        rng,
        config,
        pop,
        impressions=config.impressions_per_day,
        present=present,
        budget=budget,
        multiplier=multiplier,
        traffic=traffic,
        pacing=True,
        day=day,
    )
    return AuctionDay(
        log=run.log,
        expected_delivery=run.expected_delivery,
        multiplier=run.multiplier,
        spend=run.spend,
        planned=run.planned,
        budget=budget,
        won_value=run.won_value,
        present=present,
        out_slot=run.out_slot,
        traffic_scale=traffic,
    )


def simulate(config: AuctionConfig) -> Iterator[AuctionDay]:
    """Days ``0 .. days - 1`` in order."""
    population = draw_population(config)
    for day in range(config.days):
        yield simulate_day(day, config, population)


def day_frame(day: AuctionDay) -> pd.DataFrame:
    """The day's rows in the log schema, with ``expected_delivery`` beside them."""
    frame = day.log.to_frame()
    frame["expected_delivery"] = day.expected_delivery
    return frame


def log_file_name(first: int, last: int, fmt: str) -> str:
    suffix = ".parquet" if fmt == "parquet" else ".csv"
    return f"auction_day_{first:03d}{suffix}" if first == last else f"auction_days_{first:03d}-{last:03d}{suffix}"


def write_logs(
    out: Path, config: AuctionConfig, days_per_file: int = 1, fmt: str = "parquet", progress=None
) -> dict[str, Any]:
    """Simulate ``config`` and write its logs into ``out`` (``days_per_file`` days a file, Parquet or CSV) and
    :data:`DESCRIPTION`; return the description. ``progress`` is called once per simulated day."""
    if fmt not in LOG_FORMATS:
        raise ValueError(f"unknown log format {fmt!r}; known: {', '.join(LOG_FORMATS)}")
    if days_per_file < 1:
        raise ValueError(f"days_per_file must be >= 1, not {days_per_file}")
    out.mkdir(parents=True, exist_ok=True)
    files: list[str] = []
    days: list[dict[str, Any]] = []
    batch: list[AuctionDay] = []

    def flush() -> None:
        name = log_file_name(batch[0].log.day, batch[-1].log.day, fmt)
        frame = pd.concat([day_frame(d) for d in batch], ignore_index=True)
        if fmt == "parquet":
            atomic_write(out / name, lambda tmp: frame.to_parquet(tmp, index=False, compression="zstd"))
        else:
            atomic_write(out / name, lambda tmp: frame.to_csv(tmp, index=False, float_format="%.9g"))
        files.append(name)
        batch.clear()

    for day in simulate(config):
        batch.append(day)
        days.append(day.summary())
        if len(batch) == days_per_file:
            flush()
        if progress:
            progress()
    if batch:
        flush()
    description = {"kind": "auction", "config": config.to_dict(), "files": files, "days": days}
    atomic_write_text(out / DESCRIPTION, json.dumps(description, indent=1) + "\n")
    return description
