"""An exported model (``rcb export``) behind the :class:`Bidder` interface: the method ``onnx:MODEL_DIR``.

It bids exactly like the torch run it came from (``PolicyBidder(stochastic=False)``): the same
features, the same trajectory of transitions so far, the same posterior-sampling noise
keys (``episode-{k}`` / ``offline`` under the play seed) and the mean action. So evaluating
``onnx:MODEL_DIR`` reproduces the run directory's episodes, up to the float rounding between torch
and onnxruntime (a few 1e-7 on the ratio). Torch-free: numpy and onnxruntime only.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import numpy as np

from model.artifact import Artifact, load_artifact
from model.features import observe
from model.history import History, Registration
from model.sampling import offline_noise
from model.trajectory import episode_steps
from training.bidders.base import Bidder


class OnnxBidder(Bidder):
    """Deterministic ONNX policy; CBRL models act on ``z = mean + std * eps`` drawn from the posterior."""

    name: ClassVar[str] = "onnx"

    def __init__(self, artifact: Artifact):
        self.artifact = artifact

    @classmethod
    def load(cls, directory: Path | str, intra_op_threads: int = 1) -> OnnxBidder:
        return cls(load_artifact(directory, intra_op_threads=intra_op_threads))

    def start(self, registration: Registration, seed: int) -> None:
        self.seed = seed
        self.observations: list[np.ndarray] = []

    def bid(self, history: History) -> np.ndarray:
        current = observe(history).astype(np.float32)
        if not self.artifact.bayesian:
            return self.artifact.act(current).astype(np.float64)
        self.observations.append(current)
        t = history.slot
        steps, mask = episode_steps(np.stack(self.observations, axis=1), history.ratios[:, :t])
        eps = offline_noise(self.seed, history.n, t, self.artifact.latent_dim)  # as training's PolicyBidder
        return self.artifact.decide(current, steps, mask, eps).astype(np.float64)
