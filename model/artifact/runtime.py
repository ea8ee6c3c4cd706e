"""A loaded model, :class:`Artifact`: batch entry points over onnxruntime sessions, inputs checked against the card.

:func:`model.artifact.load_artifact` builds it; the decision step (:mod:`model.policy`) and evaluation's
``onnx:MODEL_DIR`` call it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from model.artifact.card import ModelCard
from model.artifact.errors import ArtifactError
from model.artifact.graphs import MAX_STEPS
from model.controller import Controller, ControllerGains
from model.planner import TunedPlanner
from model.sampling import sample_posterior
from model.shield import ShieldConfig


class Artifact:
    """A loaded model: batch entry points over onnxruntime sessions, inputs checked against the card."""

    def __init__(
        self,
        directory: Path,
        card: ModelCard,
        policy: Any,
        encoder: Any | None,
        planner: TunedPlanner | None = None,
        *,
        card_sha256: str,
        controller: Controller | None = None,
        encoder_graph: bytes | None = None,
    ):
        self.directory = directory
        self.card = card
        self.card_sha256 = card_sha256
        """The sha256 of the ``model.json`` bytes this artifact was loaded from (the service's model version reads the
        card parsed from them: :meth:`ModelCard.served_sha256`)."""
        self._policy = policy
        self._encoder = encoder
        self.planner = planner
        """A planner model's law (``kind: planner``; no graphs), else None."""
        self.controller = controller
        """A controller model's law (``kind: controller``; no file), else None."""
        self.encoder_graph = encoder_graph
        """The ``encoder.onnx`` bytes the encoder session was built from (what :mod:`model.incremental` reads the
        weights from), else None."""

    @property
    def bayesian(self) -> bool:
        return self.card.bayesian

    def controller_gains(self) -> ControllerGains:
        """The PID the safety shield runs around (what the service and ``shield:onnx:`` run): the card's
        ``safety_controller`` (the served market's PID), a PID controller model's own law, else the training
        market's PID where the card has it, else the defaults (:meth:`ModelCard.safety_gains`)."""
        return self.card.safety_gains()

    def reference_gains(self) -> ControllerGains:
        """A residual policy's reference, the controller it corrects: the training market's PID
        (:meth:`ModelCard.reference_gains`), whatever the shield runs around."""
        return self.card.reference_gains()

    def fallback_controller(self) -> Controller:
        """What the service bids when the model cannot decide: a controller model's own law, else the shield's PID
        (:meth:`ModelCard.fallback_controller`)."""
        return self.card.fallback_controller()

    def shield_config(self) -> ShieldConfig:
        """The band the service and ``shield:onnx:`` run around this model (:meth:`ModelCard.shield_config`)."""
        return self.card.shield_config()

    @property
    def residual(self) -> bool:
        """The policy reads the reference controller's ratio (:meth:`reference_gains`) and corrects it."""
        return self.card.residual

    @property
    def latent_dim(self) -> int:
        return self.card.latent_dim

    def posterior(self, steps: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``q(z | tau)``: ``steps (n, L, D)``, ``mask (n, L)`` with L in 1..48 -> ``(mean, std)`` each ``(n, latent)``.

        Valid steps must come first in each row (a prefix mask). Padded steps are zeroed before the
        graph runs, so whatever they held (even NaN) changes nothing.
        """
        if self._encoder is None:
            raise ArtifactError(f"{self.directory}: {self.card.algorithm} has no posterior encoder (latent_dim 0)")
        steps = np.asarray(steps, dtype=np.float32)
        mask = np.asarray(mask)
        transition_dim = self.card.transition_dim
        if steps.ndim != 3 or steps.shape[2] != transition_dim or not 1 <= steps.shape[1] <= MAX_STEPS:
            raise ValueError(f"steps must be (n, 1..{MAX_STEPS}, {transition_dim}); got {steps.shape}")
        if mask.shape != steps.shape[:2] or mask.dtype != np.bool_:
            raise ValueError(f"mask must be a bool array of shape {steps.shape[:2]}; got {mask.dtype} {mask.shape}")
        if np.any(mask[:, 1:] & ~mask[:, :-1]):
            raise ValueError("mask must mark a prefix of each row valid (the transitions seen so far come first)")
        n = steps.shape[0]
        if n == 0:
            empty = np.zeros((0, self.latent_dim), dtype=np.float32)
            return empty, empty.copy()
        steps = np.where(mask[..., None], steps, np.float32(0.0))
        mean, std = self._encoder.run(None, {"steps": steps, "mask": np.ascontiguousarray(mask)})
        return mean, std

    def act(self, obs: np.ndarray, z: np.ndarray | None = None) -> np.ndarray:
        """The deterministic ratio ``(n,)`` float32 in [0, 4] for ``obs (n, F)`` (and ``z (n, latent)`` if Bayesian)."""
        if self._policy is None:
            raise ArtifactError(f"{self.directory}: a {self.card.kind} model has no policy graph (its law decides)")
        obs = np.ascontiguousarray(obs, dtype=np.float32)
        if obs.ndim != 2 or obs.shape[1] != self.card.obs_dim:
            raise ValueError(f"obs must be (n, {self.card.obs_dim}); got {obs.shape}")
        feed = {"obs": obs}
        if self.bayesian:
            if z is None:
                raise ValueError(f"{self.card.algorithm} acts on (obs, z): z (n, {self.latent_dim}) is required")
            z = np.ascontiguousarray(z, dtype=np.float32)
            if z.shape != (obs.shape[0], self.latent_dim):
                raise ValueError(f"z must be ({obs.shape[0]}, {self.latent_dim}); got {z.shape}")
            feed["z"] = z
        elif z is not None:
            raise ValueError(f"{self.card.algorithm} has no latent (latent_dim 0): pass obs alone")
        if obs.shape[0] == 0:
            return np.zeros(0, dtype=np.float32)
        (ratio,) = self._policy.run(None, feed)
        return ratio

    def decide(
        self,
        obs: np.ndarray,
        steps: np.ndarray | None = None,
        mask: np.ndarray | None = None,
        eps: np.ndarray | None = None,
    ) -> np.ndarray:
        """One slot's ratios: for CBRL, posterior sampling ``z = mean + std * eps`` then :meth:`act`.

        ``eps (n, latent)`` is the standard-normal draw of :mod:`model.sampling`; the arithmetic is
        float32, as in training's torch bidder, so both give the same ratios.
        """
        if not self.bayesian:
            return self.act(obs)
        if steps is None or mask is None or eps is None:
            raise ValueError(f"{self.card.algorithm} samples z from the posterior: steps, mask and eps are required")
        mean, std = self.posterior(steps, mask)
        return self.act(obs, sample_posterior(mean, std, np.asarray(eps, dtype=np.float32)))
