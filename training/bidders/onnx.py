"""An exported model (``rcb export``) behind the :class:`Bidder` interface: the method ``onnx:MODEL_DIR``.

A thin user of the stateless decision step :class:`model.policy.Policy`: each slot it decides from
the history alone (no state of its own), with the offline noise keys (:func:`model.policy.offline_keys`),
exactly as training's ``PolicyBidder(stochastic=False)`` and the live service do. So evaluating
``onnx:MODEL_DIR`` reproduces the run directory's episodes, up to the float rounding between torch
and onnxruntime (a few 1e-7 on the ratio). Torch-free: numpy and onnxruntime only. A planner or a controller
model (no graph) runs its law through the same step: a controller model exported from a market plays what the
tuned ``pid`` or ``rm`` baseline plays there.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import numpy as np

from model.artifact import Artifact, load_artifact
from model.history import History, Registration
from model.policy import Policy, offline_keys
from training.bidders.base import Bidder


class OnnxBidder(Bidder):
    """An exported model as a bidder: an ONNX policy (CBRL models act on ``z = mean + std * eps`` drawn from the
    posterior), a planner or a controller."""

    name: ClassVar[str] = "onnx"

    def __init__(self, artifact: Artifact, bid_scale: float | None = None):
        self.artifact = artifact
        self.policy = Policy(artifact, bid_scale)
        """The decision step the service runs; it bids times ``bid_scale``, the card's unless given."""
        self.seed = 0

    @classmethod
    def load(cls, directory: Path | str, intra_op_threads: int = 1, bid_scale: float | None = None) -> OnnxBidder:
        return cls(load_artifact(directory, intra_op_threads=intra_op_threads), bid_scale)

    @property
    def deterministic(self) -> bool:
        return not self.artifact.bayesian  # CBRL samples z with the seed's noise

    def start(self, registration: Registration, seed: int) -> None:
        self.seed = seed

    def bid(self, history: History) -> np.ndarray:
        return self.policy.decide([history], offline_keys(self.seed, history.n)).ratio
