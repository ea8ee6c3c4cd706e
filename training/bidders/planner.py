"""PLAN: the train days as scenarios of the day, Bayes' rule each slot, the rest of the day planned.

The law is :func:`model.planner.plan` (numpy, stateless: what the service could run); this module builds its
scenarios from the train days (:func:`scenarios_of`), tunes its ``margin`` and ``cost_sd`` on those days, each
played without its own scenario (:func:`tune`), and plays it offline (:class:`Planner`). ``rcb evaluate`` plays it
as ``plan``; ``python -m research.planner_evidence`` plays it beside the PID with its margin frontier.

It comes from :mod:`research.conversion_bayes`: on the ``sparse`` market a bidder told the day's market and reading
its conversion scale from its own deliveries, re-planning every slot, gains far more over the PID than any
open-loop use of the whole regime; this is the same plan with the train days in place of the told market.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from model.history import History
from model.planner import GRID, Depth, Scenarios, plan_and_depth
from training.bidders.base import Bidder, play
from training.bidders.tuning import episode_scores
from training.replay.dayset import DaySet
from training.replay.oracle.oracles import slot_curves


def scenarios_of(days: DaySet) -> Scenarios:
    """The days' slot curves on :data:`model.planner.GRID` (exact replays), auctions and value dispersion."""
    curves = [slot_curves(index, GRID) for index in days.indexes()]
    d, c = np.stack([x for x, _ in curves]), np.stack([x for _, x in curves])
    auctions = [np.diff(log.slot_offsets) for log in days.logs]
    values = np.concatenate([log.delivery[log.delivery > 0] for log in days.logs])
    at_one = c[:, :, int(np.argmin(np.abs(GRID - 1.0)))]
    return Scenarios(
        delivery=d,
        cost=c,
        auctions=np.asarray(auctions, dtype=np.float64),
        value_dispersion=float((values**2).sum() / max(values.sum(), 1e-12)),
        cost_floor=cost_floor(at_one, c),
    )


def cost_floor(at_one: np.ndarray, cost: np.ndarray) -> float:
    """1% of the median slot cost at ratio 1; of the median positive slot cost where that median is 0 (a market
    that wins little at 1: a floor of ~0 would make a slot that won nothing weigh thousands of nats)."""
    median = float(np.median(at_one))
    if median <= 0:
        positive = cost[cost > 0]
        median = float(np.median(positive)) if positive.size else 0.0
    return 0.01 * median


class Planner(Bidder):
    """:func:`model.planner.plan` as an offline bidder; per episode ``margin``, ``cost_sd`` and ``exclude``."""

    name: ClassVar[str] = "plan"
    deterministic: ClassVar[bool] = True  # type: ignore[misc]

    def __init__(
        self,
        scenarios: Scenarios,
        margin: float | np.ndarray,
        cost_sd: float | np.ndarray,
        exclude: int | np.ndarray = -1,
        noise_aware: bool | np.ndarray = False,
    ):
        self.scenarios, self.margin, self.cost_sd, self.exclude = scenarios, margin, cost_sd, exclude
        self.noise_aware = noise_aware

    def bid(self, history: History) -> np.ndarray:
        return self.decide(history)[0]

    def decide(self, history: History) -> tuple[np.ndarray, Depth]:
        """:meth:`bid`'s ratios and the signs of the planner's depth behind them (:func:`plan_and_depth`)."""
        return plan_and_depth(self.scenarios, history, self.margin, self.cost_sd, self.exclude, self.noise_aware)

    def params(self) -> dict[str, Any]:
        """The tuned parameters of a planner that has one of each (not of a tuning batch's per-episode arrays)."""
        if np.ndim(self.margin) or np.ndim(self.cost_sd) or np.ndim(self.noise_aware):
            raise ValueError("a planner with per-episode parameters has no single set of them")
        out = {"margin": float(self.margin), "cost_sd": float(self.cost_sd)}
        if np.any(self.noise_aware):  # (plan's tuned form has none; the probe's --noise-aware may)
            out["noise_aware"] = True
        return out


