"""Benchmark: the sorted-prefix-sum replay (training.replay.simulator) against the naive masked-sum replay.

One seeded random day of ``--impressions`` impressions (default 2,000,000) over 48 slots. Measures

(a) preprocessing: building the :class:`~training.replay.simulator.DayIndex` (per-slot sort + prefix sums),
    in total and per million impressions;
(b) one 48-slot episode, per episode, for batches of episodes replayed in lockstep: the fast
    :meth:`BatchedReplay.step` (a binary search per episode and slot) against the naive O(n) step
    (for each slot, ``won = ratio * u > m`` over the slot's rows, then masked sums; vectorized numpy
    over the batch), both without a budget. Medians over ``--repeats`` runs, printed side by side with
    the speedup, after checking that both give the same wins (exactly) and sums (to rounding).

Run: ``.venv/bin/python benchmarks/bench_simulator.py``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from machine import describe_machine  # benchmarks/machine.py, beside this script

from model.contract import SLOTS_PER_DAY
from training.market.schema import DayLog
from training.replay.simulator import BatchedReplay, DayIndex


def random_day(n: int, seed: int) -> DayLog:
    """A day like the synthetic markets: lognormal utilities and prices, sparse delivery, a few exact ties."""
    rng = np.random.default_rng(seed)
    # Busier afternoons than nights, so slot sizes vary as in real traffic.
    weights = 1.0 + 0.8 * np.sin(np.linspace(0.0, 2.0 * np.pi, SLOTS_PER_DAY, endpoint=False) - np.pi / 2) ** 2
    counts = rng.multinomial(n, weights / weights.sum())
    utility = rng.lognormal(0.0, 1.0, n)
    market_price = utility * rng.lognormal(0.2, 0.7, n)
    # 1% exact ties m == u, spread over the day: at ratio 1.0 the exact predicate must decide (and lose) them.
    ties = rng.random(n) < 0.01
    market_price[ties] = utility[ties]
    delivery = rng.binomial(1, 0.05, n) * utility * rng.lognormal(0.0, 0.3, n) / 0.05
    return DayLog(
        day=0,
        utility=utility,
        market_price=market_price,
        delivery=delivery,
        cost=market_price.copy(),
        slot_offsets=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
    )


def naive_episode(log: DayLog, ratios: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-(episode, slot) delivery, cost and wins by scanning every row of every slot (no budget).

    ``ratios`` is (episodes, 48). O(episodes * impressions) work, vectorized over rows and episodes.
    """
    n_episodes = ratios.shape[0]
    delivery = np.zeros((n_episodes, SLOTS_PER_DAY))
    cost = np.zeros((n_episodes, SLOTS_PER_DAY))
    wins = np.zeros((n_episodes, SLOTS_PER_DAY), dtype=np.int64)
    for t in range(SLOTS_PER_DAY):
        rows = log.slot_rows(t)
        u, m, d, c = log.utility[rows], log.market_price[rows], log.delivery[rows], log.cost[rows]
        won = ratios[:, t, None] * u > m  # (episodes, rows)
        delivery[:, t] = (won * d).sum(axis=1)
        cost[:, t] = (won * c).sum(axis=1)
        wins[:, t] = won.sum(axis=1)
    return delivery, cost, wins


def fast_episode(env: BatchedReplay, ratios: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The same outputs from :class:`BatchedReplay` (reset, then 48 steps)."""
    env.reset()
    steps = [env.step(ratios[:, t]) for t in range(SLOTS_PER_DAY)]
    return tuple(np.stack([getattr(s, name) for s in steps], axis=1) for name in ("delivery", "cost", "wins"))


def median_seconds(run: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--impressions", type=int, default=2_000_000)
    parser.add_argument("--batches", default="1,64,256", help="comma-separated episode batch sizes")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]

    print(f"machine: {describe_machine()}")
    log = random_day(args.impressions, args.seed)
    print(
        f"day: {log.n_impressions:,} impressions, 48 slots ({np.diff(log.slot_offsets).min():,} to "
        f"{np.diff(log.slot_offsets).max():,} per slot), seed {args.seed}"
    )

    # (a) preprocessing
    build = median_seconds(lambda: DayIndex(log), max(3, args.repeats // 2))
    index = DayIndex(log)
    print("\n(a) preprocessing (DayIndex: per-slot argsort by m/u + prefix sums)")
    print(
        f"    build: {build * 1e3:.1f} ms  = {build * 1e3 / (log.n_impressions / 1e6):.1f} ms per million impressions"
        f"; index memory {index.nbytes / 2**20:.0f} MiB"
    )

    # (b) one 48-slot episode, per episode
    print(f"\n(b) one 48-slot episode, no budget; median of {args.repeats} runs, time per episode")
    print(f"    {'batch':>5}  {'fast step':>12}  {'naive step':>12}  {'speedup':>8}  {'one step() call':>15}  check")
    rng = np.random.default_rng(args.seed + 1)
    for batch in batches:
        ratios = rng.uniform(0.0, 4.0, (batch, SLOTS_PER_DAY))
        ratios[:, 0] = 1.0  # one slot bids exactly on the m == u ties
        env = BatchedReplay([index], np.zeros(batch, dtype=np.int64))

        fast = fast_episode(env, ratios)
        naive = naive_episode(log, ratios)
        same_wins = np.array_equal(fast[2], naive[2])
        worst = max(
            float(np.max(np.abs(f - g) / np.maximum(np.abs(g), 1e-300)))
            for f, g in zip(fast[:2], naive[:2], strict=True)
        )
        if not same_wins or worst > 1e-9:
            raise SystemExit(f"MISMATCH at batch {batch}: wins equal {same_wins}, worst relative sum error {worst:.3g}")

        fast_s = median_seconds(lambda env=env, ratios=ratios: fast_episode(env, ratios), args.repeats) / batch
        naive_s = median_seconds(lambda ratios=ratios: naive_episode(log, ratios), args.repeats) / batch
        # One step() call advances the whole batch by a slot; at small batches its fixed cost dominates.
        call_us = fast_s * batch / SLOTS_PER_DAY * 1e6
        print(
            f"    {batch:>5}  {fast_s * 1e3:>9.3f} ms  {naive_s * 1e3:>9.3f} ms  {naive_s / fast_s:>7.0f}x  "
            f"{call_us:>12.0f} us  wins identical, sums within {worst:.1e} relative"
        )


if __name__ == "__main__":
    main()
