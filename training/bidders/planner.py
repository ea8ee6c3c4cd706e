"""PLAN (a probe, issue 12): plan the rest of the day on the train days' market, updated by Bayes' rule each slot.

:mod:`training.conversion_bayes` showed that on the ``sparse`` market a bidder told the day's market and reading
its conversion scale from its own deliveries, re-planning every slot, gains far more over the PID than any
open-loop use of the whole regime. This bidder asks what is left of that without the told market: its only
model of a day is the **train days** (what the ad engine's logs hold), each a scenario ``d`` whose slot curves
(delivery and cost of bidding ratio ``r`` through slot ``t``) are exact replays. A day is modelled as scenario
``d`` with its competing prices scaled by ``p``, its conversions by ``s`` and its traffic by the ratio ``a`` of
the auctions seen to the scenario's; prices scaled by ``p`` make ratio ``r`` win what ``r / p`` won, at ``p``
times the cost, so on a log-spaced ratio grid ``p`` is a shift. Bayes' rule over ``(d, p, s)``:

* prior: ``d`` uniform over the train days, ``log p ~ N(0, price_sd)``, ``log s ~ N(0, conversion_sd)``;
* the market: each slot's cost against the scenario's cost at the ratio bid, log-normal with ``cost_sd``;
* the conversions: the day's delivery so far, ``N(s E, s E v)`` (``E`` the scenario's delivery at the ratios bid,
  ``v`` the train days' value dispersion ``E[value^2] / E[value]``: a sum of rare conversions).

Each slot it bids the ratio that, held for the rest of the day, has the most posterior-expected day delivery, a
``(d, p, s)`` counted only where the day's ROI (what was won plus what the scenario wins from here) reaches
``L (1 + margin)``. ``margin`` and ``cost_sd`` are tuned on the train days, each day played without its own
scenario. SC only. Run it beside the PID::

    python -m training.bidders.planner data/suite/sparse --split test --out out/plan/sparse-test
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar

import numpy as np
import pandas as pd
import typer

from model.contract import SLOTS_PER_DAY, Setting
from model.history import History, Registration
from training.bidders.base import Bidder, play
from training.bidders.tuning import episode_scores
from training.dayset import DaySet

LOW, HIGH = 0.02, 4.0
STEP = 0.02
"""Log step of the ratio grid."""
PRICE_STEPS, PRICE_SPAN = 4, 13
"""The price multiplier ``p = exp(k * PRICE_STEPS * STEP)``, ``|k| <= PRICE_SPAN``: 0.08 apart, +-1.04 in log."""
SHIFT = PRICE_STEPS * PRICE_SPAN
CORE = round(float(np.log(HIGH / LOW) / STEP)) + 1
GRID = LOW * np.exp((np.arange(CORE + 2 * SHIFT) - SHIFT) * STEP)
"""The scenario grid: the bid ratios ``LOW .. HIGH`` and ``SHIFT`` steps either side, for ``r / p``."""
DECIDE = np.arange(SHIFT, SHIFT + CORE - 1, 2)
"""Grid indices of the ratios it chooses among (0.04 apart in log, 0.02 .. 3.92)."""
PRICE_K = np.arange(-PRICE_SPAN, PRICE_SPAN + 1)
LOG_SCALES = np.linspace(-1.0, 1.0, 21)
PRICE_SD, CONVERSION_SD = 0.4, 0.3
PRUNE = 1e-5
"""``(d, p)`` pairs under this share of the heaviest are left out of the plan (their weight is negligible)."""


@dataclass(frozen=True)
class Scenarios:
    """The train days' slot curves on :data:`GRID`."""

    delivery: np.ndarray  # (D, T, X)
    cost: np.ndarray  # (D, T, X)
    auctions: np.ndarray  # (D, T)
    delivery_after: np.ndarray  # (D, T + 1, X): from slot t to the end of the day
    cost_after: np.ndarray
    value_dispersion: float
    cost_floor: float

    @classmethod
    def of(cls, days: DaySet) -> Scenarios:
        delivery, cost, auctions = [], [], []
        for index, log in zip(days.indexes(), days.logs, strict=True):
            curves = [index.slot_outcome(t, GRID) for t in range(SLOTS_PER_DAY)]
            delivery.append([c.delivery for c in curves])
            cost.append([c.cost for c in curves])
            auctions.append(np.diff(log.slot_offsets))
        d, c = np.asarray(delivery, dtype=np.float64), np.asarray(cost, dtype=np.float64)
        values = np.concatenate([log.delivery[log.delivery > 0] for log in days.logs])
        at_one = c[:, :, int(np.argmin(np.abs(GRID - 1.0)))]
        return cls(
            delivery=d,
            cost=c,
            auctions=np.asarray(auctions, dtype=np.float64),
            delivery_after=_after(d),
            cost_after=_after(c),
            value_dispersion=float((values**2).sum() / max(values.sum(), 1e-12)),
            cost_floor=max(0.01 * float(np.median(at_one)), 1e-12),
        )


