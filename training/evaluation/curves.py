"""Learning curves across runs and seeds: the paper's Fig. 6 (Hard vs CRL vs CBRL) and its speed claim.

Every run directory holds ``curves.csv`` (one row per epoch: gradient updates so far, train and
validation score). Runs are grouped by a label (one group per method, one run per seed); a group's
curve is the mean over its seeds at each epoch, with the min-max band of the seeds.

The speed claim of the paper (Sec. 4.3: curriculum learning converges faster than the sparse reward)
is measured as :func:`steps_to_reach`: the first gradient-update count at which a group's mean
validation curve reaches a reference group's *final* score (the mean of its last ``tail`` epochs),
divided by the reference group's total updates.
"""

from __future__ import annotations

import glob
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

import numpy as np
import pandas as pd

SCORE = "validation_score"
"""The curve plotted and compared: the greedy policy's score on held-out train days (model selection)."""


class CurveError(ValueError):
    """Runs that cannot be drawn together (missing curves, no runs for a label)."""


class SpeedRow(TypedDict):
    """One group's row of :func:`speed_table`."""

    method: str
    final: float
    reference_final: float
    updates_to_reference_final: float
    """``inf`` where the group never reaches the reference's final score."""
    share_of_reference_updates: float


@dataclass
class GroupCurve:
    """One method's curves: ``updates`` per epoch and a ``(seeds, epochs)`` matrix of scores."""

    label: str
    runs: list[Path]
    updates: np.ndarray
    scores: np.ndarray

    @property
    def mean(self) -> np.ndarray:
        return self.scores.mean(axis=0)

    def final(self, tail: int = 3) -> float:
        """The mean score over seeds of the last ``tail`` epochs (one epoch's score is noisy)."""
        return float(self.mean[-tail:].mean())


def split_group(spec: str) -> tuple[str, str] | None:
    """``LABEL=GLOB`` (one method's training runs, one per seed) as ``(label, glob)``; None without ``=``."""
    label, sep, pattern = spec.partition("=")
    if not sep:
        return None
    if not label or not pattern:
        raise CurveError(f"{spec!r}: expected LABEL=GLOB, e.g. crl=runs/sc/crl-s*")
    return label, pattern


def expand_runs(pattern: str) -> list[Path]:
    """A glob (or a plain path) to the sorted run directories it names that hold ``curves.csv``."""
    paths = sorted(Path(p) for p in glob.glob(pattern)) or [Path(pattern)]
    runs = [p for p in paths if (p / "curves.csv").is_file()]
    if not runs:
        raise CurveError(f"{pattern}: no training run with a curves.csv there")
    return runs


def load_group(label: str, runs: list[Path], score: str = SCORE) -> GroupCurve:
    """Read the runs' curves, truncated to the shortest run so the seeds align epoch by epoch."""
    frames = [pd.read_csv(run / "curves.csv") for run in runs]
    epochs = min(len(f) for f in frames)
    if epochs == 0:
        raise CurveError(f"{label}: a run has no finished epoch")
    scores = np.stack([f[score].to_numpy()[:epochs] for f in frames])
    updates = frames[0]["updates"].to_numpy()[:epochs]
    return GroupCurve(label=label, runs=runs, updates=updates, scores=scores)


def steps_to_reach(group: GroupCurve, target: float) -> float:
    """Gradient updates until ``group``'s mean curve first reaches ``target`` (``inf`` if it never does)."""
    reached = np.flatnonzero(group.mean >= target)
    return float(group.updates[reached[0]]) if len(reached) else float("inf")


def speed_table(groups: list[GroupCurve], reference: str) -> list[SpeedRow]:
    """For each group: updates to reach the reference group's final score, and as a share of its updates."""
    by_label = {g.label: g for g in groups}
    if reference not in by_label:
        raise CurveError(f"reference {reference!r} is not one of {', '.join(by_label)}")
    ref = by_label[reference]
    target = ref.final()
    total = float(ref.updates[-1])
    rows: list[SpeedRow] = []
    for g in groups:
        steps = steps_to_reach(g, target)
        rows.append(
            {
                "method": g.label,
                "final": g.final(),
                "reference_final": target,
                "updates_to_reference_final": steps,
                "share_of_reference_updates": steps / total,
            }
        )
    return rows


def plot(groups: list[GroupCurve], out: Path, title: str = "") -> Path:
    """Mean validation score per gradient update, seeds' min-max shaded: the paper's Fig. 6."""
    from matplotlib.figure import Figure  # here, not at the top: rcb evaluate reads split_group from this module

    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    for group in groups:
        (line,) = ax.plot(
            group.updates,
            group.mean,
            label=f"{group.label} ({len(group.runs)} seed{'' if len(group.runs) == 1 else 's'})",
        )
        ax.fill_between(
            group.updates, group.scores.min(axis=0), group.scores.max(axis=0), alpha=0.15, lw=0, color=line.get_color()
        )
    ax.set_xlabel("gradient updates")
    ax.set_ylabel("validation score (mean D/D* x 1[feasible])")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    if title:
        ax.set_title(title)
    ax.legend(loc="lower right")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    return out
