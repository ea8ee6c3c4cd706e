"""CBRL's variational posterior encoder q(z | tau_t) (paper Sec. 3.2.4, Eq. 8-9).

A trajectory ``tau_t = {(o_i, a_i, o_{i+1})}_{i<t}`` of up to 48 transitions is embedded, passed
through transformer blocks and mean-pooled over the valid steps into the mean and standard
deviation of a Gaussian over the latent market regime ``z``:

    q(z | tau_t) = N(AvgPool(f_mu(tau_t)), AvgPool(f_sigma(tau_t)))

Deviation from the paper, for speed: attention is *causal* (a transition attends to itself and
earlier ones) where the paper's blocks are bi-directional. The posterior stays a function of
``tau_t`` alone, and one pass over a whole episode then yields ``q(z | tau_t)`` for every ``t``
(:meth:`PosteriorEncoder.every_prefix`), 48 times cheaper than encoding each prefix on its own.

Masking is finite: padded steps are excluded from attention and from the pooling, and a trajectory
with no valid step at all (slot 0) pools to zeros, i.e. the head's bias, with no NaN.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from model.contract import SLOTS_PER_DAY
from model.features import obs_dim


def transition_dim(residual: bool) -> int:
    """``(o_i, a_i, o_{i+1})``: the width of what the posterior encoder reads per step."""
    return 2 * obs_dim(residual) + 1


class PosteriorEncoder(nn.Module):
    """Transformer over transitions with masked mean pooling and a Gaussian head (mean, std)."""

    def __init__(
        self,
        transition_dim: int,
        latent_dim: int = 8,
        width: int = 32,
        layers: int = 3,
        heads: int = 4,
        initial_std: float | None = None,
    ):
        super().__init__()
        self.latent_dim = latent_dim
        self.embed = nn.Linear(transition_dim, width)
        self.position = nn.Parameter(torch.zeros(SLOTS_PER_DAY, width))
        block = nn.TransformerEncoderLayer(width, heads, dim_feedforward=2 * width, dropout=0.0, batch_first=True)
        self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.mean_head = nn.Linear(width, latent_dim)
        self.std_head = nn.Linear(width, latent_dim)
        if initial_std is not None:  # start near-deterministic: z's noise must earn its place through the ELBO
            with torch.no_grad():
                self.std_head.weight.mul_(0.1)
                self.std_head.bias.fill_(float(torch.log(torch.expm1(torch.tensor(initial_std)))))

    def _hidden(self, steps: torch.Tensor, padding: torch.Tensor | None) -> torch.Tensor:
        length = steps.shape[1]
        x = self.embed(steps) + self.position[:length]
        causal = torch.ones(length, length, dtype=torch.bool, device=steps.device).triu(diagonal=1)  # True: hidden
        return self.blocks(x, mask=causal, src_key_padding_mask=padding, is_causal=True)

    def every_prefix(self, steps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``q(z | tau_t)`` for t = 0..L in one pass: ``steps (n, L, D)`` -> ``(mean, std)`` each ``(n, L+1, latent)``.

        Index ``t`` is the posterior after ``t`` transitions (``t = 0``: the empty trajectory).
        """
        h = self._hidden(steps, None)
        count = torch.arange(1, steps.shape[1] + 1, device=steps.device, dtype=h.dtype).view(1, -1, 1)
        mean = torch.cumsum(self.mean_head(h), dim=1) / count
        std = torch.cumsum(F.softplus(self.std_head(h)), dim=1) / count
        first_mean = self.mean_head.bias.expand(steps.shape[0], 1, -1)
        first_std = F.softplus(self.std_head.bias).expand(steps.shape[0], 1, -1)
        return torch.cat([first_mean, mean], dim=1), torch.cat([first_std, std], dim=1) + 1e-4

    def forward(self, steps: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``steps (n, L, D)``, ``mask (n, L)`` (True = valid) -> ``(mean, std)`` each ``(n, latent_dim)``."""
        # Attention needs one key per row: rows with no valid step attend to step 0, and pooling drops it.
        empty = ~mask.any(dim=1)
        attend = mask.clone()
        attend[empty, 0] = True
        h = self._hidden(steps, ~attend)
        weights = mask.unsqueeze(-1).to(h.dtype)
        count = weights.sum(dim=1).clamp(min=1.0)
        mean = (self.mean_head(h) * weights).sum(dim=1) / count
        std = (F.softplus(self.std_head(h)) * weights).sum(dim=1) / count
        # An empty trajectory pools to zero features: the prior-like answer of the heads' biases.
        mean = torch.where(empty.unsqueeze(-1), self.mean_head.bias.expand_as(mean), mean)
        std = torch.where(empty.unsqueeze(-1), F.softplus(self.std_head.bias).expand_as(std), std) + 1e-4
        return mean, std


def kl_to_standard_normal(mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """``KL(N(mean, std^2) || N(0, I))`` per row (the ELBO's regularizer, Eq. 8)."""
    return 0.5 * (mean.pow(2) + std.pow(2) - 1.0 - 2.0 * torch.log(std)).sum(dim=-1)
