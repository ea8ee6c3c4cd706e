"""Does the training reward rank bidders as the score does? The residual's simplest corrections, side by side.

A residual CBRL policy bids ``c_t * exp(step * tanh(u))`` around its PID ``c_t``. This probe plays the
market's tuned PID scaled by constant factors ``m`` (the simplest corrections such a policy can learn) on the
days training learns from (the train days less the validation days, :func:`training.replay.dayset.split_validation`)
and prints, per ``m``: the score model selection and the tables read (mean ``D / D* x 1[feasible]``), the CSR,
and the mean terminal reward of the original problem (Eq. 5, :func:`training.rl.rewards.indicator_reward`) under
each ``--margin`` (the rewards hold an episode to ``L (1 + margin)``, :attr:`SACConfig.roi_margin`). Where the
reward's best ``m`` is not the score's, SAC is taught to move away from what it is scored on::

    python -m research.reward_probe data/suite/bench --setting sc --margin 0 --margin 0.05
    python -m research.reward_probe data/suite/bench --setting sc --noise 0.05   # per-slot log-normal noise
    python -m research.reward_probe data/suite/* --setting mc --plot probe.png   # one panel per market

Deterministic (``--noise 0``): one episode per day. With noise, ``--repeats`` episodes per day, seeds fixed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, ClassVar, cast

import numpy as np
import pandas as pd
import typer

from model.contract import RATIO_MAX, Setting
from model.controller import RATIO_FLOOR
from model.history import History, Registration
from training.bidders.base import Bidder, SlotResult
from training.bidders.tuned import tuned_baseline
from training.bidders.tuning import episode_scores
from training.evaluation.evaluate import EvaluationError
from training.market.dataset import Market, MarketError
from training.replay.dayset import DaySet, split_validation, validation_folds
from training.replay.metrics import is_feasible
from training.rl.loop import play_days
from training.rl.rewards import indicator_reward

MULTIPLIERS = (0.85, 0.9, 0.95, 1.0, 1.05, 1.1, 1.15)
"""Default corrections ``m`` (1: the PID itself)."""


class ScaledBidder(Bidder):
    """``inner``'s ratio times a per-episode factor ``m``, times ``exp(noise * N(0, 1))`` per slot when ``noise``."""

    name: ClassVar[str] = "scaled"

    def __init__(self, inner: Bidder, multiplier: np.ndarray, noise: float = 0.0):
        self.inner, self.multiplier, self.noise = inner, np.asarray(multiplier, dtype=np.float64), noise
        self.rng = np.random.default_rng(0)  # reseeded by start()

    def start(self, registration: Registration, seed: int) -> None:
        self.inner.start(registration, seed)
        self.rng = np.random.default_rng([seed, 0x9B0BE])

    def bid(self, history: History) -> np.ndarray:
        ratio = self.inner.bid(history) * self.multiplier
        if self.noise > 0:
            ratio = ratio * np.exp(self.noise * self.rng.standard_normal(ratio.shape))
        return np.clip(ratio, RATIO_FLOOR, RATIO_MAX)

    def on_result(self, history: History, result: SlotResult) -> None:
        self.inner.on_result(history, result)

    @property
    def deterministic(self) -> bool:
        return self.noise == 0 and self.inner.deterministic


def probe(
    days: DaySet,
    controller: Bidder,
    multipliers: tuple[float, ...] = MULTIPLIERS,
    margins: tuple[float, ...] = (0.0, 0.05),
    noise: float = 0.0,
    repeats: int = 1,
    seed: int = 0,
    validation_fold: int = 0,
) -> pd.DataFrame:
    """One row per multiplier: ``score``, ``csr`` and ``reward_margin_<margin>`` (means over the episodes of
    ``controller`` x ``m`` on the training part of ``days``, each day ``repeats`` times): the days a run of
    ``rcb train --validation-fold validation_fold`` learns from."""
    learn, _ = split_validation(days, fold=validation_fold)
    factors = np.repeat(np.asarray(multipliers, dtype=np.float64), learn.size)  # multiplier-major
    chosen = np.tile(learn, len(multipliers))
    bidder = ScaledBidder(controller, np.tile(factors, repeats), noise)
    outcome, oracle = play_days(bidder, days, chosen, repeats, seed=seed)
    played = days.subset(np.tile(chosen, repeats))
    scores = episode_scores(outcome.delivery, outcome.cost, played)
    table = pd.DataFrame({"multiplier": np.tile(factors, repeats), "score": scores})
    table["csr"] = is_feasible(outcome.delivery, outcome.cost, played.roi_target, played.budget).astype(float)
    for margin in margins:
        rewards = indicator_reward(  # Eq. 5 reads the day's totals only: one column of them will do
            outcome.delivery[:, None],
            outcome.cost[:, None],
            played.roi_target * (1.0 + margin),
            played.budget,
            oracle,
        )
        table[f"reward_margin_{margin:g}"] = rewards[:, -1]
    return table.groupby("multiplier", as_index=False).mean()


