"""Probe: the planner beside the PID on a split, with its margin frontier (``python -m research.planner_evidence``).

The planner (:mod:`training.bidders.planner`, ``plan`` in ``rcb evaluate``) takes the train days as its scenarios and
tunes its margin and cost noise there, each day played without its own scenario. This probe prints the tuned
parameters, the PID's and the planner's rows, and the rows at every margin (for reading, not a choice);
``--noise-aware`` also tunes the count that weighs a scenario by the chance its delivery noise keeps the ROI on
target; ``--out`` writes ``episodes.csv`` and ``plan.json``. Train days are refused: they are its scenarios.

    python -m research.planner_evidence data/suite/sparse --split test --out out/plan/sparse-test
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import pandas as pd
import typer

from model.contract import Setting
from training.bidders.base import play
from training.bidders.planner import MARGINS, Planner, scenarios_of, tune_on
from training.bidders.tuned import tuned_baseline
from training.evaluation.evaluate import episode_rows, split_days, summarize
from training.market.dataset import Market

HOLDS_TRAIN_DAYS = "its scenarios are the train days"
"""Why the probe does not play train days; ``rcb evaluate`` plays them leave-one-out
(:func:`training.bidders.planner.without_own_days`)."""


def main(
    data: Annotated[Path, typer.Argument(help="A market directory.")],
    split: Annotated[
        str, typer.Option(help="test or ood: the days to play (not train days: they are its scenarios).")
    ] = "test",
    setting: Annotated[Setting, typer.Option(help="sc or mc.")] = Setting.SC,
    out: Annotated[Path | None, typer.Option(help="Folder for plan.json and episodes.csv.")] = None,
    noise_aware: Annotated[
        bool, typer.Option(help="Tune the noise-aware count too (on or off, by the train score).")
    ] = False,
) -> None:
    """Tune the planner on the train days and play it beside the PID, at its tuned margin and at every margin it
    tunes among."""
    if split not in ("test", "ood"):
        raise typer.BadParameter(f"--split {split}: {HOLDS_TRAIN_DAYS}; play test or ood days")
    market = Market.open(data)
    days, train = split_days(market, split, setting)
    train_days = train()
    scenarios = scenarios_of(train_days)
    params, train_score, table = tune_on(train_days, scenarios, (False, True) if noise_aware else (False,))
    typer.echo(f"tuned on {len(train_days)} train days: {params} (train score {train_score:.3f})")
    for option in sorted({a for _, _, a in table}):
        top, (m, sd, _) = max((score, c) for c, score in table.items() if c[2] == option)
        typer.echo(f"best train score with noise_aware={option}: {top:.4f} (margin {m:g}, cost_sd {sd:g})")
    pid, _ = tuned_baseline(market, "pid", setting, train)
    outcome = play(pid, days.indexes(), days.episode_days(1), days.registration(1), 0)
    frames = {"pid": episode_rows("pid", 0, days, outcome.delivery, outcome.cost)}
    for m in MARGINS:  # the whole margin frontier, for reading (not a choice); "plan" is its tuned margin's row
        again = Planner(scenarios, m, params["cost_sd"], noise_aware=params.get("noise_aware", False))
        outcome = play(again, days.indexes(), days.episode_days(1), days.registration(1), 0)
        frames[f"plan@{m:g}"] = episode_rows(f"plan@{m:g}", 0, days, outcome.delivery, outcome.cost)
    tuned = frames[f"plan@{params['margin']:g}"].assign(method="plan")
    episodes = pd.concat([frames["pid"], tuned, *(f for k, f in frames.items() if k != "pid")], ignore_index=True)
    summary = summarize(episodes, list(dict.fromkeys(episodes["method"])))
    for label, row in summary.items():
        typer.echo(f"| {label} | {row['ans_median']:.3f} | {row['csr']:.3f} |")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        episodes.to_csv(out / "episodes.csv", index=False)
        (out / "plan.json").write_text(
            json.dumps(
                {
                    "params": params,
                    "train_score": train_score,
                    "summary": summary,
                    "candidates": [
                        {"margin": c[0], "cost_sd": c[1], "noise_aware": c[2], "train_score": x}
                        for c, x in table.items()
                    ],
                },
                indent=1,
                default=float,
            )
        )


if __name__ == "__main__":
    typer.run(main)
