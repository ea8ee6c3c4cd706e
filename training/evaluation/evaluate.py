"""`rcb evaluate`: run methods over a split for several seeds; episodes, summary, tables and plots.

The methods (:mod:`training.evaluation.methods`) are the tuned baselines, the hindsight references, training runs,
run groups, ensembles and exported models, each optionally behind the shield (:mod:`training.evaluation.shielding`);
a method whose score would be in-sample is refused first (:mod:`training.evaluation.leakage`). Every bidder runs
through :func:`training.bidders.base.play`, so every number comes from the same harness. Seeds ``0..N-1`` seed the
bidders' own randomness (CEM's exploration; CBRL's posterior samples); deterministic methods give the same episodes
for every seed.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from model.contract import Setting
from model.controller import ControllerGains
from training.bidders.base import Bidder
from training.bidders.shielded import ShieldedBidder
from training.bidders.tuned import BASELINES, Progress
from training.evaluation.leakage import check_split, own_days_left_out
from training.evaluation.methods import (
    ENSEMBLE_PREFIX,
    REFERENCES,
    SHIELD_PREFIX,
    EvaluationError,
    method_bidder,
    method_label,
    run_bidder,
    run_group,
    unshielded,
)
from training.evaluation.report import per_seed_metrics, write_report
from training.evaluation.shielding import market_shield_gains, shield_config, shield_gains
from training.market.dataset import Market, MarketError
from training.replay.dayset import VALIDATION, DaySet, split_validation
from training.replay.metrics import DEFAULT_GAMMA, is_feasible, normalized_delivery, roi
from training.replay.oracle import market_oracle


@dataclass
class Evaluation:
    """What :func:`evaluate` returns: every episode, the per-method summary, and the metadata meta.json holds."""

    episodes: pd.DataFrame
    summary: dict[str, dict[str, Any]]
    meta: dict[str, Any]


def episode_rows(method: str, seed: int, days: DaySet, delivery: np.ndarray, cost: np.ndarray) -> pd.DataFrame:
    feasible = is_feasible(delivery, cost, days.roi_target, days.budget)
    return pd.DataFrame(
        {
            "method": method,
            "seed": seed,
            "day": days.days,
            "delivery": delivery,
            "cost": cost,
            "roi": roi(delivery, cost),
            "feasible": feasible,
            "oracle_delivery": days.oracle_delivery,
            "roi_target": days.roi_target,
            "budget": days.budget,
            "score": normalized_delivery(delivery, days.oracle_delivery) * feasible,
        }
    )


def summarize(episodes: pd.DataFrame, methods: list[str], gamma: float = DEFAULT_GAMMA) -> dict[str, dict[str, Any]]:
    """Per method: median and mean over seeds of each seed's ANS; CSR, ANDR, G-metric over seeds (docs/metrics.md).

    Built on :func:`per_seed_metrics`, the same numbers the boxplots draw. ``gamma`` is the G-metric's
    (the value validated for USCB in the setting, where known).

    Days whose hindsight oracle delivers nothing (``D* = 0``: no bidder can reach L there, which the
    ``prior`` constraint recipe allows) are scored by the rule of :func:`training.replay.metrics.normalized_delivery`
    (1 if the episode stayed feasible, else 0) and reported apart: ``n_zero_oracle`` counts the method's
    episodes on them, ``csr_zero_oracle`` is its feasible share there (``nan`` if none) and
    ``ans_reachable_median`` its median ANS over the other days alone. ``n_above_oracle`` counts the method's
    feasible episodes that delivered more than a positive ``D*`` (the slot-wise oracle is the paper's reference,
    not a strict bound: docs/metrics.md), so a D/D* above 1 is never hidden in a mean.
    """
    table = per_seed_metrics(episodes, gamma)
    reachable = per_seed_metrics(episodes[episodes["oracle_delivery"] > 0], gamma)
    zero = episodes[episodes["oracle_delivery"] <= 0]
    above = episodes[
        (episodes["oracle_delivery"] > 0) & episodes["feasible"] & (episodes["delivery"] > episodes["oracle_delivery"])
    ]

    def over_seeds(values: pd.Series, how: str) -> float:
        values = values.dropna()
        return float(getattr(values, how)()) if len(values) else float("nan")

    summary: dict[str, dict[str, Any]] = {}
    for method in methods:
        rows = table[table["method"] == method]
        summary[method] = {
            "ans_median": over_seeds(rows["ans"], "median"),
            "ans_mean": over_seeds(rows["ans"], "mean"),
            "csr": over_seeds(rows["csr"], "mean"),
            "csr_median": over_seeds(rows["csr"], "median"),
            "andr": over_seeds(rows["andr"], "mean"),
            "andr_median": over_seeds(rows["andr"], "median"),
            "gmetric": over_seeds(rows["gmetric"], "mean"),
            "n_episodes": int(rows["n_episodes"].sum()),
            "n_seeds": len(rows),
            "n_zero_oracle": int((zero["method"] == method).sum()),
            "csr_zero_oracle": float(zero.loc[zero["method"] == method, "feasible"].mean())
            if (zero["method"] == method).any()
            else float("nan"),
            "ans_reachable_median": over_seeds(reachable.loc[reachable["method"] == method, "ans"], "median"),
            "n_above_oracle": int((above["method"] == method).sum()),
            "gmetric_gamma": gamma,
        }
    return summary


def split_days(
    market: Market, split: str, setting: Setting, progress: Progress | None = None
) -> tuple[DaySet, Callable[[], DaySet]]:
    """The days of ``split`` (``validation``: the train days training held out for model selection) and a loader
    of the train days that reads them once, when first asked (baselines and the shield's PID are tuned there)."""
    if split not in ("test", "ood", "train", VALIDATION):
        raise EvaluationError(f"unknown split {split!r}; expected test, ood or validation (or train)")
    if not market.split("train" if split == VALIDATION else split):
        raise EvaluationError(f"{market.root}: split {split!r} has no days")
    train_cache: list[DaySet] = []
    if split == VALIDATION:
        train_cache.append(DaySet.load(market, "train", setting, progress=progress))
        days = train_cache[0].subset(split_validation(train_cache[0])[1])
    else:
        days = DaySet.load(market, split, setting, progress=progress)

    def train() -> DaySet:
        if not train_cache:
            train_cache.append(days if split == "train" else DaySet.load(market, "train", setting, progress=progress))
        return train_cache[0]

    return days, train


def evaluate(
    market: Market,
    setting: Setting | str,
    split: str,
    methods: list[str],
    seeds: int,
    progress: Progress | None = None,
    gamma: float = DEFAULT_GAMMA,
) -> Evaluation:
    """Run every method over ``split`` for ``seeds`` seeds; return episodes, summary and metadata.

    A deterministic bidder (RM, PID, a non-Bayesian policy; :attr:`Bidder.deterministic`) and the
    hindsight references play once: their seeds would be identical copies. ``gamma``: the G-metric's.
    """
    setting = Setting(setting)
    if seeds < 1:
        raise EvaluationError("seeds must be >= 1")
    if any(m in BASELINES for m in methods) and not market.split("train"):
        raise EvaluationError(f"{market.root}: baselines are tuned on the train split, which has no days")
    check_split(methods, market, split)
    days, train = split_days(market, split, setting, progress)
    market_gains: list[ControllerGains] = []

    def market_pid() -> ControllerGains:  # read at most once per evaluation
        if not market_gains:
            market_gains.append(market_shield_gains(market, setting, train, progress))
        return market_gains[0]

    def shielded_by(inner: Bidder) -> ShieldedBidder:
        """``inner`` behind the band :func:`shield_config` gives it, centred on the controller :func:`shield_gains`
        gives it: a model's card controller or a residual run's own reference (as the service would serve them),
        else the market's PID."""
        return ShieldedBidder(
            inner, shield_gains(inner, market, setting, train, progress, market_pid), shield_config(inner)
        )

    frames: list[pd.DataFrame] = []
    tuned: dict[str, dict[str, Any]] = {}
    for listed in methods:
        method, shielded = unshielded(listed)
        group = run_group(method)
        if group is not None and not method.startswith(ENSEMBLE_PREFIX):
            label, runs = group
            wrap = shielded_by if shielded else None
            label = SHIELD_PREFIX + label if shielded else label
            frames.extend(_play_run_group(label, runs, setting, days, tuned, progress, wrap))
            continue
        if method in REFERENCES:
            answers = market_oracle(market, setting, kind=REFERENCES[method], days=days.days)
            delivery = np.array([a.delivery for a in answers])
            cost = np.array([a.cost for a in answers])
            frames.append(episode_rows(method, 0, days, delivery, cost))
            if progress:
                progress("episodes")
            continue
        bidder, record = method_bidder(method, market, setting, train, progress)
        row_label = method_label(listed)  # the method as written, or an ensemble's group label
        bidder, left_out = own_days_left_out(bidder, method, split, days, train)
        if left_out:
            record["left_out"] = "each day played without its own scenario"
        if shielded:
            bidder = shielded_by(bidder)
        # its own copy: METHOD and shield:METHOD listed together each keep their record
        tuned[row_label] = dict(record)
        for seed in range(1 if bidder.deterministic else seeds):
            outcome = days.play(bidder, seed)
            frames.append(episode_rows(row_label, seed, days, outcome.delivery, outcome.cost))
            if isinstance(bidder, ShieldedBidder):
                tuned[row_label]["shield_acted_share"] = round(bidder.acted_share, 4)
                tuned[row_label]["shield"] = asdict(bidder.config)  # the band played (a card's may be its own)
            if progress:
                progress("episodes")
    episodes = pd.concat(frames, ignore_index=True)
    meta = {
        "market": str(market.root),
        "split": split,
        "setting": str(setting),
        "seeds": seeds,
        "methods": [method_label(m) for m in methods],
        "tuned": tuned,
        "gmetric_gamma": gamma,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    summary = summarize(episodes, [method_label(m) for m in methods], gamma)
    return Evaluation(episodes=episodes, summary=summary, meta=meta)


def _play_run_group(
    label: str,
    runs: list[Path],
    setting: Setting,
    days: DaySet,
    tuned: dict[str, Any],
    progress: Progress | None,
    wrap: Callable[[Bidder], Bidder] | None = None,
) -> list[pd.DataFrame]:
    """Each run of a group plays the split once, run ``k`` with seed ``k``; its rows are seed ``k``."""
    frames: list[pd.DataFrame] = []
    record: dict[str, Any] = {"runs": [], "best_validation_score": [], "kept_epoch": []}
    for seed, run_dir in enumerate(runs):
        bidder, run = run_bidder(run_dir, setting)
        if wrap is not None:
            bidder = wrap(bidder)
        if record.get("algo", run["algo"]) != run["algo"]:  # one method's rows are one algorithm's seeds
            raise EvaluationError(
                f"{label}: its runs train different algorithms ({runs[0]}: {record['algo']}, {run_dir}:"
                f" {run['algo']}); give each its own label"
            )
        record["algo"] = run["algo"]
        record["runs"].append(str(run_dir))
        record["best_validation_score"].append(run["best_validation_score"])
        record["kept_epoch"].append(run.get("kept_epoch"))
        outcome = days.play(bidder, seed)
        frames.append(episode_rows(label, seed, days, outcome.delivery, outcome.cost))
        if isinstance(bidder, ShieldedBidder):
            record.setdefault("shield_acted_share", []).append(round(bidder.acted_share, 4))
        if progress:
            progress("episodes")
    tuned[label] = record
    return frames


def write_outputs(evaluation: Evaluation, out: Path, plots: bool = True) -> dict[str, Path]:
    """episodes.csv, summary.json (``{method: {...}}``, docs/metrics.md), meta.json, summary.md and PNG plots in ``out``
    (``plots=False``: no PNGs, and no matplotlib needed)."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"episodes": out / "episodes.csv", "summary": out / "summary.json", "meta": out / "meta.json"}
    evaluation.episodes.to_csv(paths["episodes"], index=False)
    paths["summary"].write_text(json.dumps(_jsonable(evaluation.summary), indent=1))
    paths["meta"].write_text(json.dumps(_jsonable(evaluation.meta), indent=1))
    paths.update(write_report(evaluation.episodes, evaluation.summary, evaluation.meta, out, plots=plots))
    return paths


def _jsonable(obj: Any) -> Any:
    """NaN and inf are not JSON: write them as null."""
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, float | np.floating) and not np.isfinite(obj):
        return None
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


__all__ = [
    "Evaluation",
    "EvaluationError",
    "MarketError",
    "episode_rows",
    "evaluate",
    "split_days",
    "summarize",
    "write_outputs",
]
