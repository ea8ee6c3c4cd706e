"""How much of a day's hindsight its MC constraints carry, per recipe.

For every day of a market, the ``prior`` constraints (the manifest's, or drawn again) and the ``paper``
recipe's on the same impressions, with the slot-wise oracle's ``D*`` under each. Prints, per recipe and
split: corr(log B, log D*) (how well the budget alone predicts the best achievable delivery: the leak),
the share of days where the budget binds the oracle, where the ROI target does, and the days where no
bidder reaches L (D* = 0).

    .venv/bin/python benchmarks/constraint_hindsight.py data/suite/bench
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from rich.progress import track

from training.market.constraints import curve_of, draw_market_constraints, draw_paper_constraints
from training.market.dataset import Market
from training.replay.oracle import slot_oracle
from training.replay.simulator import DayIndex


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("market", type=Path)
    parser.add_argument("--seed", type=int, default=None, help="Constraint seed (default: the market's).")
    parser.add_argument("--json", type=Path, help="Also write the figures here.")
    args = parser.parse_args()
    market = Market.open(args.market)
    seed = args.seed if args.seed is not None else int(market.source.get("config", {}).get("seed", 0))
    indexes = {e.day: DayIndex(market.load(e.day)) for e in track(market.days, description="loading days")}
    curves = {day: curve_of(index) for day, index in indexes.items()}
    prior = draw_market_constraints(curves, {e.day: e.split for e in market.days}, seed)
    rows = []
    for entry in track(market.days, description="oracles (2 per day)"):
        index = indexes[entry.day]
        paper = draw_paper_constraints(index, np.random.default_rng([seed, entry.day, 1]))
        for recipe, drawn in (("prior", prior[entry.day]), ("paper", paper)):
            best = slot_oracle(index, drawn.roi_target, drawn.budget)
            rows.append(
                {
                    "recipe": recipe,
                    "split": entry.split,
                    "budget": drawn.budget,
                    "d_star": best.delivery,
                    "budget_binds": best.cost >= 0.98 * drawn.budget,
                    "roi_binds": best.delivery > 0 and best.delivery <= 1.02 * drawn.roi_target * best.cost,
                }
            )
    report = {}
    print(f"{args.market}: {len(market.days)} days, constraint seed {seed}")
    print("| recipe | split | days | corr(log B, log D*) | budget binds | ROI binds | D* = 0 |")
    print("|:---|:---|---:|---:|---:|---:|---:|")
    for recipe in ("prior", "paper"):
        for split in ("train", "test", "ood", "all"):
            sel = [r for r in rows if r["recipe"] == recipe and (split == "all" or r["split"] == split)]
            if not sel:
                continue
            reach = [r for r in sel if r["d_star"] > 0]
            corr = float(np.corrcoef(np.log([r["budget"] for r in reach]), np.log([r["d_star"] for r in reach]))[0, 1])
            figures = {
                "days": len(sel),
                "corr_log_budget_log_dstar": round(corr, 3),
                "budget_binds": round(float(np.mean([r["budget_binds"] for r in sel])), 3),
                "roi_binds": round(float(np.mean([r["roi_binds"] for r in sel])), 3),
                "zero_oracle_days": len(sel) - len(reach),
            }
            report[f"{recipe}/{split}"] = figures
            print(
                f"| {recipe} | {split} | {figures['days']} | {corr:.2f} | {figures['budget_binds']:.0%} |"
                f" {figures['roi_binds']:.0%} | {figures['zero_oracle_days']} |"
            )
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
