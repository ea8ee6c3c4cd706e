"""Benchmark: a bootstrap day's replay index (training.replay.day_bootstrap), resampled from the logged day's index
against indexing the resample from scratch, on a market's train days.

Collection on bootstrap days (the SC default for CBRL) builds one resampled index per train day and epoch; this
measures that step per day both ways, with the same Poisson draws, and checks the two indexes are equal.

    .venv/bin/python benchmarks/bench_bootstrap.py [--data data/suite/bench] [--days 6] [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from machine import describe_machine  # benchmarks/machine.py, beside this script
from timing import median_ms

from training.market.dataset import Market
from training.replay.day_bootstrap import bootstrap_index, bootstrap_log
from training.replay.simulator import DayIndex


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=Path("data/suite/bench"))
    parser.add_argument("--days", type=int, default=6, help="train days measured (the first N)")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    market = Market.open(args.data)
    entries = market.split("train")[: args.days]
    print(f"machine: {describe_machine()}; market {args.data}: {len(entries)} train days")
    print(f"{'day':>4} {'impressions':>12} {'from scratch ms':>16} {'resampled ms':>13} {'speedup':>8}")
    scratch_ms, resampled_ms = [], []
    for entry in entries:
        log = market.load(entry.day)
        logged = DayIndex(log)
        fast = bootstrap_index(logged, np.random.default_rng(0))
        slow = DayIndex(bootstrap_log(log, np.random.default_rng(0)))
        for name in ("order", "critical", "prefix_delivery", "prefix_cost", "segment_offsets"):
            if not np.array_equal(getattr(fast, name), getattr(slow, name)):
                sys.exit(f"day {entry.day}: the resampled index differs from the resample's own in {name}")
        rng_slow, rng_fast = np.random.default_rng(1), np.random.default_rng(1)
        slow_ms = median_ms(lambda: DayIndex(bootstrap_log(log, rng_slow)), args.repeats)  # noqa: B023
        fast_ms = median_ms(lambda: bootstrap_index(logged, rng_fast), args.repeats)  # noqa: B023
        scratch_ms.append(slow_ms)
        resampled_ms.append(fast_ms)
        print(f"{entry.day:>4} {log.n_impressions:>12,} {slow_ms:>16.1f} {fast_ms:>13.1f} {slow_ms / fast_ms:>7.2f}x")
    slow, fast = statistics.median(scratch_ms), statistics.median(resampled_ms)
    print(
        f"median per day: from scratch {slow:.1f} ms, resampled {fast:.1f} ms: {slow / fast:.2f}x; "
        f"an epoch of 24 such days: {24 * slow / 1e3:.2f} s against {24 * fast / 1e3:.2f} s"
    )


if __name__ == "__main__":
    main()
