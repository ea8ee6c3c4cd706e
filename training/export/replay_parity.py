"""An exported model without graphs (a planner, a controller) checked against the bidder it was built from.

Before it replaces its destination, the directory being built is loaded back through the service's loader and
played beside the tuned bidder on the first train days; the largest ratio gap between the two is the card's
``parity.ratio``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from model.artifact import Artifact, ArtifactError, load_artifact
from training.bidders.base import Bidder, play
from training.bidders.onnx import OnnxBidder
from training.export.destination import ExportError
from training.replay.dayset import DaySet


def replayed_gap(building: Path, tuned: Bidder, days: DaySet, n_days: int, what: str) -> tuple[Artifact, float]:
    """The model in ``building`` loaded back (``ExportError`` naming ``what`` if it does not load) and the largest
    ratio gap between it and ``tuned`` over the first ``n_days`` of ``days``, seed 0 (NaN where a ratio is)."""
    try:
        artifact = load_artifact(building)
    except ArtifactError as exc:
        raise ExportError(f"the exported {what} does not load: {exc}") from None
    shown = days.subset(np.arange(min(n_days, len(days))))
    ratios = []
    for bidder in (tuned, OnnxBidder(artifact)):
        played = play(bidder, shown.indexes(), shown.episode_days(1), shown.registration(1), 0)
        ratios.append(played.history.ratios)
    return artifact, float(np.max(np.abs(ratios[0] - ratios[1])))
