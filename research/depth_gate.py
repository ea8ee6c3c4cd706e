"""Probe: the planner behind a shield that its own depth flag switches on (``python -m research.depth_gate``).

The shield (:mod:`model.shield`) guards a policy out of its depth, and costs one that is not: on ``sparse``'s SC
test days it costs the planner 0.039 ANS, on its 100 OOD days it gains it 0.070 (RESULTS.md). The planner
can say when it is out of its depth (:class:`model.planner.Depth`: its posterior on the grids' edges, or no scenario
explaining the day's costs; alerts calibrated on the train days, as ``rcb export --plan`` writes them). ``gated``
bids the planner alone until the first slot its flag fires and behind the shield from there to the day's end
(latched: a day found out of the planner's depth stays so). Rows: ``pid``, ``plan``, ``shield:plan`` and
``gated``, each deterministic (one play), with paired bootstrap intervals against the PID and against
``shield:plan``, and the share of days the flag fired.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from model.contract import Setting
from model.controller import ControllerGains
from model.history import History, Registration
from model.planner import Depth, calibrated_alerts
from model.shield import ShieldConfig, shield
from research.significance import paired_gap
from training.bidders.base import Bidder, play
from training.bidders.planner import Planner, train_depth
from training.bidders.shielded import ShieldedBidder
from training.bidders.tuned import tuned_baseline
from training.evaluation.evaluate import episode_rows, split_days, summarize
from training.evaluation.shielding import shield_gains
from training.market.dataset import Market


class DepthGatedShield(Bidder):
    """The planner, behind the shield from the first slot its depth flag fires (per episode, for the day's rest)."""

    name: ClassVar[str] = "gated"

    def __init__(self, planner: Planner, gains: ControllerGains, alerts: tuple[float, float]):
        self.planner, self.gains, self.alerts = planner, gains, alerts
        self.config = ShieldConfig()
        self.flagged = np.zeros(0, dtype=bool)
        self.first_flag = np.zeros(0, dtype=np.int64)

    @property
    def deterministic(self) -> bool:
        return True

    def start(self, registration: Registration, seed: int) -> None:
        self.flagged = np.zeros(registration.n, dtype=bool)
        self.first_flag = np.full(registration.n, -1, dtype=np.int64)

    def bid(self, history: History) -> np.ndarray:
        ratio, found = self.planner.decide(history)
        depth = Depth(found.edge, found.misfit, *self.alerts)
        newly = depth.out & ~self.flagged if history.slot > 0 else np.zeros(history.n, dtype=bool)
        self.first_flag[newly] = history.slot
        self.flagged |= newly
        guarded = shield(history, ratio, self.gains, self.config).ratio
        return np.where(self.flagged, guarded, ratio)


def probe(market_dir: Path, split: str, setting: Setting) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The four rows' episodes on ``market_dir``'s ``split`` and what the gate did."""
    market = Market.open(market_dir)
    days, train = split_days(market, split, setting)
    planner, _ = tuned_baseline(market, "plan", setting, train)
    pid, _ = tuned_baseline(market, "pid", setting, train)
    assert isinstance(planner, Planner)
    gains = shield_gains(planner, market, setting, train)  # what rcb evaluate's shield:plan runs
    alerts = calibrated_alerts(*train_depth(planner, train()))
    gated = DepthGatedShield(planner, gains, alerts)
    frames = []
    players = (("pid", pid), ("plan", planner), ("shield:plan", ShieldedBidder(planner, gains)), ("gated", gated))
    for label, bidder in players:
        outcome = play(bidder, days.indexes(), days.episode_days(), days.registration(), 0)
        frames.append(episode_rows(label, 0, days, outcome.delivery, outcome.cost))
    first = gated.first_flag
    info = {
        "alerts": {"edge": alerts[0], "misfit": alerts[1]},
        "days": len(days),
        "flagged_days": int((first >= 0).sum()),
        "median_first_flag_slot": float(np.median(first[first >= 0])) if (first >= 0).any() else None,
    }
    return pd.concat(frames, ignore_index=True), info


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("market", type=Path)
    parser.add_argument("--split", required=True, choices=("test", "ood"))
    parser.add_argument("--setting", default="sc", choices=("sc", "mc"))
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    episodes, info = probe(args.market, args.split, Setting(args.setting))
    args.out.mkdir(parents=True, exist_ok=True)
    episodes.to_csv(args.out / "episodes.csv", index=False)
    summary = summarize(episodes, ["pid", "plan", "shield:plan", "gated"])
    (args.out / "summary.json").write_text(json.dumps({"summary": summary, "gate": info}, indent=1))
    for label, row in summary.items():
        print(f"{label:12s} {row['ans_median']:.3f} ({row['csr']:.2f})")
    for baseline in ("pid", "shield:plan"):
        gap = paired_gap(episodes, "gated", baseline)
        print(f"gated - {baseline} over {gap.days} days (95% paired bootstrap): ANS {gap.describe()}")
    print(json.dumps(info))


if __name__ == "__main__":
    main()
