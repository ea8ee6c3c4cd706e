"""The observation features of the slot-wise policy (paper appendix, "Policy design"), computable online.

One function, :func:`observe`, used by the simulator-driven training, by offline evaluation and by
the live service. Every feature uses only what a live bidder knows: the registration
(L and B), its own past ratios and the slot stats it was told (delivery, cost, wins, auctions).

Every feature is **scale-free**: a ratio of two amounts of the campaign itself, never an amount. The
paper normalizes delivery by the *same day's* hindsight oracle ``D*_T``, which leaks the answer; a
"reference delivery" from the train days (their median hindsight oracle delivery) is no better: no
advertiser can compute it, and it is wrong by the ratio of two price scales on a market the model was not
trained on. So no feature is an amount at a daily scale (the last slot's delivery, the banked surplus
``D - L C``), and a campaign registers L and B and nothing else.

Features (all clipped to the range listed in :data:`FEATURES`, so training and serving agree):

===================  ==========================================================================
``time``             ``t / T``: the share of the day already over
``prev_ratio``       ``beta_{t-1} / 4``: the ratio bid in the last slot (0 at the start)
``roi_gap``          ``(ROI_{t-1} - L) / L`` on the cumulative stats (0 before any spend)
``budget_spent``     ``C_{t-1} / B`` (0 without a budget)
``slot_roi_gap``     ``(D_{t-2:t-1} / C_{t-2:t-1} - L) / L`` of the last slot (0 if it spent nothing)
``slot_win_rate``    ``wins / auctions`` of the last slot (0 if it saw no traffic)
``slot_price``       ``log`` of the last slot's cost per win over the day's cost per win so far: the
                     intraday price drift, scale-free (0 if nothing was won)
``has_budget``       1 when the episode has a budget
===================  ==========================================================================

A **residual** model (``rcb train --algo cbrl``, the default, or ``--residual``) reads one more feature, last:

===================  ==========================================================================
``controller_ratio`` ``c_t / 4``: the ratio the reference controller (:mod:`model.controller`, the PID
                     tuned on the train days, its gains on the model card) bids in this slot; the
                     policy's ratio is ``c_t`` times its own correction
===================  ==========================================================================

It needs the controller, so the functions below take it (``controller``: the PID's gains); without it they
compute the base features only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from model.contract import RATIO_MAX, SLOTS_PER_DAY
from model.controller import Reference
from model.history import History
from model.roi import roi


@dataclass(frozen=True)
class Feature:
    name: str
    low: float
    high: float


FEATURES: tuple[Feature, ...] = (
    Feature("time", 0.0, 1.0),
    Feature("prev_ratio", 0.0, 1.0),
    Feature("roi_gap", -1.0, 3.0),
    Feature("budget_spent", 0.0, 1.0),
    Feature("slot_roi_gap", -1.0, 3.0),
    Feature("slot_win_rate", 0.0, 1.0),
    Feature("slot_price", -3.0, 3.0),
    Feature("has_budget", 0.0, 1.0),
)
"""Names, order and clip ranges: part of the model artifact contract (docs/model-artifact.md)."""

CONTROLLER_FEATURE = Feature("controller_ratio", 0.0, 1.0)
"""The residual models' extra feature, after :data:`FEATURES` (a ratio in [0.01, 4] over 4 never clips)."""
RESIDUAL_FEATURES: tuple[Feature, ...] = (*FEATURES, CONTROLLER_FEATURE)
CONTROLLER_INDEX = len(FEATURES)
"""Where a residual model's observation holds ``c_t / 4``."""

FEATURE_NAMES: tuple[str, ...] = tuple(f.name for f in FEATURES)
N_FEATURES = len(FEATURES)
_LOW = np.array([f.low for f in FEATURES])
_HIGH = np.array([f.high for f in FEATURES])


def feature_set(residual: bool) -> tuple[Feature, ...]:
    """The features a model reads: :data:`FEATURES`, plus ``controller_ratio`` for a residual one."""
    return RESIDUAL_FEATURES if residual else FEATURES


def obs_dim(residual: bool) -> int:
    return len(feature_set(residual))


def _ratio_or(numerator: np.ndarray, denominator: np.ndarray, default: float) -> np.ndarray:
    return np.divide(numerator, denominator, out=np.full(numerator.shape, default), where=denominator > 0)


def observe(history: History, slot: int | None = None, controller: Reference | None = None) -> np.ndarray:
    """Features of every episode before it bids slot ``slot`` (default: the next slot), shape ``(n, F)``.

    Only ``history[:, :slot]`` is read, so the features of slot ``t`` can be rebuilt later from the
    same history (the posterior encoder needs ``o_t`` for every past ``t``). With ``controller``, the
    residual feature set (``F + 1``, ``controller_ratio`` last).
    """
    base = np.clip(raw_features(history, slot), _LOW, _HIGH)
    if controller is None:
        return base
    t = history.slot if slot is None else slot
    reference = controller.sequence(history, until=t)[:, -1] / RATIO_MAX
    return np.concatenate([base, np.clip(reference, 0.0, 1.0)[:, None]], axis=1)


