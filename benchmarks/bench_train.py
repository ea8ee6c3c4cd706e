"""Benchmark: the cost of one SAC gradient update and of one epoch's collection, CBRL against plain SAC (CRL).

Both agents use the default ``SACConfig`` (one torch thread) and update from the same replay buffer:
96 stochastic episodes (the 24 training days of a generated market, 4 episodes each). The script
times ``--updates`` updates of each and one collection of the 96 episodes, then prints the medians
side by side with CBRL's cost as a multiple of CRL's. CBRL's extra cost is its posterior encoder: a
forward and backward pass over every sampled episode in each update, and an encoding of the
transitions seen so far at every slot while acting.

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


def time_agent(algo: str, days: DaySet, updates: int, repeats: int, seed: int) -> tuple[float, float]:
    """Median seconds per update (over ``repeats`` blocks of ``updates``) and per 96-episode collection."""
    gains = ControllerGains()  # a residual run's reference PID: its untuned defaults time the same work
    controller = {**gains.tuned(), "traffic_profile": list(gains.traffic_profile)}
    config = SACConfig(algo=algo, seed=seed, controller=controller)
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
        results = {algo: time_agent(algo, days, args.updates, args.repeats, args.seed) for algo in ("crl", "cbrl")}
    (crl_update, crl_collect), (cbrl_update, cbrl_collect) = results["crl"], results["cbrl"]
    print(f"\nmedian of {args.repeats} blocks of {args.updates} updates (batch 256) and of {args.repeats} collections")
    print(f"  {'':<28} {'CRL (plain SAC)':>16} {'CBRL':>10} {'CBRL / CRL':>11}")
    print(
        f"  {'one gradient update':<28} {crl_update * 1e3:>13.1f} ms {cbrl_update * 1e3:>7.1f} ms "
        f"{cbrl_update / crl_update:>10.2f}x"
    )
    print(
        f"  {'collect 96 episodes':<28} {crl_collect:>14.2f} s {cbrl_collect:>8.2f} s "
        f"{cbrl_collect / crl_collect:>10.1f}x"
    )
    updates = SACConfig().updates_per_epoch
    epoch = lambda update, collect: updates * update + collect  # noqa: E731
    crl_epoch, cbrl_epoch = epoch(crl_update, crl_collect), epoch(cbrl_update, cbrl_collect)
    label = f"an epoch ({updates} updates)"
    print(f"  {label:<28} {crl_epoch:>14.1f} s {cbrl_epoch:>8.1f} s {cbrl_epoch / crl_epoch:>10.2f}x")


if __name__ == "__main__":
    main()
