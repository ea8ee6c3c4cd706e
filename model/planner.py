"""PLAN: plan the rest of the day on the train days' market, by Bayes' rule from the campaign's own stats.

Stateless and numpy-only, like :mod:`model.controller`: the ratio is a function of the history and of the
**scenarios**, the train days' slot curves (what bidding ratio ``r`` through slot ``t`` of train day ``d`` delivered
and cost, exact replays; built by ``training/bidders/planner.py``). A day is modelled as scenario ``d`` with its
competing prices scaled by ``p``, its conversions by ``s`` and its traffic by the ratio ``a`` of the auctions seen
to the scenario's. Prices scaled by ``p`` make ratio ``r`` win what ``r / p`` won at ``p`` times the cost, so on
the log-spaced :data:`GRID` a price multiplier is a shift. Bayes' rule over ``(d, p, s)``:

* prior: ``d`` uniform over the train days, ``log p ~ N(0, PRICE_SD)``, ``log s ~ N(0, CONVERSION_SD)``;
* the market: each slot's cost against the scenario's at the ratio bid, log-normal with sd ``cost_sd``;
* the conversions: the day's delivery so far ``D`` against ``s E``, ``E`` the scenario's delivery at the ratios bid,
  by the compound-Poisson quasi-likelihood ``K log(lambda) - lambda``, ``K = D / v``, ``lambda = s E / v``, ``v`` the
  train days' value dispersion ``E[value^2] / E[value]`` (a sum of rare conversions has variance ``v`` times its
  mean). A scenario that expects nothing where the day has delivered is ruled out; one that expects much where the
  day delivered nothing weighs ``exp(-lambda)``.

Each slot it bids the ratio that, held for the rest of the day, has the most posterior-expected day delivery, a
``(d, p, s)`` counted only where the day's ROI (what was won plus what the scenario wins from here) reaches
``L (1 + margin)``; with a budget, a rest that would overspend is cut pro rata at the budget. ``noise_aware``
counts it by the probability that the rest's delivery noise (compound Poisson, sd ``sqrt(s * rest * v)``) leaves
the ROI there instead. It is a certainty-equivalent plan re-made every slot (closed loop), not a Bayes-optimal
policy.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import BinaryIO, ClassVar

import numpy as np

from model.contract import SLOTS_PER_DAY
from model.history import History, Registration

LOW, HIGH = 0.02, 4.0
STEP = 0.02
"""Log step of the ratio grid."""
PRICE_STEPS, PRICE_SPAN = 4, 13
"""Price multipliers ``p = exp(k * PRICE_STEPS * STEP)``, ``|k| <= PRICE_SPAN``: 0.08 apart, +-1.04 in log."""
SHIFT = PRICE_STEPS * PRICE_SPAN
CORE = round(float(np.log(HIGH / LOW) / STEP)) + 1
GRID = LOW * np.exp((np.arange(CORE + 2 * SHIFT) - SHIFT) * STEP)
"""The scenario grid: the bid ratios ``LOW .. HIGH`` and ``SHIFT`` steps either side of them, for ``r / p``."""
DECIDE = np.arange(SHIFT, SHIFT + CORE - 1, 2)
"""Grid indices of the ratios the plan chooses among (0.04 apart in log, 0.02 .. 3.92)."""
PRICE_K = np.arange(-PRICE_SPAN, PRICE_SPAN + 1)
LOG_PRICES = PRICE_K * PRICE_STEPS * STEP
LOG_SCALES = np.linspace(-1.0, 1.0, 21)
PRICE_SD, CONVERSION_SD = 0.4, 0.3
"""Prior sds of the day's log price and log conversion multipliers against a train day."""
EDGE_ALERT = 0.5
"""A posterior with at least this share of its mass on the grids' edges marks a day no scenario explains (the prior
puts under 1% there: 0.65% on `bench`'s planner)."""
MISFIT_ALERT = 9.0
"""A best-fitting scenario whose slot costs are off by 3 of its sds on average (mean squared standardized residual
9) marks a day no scenario explains, even one whose posterior is not on an edge (all scenarios equally wrong)."""
PRUNE = 1e-5
"""``(d, p)`` pairs whose weight is under this share of the heaviest's are left out of the plan."""
VERSION = 1
"""The law's version, written on an exported planner's card (:mod:`model.artifact`): bump it when the grid, the
priors or the rule change, so a model exported under another law is refused instead of bidding differently."""
SCENARIO_ARRAYS = ("delivery", "cost", "auctions", "value_dispersion", "cost_floor")
"""What a scenarios file (``.npz``) holds, by name."""


