"""Benchmark: `rcb evaluate` of RM, PID and CEM over test + OOD days for 5 seeds.

Needs a market (default: the benchmark market, `rcb market generate --out data/bench`). Measures,
per split and setting: loading (days + cached oracles), tuning on the train days (cold, then served
from the tuning cache), and the evaluation episodes themselves. As a side-by-side baseline it
replays RM's test episodes one episode at a time (batch 1) against the batched harness.

    .venv/bin/python benchmarks/bench_evaluate.py [--data data/bench] [--seeds 5]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from machine import describe_machine  # benchmarks/machine.py, beside this script

from model.contract import Setting
from training.bidders.base import play
from training.bidders.tuned import TUNING_CACHE, tuned_baseline
from training.evaluation.evaluate import evaluate
from training.market.dataset import Market
from training.replay.dayset import DaySet
from training.replay.oracle import market_oracle


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=Path("data/bench"))
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    market = Market.open(args.data)
    impressions = sum(e.n_impressions for e in market.days if e.split in ("test", "ood"))
    print(
        f"machine: {describe_machine()}; market {args.data}: "
        f"{len(market.split('test'))} test + {len(market.split('ood'))} ood days, {impressions:,} impressions"
    )

    started = time.perf_counter()
    for setting in (Setting.SC, Setting.MC):
        market_oracle(market, setting)  # data preparation, cached beside the data
    print(
        f"oracles (slot-wise, both settings, all days; cached after the first run): "
        f"{time.perf_counter() - started:.1f} s"
    )

    shutil.rmtree(market.root / TUNING_CACHE, ignore_errors=True)
    total_cold = total_warm = 0.0
    for setting in (Setting.SC, Setting.MC):
        for split in ("test", "ood"):
            for label in ("cold", "warm"):
                started = time.perf_counter()
                result = evaluate(market, setting, split, ["rm", "pid", "cem"], args.seeds)
                elapsed = time.perf_counter() - started
                ans = {m: round(v["ans_mean"], 3) for m, v in result.summary.items()}
                episodes = len(result.episodes)
                print(f"{setting.value} {split:>4} {label}: {elapsed:6.1f} s  ({episodes} episodes)  ANS {ans}")
                if label == "cold":
                    total_cold += elapsed
                else:
                    total_warm += elapsed
    print(
        f"total, 4 split x setting runs: cold (tuning included) {total_cold:.1f} s, warm (tuned cache) "
        f"{total_warm:.1f} s; target < 120 s"
    )

    # Baseline: the same RM test episodes one at a time instead of one batch.
    days = DaySet.load(market, "test", Setting.SC)
    bidder, _ = tuned_baseline(market, "rm", Setting.SC, lambda: days)
    indexes = days.indexes()
    batched, single = [], []
    for _ in range(3):
        started = time.perf_counter()
        together = play(bidder, indexes, days.episode_days(), days.registration(), 0)
        batched.append(time.perf_counter() - started)
        started = time.perf_counter()
        alone = [
            play(bidder, [indexes[k]], np.zeros(1, np.int64), days.registration().take([k]), 0)
            for k in range(len(days))
        ]
        single.append(time.perf_counter() - started)
    assert np.allclose([a.delivery[0] for a in alone], together.delivery)
    b, s = statistics.median(batched), statistics.median(single)
    print(
        f"RM over {len(days)} test days: batched {b * 1e3:.1f} ms vs one episode at a time {s * 1e3:.1f} ms "
        f"-> {s / b:.1f}x"
    )


if __name__ == "__main__":
    main()
