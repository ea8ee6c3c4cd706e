"""Benchmark: the planner's posterior evidence (``model.planner.evidence``) summed in place slot by slot, against the
baseline form (the slots' terms concatenated and summed by ``np.cumsum``). Both add the terms in slot
order, so they give the same numbers to the bit (asserted here on every history measured).

The histories: the exported planner (``rcb export --plan``) plays a market's first 8 test days (MC) as 64 campaigns,
cut at the slots shown. One thread; median of 7. Also the whole served decision (``TunedPlanner.ratios``) now, and
per slot (slot 0 with every campaign registered differently, as MC budgets are, and all alike).

    .venv/bin/python benchmarks/bench_planner_evidence.py [--model out/plan-bench-mc] [--market data/suite/bench]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
from machine import describe_machine  # benchmarks/machine.py, beside this script
from timing import median_ms  # benchmarks/timing.py

from model import planner as law
from model.artifact import load_artifact
from model.contract import Setting
from model.history import History, Registration
from training.bidders.base import play
from training.bidders.onnx import OnnxBidder
from training.evaluation.evaluate import split_days
from training.market.dataset import Market


def evidence_by_cumsum(
    scenarios: law.Scenarios, history: History, cost_sd: np.ndarray, exclude: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``model.planner.evidence`` in its baseline form."""
    n, days = history.n, scenarios.days
    log_market = np.broadcast_to(-0.5 * (law.LOG_PRICES / law.PRICE_SD) ** 2, (n, days, law.PRICE_K.size)).copy()
    log_market[exclude >= 0, exclude[exclude >= 0]] = -np.inf
    expected = np.zeros((n, days, law.PRICE_K.size))
    played = history.slot
    seen = scenarios.auctions[None, :, :played].sum(axis=2) * np.ones((n, 1))
    at = law.grid_index(history.ratios[:, :played])[:, :, None] - law.PRICE_K * law.PRICE_STEPS
    slots = np.arange(played)[None, :, None]
    traffic = history.auctions[:, :played, None] / np.maximum(scenarios.auctions[:, :played].T[None], 1.0)
    cost = np.moveaxis(scenarios.cost[:, slots, at], 0, 2) * traffic[..., None] * np.exp(law.LOG_PRICES)
    floor = scenarios.cost_floor
    residual = np.log(history.cost[:, :played, None, None] + floor) - np.log(cost + floor)
    terms = -0.5 * (residual / cost_sd[:, None, None, None]) ** 2
    log_market = np.cumsum(np.concatenate([log_market[:, None], terms], axis=1), axis=1)[:, -1]
    delivery = np.moveaxis(scenarios.delivery[:, slots, at], 0, 2) * traffic[..., None]
    expected = np.cumsum(np.concatenate([expected[:, None], delivery], axis=1), axis=1)[:, -1]
    return log_market, expected, seen


def first_call_ms(fn: Callable[[], object]) -> float:
    """One call, unwarmed: a plan cache's first answer is the figure (``median_ms`` would warm it up first)."""
    start = time.perf_counter()
    fn()
    return 1e3 * (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=Path("out/plan-bench-mc"), help="rcb export --plan's output")
    parser.add_argument("--market", type=Path, default=Path("data/suite/bench"))
    args = parser.parse_args()
    print(f"machine: {describe_machine()}")
    artifact = load_artifact(args.model)
    planner = artifact.planner
    if planner is None:
        parser.error(f"--model {args.model} is not a planner model (rcb export --plan)")
    days, _ = split_days(Market.open(args.market), "test", Setting(artifact.card.setting))
    shown = days.subset(np.arange(min(8, len(days))))
    played = play(OnnxBidder(artifact), shown.indexes(), shown.episode_days(8), shown.registration(8), 0).history
    print("| slot | evidence, cumsum (before) | evidence, in place (now) | before / now | whole decision now |")
    print("|---:|---:|---:|---:|---:|")
    for slot in (8, 24, 47):
        history = played.until(slot)
        sd, exclude = np.full(history.n, planner.cost_sd), np.full(history.n, -1)
        now = law.evidence(planner.scenarios, history, sd, exclude)
        before = evidence_by_cumsum(planner.scenarios, history, sd, exclude)
        assert all(np.array_equal(a, b) for a, b in zip(now, before, strict=True)), "the two forms differ"
        args_ = (planner.scenarios, history, sd, exclude)
        old = median_ms(partial(evidence_by_cumsum, *args_), 7) / history.n
        new = median_ms(partial(law.evidence, *args_), 7) / history.n
        whole = median_ms(partial(planner.ratios, history), 3) / history.n
        print(f"| {slot} | {old:.3f} ms | {new:.3f} ms | {old / new:.2f}x | {whole:.2f} ms |")
    print(f"(ms per campaign; {played.n} campaigns; identical evidence asserted)")
    # the served decision slot by slot; slot 0 twice: every campaign registered differently (MC budgets: no cache
    # hit) and all registered alike (one plan for all, then the cache)
    print("\n| slot | served decision (TunedPlanner) |\n|---:|---:|")
    registration = played.registration
    distinct = History(Registration(registration.roi_target, registration.budget * (1 + np.arange(played.n) / 1e3)))
    fresh = law.TunedPlanner(planner.scenarios, planner.margin, planner.cost_sd, planner.noise_aware)
    first = first_call_ms(partial(fresh.ratios, distinct)) / played.n
    print(f"| 0, distinct registrations | {first:.2f} ms |")
    alike = History(Registration.of(1.0, float(registration.budget[0]), n=played.n))
    once = law.TunedPlanner(planner.scenarios, planner.margin, planner.cost_sd, planner.noise_aware)
    print(f"| 0, alike (first call) | {first_call_ms(partial(once.ratios, alike)) / played.n:.2f} ms |")
    for slot in (1, 4, 8, 24, 47):
        whole = median_ms(partial(planner.ratios, played.until(slot)), 3) / played.n
        print(f"| {slot} | {whole:.2f} ms |")


if __name__ == "__main__":
    main()
