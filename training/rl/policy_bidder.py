"""A torch policy behind the :class:`~training.bidders.base.Bidder` interface: how training plays its actor."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch

from model.controller import Reference
from model.history import History, Registration
from model.policy import decision_inputs, offline_keys
from training.bidders.base import Bidder
from training.rl.encoder import PosteriorEncoder
from training.rl.networks import TanhGaussianPolicy


class PolicyBidder(Bidder):
    """A torch policy as a bidder (stochastic for collection, its mean for evaluation).

    With an encoder (CBRL) it acts by posterior sampling. It is the torch twin of the stateless step
    :class:`model.policy.Policy`: the same :func:`model.policy.decision_inputs` (observations rebuilt from the
    history, the trajectory so far, the noise of :func:`model.policy.offline_keys` under the play seed), run through
    the torch networks instead of their ONNX export.
    """

    name: ClassVar[str] = "sac"

    def __init__(
        self,
        policy: TanhGaussianPolicy,
        stochastic: bool,
        encoder: PosteriorEncoder | None = None,
        controller: Reference | None = None,
    ):
        if policy.residual and controller is None:
            raise ValueError("a residual policy needs its reference controller")
        self.policy = policy
        self.stochastic = stochastic
        self.encoder = encoder
        self.controller = controller if policy.residual else None
        self.seed = 0

    @property
    def deterministic(self) -> bool:
        return not self.stochastic and self.encoder is None

    def start(self, registration: Registration, seed: int) -> None:
        self.seed = seed

    def bid(self, history: History) -> np.ndarray:
        latent_dim = 0 if self.encoder is None else self.encoder.latent_dim
        inputs = decision_inputs([history], offline_keys(self.seed, history.n), latent_dim, self.controller)
        with torch.no_grad():
            obs = torch.as_tensor(inputs.obs)
            if self.encoder is not None:
                mean, std = self.encoder(torch.as_tensor(inputs.steps), torch.as_tensor(inputs.mask))
                obs = torch.cat([obs, mean + std * torch.as_tensor(inputs.eps)], dim=1)
            ratio = self.policy.sample(obs)[0] if self.stochastic else self.policy.act(obs)
        return ratio.numpy().astype(np.float64)
