"""Benchmark: the cost of one SAC gradient update and of one epoch's collection, CBRL against plain SAC (CRL).

Three configs, CRL, the paper-form CBRL and the default (residual) CBRL, all otherwise the default
``SACConfig`` (one torch thread), update from the same kind of replay buffer:
96 stochastic episodes (the 24 training days of a generated market, 4 episodes each). The script
times ``--updates`` updates of each and one collection of the 96 episodes, then prints the medians
side by side with each one's cost as a multiple of CRL's. CBRL's extra cost is its posterior encoder: a
forward and backward pass over every sampled episode in each update, and an encoding of the
transitions seen so far at every slot while acting. The residual adds the PID's ratio on every prefix
(one more feature) to each observation rebuild.

Run: ``.venv/bin/python benchmarks/bench_train.py`` (generates a 30-day market of ``--impressions``
impressions a day into a temporary directory first).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from machine import describe_machine  # benchmarks/machine.py, beside this script

from model.contract import Setting
from model.controller import ControllerGains
from training.agents.sac import EpisodeBuffer, PolicyBidder, SACAgent, SACConfig, play_days
from training.curriculum import SPARSE_ONLY
from training.dayset import DaySet
from training.market.dataset import Market
from training.market.generator import config_with, generate_market

VARIANTS = {
    "CRL (plain SAC)": ("crl", None),
    "CBRL, paper form": ("cbrl", False),
    "CBRL (default: residual)": ("cbrl", True),
}
"""The timed configs: name -> (algo, residual); ``None`` is SACConfig's default for the algo."""


def time_agent(
    algo: str, residual: bool | None, days: DaySet, updates: int, repeats: int, seed: int
) -> tuple[float, float]:
    """Median seconds per update (over ``repeats`` blocks of ``updates``) and per 96-episode collection."""
    gains = ControllerGains()  # a residual run's reference PID: its untuned defaults time the same work
    controller = {**gains.tuned(), "traffic_profile": list(gains.traffic_profile)}
    config = SACConfig(algo=algo, seed=seed, controller=controller, residual=residual)
    torch.set_num_threads(config.torch_threads)
    agent = SACAgent(config)
    chosen = np.arange(min(24, len(days)))
    buffer = EpisodeBuffer(config.buffer_episodes, agent.controller)
    bidder = lambda: PolicyBidder(agent.actor, True, agent.encoder, controller=agent.controller)  # noqa: E731
    collect = lambda: play_days(bidder(), days, chosen, 4, seed)  # noqa: E731
    outcome, oracle = collect()
    buffer.add(outcome.history, oracle)
    rng = np.random.default_rng(seed)
    per_update, per_collection = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(updates):
            agent.update(buffer.sample(rng, config.batch_size, SPARSE_ONLY[0], n_step=config.n_step))
        per_update.append((time.perf_counter() - start) / updates)
        start = time.perf_counter()
        collect()
        per_collection.append(time.perf_counter() - start)
    return statistics.median(per_update), statistics.median(per_collection)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--impressions", type=int, default=200_000, help="impressions per generated day")
    parser.add_argument("--updates", type=int, default=100, help="updates per timed block")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"machine: {describe_machine()}; torch {torch.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "market"
        generate_market(root, config_with(days_id=60, days_ood=0, impressions_per_day=args.impressions, seed=0))
        days = DaySet.load(Market.open(root), "train", Setting.SC)
        print(f"market: {len(days)} train days x {args.impressions:,} impressions; 96 episodes in the buffer")
        results = {
            name: time_agent(algo, residual, days, args.updates, args.repeats, args.seed)
            for name, (algo, residual) in VARIANTS.items()
        }
    updates = SACConfig().updates_per_epoch
    print(f"\nmedian of {args.repeats} blocks of {args.updates} updates (batch 256) and of {args.repeats} collections;")
    print(f"an epoch = {updates} updates + one collection; x CRL: the ratio to plain SAC in the same run")
    print(
        f"  {'':<26} {'one update':>11} {'x CRL':>6} {'collect 96 episodes':>20} {'x CRL':>6}"
        f" {'an epoch':>9} {'x CRL':>6}"
    )
    base_update, base_collect = results["CRL (plain SAC)"]
    base_epoch = updates * base_update + base_collect
    for name, (update, collect) in results.items():
        epoch = updates * update + collect
        print(
            f"  {name:<26} {update * 1e3:>8.1f} ms {update / base_update:>5.2f}x {collect:>18.2f} s"
            f" {collect / base_collect:>5.1f}x {epoch:>7.1f} s {epoch / base_epoch:>5.2f}x"
        )


if __name__ == "__main__":
    main()
