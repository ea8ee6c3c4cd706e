"""The timing every micro-benchmark here shares: the median wall time of a call over repeats; a baseline revision's
worktree and the ABBA order for benchmarks that compare this tree with it in one run."""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path


def median_ms(fn: Callable[[], object], repeats: int) -> float:
    """Median milliseconds of ``fn()`` over ``repeats`` calls, after one warm-up call (allocations, caches,
    onnxruntime's first-run planning)."""
    fn()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return 1e3 * statistics.median(times)


@contextlib.contextmanager
def baseline_worktree(root: Path, revision: str) -> Iterator[tuple[str, Path]]:
    """A ``git worktree`` of ``revision`` in a temporary directory, removed after: ``(label, path)``, the label
    ``baseline <short hash>``. For benchmarks that run this tree against an earlier one in the same run."""
    path = Path(tempfile.mkdtemp(prefix="bench-baseline-")) / "tree"
    subprocess.run(["git", "-C", str(root), "worktree", "add", "--detach", "-q", str(path), revision], check=True)
    try:
        short = subprocess.run(["git", "-C", str(path), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        yield f"baseline {short.stdout.strip()}", path
    finally:
        subprocess.run(["git", "-C", str(root), "worktree", "remove", "--force", str(path)], check=False)


def abba(arms: Sequence[str], rounds: int) -> list[str]:
    """The order to run two arms in: A B B A, ``rounds`` times (drift in the machine falls on both alike)."""
    return [*arms, *reversed(arms)] * rounds


def medians(rows: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Per arm, the median over its runs of every figure its rows hold."""
    return {arm: {k: statistics.median(r[k] for r in runs) for k in runs[0]} for arm, runs in rows.items()}


@contextlib.contextmanager
def compared_arms(
    root: Path, baseline: str | None, with_env: str | None
) -> Iterator[tuple[str, dict[str, tuple[Path, dict[str, str]]]]]:
    """``(the baseline arm's name, {arm: (tree, environment)})``: a worktree of ``baseline`` against this tree, or
    this tree as it is against this tree with ``with_env`` (``KEY=VALUE``) set."""
    if with_env is not None:
        key, _, value = with_env.partition("=")
        yield "as it is", {"as it is": (root, {}), "this tree": (root, {key: value})}
        return
    assert baseline is not None
    with baseline_worktree(root, baseline) as (label, tree):
        yield label, {label: (tree, {}), "this tree": (root, {})}


def run_in_tree(script: Path, tree: Path, args: Sequence[str], extra_env: dict[str, str] | None = None) -> dict:
    """``script --child ARGS`` in a process whose imports come from ``tree`` (its ``PYTHONPATH`` and working
    directory), with ``extra_env`` set: the arm of a comparison. Its last line of output, read as JSON."""
    env = {**os.environ, "PYTHONPATH": str(tree), **(extra_env or {})}
    cmd = [sys.executable, str(Path(script).resolve()), "--child", *args]
    out = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"the run in {tree} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])
