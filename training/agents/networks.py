"""SAC's networks (paper appendix, "Policy design"): a tanh-Gaussian policy on [0, 4] and twin Q critics.

Inputs are the observation features of :mod:`model.features`, optionally concatenated with a latent
``z`` (CBRL's posterior sample). Torch lives in ``training/`` only; serving runs the ONNX export.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from model.contract import RATIO_MAX, RATIO_MIN

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


def mlp(inputs: int, hidden: int, outputs: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(inputs, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, outputs)
    )


class TanhGaussianPolicy(nn.Module):
    """``u ~ N(mu(o), sigma(o))``, ``ratio = RATIO_MIN + (tanh(u) + 1) / 2 * (RATIO_MAX - RATIO_MIN)``."""

    def __init__(self, inputs: int, hidden: int = 128):
        super().__init__()
        self.body = mlp(inputs, hidden, 2)
        self.register_buffer("scale", torch.tensor((RATIO_MAX - RATIO_MIN) / 2.0))
        self.register_buffer("offset", torch.tensor((RATIO_MAX + RATIO_MIN) / 2.0))

    def distribution(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.body(observation).unbind(-1)
        return mean, torch.clamp(log_std, LOG_STD_MIN, LOG_STD_MAX)

    def sample(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterized ratio and its log-density (tanh and scale change of variables included)."""
        mean, log_std = self.distribution(observation)
        std = log_std.exp()
        u = mean + std * torch.randn_like(mean)
        squashed = torch.tanh(u)
        log_prob = (
            -0.5 * ((u - mean) / std) ** 2
            - log_std
            - 0.5 * math.log(2 * math.pi)
            - torch.log(self.scale * (1 - squashed.pow(2)) + 1e-6)
        )
        return self.offset + self.scale * squashed, log_prob

    def act(self, observation: torch.Tensor) -> torch.Tensor:
        """The deterministic ratio (the mean's image): what evaluation and export use."""
        mean, _ = self.distribution(observation)
        return self.offset + self.scale * torch.tanh(mean)


class TwinQ(nn.Module):
    """Two independent Q networks on (observation, ratio); SAC uses their minimum."""

    def __init__(self, inputs: int, hidden: int = 128):
        super().__init__()
        self.q1 = mlp(inputs + 1, hidden, 1)
        self.q2 = mlp(inputs + 1, hidden, 1)

    def forward(self, observation: torch.Tensor, ratio: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.cat([observation, (ratio / RATIO_MAX).unsqueeze(-1)], dim=-1)
        return self.q1(x).squeeze(-1), self.q2(x).squeeze(-1)