@dataclass(frozen=True)
class Scenarios:
    """The train days' slot curves on :data:`GRID`: ``delivery`` and ``cost`` ``(D, T, X)``, ``auctions`` ``(D, T)``."""

    delivery: np.ndarray
    cost: np.ndarray
    auctions: np.ndarray
    value_dispersion: float
    """``E[value^2] / E[value]`` over the train days' delivering impressions."""
    cost_floor: float
    """Added to costs before their log (a slot that won nothing is evidence, not a log of 0)."""
    delivery_after: np.ndarray = field(init=False, repr=False)
    """``(D, T + 1, X)``: delivery from slot ``t`` to the end of the day."""
    cost_after: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        shape = self.delivery.shape
        if len(shape) != 3 or shape[1:] != (SLOTS_PER_DAY, GRID.size) or self.cost.shape != shape:
            raise ValueError(f"scenario curves must be (days, {SLOTS_PER_DAY}, {GRID.size}); got {shape}")
        if self.auctions.shape != shape[:2]:
            raise ValueError(f"scenario auctions must be {shape[:2]}; got {self.auctions.shape}")
        if not (self.value_dispersion > 0 and self.cost_floor > 0):
            raise ValueError("scenarios need a positive value dispersion and cost floor (a market that delivered)")
        object.__setattr__(self, "delivery_after", from_slot_on(self.delivery))
        object.__setattr__(self, "cost_after", from_slot_on(self.cost))

    @property
    def days(self) -> int:
        return int(self.delivery.shape[0])


def save_scenarios(scenarios: Scenarios, path: Path) -> None:
    """Write ``scenarios`` to ``path`` (a compressed ``.npz`` of :data:`SCENARIO_ARRAYS`, float64: exact)."""
    with Path(path).open("wb") as f:
        np.savez_compressed(
            f,
            delivery=scenarios.delivery,
            cost=scenarios.cost,
            auctions=scenarios.auctions,
            value_dispersion=np.float64(scenarios.value_dispersion),
            cost_floor=np.float64(scenarios.cost_floor),
        )


def load_scenarios(source: Path | BinaryIO, name: str | None = None) -> Scenarios:
    """:func:`save_scenarios`' file read back (a path, or its bytes as a file object named ``name`` in messages);
    ``ValueError`` names what is missing, malformed or not finite."""
    path = name or str(source)
    try:
        with np.load(Path(source) if isinstance(source, str | Path) else source, allow_pickle=False) as f:
            missing = [name for name in SCENARIO_ARRAYS if name not in f.files]
            if missing:
                raise ValueError(f"{path}: scenarios file lacks {', '.join(missing)}")
            arrays = {name: np.asarray(f[name], dtype=np.float64) for name in SCENARIO_ARRAYS}
    except (OSError, EOFError, zipfile.BadZipFile) as exc:
        raise ValueError(f"{path}: not a readable scenarios file ({exc})") from None
    if arrays["value_dispersion"].ndim or arrays["cost_floor"].ndim:
        raise ValueError(f"{path}: value_dispersion and cost_floor must be scalars")
    if not all(np.all(np.isfinite(a)) for a in arrays.values()):
        raise ValueError(f"{path}: scenarios hold non-finite numbers")
    if any(np.any(arrays[name] < 0) for name in ("delivery", "cost", "auctions")):
        raise ValueError(f"{path}: scenarios hold negative deliveries, costs or auctions")
    return Scenarios(
        delivery=arrays["delivery"],
        cost=arrays["cost"],
        auctions=arrays["auctions"],
        value_dispersion=float(arrays["value_dispersion"]),
        cost_floor=float(arrays["cost_floor"]),
    )