def _after(x: np.ndarray) -> np.ndarray:
    tail = np.cumsum(x[:, ::-1], axis=1)[:, ::-1]
    return np.concatenate([tail, np.zeros_like(x[:, :1])], axis=1)


def grid_index(ratio: np.ndarray) -> np.ndarray:
    return (np.round(np.log(np.maximum(ratio, 1e-9) / LOW) / STEP).astype(int) + SHIFT).clip(SHIFT, SHIFT + CORE - 1)


class Planner(Bidder):
    """See the module docstring. Per episode: ``margin``, ``cost_sd``, and ``exclude`` (a scenario it may not use:
    the train day it plays while being tuned; -1 for none)."""

    name: ClassVar[str] = "plan"
    deterministic: ClassVar[bool] = True  # type: ignore[misc]

    def __init__(self, scenarios: Scenarios, margin: Any, cost_sd: Any, exclude: Any = -1):
        self.sc = scenarios
        self.margin, self.cost_sd, self.exclude = margin, cost_sd, exclude
        self.log_p = PRICE_K * PRICE_STEPS * STEP
        self.p = np.exp(self.log_p)
        self.s = np.exp(LOG_SCALES)

    def start(self, registration: Registration, seed: int) -> None:
        if np.isfinite(registration.budget).any():
            raise ValueError("the planner plays SC episodes only (no budget)")
        n, days = registration.n, self.sc.delivery.shape[0]
        self.margins = np.broadcast_to(np.asarray(self.margin, float), (n,))
        self.cost_sds = np.broadcast_to(np.asarray(self.cost_sd, float), (n,))
        excluded = np.broadcast_to(np.asarray(self.exclude, int), (n,))
        prior = -0.5 * (self.log_p / PRICE_SD) ** 2
        self.log_market = np.tile(prior, (n, days, 1))  # (n, D, P)
        for i, d in enumerate(excluded):
            if d >= 0:
                self.log_market[i, d] = -np.inf
        self.expected = np.zeros((n, days, self.p.size))  # delivery at scale 1 of the ratios bid
        self.auctions_seen = np.zeros((n, days))  # the scenario's auctions in the slots played
        self.log_prior_s = -0.5 * (LOG_SCALES / CONVERSION_SD) ** 2

    def _book(self, history: History) -> None:
        """Fold the slot just played into the market likelihood and the expected delivery."""
        t = history.slot - 1
        sc = self.sc
        at = grid_index(history.ratios[:, t])[:, None] - PRICE_K[None, :] * PRICE_STEPS  # (n, P)
        traffic = history.auctions[:, t][:, None] / np.maximum(sc.auctions[None, :, t], 1.0)  # (n, D)
        self.auctions_seen += sc.auctions[None, :, t]
        cost = sc.cost[:, t, :][:, at]  # (D, n, P)
        delivery = sc.delivery[:, t, :][:, at]
        cost = np.moveaxis(cost, 1, 0) * traffic[:, :, None] * self.p  # (n, D, P)
        delivery = np.moveaxis(delivery, 1, 0) * traffic[:, :, None]
        floor = sc.cost_floor
        residual = np.log(history.cost[:, t][:, None, None] + floor) - np.log(cost + floor)
        self.log_market += -0.5 * (residual / self.cost_sds[:, None, None]) ** 2
        self.expected += delivery

    def bid(self, history: History) -> np.ndarray:
        if history.slot > 0:
            self._book(history)
        t, sc = history.slot, self.sc
        delivered, spent = history.total_delivery, history.total_cost
        seen = history.auctions[:, :t].sum(axis=1)
        target = history.registration.roi_target * (1.0 + self.margins)
        out = np.empty(history.n)
        for i in range(history.n):
            expected = self.expected[i][:, :, None] * self.s  # (D, P, S)
            spread = expected * sc.value_dispersion + (0.05 * expected) ** 2 + 1e-12
            log_w = self.log_market[i][:, :, None] + self.log_prior_s
            log_w = log_w + np.where(
                expected > 0, -0.5 * (delivered[i] - expected) ** 2 / spread - 0.5 * np.log(spread), 0.0
            )
            w = np.exp(log_w - log_w.max())
            pair = w.sum(axis=2)
            d_idx, k_idx = np.nonzero(pair >= PRUNE * pair.max())
            traffic = np.where(t > 0, seen[i] / np.maximum(self.auctions_seen[i, d_idx], 1.0), 1.0)  # (Q,)
            cols = DECIDE[None, :] - PRICE_K[k_idx][:, None] * PRICE_STEPS  # (Q, J)
            rest_d = sc.delivery_after[d_idx, t][np.arange(d_idx.size)[:, None], cols] * traffic[:, None]
            rest_c = sc.cost_after[d_idx, t][np.arange(d_idx.size)[:, None], cols] * (traffic * self.p[k_idx])[:, None]
            day_d = delivered[i] + self.s[None, :, None] * rest_d[:, None, :]  # (Q, S, J)
            day_c = spent[i] + rest_c[:, None, :]
            counted = np.where((day_d >= target[i] * day_c) & (day_d > 0), day_d, 0.0)
            value = np.einsum("qsj,qs->j", counted, w[d_idx, k_idx])
            out[i] = GRID[DECIDE[int(np.argmax(value))]]
        return out


