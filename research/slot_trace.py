"""Slot by slot, how a method bids beside the market's tuned PID: where a model wins or loses a market.

A summary row says a model scored below the PID; this says how. It plays METHOD (behind the shield, as served: a
card's own band where it carries one; ``--unshielded``: alone) and the PID tuned on the market's train days over the
same episodes, one seed, and per slot of the day reports the median over the episodes of:

* ``ratio`` and ``pid_ratio``: what each bid;
* ``reference``: the ratio the shield's controller asks on the method's own history, the centre of its band (the
  card's controller for ``onnx:``, a residual run's own reference, the market's PID for baselines;
  :func:`training.evaluation.evaluate.shield_gains`);
* ``spent`` and ``pid_spent``: each one's cost so far, as a share of the PID's whole-day cost on the same episode,
  so a method that paces slower than the PID shows it at once, with a budget or without.

::

    python -m research.slot_trace data/suite-ood100/sparse --method onnx:models/default --split ood \\
        --out out/trace/sparse-ood

writes ``slots.csv`` (the table) and ``slots.png`` (ratios and spend by slot) and prints every fourth slot.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import numpy as np
import pandas as pd
import typer

from model.contract import Setting
from model.controller import controller_sequence
from model.history import History
from research.shield_sweep import REFERENCE, inner_bidder
from training.bidders.base import Bidder
from training.bidders.shielded import ShieldedBidder
from training.bidders.tuned import tuned_baseline
from training.evaluation.evaluate import EvaluationError, split_days
from training.evaluation.leakage import check_split
from training.evaluation.shielding import shield_config
from training.market.dataset import Market, MarketError
from training.replay.dayset import DaySet

COLUMNS = ("slot", "ratio", "reference", "pid_ratio", "spent", "pid_spent")
"""``slots.csv``'s columns, each a median over the episodes (``slot`` 0-47)."""


def _played(bidder: Bidder, days: DaySet, seed: int) -> History:
    return days.play(bidder, seed).history


def _spent_share(history: History, day_cost: np.ndarray) -> np.ndarray:
    """``(n, slots)``: cumulative cost over ``day_cost`` (the PID's day; NaN where the PID spent nothing)."""
    scale = np.where(day_cost > 0, day_cost, np.nan)[:, None]
    return np.cumsum(history.cost, axis=1) / scale


def trace(data: Path, split: str, setting: Setting, method: str, seed: int = 0, shielded: bool = True) -> pd.DataFrame:
    """Per slot, the medians of :data:`COLUMNS` over ``split``'s episodes of ``data``."""
    market = Market.open(data)
    check_split([method], market, split)
    days, train = split_days(market, split, setting)
    inner, gains = inner_bidder(method, market, setting, train, split, days)
    pid, _ = tuned_baseline(market, REFERENCE, setting, train)
    bidder = ShieldedBidder(inner, gains, shield_config(inner)) if shielded else inner
    ours, theirs = _played(bidder, days, seed), _played(pid, days, seed)
    slots = ours.ratios.shape[1]
    reference = controller_sequence(ours, gains, until=slots - 1)  # column t: the law after t slots, one pass
    pid_day = theirs.total_cost
    columns = {
        "ratio": ours.ratios,
        "reference": reference,
        "pid_ratio": theirs.ratios,
        "spent": _spent_share(ours, pid_day),
        "pid_spent": _spent_share(theirs, pid_day),
    }
    frame = pd.DataFrame({name: np.nanmedian(values, axis=0) for name, values in columns.items()})
    frame.insert(0, "slot", np.arange(slots))
    return frame


def plot(frame: pd.DataFrame, title: str, path: Path) -> None:
    """Two panels by slot: the ratios (the method's, its shield's reference, the PID's) and the spend shares."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    left.plot(frame.slot, frame.ratio, label="method")
    left.plot(frame.slot, frame.reference, ls="--", label="its shield's reference")
    left.plot(frame.slot, frame.pid_ratio, label="market's PID")
    left.set(xlabel="slot", ylabel="ratio (median over episodes)")
    right.plot(frame.slot, frame.spent, label="method")
    right.plot(frame.slot, frame.pid_spent, label="market's PID")
    right.set(xlabel="slot", ylabel="cost so far / PID's day cost (median)")
    for axis in (left, right):
        axis.legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(
    data: Annotated[Path, typer.Argument(help="A market directory (rcb market generate/import).")],
    method: Annotated[str, typer.Option(help="onnx:MODEL_DIR, ensemble:LABEL=GLOB or a baseline (rm, cem, plan).")],
    out: Annotated[Path, typer.Option(help="Directory for slots.csv and slots.png.")],
    split: Annotated[str, typer.Option(help="train, validation, test or ood.")] = "test",
    setting: Annotated[Setting, typer.Option(help="sc or mc.")] = Setting.MC,
    seed: Annotated[int, typer.Option(min=0, help="Seed of a stochastic method.")] = 0,
    unshielded: Annotated[bool, typer.Option("--unshielded", help="Play the method alone.")] = False,
) -> None:
    try:
        frame = trace(data, split, setting, method, seed, shielded=not unshielded)
    except (EvaluationError, MarketError) as exc:
        raise typer.BadParameter(str(exc)) from None
    out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out / "slots.csv", index=False)
    shown = f"{'' if unshielded else 'shield:'}{method}"
    plot(frame, f"{data} {split} {setting.value}: {shown} beside the market's PID (seed {seed})", out / "slots.png")
    typer.echo(frame.iloc[::4].round(3).to_string(index=False))
    typer.echo(f"wrote {out / 'slots.csv'} and {out / 'slots.png'}")


if __name__ == "__main__":
    typer.run(main)