def out_of_range(history: History, slot: int | None = None) -> np.ndarray:
    """``(n,)`` the number of features :func:`observe` had to clip: the campaign is outside the range the
    features were designed (and the model trained) for."""
    raw = raw_features(history, slot)
    return ((raw < _LOW) | (raw > _HIGH)).sum(axis=1)


def raw_features(history: History, slot: int | None = None) -> np.ndarray:
    """:func:`observe` before clipping, ``(n, F)``."""
    t = history.slot if slot is None else slot
    if not 0 <= t <= history.slot:
        raise ValueError(f"slot {t} is not observed yet (history has {history.slot} slots)")
    n = history.n
    if t > 0:
        last = {name: getattr(history, name)[:, t - 1] for name in ("ratios", "delivery", "cost", "wins", "auctions")}
    else:
        last = dict.fromkeys(("ratios", "delivery", "cost", "wins", "auctions"), np.zeros(n))
    totals = {name: getattr(history, name)[:, :t].sum(axis=1) for name in ("delivery", "cost", "wins")}
    reg = history.registration
    return _features(np.full(n, t / SLOTS_PER_DAY), last, totals, reg.roi_target, reg.budget, axis=1)


def observation_sequence(history: History, controller: Reference | None = None) -> np.ndarray:
    """``(n, t+1, F)`` float32: :func:`observe` before each slot ``0..t`` (the last is the current observation).

    Bit for bit the same numbers as ``t+1`` calls of :func:`observe`, at the cost of about one: the prefix sums
    are taken exactly as :func:`raw_features` takes them (one numpy ``sum`` per prefix; a cumulative sum would
    round differently) and every formula is elementwise, so :func:`_features` runs once on ``(n, t+1)`` arrays.
    With ``controller``, ``controller_ratio`` comes from one pass of the law over all prefixes
    (:func:`model.controller.controller_sequence`, which :func:`observe` reads one column of).
    """
    t_max, n = history.slot, history.n
    width = t_max + 1
    totals = {name: np.empty((n, width)) for name in ("delivery", "cost", "wins")}
    for t in range(width):
        for name, total in totals.items():
            total[:, t] = getattr(history, name)[:, :t].sum(axis=1)
    last = {  # each slot's previous slot (0 before slot 0)
        name: np.concatenate([np.zeros((n, 1)), getattr(history, name)[:, :t_max]], axis=1)
        for name in ("ratios", "delivery", "cost", "wins", "auctions")
    }
    reg = history.registration
    time = np.broadcast_to(np.arange(width) / SLOTS_PER_DAY, (n, width))
    features = np.clip(_features(time, last, totals, reg.roi_target[:, None], reg.budget[:, None], axis=2), _LOW, _HIGH)
    if controller is not None:
        reference = np.clip(controller.sequence(history) / RATIO_MAX, 0.0, 1.0)
        features = np.concatenate([features, reference[:, :, None]], axis=2)
    return features.astype(np.float32)


def _features(
    time: np.ndarray,
    last: dict[str, np.ndarray],
    totals: dict[str, np.ndarray],
    roi_target: np.ndarray,
    budget: np.ndarray,
    axis: int,
) -> np.ndarray:
    """The formulas of :data:`FEATURES`, elementwise on any shape: ``last`` the previous slot's stats and ratio,
    ``totals`` the cumulative delivery, cost and wins before the slot; stacked along ``axis``."""
    delivery, cost = totals["delivery"], totals["cost"]
    d, c = last["delivery"], last["cost"]
    has_budget = np.isfinite(budget)
    per_win = _ratio_or(c, last["wins"], 0.0)
    day_per_win = _ratio_or(cost, totals["wins"], 0.0)
    return np.stack(
        [
            time,
            last["ratios"] / RATIO_MAX,
            np.where(cost > 0, (roi(delivery, cost) - roi_target) / roi_target, 0.0),
            np.where(has_budget, cost / np.where(has_budget, budget, 1.0), 0.0),
            np.where(c > 0, (roi(d, c) - roi_target) / roi_target, 0.0),
            _ratio_or(last["wins"], last["auctions"], 0.0),
            np.where(per_win > 0, np.log(np.maximum(per_win, 1e-300) / np.maximum(day_per_win, 1e-300)), 0.0),
            np.broadcast_to(has_budget.astype(np.float64), time.shape),
        ],
        axis=axis,
    )
