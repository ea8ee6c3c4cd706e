"""A slot batch's per-campaign state work on the event loop: this tree's ``model/state.py`` against a baseline's.

Between two model calls a slot batch decodes each campaign's stored blob, appends the reported slot, applies the
decision and encodes the new blob, all on the event loop the bids share (``service/episodes.py``), 128 campaigns a
chunk. Each arm runs in a child process of its own tree (this checkout, or a ``git worktree`` of ``--baseline``),
alternately, on a campaign at slot 47 with the shipped model's posterior width (``models/default``: 40 values):

    .venv/bin/python benchmarks/bench_state.py --baseline HEAD~1

Prints microseconds per campaign (median of repeats) for each step and a chunk of 128, per arm, and the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STEPS = ("from_bytes", "reported", "decided", "to_bytes")


def child(latent: int, repeats: int) -> dict[str, float]:
    import numpy as np

    import model.state
    from benchmarks.timing import median_ms
    from model.state import CampaignState

    print(f"measuring {model.state.__file__}", file=sys.stderr)

    rng = np.random.default_rng(0)
    state = CampaignState.new("b000123", "e1", 1.2, None, 7)
    for _ in range(47):
        mean, std = rng.normal(size=latent).astype(np.float32), rng.random(latent).astype(np.float32)
        state = state.reported(3.0, 2.0, 4, 100).decided(1.1, "cbrl-mc-0123456789ab", "model", mean, std)
    blob = state.to_bytes()
    reported = state.reported(2.0, 1.5, 3, 90)
    mean, std = rng.normal(size=latent).astype(np.float32), rng.random(latent).astype(np.float32)
    decided = reported.decided(1.3, "cbrl-mc-0123456789ab", "shield", mean, std)
    n = 200
    calls = {
        "from_bytes": lambda: [CampaignState.from_bytes(blob) for _ in range(n)],
        "reported": lambda: [state.reported(2.0, 1.5, 3, 90) for _ in range(n)],
        "decided": lambda: [reported.decided(1.3, "cbrl-mc-0123456789ab", "shield", mean, std) for _ in range(n)],
        "to_bytes": lambda: [decided.to_bytes() for _ in range(n)],
    }
    return {step: 1e3 * median_ms(calls[step], repeats) / n for step in STEPS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", help="the git revision to compare with (a worktree of it)")
    parser.add_argument("--latent", type=int, default=40, help="posterior values per campaign (models/default: 40)")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=2, help="ABBA rounds (each runs both arms twice)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:  # the arm's own tree comes first on PYTHONPATH (run_arm): its model/state.py is measured
        print(json.dumps(child(args.latent, args.repeats)))
        return
    sys.path.insert(0, str(ROOT))
    if not args.baseline:
        parser.error("--baseline is required")
    from benchmarks.machine import describe_machine
    from benchmarks.timing import abba, baseline_worktree, run_in_tree

    print(f"machine: {describe_machine()}; load average at start: {os.getloadavg()}", flush=True)
    with baseline_worktree(ROOT, args.baseline) as (label, baseline):
        trees = {label: baseline, "this tree": ROOT}
        rows: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
        for name in abba(list(trees), args.rounds):
            arm = ["--latent", str(args.latent), "--repeats", str(args.repeats)]
            rows[name].append(run_in_tree(Path(__file__), trees[name], arm))
    med = {name: {s: statistics.median(r[s] for r in runs) for s in STEPS} for name, runs in rows.items()}
    runs = 2 * args.rounds
    print(f"\nus per campaign at slot 47 ({args.latent} posterior values), medians over {runs} runs per arm:\n")
    print("| step | " + " | ".join(trees) + " | this tree / baseline |")
    print("|:---|" + "---:|" * (len(trees) + 1))
    base, this = med[label], med["this tree"]
    for step in STEPS:
        print(f"| {step} | {base[step]:.2f} | {this[step]:.2f} | {this[step] / base[step]:.2f}x |")
    chunk = {name: 128 * sum(m.values()) / 1e3 for name, m in med.items()}
    print(
        f"| a chunk of 128 (all four steps), ms | {chunk[label]:.2f} | {chunk['this tree']:.2f} | "
        f"{chunk['this tree'] / chunk[label]:.2f}x |"
    )


if __name__ == "__main__":
    main()