def plot_probes(tables: dict[str, pd.DataFrame], path: Path, title: str) -> None:
    """One panel per market: the score and each margin's reward against the correction ``m``."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(3.2 * len(tables), 3.2))
    axes = fig.subplots(1, len(tables), squeeze=False)[0]
    for ax, (name, table) in zip(axes, tables.items(), strict=True):
        ax.plot(table["multiplier"], table["score"], "o-", color="k", label="score (ANS)")
        for column in [c for c in table.columns if c.startswith("reward_margin_")]:
            margin = column.removeprefix("reward_margin_")
            ax.plot(table["multiplier"], table[column], "s--", label=f"training reward, margin {margin}")
        ax.axvline(1.0, color="grey", lw=0.8, ls=":")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("m (ratio = PID x m)")
    axes[0].set_ylabel("mean over the training days")
    axes[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(
    data: Annotated[list[Path], typer.Argument(help="Market directories (rcb market generate/import).")],
    setting: Annotated[Setting, typer.Option(help="sc or mc.")] = Setting.SC,
    multiplier: Annotated[
        list[float] | None, typer.Option(help="A constant correction m of the PID (repeat; default 0.85-1.15).")
    ] = None,
    margin: Annotated[list[float] | None, typer.Option(help="A training ROI margin (repeat; default 0, 0.05).")] = None,
    noise: Annotated[float, typer.Option(min=0.0, help="Per-slot log-normal noise of the ratio (0: none).")] = 0.0,
    repeats: Annotated[int, typer.Option(min=1, help="Episodes per day when --noise > 0.")] = 4,
    plot: Annotated[Path | None, typer.Option(help="Also draw one panel per market into this PNG.")] = None,
    validation_fold: Annotated[
        int, typer.Option(min=0, help="Probe the days a run of rcb train --validation-fold K learns from.")
    ] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="The tables as JSON ({market: records}) on stdout.")] = False,
) -> None:
    multipliers = tuple(multiplier or MULTIPLIERS)
    margins = tuple(margin if margin is not None else (0.0, 0.05))
    if min(multipliers) <= 0 or min(margins, default=0.0) < 0:
        raise typer.BadParameter("multipliers must be > 0 and margins >= 0")
    if validation_fold >= validation_folds():
        raise typer.BadParameter(f"--validation-fold must be below {validation_folds()} (the folds of the train days)")
    tables: dict[str, pd.DataFrame] = {}
    for path in data:
        try:
            market = Market.open(path)
            days = DaySet.load(market, "train", setting)
            # The default binds this iteration's days; mypy cannot infer a lambda's type from a default.
            pid, _ = tuned_baseline(market, "pid", setting, cast(Callable[[], DaySet], lambda days=days: days))
        except (EvaluationError, MarketError) as exc:
            raise typer.BadParameter(str(exc)) from None
        tables[str(path)] = probe(
            days, pid, multipliers, margins, noise, repeats if noise > 0 else 1, validation_fold=validation_fold
        )
    if plot is not None:
        plot_probes(tables, plot, f"{setting}: PID x m on each market's training days (noise {noise:g})")
    if as_json:
        typer.echo(json.dumps({name: table.to_dict(orient="records") for name, table in tables.items()}))
        return
    for name, table in tables.items():
        typer.echo(f"{name} {setting} train days less validation, PID x m (noise {noise:g}); best per column in bold")
        columns = [c for c in table.columns if c != "multiplier"]
        typer.echo("| m | " + " | ".join(columns) + " |")
        typer.echo("|---:|" + "---:|" * len(columns))
        best = {c: table[c].idxmax() for c in columns}
        for i, row in table.iterrows():
            cells = [f"**{row[c]:.3f}**" if best[c] == i else f"{row[c]:.3f}" for c in columns]
            typer.echo(f"| {row['multiplier']:g} | " + " | ".join(cells) + " |")
        typer.echo("")
    if plot is not None:
        typer.echo(f"wrote {plot}")


if __name__ == "__main__":
    typer.run(main)
