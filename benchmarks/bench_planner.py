"""Benchmark: one decision of the planner (model/planner.py) against the PID controller's, per campaign and slot.

What a slot update would pay to serve ``plan``, or to train a residual policy on it: the stateless step
``plan(scenarios, history, ...)`` rebuilds the posterior from the stored stats and plans the rest of the day. The
histories are real: the planner plays a market's first test days (SC), and each is cut at the slots listed.
Side by side in the same run: the planner with its feasible value summed directly over (pairs x scales x ratios)
(``feasible_value_dense``, the form it had first) and the PID controller's stateless step (``controller_ratios``),
on the same histories. One thread; median wall time over repeats.

    .venv/bin/python benchmarks/bench_planner.py [--market data/suite/sparse] [--days 4] [--slots 0,8,24,47]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
from machine import describe_machine  # benchmarks/machine.py, beside this script
from timing import median_ms  # benchmarks/timing.py

from model import planner as law
from model.contract import Setting
from model.controller import ControllerGains, controller_ratios
from model.planner import plan
from training.bidders.base import play
from training.bidders.tuned import tuned_baseline
from training.evaluation.evaluate import split_days
from training.market.dataset import Market


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--market", type=Path, default=Path("data/suite/sparse"))
    parser.add_argument("--days", type=int, default=4, help="Test days played (one campaign each).")
    parser.add_argument("--slots", default="0,8,24,47")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(describe_machine())
    market = Market.open(args.market)
    days, train = split_days(market, "test", Setting.SC)
    started = time.perf_counter()
    planner, record = tuned_baseline(market, "plan", Setting.SC, train)
    scenarios = planner.scenarios
    print(
        f"planner on {scenarios.days} train days of {args.market} ready in {time.perf_counter() - started:.1f} s"
        " (its scenarios built; parameters from the tuning cache, or tuned now)"
    )
    pid, _ = tuned_baseline(market, "pid", Setting.SC, train)
    gains = ControllerGains.with_profile(pid.params()["traffic_profile"], pid.params())
    n = min(args.days, len(days))
    outcome = play(planner, days.indexes()[:n], np.arange(n), days.registration(1).take(list(range(n))), 0)
    margin, cost_sd = record["params"]["margin"], record["params"]["cost_sd"]
    print(
        f"| slot | plan, 1 campaign (ms) | direct sum (ms) | direct / plan | PID (ms) | plan / PID |"
        f" plan, {n} campaigns at once (ms) |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for slot in (int(s) for s in args.slots.split(",")):
        whole, one = outcome.history.until(slot), outcome.history.until(slot, [0])
        t_plan = median_ms(lambda h=one: plan(scenarios, h, margin, cost_sd), args.repeats)
        fast = law.feasible_value
        law.feasible_value = law.feasible_value_dense  # the direct sum, same answers (a test)
        try:
            t_dense = median_ms(lambda h=one: plan(scenarios, h, margin, cost_sd), args.repeats)
        finally:
            law.feasible_value = fast
        t_pid = median_ms(lambda h=one: controller_ratios(h, gains), args.repeats)
        t_all = median_ms(lambda h=whole: plan(scenarios, h, margin, cost_sd), args.repeats)
        print(
            f"| {slot} | {t_plan:.2f} | {t_dense:.2f} | {t_dense / t_plan:.1f}x | {t_pid:.3f} | {t_plan / t_pid:.0f}x |"
            f" {t_all:.1f} |"
        )


if __name__ == "__main__":
    main()
