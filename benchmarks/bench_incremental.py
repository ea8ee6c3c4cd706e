"""Benchmark: the incremental posterior (model/incremental.py) beside the full pass, at the day's last slot.

A slot-47 update either encodes the campaign's whole day (47 transitions through every block of every member:
``encoder.onnx``, what the service did) or only its new transition over the cached keys and values
(:class:`model.incremental.IncrementalEncoder`). Measured side by side in one run, in ABBA order (full, incremental,
incremental, full per round), each figure the median over the rounds and the ratio the median of the per-round
ratios:

* a 10,000-campaign slot-47 boundary in chunks of 128 (what the service's batch thread decides per model call):
  the encoder alone on prebuilt inputs, and the whole decision (``Policy.decide_states``: rebuild, noise,
  encoder, policy);
* a single slot-47 update (one campaign, ``decide_states``), the median over many calls;
* a miss: campaigns with no cached belief encoded from their first transition (one full pass, numpy).

Every belief is reset to its 46 transitions before each incremental run (outside the timing), so each run does
the slot-47 work. BLAS runs one thread (``OPENBLAS_NUM_THREADS=1``, as onnxruntime's one intra-op thread): on
shared cores OpenBLAS's threads cost small products 100 times what they compute.

    .venv/bin/python benchmarks/bench_incremental.py [--model models/default] [--campaigns 10000] [--rounds 3]
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_policy import random_states  # benchmarks/, beside this script
from machine import describe_machine

from model.artifact import load_artifact
from model.incremental import Belief
from model.policy import Policy, states_inputs
from model.state import CampaignState

CHUNK = 128


def chunks(states: list[CampaignState]) -> list[list[CampaignState]]:
    return [states[s : s + CHUNK] for s in range(0, len(states), CHUNK)]


def timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return 1e3 * (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=Path("models/default"))
    parser.add_argument("--campaigns", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--singles", type=int, default=200)
    parser.add_argument("--miss", type=int, default=1000, help="campaigns encoded from nothing (a cold cache)")
    args = parser.parse_args()
    artifact = load_artifact(args.model, intra_op_threads=1)
    full, incremental = Policy(artifact), Policy(artifact)
    if not incremental.use_incremental(capacity=args.campaigns + 1):
        raise SystemExit(f"{args.model}: no incremental encoder for this model")
    engine = incremental.incremental
    assert engine is not None
    print(f"machine: {describe_machine()}; load {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}")
    print(f"model: {args.model}; {args.campaigns} campaigns at slot 47, chunks of {CHUNK}")
    rng = np.random.default_rng(0)
    at47 = random_states(rng, args.campaigns, 47)
    at46 = [
        CampaignState(**{**s.__dict__, "slot": 46, "stats": s.stats[:, :46].copy()}).decided(1.0, "bench") for s in at47
    ]
    for part in chunks(at46):  # the cache as slot 46 left it
        incremental.decide_states(part)
    keys = [(s.campaign, s.episode) for s in at47]
    saved: list[tuple[Belief, np.ndarray]] = []
    for belief in engine.cache.take(keys):
        assert belief is not None and belief.length == 46
        saved.append((belief, belief.sums.copy()))

    def reset() -> None:
        engine.cache.clear()
        for belief, sums in saved:
            belief.length, belief.sums = 46, sums.copy()
        engine.cache.put(keys, [b for b, _ in saved])

    inputs = [states_inputs(part, full.latent_dim, full.controller, full.own_ratio_scale) for part in chunks(at47)]
    parts = chunks(at47)
    part_keys = [keys[s : s + CHUNK] for s in range(0, len(keys), CHUNK)]

    def encoder_full() -> None:
        for x in inputs:
            assert x.steps is not None and x.mask is not None
            artifact.posterior(x.steps, x.mask)

    def encoder_incremental() -> None:
        for x, k in zip(inputs, part_keys, strict=True):
            assert x.steps is not None and x.mask is not None
            engine.posterior(k, x.steps, x.mask)

    def decide_full() -> None:
        for part in parts:
            full.decide_states(part)

    def decide_incremental() -> None:
        for part in parts:
            incremental.decide_states(part)

    # parity on the measured states, once
    reset()
    a = np.concatenate([full.decide_states(p).ratio for p in parts])
    b = np.concatenate([incremental.decide_states(p).ratio for p in parts])
    print(f"parity: max |ratio difference| {np.abs(a - b).max():.2e} over {len(a)} campaigns")

    rows: dict[str, tuple[list[float], list[float]]] = {}
    for name, old, new in (
        ("boundary: encoder", encoder_full, encoder_incremental),
        ("boundary: whole decide", decide_full, decide_incremental),
    ):
        olds, news = [], []
        for _ in range(args.rounds):
            for which in ("old", "new", "new", "old"):
                if which == "old":
                    olds.append(timed(old))
                else:
                    reset()
                    news.append(timed(new))
        rows[name] = (olds, news)

    one = at47[:1]
    olds, news = [], []
    for _ in range(args.singles):
        for which in ("old", "new", "new", "old"):
            if which == "old":
                olds.append(timed(lambda: full.decide_states(one)))
            else:
                belief, sums = saved[0]
                belief.length, belief.sums = 46, sums.copy()
                engine.cache.put(keys[:1], [belief])
                news.append(timed(lambda: incremental.decide_states(one)))
    rows["single update: whole decide"] = (olds, news)

    cold = at47[: args.miss]
    olds, news = [], []
    for _ in range(max(1, args.rounds // 2)):
        for which in ("old", "new", "new", "old"):
            if which == "old":
                olds.append(timed(lambda: [full.decide_states(p) for p in chunks(cold)]))
            else:
                engine.cache.clear()
                news.append(timed(lambda: [incremental.decide_states(p) for p in chunks(cold)]))
    rows[f"miss, {len(cold)} campaigns: whole decide"] = (olds, news)
    reset()

    print(f"{'measure':42s} {'full pass ms':>14s} {'incremental ms':>15s} {'full/incr.':>10s}")
    for name, (olds, news) in rows.items():
        pairs = len(news) // 2
        ratios = [(olds[2 * i] + olds[2 * i + 1]) / (news[2 * i] + news[2 * i + 1]) for i in range(pairs)]
        print(
            f"{name:42s} {statistics.median(olds):14.3f} {statistics.median(news):15.3f} "
            f"{statistics.median(ratios):9.2f}x"
        )
    sizes = [b.nbytes for b, _ in saved]
    print(
        f"belief per campaign: {sizes[0]} bytes (48-slot arrays); cache of {len(saved)}: {sum(sizes) / 2**20:.0f} MiB"
    )
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