@dataclass(frozen=True)
class TunedPlanner:
    """The planner with one set of tuned parameters: what an exported planner model holds and the service runs.

    :meth:`ratios` is :func:`plan`, arranged for a slot boundary of many campaigns: at slot 0 (nothing observed) the
    plan depends on the registration alone, so campaigns registered alike share one plan (and a bounded cache keeps
    it for the next registrations); later slots are planned :data:`CHUNK` campaigns at a time, which bounds the
    posterior's ``(n, slots, days, prices)`` arrays (10,000 campaigns at once would need gigabytes)."""

    scenarios: Scenarios
    margin: float
    cost_sd: float
    noise_aware: bool = False
    edge_alert: float = EDGE_ALERT
    misfit_alert: float = MISFIT_ALERT
    """The alerts of the :class:`Depth` it reports (an exported planner's card carries its own)."""
    _first: dict[tuple[float, float], tuple[float, float, float]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """Slot 0's (ratio, edge mass, misfit) per registration ``(roi_target, budget)``."""

    CHUNK: ClassVar[int] = 64
    FIRST_CACHE: ClassVar[int] = 4096
    """Registrations whose slot-0 ratio is kept (a dict; cleared when full)."""

    def ratios(self, history: History) -> np.ndarray:
        """The ratio each of ``history``'s campaigns bids in slot ``history.slot``: exactly :func:`plan`'s."""
        return self.decide(history)[0]

    def decide(self, history: History) -> tuple[np.ndarray, Depth]:
        """:meth:`ratios` and each campaign's signs of being out of the planner's depth (:func:`plan_and_depth`)."""
        if history.slot == 0:
            return self._first_slot(history.registration)
        ratio, parts = np.empty(history.n), []
        for start in range(0, history.n, self.CHUNK):
            rows = np.arange(start, min(start + self.CHUNK, history.n))
            ratio[rows], depth = self._plan(history.until(history.slot, rows.tolist()))
            parts.append(depth)
        return ratio, Depth.concat(parts)

    def _plan(self, history: History) -> tuple[np.ndarray, Depth]:
        ratio, depth = plan_and_depth(self.scenarios, history, self.margin, self.cost_sd, noise_aware=self.noise_aware)
        return ratio, Depth(depth.edge, depth.misfit, self.edge_alert, self.misfit_alert)

    def _first_slot(self, registration: Registration) -> tuple[np.ndarray, Depth]:
        keys = list(zip(registration.roi_target.tolist(), registration.budget.tolist(), strict=True))
        found = {k: self._first.get(k) for k in dict.fromkeys(keys)}  # read once: another thread may clear it
        missing = [k for k, known in found.items() if known is None]
        if missing:
            fresh = History(Registration(np.array([k[0] for k in missing]), np.array([k[1] for k in missing])))
            ratio, depth = self._plan(fresh)
            planned = list(zip(ratio.tolist(), depth.edge.tolist(), depth.misfit.tolist(), strict=True))
            found.update(zip(missing, planned, strict=True))
            if len(self._first) + len(missing) > self.FIRST_CACHE:
                self._first.clear()
            # at most FIRST_CACHE kept, whatever one batch brings (10,000 distinct MC budgets, say)
            self._first.update(islice(zip(missing, planned, strict=True), self.FIRST_CACHE))
        answers = np.array([found[k] for k in keys]).reshape(len(keys), 3)
        return answers[:, 0].copy(), Depth(
            answers[:, 1].copy(), answers[:, 2].copy(), self.edge_alert, self.misfit_alert
        )


@dataclass(frozen=True)
class Depth:
    """Per episode, the signs that the planner is out of its depth (no scenario explains the day so far)."""

    edge: np.ndarray
    """The posterior's mass on its grids' edges (the most extreme price or conversion multiplier)."""
    misfit: np.ndarray
    """The best-fitting (scenario, price multiplier)'s mean squared standardized cost residual over the slots played
    (0 before any); about 1 where a scenario explains the day's costs."""
    edge_alert: float = EDGE_ALERT
    misfit_alert: float = MISFIT_ALERT
    """The alerts :attr:`out` reads: the defaults, or an exported planner's own (:func:`calibrated_alerts`)."""

    @property
    def out(self) -> np.ndarray:
        """``(n,)`` bool: either sign at or past its alert."""
        return (self.edge >= self.edge_alert) | (self.misfit >= self.misfit_alert)

    @classmethod
    def concat(cls, parts: list[Depth]) -> Depth:
        edge, misfit = np.concatenate([p.edge for p in parts]), np.concatenate([p.misfit for p in parts])
        return cls(edge, misfit, parts[0].edge_alert, parts[0].misfit_alert)

    def take(self, rows: np.ndarray) -> Depth:
        return Depth(self.edge[rows], self.misfit[rows], self.edge_alert, self.misfit_alert)


def calibrated_alerts(train_edge: np.ndarray, train_misfit: np.ndarray) -> tuple[float, float]:
    """``(edge_alert, misfit_alert)`` for a planner whose train days, each played without its own scenario, showed
    these signs (every slot after the first): past anything its own days showed, by a margin, and never below the
    defaults. A planner on few, thin days (noisy scenarios) gets higher alerts than one on many full days."""
    edge_alert = min(1.0, max(EDGE_ALERT, float(np.max(train_edge, initial=0.0)) + 0.25))
    misfit_alert = max(MISFIT_ALERT, 2.0 * float(np.max(train_misfit, initial=0.0)))
    return edge_alert, misfit_alert


def from_slot_on(x: np.ndarray) -> np.ndarray:
    """``(K, T + 1, ...)`` sums of per-slot amounts ``x`` ``(K, T, ...)`` from slot ``t`` to the end of the day (0 at
    ``t = T``)."""
    tail = np.cumsum(x[:, ::-1], axis=1)[:, ::-1]
    return np.concatenate([tail, np.zeros_like(x[:, :1])], axis=1)


def grid_index(ratio: np.ndarray) -> np.ndarray:
    """The index in :data:`GRID` of the bid ratio nearest each of ``ratio`` (clipped to ``LOW .. HIGH``)."""
    steps = np.round(np.log(np.maximum(ratio, 1e-9) / LOW) / STEP).astype(int)
    return (steps + SHIFT).clip(SHIFT, SHIFT + CORE - 1)


def evidence(
    scenarios: Scenarios, history: History, cost_sd: np.ndarray, exclude: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """From the slots played: the market's log weight of each ``(d, p)`` ``(n, D, P)`` (prior included), the
    delivery each expects at conversion scale 1 ``(n, D, P)`` and the auctions each scenario saw ``(n, D)``."""
    n, days = history.n, scenarios.days
    log_market = np.broadcast_to(-0.5 * (LOG_PRICES / PRICE_SD) ** 2, (n, days, PRICE_K.size)).copy()
    log_market[exclude >= 0, exclude[exclude >= 0]] = -np.inf
    expected = np.zeros((n, days, PRICE_K.size))
    played = history.slot
    seen = scenarios.auctions[None, :, :played].sum(axis=2) * np.ones((n, 1))
    if played == 0:
        return log_market, expected, seen
    # every slot played at once: (n, T, D, P); each slot's term added in slot order (as a cumulative sum would, so
    # the totals are those of adding them one by one), into the running total in place
    at = grid_index(history.ratios[:, :played])[:, :, None] - PRICE_K * PRICE_STEPS  # (n, T, P)
    slots = np.arange(played)[None, :, None]
    traffic = history.auctions[:, :played, None] / np.maximum(scenarios.auctions[:, :played].T[None], 1.0)  # (n, T, D)
    cost = np.moveaxis(scenarios.cost[:, slots, at], 0, 2) * traffic[..., None] * np.exp(LOG_PRICES)
    floor = scenarios.cost_floor
    residual = np.log(history.cost[:, :played, None, None] + floor) - np.log(cost + floor)
    terms = -0.5 * (residual / cost_sd[:, None, None, None]) ** 2
    delivery = np.moveaxis(scenarios.delivery[:, slots, at], 0, 2) * traffic[..., None]
    for s in range(played):
        log_market += terms[:, s]
        expected += delivery[:, s]
    return log_market, expected, seen


def rest_of_day(
    scenarios: Scenarios, d_idx: np.ndarray, k_idx: np.ndarray, t: int, traffic: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """What each pair (scenario ``d_idx[q]``, price multiplier ``PRICE_K[k_idx[q]]``) wins from slot ``t`` to the end
    of the day at each ratio of :data:`DECIDE`, its traffic scaled by ``traffic[q]``: delivery at conversion scale 1
    and cost, ``(Q, J)`` each. Prices times ``p`` make ratio ``r`` win what ``r / p`` won, at ``p`` times the cost."""
    cols = DECIDE[None, :] - PRICE_K[k_idx][:, None] * PRICE_STEPS
    rows = np.arange(d_idx.size)[:, None]
    delivery = scenarios.delivery_after[d_idx, t][rows, cols] * traffic[:, None]
    cost = scenarios.cost_after[d_idx, t][rows, cols] * (traffic * np.exp(LOG_PRICES)[k_idx])[:, None]
    return delivery, cost


def plan(
    scenarios: Scenarios,
    history: History,
    margin: float | np.ndarray,
    cost_sd: float | np.ndarray,
    exclude: int | np.ndarray = -1,
    noise_aware: bool | np.ndarray = False,
) -> np.ndarray:
    """The ratio each of ``history``'s episodes bids in slot ``history.slot`` (see the module docstring).
    ``exclude``: per episode, a scenario it may not use (a train day played while tuning; -1: none)."""
    return plan_and_depth(scenarios, history, margin, cost_sd, exclude, noise_aware)[0]


def plan_and_depth(
    scenarios: Scenarios,
    history: History,
    margin: float | np.ndarray,
    cost_sd: float | np.ndarray,
    exclude: int | np.ndarray = -1,
    noise_aware: bool | np.ndarray = False,
) -> tuple[np.ndarray, Depth]:
    """:func:`plan`'s ratios, and per episode the signs that no scenario explains the day (:class:`Depth`): then the
    planner is out of its depth and its plan is not to be trusted (the service counts such slots as out of range)."""
    n, t = history.n, history.slot
    margins = np.broadcast_to(np.asarray(margin, dtype=np.float64), (n,))
    cost_sds = np.broadcast_to(np.asarray(cost_sd, dtype=np.float64), (n,))
    excluded = np.broadcast_to(np.asarray(exclude, dtype=np.int64), (n,))
    if excluded.max(initial=-1) >= scenarios.days or (scenarios.days < 2 and excluded.max(initial=-1) >= 0):
        raise ValueError(f"exclude names a scenario of {scenarios.days}, leaving none or naming none")
    noisy = np.broadcast_to(np.asarray(noise_aware, dtype=bool), (n,))
    log_market, expected_at_one, seen_by_scenario = evidence(scenarios, history, cost_sds, excluded)
    scales = np.exp(LOG_SCALES)
    log_prior_s = -0.5 * (LOG_SCALES / CONVERSION_SD) ** 2
    delivered, spent = history.total_delivery, history.total_cost
    seen = history.auctions[:, :t].sum(axis=1)
    target = history.registration.roi_target * (1.0 + margins)
    budget = history.registration.budget
    out, edge = np.empty(n), np.empty(n)
    # the best-fitting (d, p)'s mean squared standardized cost residual over the slots played (prior and exclusions
    # aside): about 1 where a scenario explains the day's costs
    fit_only = np.where(np.isneginf(log_market), -np.inf, log_market + 0.5 * (LOG_PRICES / PRICE_SD) ** 2)
    misfit = -2.0 * fit_only.reshape(n, -1).max(axis=1) / max(t, 1)
    # at slot 0 the posterior and the rest of the day depend on a row's excluded scenario alone (nothing observed):
    # rows that share it share that work, and only the registration's part (budget, target) is their own
    first_slot: dict[int, tuple[float, np.ndarray, np.ndarray, np.ndarray]] = {}
    for i in range(n):
        if t == 0 and int(excluded[i]) in first_slot:
            edge[i], weights, rest_d, rest_c = first_slot[int(excluded[i])]
        else:
            rate = np.maximum(expected_at_one[i][:, :, None] * scales / scenarios.value_dispersion, 1e-9)  # (D, P, S)
            fit = delivered[i] / scenarios.value_dispersion * np.log(rate) - rate
            log_w = log_market[i][:, :, None] + log_prior_s + fit
            w = np.exp(log_w - log_w.max())
            edge[i] = (w[:, [0, -1]].sum() + w[:, 1:-1][:, :, [0, -1]].sum()) / w.sum()
            pair = w.sum(axis=2)
            d_idx, k_idx = np.nonzero(pair >= PRUNE * pair.max())
            traffic = seen[i] / np.maximum(seen_by_scenario[i, d_idx], 1.0) if t > 0 else np.ones(d_idx.size)
            rest_d, rest_c = rest_of_day(scenarios, d_idx, k_idx, t, traffic)
            weights = w[d_idx, k_idx]  # (Q, S)
            if t == 0:
                first_slot[int(excluded[i])] = (float(edge[i]), weights, rest_d, rest_c)
        if np.isfinite(budget[i]):
            # a plan whose rest would overspend stops at the budget: its rest is cut pro rata
            room = budget[i] - spent[i]
            share = np.clip(np.divide(room, rest_c, out=np.ones_like(rest_c), where=rest_c > 0), 0.0, 1.0)
            rest_d, rest_c = rest_d * share, rest_c * share  # new arrays: a shared slot-0 rest stays as it was
        if noisy[i]:
            day_d = delivered[i] + scales[None, :, None] * rest_d[:, None, :]  # (Q, S, J)
            day_c = spent[i] + rest_c[:, None, :]
            sd = np.sqrt(scales[None, :, None] * rest_d[:, None, :] * scenarios.value_dispersion) + 1e-12
            # P(ROI reaches the target), Phi by its logistic approximation (within 0.01)
            reach = 1.0 / (1.0 + np.exp(np.clip(-1.702 * (day_d - target[i] * day_c) / sd, -50.0, 50.0)))
            value = np.einsum("qsj,qs->j", np.where(day_d > 0, day_d * reach, 0.0), weights)
        else:
            value = feasible_value(delivered[i], spent[i], target[i], scales, rest_d, rest_c, weights)
        out[i] = GRID[DECIDE[int(np.argmax(value))]]
    return out, Depth(edge, misfit)


def feasible_value(
    delivered: float,
    spent: float,
    target: float,
    scales: np.ndarray,
    rest_d: np.ndarray,
    rest_c: np.ndarray,
    weights: np.ndarray,
) -> np.ndarray:
    """Per ratio ``j``, ``sum_{q, s} weights[q, s] * D[q, s, j]`` over the (pair, scale) whose day delivery
    ``D = delivered + s * rest_d[q, j]`` is positive and reaches ``target`` times the day cost ``spent + rest_c[q, j]``.

    Linear in ``s``, so for each (q, j) feasibility is a threshold on the ascending ``scales``: the sum is suffix
    sums of ``weights`` and ``scales * weights`` read at that threshold, ``(Q, J)`` work instead of ``(Q, S, J)``
    (:func:`feasible_value_dense` is the direct sum; a test holds them equal)."""
    zeros = np.zeros((weights.shape[0], 1))
    w_from = np.concatenate([np.cumsum(weights[:, ::-1], axis=1)[:, ::-1], zeros], axis=1)  # (Q, S + 1)
    sw_from = np.concatenate([np.cumsum((weights * scales)[:, ::-1], axis=1)[:, ::-1], zeros], axis=1)
    need = target * (spent + rest_c) - delivered  # what s * rest_d must reach
    with np.errstate(divide="ignore", invalid="ignore"):
        threshold = np.where(rest_d > 0, need / rest_d, np.where(need <= 0, -np.inf, np.inf))
    first = np.searchsorted(scales, threshold, side="left")  # the first scale that reaches it
    value = delivered * np.take_along_axis(w_from, first, axis=1) + rest_d * np.take_along_axis(sw_from, first, axis=1)
    value = np.where((rest_d > 0) | (delivered > 0), value, 0.0)  # a day that delivers nothing counts nothing
    return value.sum(axis=0)


def feasible_value_dense(
    delivered: float,
    spent: float,
    target: float,
    scales: np.ndarray,
    rest_d: np.ndarray,
    rest_c: np.ndarray,
    weights: np.ndarray,
) -> np.ndarray:
    """:func:`feasible_value` summed directly over ``(Q, S, J)`` (the reference its test compares to)."""
    day_d = delivered + scales[None, :, None] * rest_d[:, None, :]
    day_c = spent + rest_c[:, None, :]
    counted = np.where((day_d >= target * day_c) & (day_d > 0), day_d, 0.0)
    return np.einsum("qsj,qs->j", counted, weights)
