"""How bidders pace a day, slot by slot: the mean ratio, the spent share of B and the cumulative ROI / L.

A bidder's score says how a day ended; this says how it got there. Two bidders can end at the same score from
different days (one bids above its controller from noon and spends more, one opens low) or at the same operating
point (RESULTS.md: on ``sparse`` the shipped model and the PID end at the same spend and ROI, so a
shield that lifts underspending cannot help)::

    python -m research.pacing data/suite/bench data/suite/sparse --setting mc --split train \\
        --method pid --method onnx:models/default --method shield:onnx:models/default --plot pacing.png

``--method`` is a baseline (``pid``, ...), ``onnx:MODEL_DIR``, ``ensemble:LABEL=GLOB`` or a run directory, each
optionally behind the shield (``shield:METHOD``, with the controller ``rcb evaluate`` gives it). One seed is played
(``--seed``).
Prints, per market and method, where the day ends (``--json``: one JSON object).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from model.contract import Setting
from model.roi import is_feasible, roi
from training.bidders.base import Bidder, Outcome
from training.bidders.shielded import ShieldedBidder
from training.evaluation.evaluate import EvaluationError, split_days
from training.evaluation.leakage import check_split, own_days_left_out
from training.evaluation.methods import method_bidder, unshielded
from training.evaluation.shielding import shield_config, shield_gains
from training.market.dataset import Market, MarketError
from training.replay.dayset import DaySet


def make_bidder(
    method: str, market: Market, setting: Setting, train: Callable[[], DaySet], split: str, days: DaySet
) -> Bidder:
    """The bidder ``rcb evaluate`` plays for ``method`` on ``days`` of ``split``
    (:func:`training.evaluation.evaluate.method_bidder`; the planner leave-one-out on train and validation days;
    behind the
    shield with the controller and band ``rcb evaluate`` gives it for ``shield:METHOD``)."""
    inner_method, shielded = unshielded(method)
    bidder = method_bidder(inner_method, market, setting, train)[0]
    bidder, _ = own_days_left_out(bidder, inner_method, split, days, train)
    if shielded:
        bidder = ShieldedBidder(bidder, shield_gains(bidder, market, setting, train), shield_config(bidder))
    return bidder


def trajectories(outcome: Outcome, days: DaySet) -> dict[str, np.ndarray]:
    """Per slot, over the played days: the mean ratio, the mean spent share of B (NaN without a budget) and the
    median cumulative ROI / L (NaN before any spend)."""
    history = outcome.history
    cost = np.cumsum(history.cost, axis=1)
    over_target = roi(np.cumsum(history.delivery, axis=1), cost) / days.roi_target[:, None]
    budget = days.budget[:, None]
    spent = np.where(np.isfinite(budget), cost / np.where(np.isfinite(budget), budget, 1.0), np.nan)
    with np.errstate(all="ignore"):  # an all-NaN slot (no spend yet anywhere) stays NaN
        return {
            "ratio": history.ratios.mean(axis=0),
            "spent_share": np.nanmean(spent, axis=0) if np.isfinite(budget).any() else np.full(cost.shape[1], np.nan),
            "roi_over_target": np.nanmedian(np.where(cost > 0, over_target, np.nan), axis=0),
        }


def day_ends(outcome: Outcome, days: DaySet) -> dict[str, float]:
    """Where the days end: mean spent share of B (NaN without one), median ROI / L, share of feasible days."""
    cost = outcome.cost
    over_target = roi(outcome.delivery, cost) / days.roi_target
    budgeted = np.isfinite(days.budget)
    spent = float(np.mean(cost[budgeted] / days.budget[budgeted])) if budgeted.any() else float("nan")
    feasible = is_feasible(outcome.delivery, cost, days.roi_target, days.budget)
    return {
        "spent_share": spent,
        "roi_over_target": float(np.median(over_target)),
        "feasible": float(np.mean(feasible)),
    }


def pace(
    data: Path, setting: Setting, split: str, methods: list[str], seed: int = 0
) -> dict[str, tuple[dict[str, np.ndarray], dict[str, float]]]:
    """Per method: its :func:`trajectories` and :func:`day_ends` on ``split`` of the market at ``data``."""
    market = Market.open(data)
    check_split(methods, market, split)
    days, train = split_days(market, split, setting)
    paced = {}
    for method in methods:
        bidder = make_bidder(method, market, setting, train, split, days)
        outcome = days.play(bidder, seed)
        paced[method] = (trajectories(outcome, days), day_ends(outcome, days))
    return paced


def plot_pacing(
    paced: dict[str, dict[str, tuple[dict[str, np.ndarray], dict[str, float]]]], path: Path, title: str
) -> None:
    """One column per market, one row per trajectory (the spent share only where a budget exists)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [("ratio", "bid ratio (mean over days)"), ("roi_over_target", "cumulative ROI / L (median)")]
    if any(np.isfinite(t["spent_share"]).any() for market in paced.values() for t, _ in market.values()):
        rows.insert(1, ("spent_share", "spent share of B (mean)"))
    fig, axes = plt.subplots(len(rows), len(paced), figsize=(4 * len(paced), 2.8 * len(rows)), squeeze=False)
    for j, (market, methods) in enumerate(paced.items()):
        for i, (key, label) in enumerate(rows):
            ax = axes[i, j]
            for method, (trajectory, _) in methods.items():
                ax.plot(np.arange(trajectory[key].size), trajectory[key], label=method)
            if key == "roi_over_target":
                ax.axhline(1.0, color="grey", lw=0.8, ls="--")
            if j == 0:
                ax.set_ylabel(label)
            if i == 0:
                ax.set_title(Path(market).name)
            if i == len(rows) - 1:
                ax.set_xlabel("slot")
    axes[0, 0].legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(
    data: Annotated[list[Path], typer.Argument(help="Market directories (rcb market generate/import).")],
    method: Annotated[
        list[str], typer.Option(help="A baseline, onnx:DIR, ensemble:LABEL=GLOB or a run; shield: (repeat).")
    ],
    setting: Annotated[Setting, typer.Option(help="sc or mc.")] = Setting.MC,
    split: Annotated[str, typer.Option(help="train, validation, test or ood.")] = "train",
    seed: Annotated[int, typer.Option(min=0, help="The seed played.")] = 0,
    plot: Annotated[Path | None, typer.Option(help="Draw the trajectories into this PNG.")] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Where the days end, as JSON, on stdout (null: no budget).")
    ] = False,
) -> None:
    paced = {}
    for path in data:
        try:
            paced[str(path)] = pace(path, setting, split, method, seed)
        except (EvaluationError, MarketError) as exc:
            raise typer.BadParameter(str(exc)) from None
    if plot is not None:
        plot_pacing(paced, plot, f"{setting}, {split} days, seed {seed}")
    ends: dict[str, dict[str, Any]] = {m: {k: e for k, (_, e) in v.items()} for m, v in paced.items()}
    if as_json:
        clean = {
            m: {k: {f: (None if np.isnan(x) else x) for f, x in e.items()} for k, e in v.items()}
            for m, v in ends.items()
        }
        typer.echo(json.dumps(clean))  # NaN (no budget) as null
        return
    for market, rows in ends.items():
        typer.echo(f"{market} {setting} {split}, seed {seed}: where the days end")
        typer.echo("| method | spent share of B | median ROI / L | feasible |")
        typer.echo("|:---|---:|---:|---:|")
        for name, end in rows.items():
            spent = "n/a (no budget)" if np.isnan(end["spent_share"]) else f"{end['spent_share']:.3f}"
            typer.echo(f"| {name} | {spent} | {end['roi_over_target']:.3f} | {end['feasible']:.2f} |")
        typer.echo("")
    if plot is not None:
        typer.echo(f"wrote {plot}")


if __name__ == "__main__":
    typer.run(main)
