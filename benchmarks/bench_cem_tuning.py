"""Benchmark: CEM's tuning on a market's train days, the five-draw pick (training.bidders.cem.tune) against the
random search alone (what the previous tuner did: 48 candidates on one noise draw, the best kept).

The rescoring replays the search's best ``RESCORED`` candidates on ``RESCORE_SEEDS`` more noise draws, so it costs
those replays on top of the search; this measures both on the same loaded days, one after the other.

    .venv/bin/python benchmarks/bench_cem_tuning.py [--data data/suite/bench] [--setting sc] [--repeats 3]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from machine import describe_machine  # benchmarks/machine.py, beside this script
from timing import median_ms

from model.contract import Setting
from training.bidders import cem
from training.bidders.tuning import best_of, candidate_scores
from training.market.dataset import Market
from training.replay.dayset import DaySet

N_RANDOM = 48


def search_only(train: DaySet, seed: int = 0) -> float:
    """The previous tuner: the search's scores on one draw, the best kept (its score returned)."""
    rng = np.random.default_rng([seed, 0xCE3])
    candidates = cem.sample_candidates(rng, N_RANDOM)
    profile = train.traffic_profile()
    tiled = {k: np.repeat(v, len(train)) for k, v in candidates.items()}
    scores = candidate_scores(lambda _: cem.CEM(profile, **tiled), N_RANDOM, train, seed)
    return best_of(scores, candidates)[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=Path("data/suite/bench"))
    parser.add_argument("--setting", choices=["sc", "mc"], default="sc")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    train = DaySet.load(Market.open(args.data), "train", Setting(args.setting))
    print(describe_machine())
    print(f"market {args.data}: {len(train)} train days, {sum(d.n_impressions for d in train.logs):,} impressions")
    search = median_ms(lambda: search_only(train), args.repeats)
    five = median_ms(lambda: cem.tune(train, seed=0, n_random=N_RANDOM), args.repeats)
    replays = N_RANDOM + cem.RESCORED * cem.RESCORE_SEEDS
    rescored = f"{N_RANDOM} + {cem.RESCORED} x {cem.RESCORE_SEEDS}"
    print(f"search alone ({N_RANDOM} candidates x 1 draw): median {search / 1e3:6.2f} s")
    print(f"five-draw pick ({rescored} = {replays} replays): median {five / 1e3:6.2f} s")
    print(f"five-draw / search alone: {five / search:.2f}x (replays {replays / N_RANDOM:.2f}x)")


if __name__ == "__main__":
    main()