class _DepthRecorder(Planner):
    """The planner, keeping the signs of its depth (:class:`model.planner.Depth`) at every slot after the first."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.edge: list[np.ndarray] = []
        self.misfit: list[np.ndarray] = []

    def bid(self, history: History) -> np.ndarray:
        ratio, depth = self.decide(history)
        if history.slot > 0:
            self.edge.append(depth.edge)
            self.misfit.append(depth.misfit)
        return ratio


def train_depth(planner: Planner, train: DaySet) -> tuple[np.ndarray, np.ndarray]:
    """Edge mass and misfit ``(slots 1..47, days)`` of the train days, each played without its own scenario with
    ``planner``'s parameters: what :func:`model.planner.calibrated_alerts` reads."""
    recorder = _DepthRecorder(
        planner.scenarios,
        planner.margin,
        planner.cost_sd,
        exclude=np.arange(len(train)),
        noise_aware=planner.noise_aware,
    )
    play(recorder, train.indexes(), train.episode_days(1), train.registration(1), 0)
    return np.array(recorder.edge), np.array(recorder.misfit)


def without_own_days(bidder: Planner, train_rows: np.ndarray) -> Planner:
    """``bidder`` to play train days, episode ``k`` being train day ``train_rows[k]``: each without its own scenario
    (leave-one-out, as in tuning), so a train or validation score is not in-sample. Its margin and cost sd were still
    tuned on all train days (two numbers chosen among twelve)."""
    return Planner(bidder.scenarios, bidder.margin, bidder.cost_sd, exclude=train_rows, noise_aware=bidder.noise_aware)


TUNER_VERSION = "2"
"""Part of the tuning-cache key (:func:`training.bidders.tuned.tuning_key`), bumped when the planner's likelihood
changes: 2 is the compound-Poisson delivery fit."""
MARGINS = (0.0, 0.05, 0.1, 0.2)
COST_SDS = (0.15, 0.3, 0.6)


def tune_on(
    train: DaySet, scenarios: Scenarios, noise_options: tuple[bool, ...] = (False,)
) -> tuple[dict[str, Any], float, dict[tuple[float, float, bool], float]]:
    """``margin`` and ``cost_sd`` (and ``noise_aware`` among ``noise_options``) with the best mean train score, each
    train day played without its own scenario; also every candidate's score."""
    n = len(train)
    if n < 2:
        raise ValueError(f"the planner tunes on at least 2 train days (each is played without its own); got {n}")
    grid = [(m, s, a) for a in noise_options for m in MARGINS for s in COST_SDS]
    bidder = Planner(
        scenarios,
        margin=np.repeat([m for m, _, _ in grid], n),
        cost_sd=np.repeat([s for _, s, _ in grid], n),
        exclude=np.tile(np.arange(n), len(grid)),
        noise_aware=np.repeat([a for _, _, a in grid], n),
    )
    outcome = play(bidder, train.indexes(), train.episode_days(len(grid)), train.registration(len(grid)), 0)
    scores = episode_scores(outcome.delivery, outcome.cost, train, len(grid)).reshape(len(grid), n).mean(axis=1)
    best = int(np.argmax(scores))
    m, s, a = grid[best]
    params: dict[str, Any] = {"margin": m, "cost_sd": s} | ({"noise_aware": True} if a else {})
    return params, float(scores[best]), {c: float(x) for c, x in zip(grid, scores, strict=True)}


def tune(train: DaySet, seed: int = 0, progress: Callable[[str], None] | None = None) -> tuple[Planner, float]:
    """The planner on the train days' scenarios, its parameters tuned there (deterministic: ``seed`` unused)."""
    scenarios = scenarios_of(train)
    params, score, _ = tune_on(train, scenarios)
    if progress:
        progress("plan")
    return Planner(scenarios, **params), score


def from_params(params: dict[str, Any], train: Callable[[], DaySet] | None = None) -> Planner:
    """A tuned planner again: its parameters, and its scenarios rebuilt from the train days (they are not cached)."""
    if train is None:
        raise ValueError("the planner's scenarios are the train days: from_params needs them")
    noise_aware = bool(params.get("noise_aware", False))
    return Planner(scenarios_of(train()), float(params["margin"]), float(params["cost_sd"]), noise_aware=noise_aware)
