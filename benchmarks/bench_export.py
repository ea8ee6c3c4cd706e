"""Benchmark: one slot's decision of the exported CBRL model in onnxruntime vs the torch forward it came from.

A decision is the posterior encoder over the campaign's trajectory (padded to 48 steps and masked: the
cost of the day's last slot, the worst case; ``model.trajectory`` feeds only the steps seen so far),
``z = mean + std * eps``, then the policy. Measured for one
campaign and for 10,000 campaigns in one batch, each campaign at a random slot of its day; one
intra-op thread on both sides (``intra_op_num_threads=1``, ``torch.set_num_threads(1)``); median
wall time over repeats; outputs checked equal within the export tolerances first.

onnxruntime goes through :meth:`model.artifact.Artifact.decide` (input checks included: what the
service pays); torch runs the eager modules under ``no_grad``. Without ``--run`` the networks are a
fresh CBRL agent with the current default config (latency does not depend on the weights).

    .venv/bin/python benchmarks/bench_export.py [--run RUN] [--batches 1,10000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from machine import describe_machine  # benchmarks/machine.py, beside this script
from timing import median_ms  # benchmarks/timing.py

from model.artifact import Artifact, EvaluationInfo, TrainingInfo, load_artifact
from model.contract import SLOTS_PER_DAY
from model.trajectory import prefix_mask, transitions
from training.export.card import Provenance
from training.export.onnx import export_modules, random_observations
from training.rl.config import SACConfig
from training.rl.sac import SACAgent


def inputs(rng: np.random.Generator, n: int, latent: int) -> tuple[np.ndarray, ...]:
    observations = random_observations(rng, (n, SLOTS_PER_DAY + 1))
    slot = rng.integers(0, SLOTS_PER_DAY, n)
    mask = prefix_mask(slot)
    steps = np.where(mask[..., None], transitions(observations, 4 * rng.random((n, SLOTS_PER_DAY))), 0)
    obs = observations[np.arange(n), slot]
    eps = rng.standard_normal((n, latent)).astype(np.float32)
    return obs, steps.astype(np.float32), mask, eps


def measure(
    artifact: Artifact, actor: torch.nn.Module, encoder: torch.nn.Module, batch: tuple[np.ndarray, ...], repeats: int
) -> list[tuple[int, str, float, float]]:
    """``(n, part, onnxruntime ms, torch ms)`` for the whole decision, the encoder alone and the policy alone."""
    obs, steps, mask, eps = batch
    obs_t, steps_t, mask_t, eps_t = (torch.as_tensor(x) for x in batch)

    @torch.no_grad()
    def torch_decide() -> torch.Tensor:
        mean, std = encoder(steps_t, mask_t)
        return actor.act(torch.cat([obs_t, mean + std * eps_t], dim=1))

    gap = float(np.abs(artifact.decide(obs, steps, mask, eps) - torch_decide().numpy()).max())
    assert gap <= 1e-3, f"onnxruntime and torch disagree by {gap} on the ratio"
    print(f"batch {len(obs)}: max |onnxruntime - torch| on the ratio {gap:.1e}")
    parts = (
        ("encoder + policy", lambda: artifact.decide(obs, steps, mask, eps), torch_decide),
        ("encoder", lambda: artifact.posterior(steps, mask), torch.no_grad()(lambda: encoder(steps_t, mask_t))),
        ("policy", lambda: artifact.act(obs, eps), torch.no_grad()(lambda: actor.act(torch.cat([obs_t, eps_t], 1)))),
    )
    return [(len(obs), part, median_ms(ours, repeats), median_ms(theirs, repeats)) for part, ours, theirs in parts]


def modules(run: Path | None) -> tuple[torch.nn.Module, torch.nn.Module, str]:
    if run is not None:
        from training.rl.runs import load_run_bidder

        bidder, _ = load_run_bidder(run)
        if bidder.encoder is None:
            raise SystemExit(f"{run} is not a CBRL run (no posterior encoder)")
        return bidder.policy, bidder.encoder, str(run)
    # Non-residual: the networks' speed is the question here (a residual policy reads one more input feature,
    # and its card needs a tuned PID this benchmark has no market to tune on).
    agent = SACAgent(SACConfig(algo="cbrl", residual=False))
    assert agent.encoder is not None
    return agent.actor, agent.encoder, "fresh CBRL agent, default SACConfig (non-residual)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, default=None, help="A CBRL training run (default: fresh networks).")
    parser.add_argument("--batches", default="1,10000")
    args = parser.parse_args()
    torch.set_num_threads(1)
    actor, encoder, source = modules(args.run)
    actor.eval()
    encoder.eval()
    params = sum(p.numel() for p in [*actor.parameters(), *encoder.parameters()])
    print(f"machine: {describe_machine()}")
    print(f"torch {torch.__version__} (1 thread); networks: {source}, {params:,} parameters")

    with tempfile.TemporaryDirectory() as tmp:
        provenance = Provenance(
            algorithm="cbrl",
            setting="sc",
            source_run=source,
            training=TrainingInfo(run=source, market="", data_fingerprint="benchmark", epochs=0, config={}),
            evaluation=EvaluationInfo(),
        )
        started = time.perf_counter()
        card = export_modules(actor, encoder, Path(tmp) / "model", provenance)
        print(f"export + parity check: {time.perf_counter() - started:.1f} s; opset {card.opset}")
        artifact = load_artifact(Path(tmp) / "model", intra_op_threads=1)

    rng = np.random.default_rng(0)
    rows = []
    for n in [int(b) for b in args.batches.split(",")]:
        rows += measure(artifact, actor, encoder, inputs(rng, n, artifact.latent_dim), repeats=300 if n <= 10 else 7)
    print()
    print("| campaigns | part | onnxruntime (ms) | torch (ms) | torch / onnxruntime | onnxruntime per campaign (us) |")
    print("|---:|---|---:|---:|---:|---:|")
    for n, part, ort_ms, torch_ms in rows:
        print(f"| {n:,} | {part} | {ort_ms:.3f} | {torch_ms:.3f} | {torch_ms / ort_ms:.2f}x | {1e3 * ort_ms / n:.2f} |")


if __name__ == "__main__":
    main()
