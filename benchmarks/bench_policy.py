"""Benchmark: the stateless decision step (model/policy.py) for 1 and 10,000 campaigns at the day's last slot.

What the service pays per slot update: rebuild each campaign's observations o_0..o_47 and its trajectory
from the stored stats (``states_inputs``), draw the noise, run the posterior encoder and the policy
(``Policy.decide_inputs``). Side by side in the same run, the baseline: the same ONNX calls on inputs
built beforehand, which is what the stateful bidders paid (they kept the observations between slots);
the ratio is the price of keeping nothing but raw stats. Also: decoding the stored blobs
(``CampaignState.from_bytes``), which the service does before deciding. One onnxruntime intra-op thread;
median wall time over repeats.

    .venv/bin/python benchmarks/bench_policy.py [--model models/default] [--batches 1,10000] [--slot 47]

``--model`` may be repeated: each model is measured on the same states, one table row per model and batch (a
residual model also runs its reference controller once per prefix when rebuilding the observations).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from machine import describe_machine  # benchmarks/machine.py, beside this script
from timing import median_ms  # benchmarks/timing.py

from model.artifact import load_artifact
from model.policy import Policy, states_inputs
from model.state import CampaignState


def random_states(rng: np.random.Generator, n: int, slot: int) -> list[CampaignState]:
    states = []
    for k in range(n):
        budget = None if k % 2 else float(rng.uniform(500, 5000))
        state = CampaignState.new(f"campaign-{k:06d}", "2026-11-26", float(rng.uniform(0.8, 1.3)), budget, 0)
        auctions = rng.integers(1000, 30000, slot)
        wins = (auctions * rng.uniform(0.001, 0.05, slot)).astype(int)
        cost = wins * rng.lognormal(0, 0.5, slot)
        delivery = cost * rng.lognormal(0, 0.8, slot) * (rng.random(slot) < 0.7)
        for s in range(slot):
            state = state.decided(float(rng.uniform(0.5, 2.0)), "bench").reported(
                delivery[s], cost[s], wins[s], auctions[s]
            )
        states.append(state.decided(1.0, "bench"))
    return states


def measure(policy: Policy, states: list[CampaignState], repeats: int) -> tuple[float, float, float]:
    """Median ms of the stateless step, of its rebuild + noise, and of the model calls alone."""
    latent_dim = policy.latent_dim
    prebuilt = states_inputs(states, latent_dim, policy.controller)
    stateless = policy.decide_states(states).ratio
    assert np.array_equal(stateless, policy.decide_inputs(prebuilt).ratio)
    step = median_ms(lambda: policy.decide_states(states), repeats)
    rebuild = median_ms(lambda: states_inputs(states, latent_dim, policy.controller), repeats)
    model = median_ms(lambda: policy.decide_inputs(prebuilt), repeats)
    return step, rebuild, model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, action="append", help="A model directory (repeatable).")
    parser.add_argument("--batches", default="1,10000")
    parser.add_argument("--slot", type=int, default=47, help="Slots already reported (47: the day's last decision).")
    args = parser.parse_args()
    policies = {
        model_dir: Policy(load_artifact(model_dir, intra_op_threads=1))
        for model_dir in args.model or [Path("models/default")]
    }
    print(f"machine: {describe_machine()}")
    for model_dir, policy in policies.items():
        card = policy.artifact.card
        kind = "residual, " if card.residual else ""
        print(f"model: {model_dir} ({card.algorithm}, {kind}latent {card.latent_dim}); slot {args.slot}")
    rng = np.random.default_rng(0)
    rows = []
    for n in [int(b) for b in args.batches.split(",")]:
        states = random_states(rng, n, args.slot)
        repeats = 200 if n <= 10 else 5
        blobs = [s.to_bytes() for s in states]  # the stored blobs do not depend on the model
        decode = median_ms(lambda blobs=blobs: [CampaignState.from_bytes(b) for b in blobs], repeats)
        size = float(np.mean([len(b) for b in blobs]))
        for model_dir, policy in policies.items():
            rows.append((model_dir, n, *measure(policy, states, repeats), decode, size))
    print()
    print(
        "| model | campaigns | stateless step (rebuild + encoder + policy) | of which rebuild + noise | model calls "
        "alone (baseline: inputs kept between slots) | step / baseline | decode blobs | blob bytes |"
    )
    print("|:---|---:|---:|---:|---:|---:|---:|---:|")
    for model_dir, n, step, rebuild, model, decode, size in rows:
        print(
            f"| {model_dir} | {n:,} | {step:.2f} ms ({1e3 * step / n:.0f} us each) | {rebuild:.2f} ms | {model:.2f} ms "
            f"| {step / model:.2f}x | {decode:.2f} ms | {size:,.0f} |"
        )


if __name__ == "__main__":
    main()
