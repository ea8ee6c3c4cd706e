"""Benchmark: generating the default market (80 days x 1,000,000 impressions) on this machine.

Prints wall time, throughput and the peak resident memory of the whole process tree (sampled),
for the parallel run (one worker per core) and, side by side, a single-worker run of a subset.

    .venv/bin/python benchmarks/bench_generate.py [--days-id 60 --days-ood 20 --impressions 1000000]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import psutil
from machine import describe_machine  # benchmarks/machine.py, beside this script

from training.market.generator import config_with, generate_market


class PeakTreeMemory:
    """Samples the RSS of this process plus its children every 50 ms; keeps the peak."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            total = me.memory_info().rss
            for child in me.children(recursive=True):
                with contextlib.suppress(psutil.NoSuchProcess):
                    total += child.memory_info().rss
            self.peak = max(self.peak, total)
            time.sleep(0.05)

    def __enter__(self) -> PeakTreeMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def run(days_id: int, days_ood: int, impressions: int, workers: int, seed: int) -> tuple[float, int, int, int]:
    out = Path(tempfile.mkdtemp(prefix="rcb-bench-gen-"))
    try:
        config = config_with(days_id=days_id, days_ood=days_ood, impressions_per_day=impressions, seed=seed)
        with PeakTreeMemory() as memory:
            started = time.perf_counter()
            market = generate_market(out, config, workers=workers)
            elapsed = time.perf_counter() - started
        rows = sum(d.n_impressions for d in market.days)
        disk = sum(p.stat().st_size for p in out.iterdir())
        return elapsed, rows, memory.peak, disk
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--days-id", type=int, default=60)
    parser.add_argument("--days-ood", type=int, default=20)
    parser.add_argument("--impressions", type=int, default=1_000_000)
    parser.add_argument("--serial-days", type=int, default=8, help="days in the single-worker comparison run")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    cores = os.cpu_count() or 1
    print(f"machine: {describe_machine()}; seed {args.seed}")
    n_days = args.days_id + args.days_ood
    elapsed, rows, peak, disk = run(args.days_id, args.days_ood, args.impressions, cores, args.seed)
    print(
        f"parallel ({cores} workers): {n_days} days, {rows:,} impressions in {elapsed:.1f} s"
        f" = {rows / elapsed / 1e6:.2f} M impressions/s; peak RSS (tree) {peak / 2**20:,.0f} MiB;"
        f" {disk / 2**20:,.0f} MiB on disk"
    )
    s_elapsed, s_rows, s_peak, _ = run(args.serial_days, 0, args.impressions, 1, args.seed)
    print(
        f"serial (1 worker):    {args.serial_days} days, {s_rows:,} impressions in {s_elapsed:.1f} s"
        f" = {s_rows / s_elapsed / 1e6:.2f} M impressions/s; peak RSS {s_peak / 2**20:,.0f} MiB"
    )
    print(f"parallel / serial throughput: {(rows / elapsed) / (s_rows / s_elapsed):.2f}x")
    print(f"target: full market within 180 s -> {'met' if elapsed <= 180 else 'MISSED'} ({elapsed:.1f} s)")


if __name__ == "__main__":
    main()