MARGINS = (0.0, 0.05, 0.1, 0.2)
COST_SDS = (0.15, 0.3, 0.6)


def tune(train: DaySet, scenarios: Scenarios) -> tuple[dict[str, float], float]:
    """``margin`` and ``cost_sd`` with the best mean train score, each train day played without its own scenario."""
    grid = [(m, s) for m in MARGINS for s in COST_SDS]
    n = len(train)
    bidder = Planner(
        scenarios,
        margin=np.repeat([m for m, _ in grid], n),
        cost_sd=np.repeat([s for _, s in grid], n),
        exclude=np.tile(np.arange(n), len(grid)),
    )
    outcome = play(bidder, train.indexes(), train.episode_days(len(grid)), train.registration(len(grid)), 0)
    scores = episode_scores(outcome.delivery, outcome.cost, train, len(grid)).reshape(len(grid), n).mean(axis=1)
    best = int(np.argmax(scores))
    return {"margin": grid[best][0], "cost_sd": grid[best][1]}, float(scores[best])


def main(
    data: Annotated[Path, typer.Argument(help="A market directory.")],
    split: Annotated[str, typer.Option(help="test, ood or validation days to play.")] = "test",
    out: Annotated[Path | None, typer.Option(help="Folder for plan.json and episodes.csv.")] = None,
) -> None:
    from training.evaluate import episode_rows, split_days, summarize, tuned_baseline
    from training.market.dataset import Market

    market = Market.open(data)
    days, train = split_days(market, split, Setting.SC)
    train_days = train()
    scenarios = Scenarios.of(train_days)
    params, train_score = tune(train_days, scenarios)
    typer.echo(f"tuned on {len(train_days)} train days: {params} (train score {train_score:.3f})")
    pid, _ = tuned_baseline(market, "pid", Setting.SC, train)
    frames = []
    for label, bidder in (("pid", pid), ("plan", Planner(scenarios, **params))):
        outcome = play(bidder, days.indexes(), days.episode_days(1), days.registration(1), 0)
        frames.append(episode_rows(label, 0, days, outcome.delivery, outcome.cost))
    for m in MARGINS:  # the whole margin frontier, for reading (not a choice)
        outcome = play(
            Planner(scenarios, m, params["cost_sd"]), days.indexes(), days.episode_days(1), days.registration(1), 0
        )
        frames.append(episode_rows(f"plan@{m:g}", 0, days, outcome.delivery, outcome.cost))
    episodes = pd.concat(frames, ignore_index=True)
    summary = summarize(episodes, list(dict.fromkeys(episodes["method"])))
    for label, row in summary.items():
        typer.echo(f"| {label} | {row['ans_median']:.3f} | {row['csr']:.3f} |")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        episodes.to_csv(out / "episodes.csv", index=False)
        (out / "plan.json").write_text(
            json.dumps({"params": params, "train_score": train_score, "summary": summary}, indent=1, default=float)
        )


if __name__ == "__main__":
    typer.run(main)

