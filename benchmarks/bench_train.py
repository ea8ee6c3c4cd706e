"""Benchmark: the cost of one SAC gradient update and of one epoch's collection, CBRL against plain SAC (CRL).

Three configs, CRL, the paper-form CBRL and the default (residual) CBRL, all otherwise the default
``SACConfig`` (one torch thread), update from the same kind of replay buffer:
96 stochastic episodes (the 24 training days of a generated market, 4 episodes each). The script
times ``--updates`` updates of each and one collection of the 96 episodes, then prints the medians
side by side with each one's cost as a multiple of CRL's. CBRL's extra cost is its posterior encoder: a
forward and backward pass over every sampled episode in each update, and an encoding of the
transitions seen so far at every slot while acting. The residual adds the PID's ratio on every prefix
(one more feature) to each observation rebuild. Last, model selection's cost per epoch: the default CBRL's greedy
play of the validation days (fold 0) with one noise stream and with SC's default of several
(``--selection-seeds``), beside the epoch they are part of.

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
from training.market.dataset import Market
from training.market.generator import config_with, generate_market
from training.replay.dayset import DaySet, split_validation
from training.rl.buffer import EpisodeBuffer
from training.rl.config import SELECTION_SEEDS, SACConfig
from training.rl.curriculum import SPARSE_ONLY
from training.rl.loop import greedy_scores, play_days
from training.rl.policy_bidder import PolicyBidder
from training.rl.sac import SACAgent

VARIANTS = {
    "CRL (plain SAC)": ("crl", None),
    "CBRL, paper form": ("cbrl", False),
    "CBRL (default: residual)": ("cbrl", True),
}
"""The timed configs: name -> (algo, residual); ``None`` is SACConfig's default for the algo."""


def untuned_controller() -> dict[str, object]:
    """A residual run's reference PID: its untuned defaults time the same work as a tuned one."""
    gains = ControllerGains()
    return {**gains.tuned(), "traffic_profile": list(gains.traffic_profile)}


def time_agent(
    algo: str, residual: bool | None, days: DaySet, updates: int, repeats: int, seed: int
) -> tuple[float, float]:
    """Median seconds per update (over ``repeats`` blocks of ``updates``) and per 96-episode collection."""
    config = SACConfig(algo=algo, seed=seed, controller=untuned_controller(), residual=residual)
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


def time_selection(days: DaySet, streams: int, repeats: int, seed: int) -> tuple[float, int]:
    """Median seconds of model selection's play of the validation days with ``streams`` noise streams, and how
    many validation days that is."""
    config = SACConfig(algo="cbrl", seed=seed, controller=untuned_controller()).resolve(Setting.SC)
    agent = SACAgent(config)
    _, validation = split_validation(days, config.validation_fraction, config.validation_fold)
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        greedy_scores(agent, days, validation, streams)
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), len(validation)


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
        many = SELECTION_SEEDS["sc"]
        (one_stream, held_out), (many_streams, _) = (
            time_selection(days, k, args.repeats, args.seed) for k in (1, many)
        )
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
    cbrl_epoch = updates * results["CBRL (default: residual)"][0] + results["CBRL (default: residual)"][1]
    print(f"\nmodel selection, default CBRL, {held_out} validation days (median of {args.repeats}):")
    print(f"  one stream {one_stream:.2f} s; {many} streams {many_streams:.2f} s ({many_streams / one_stream:.1f}x);")
    extra = (many_streams - one_stream) / cbrl_epoch
    print(f"  the {many - 1} extra streams add {extra:.0%} to an epoch of {cbrl_epoch:.1f} s (updates + collection)")


if __name__ == "__main__":
    main()
