"""K trained policies as one: the median of their log-ratios, exported as one ordinary artifact.

Training seeds of the same config disagree a lot (best validation scores from 0.63 to 0.81
across five CBRL MC seeds); a median over K members is robust to a member that runs away or collapses
on a day it reads wrongly, where a mean would follow it.

The ensemble is shaped like one CBRL model, so nothing downstream changes: the card format, the
stateless step, the service and the noise stream are those of a single model.

* :class:`EnsembleEncoder` concatenates the members' posteriors: latent ``z = (z_1, ..., z_K)``,
  ``K * d`` wide. The posterior-sampling noise of one stream (:mod:`model.sampling`) is then ``K * d``
  draws, so every member samples its own ``z_k``.
* :class:`EnsembleActor` reads ``[o, z_1, ..., z_K]``, gives member ``k`` ``[o, z_k]`` and answers
  ``exp(median_k log max(ratio_k, RATIO_FLOOR))`` (the floor keeps an abstaining member finite).

``rcb evaluate`` plays ``ensemble:LABEL=GLOB`` with these modules and ``rcb export --run A --run B ...``
exports them: the same computation, checked by the export's parity test.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch
from torch import nn

from model.controller import RATIO_FLOOR
from model.features import obs_dim
from training.rl.encoder import PosteriorEncoder
from training.rl.networks import TanhGaussianPolicy


def median_last(values: torch.Tensor) -> torch.Tensor:
    """The median over the last axis (the mean of the middle two for an even count); exports to ONNX."""
    count = values.shape[-1]
    ordered, _ = torch.sort(values, dim=-1)
    if count % 2:
        return ordered[..., count // 2]
    return 0.5 * (ordered[..., count // 2 - 1] + ordered[..., count // 2])


class EnsembleEncoder(nn.Module):
    """The members' posteriors side by side: ``(mean_1, ..., mean_K), (std_1, ..., std_K)``."""

    def __init__(self, encoders: Sequence[PosteriorEncoder]):
        super().__init__()
        if not encoders:
            raise ValueError("an ensemble needs at least one member")
        if len({e.embed.in_features for e in encoders}) != 1:
            raise ValueError("ensemble members read transitions of different widths")
        self.encoders = nn.ModuleList(encoders)
        self.member_latent_dim = int(encoders[0].latent_dim)
        if any(int(e.latent_dim) != self.member_latent_dim for e in encoders):
            raise ValueError("ensemble members have different latent sizes")
        self.latent_dim = self.member_latent_dim * len(encoders)

    @property
    def embed(self) -> nn.Linear:
        """The first member's input layer: what the export reads the transition width from."""
        return self.encoders[0].embed  # type: ignore[return-value]

    def forward(self, steps: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        posteriors = [encoder(steps, mask) for encoder in self.encoders]
        return torch.cat([m for m, _ in posteriors], dim=-1), torch.cat([s for _, s in posteriors], dim=-1)


class EnsembleActor(nn.Module):
    """``act([o, z_1..z_K]) = exp(median_k log actor_k.act([o, z_k]))``; ``member_latent_dim`` 0: no latent."""

    def __init__(self, actors: Sequence[TanhGaussianPolicy], member_latent_dim: int = 0):
        super().__init__()
        if not actors:
            raise ValueError("an ensemble needs at least one member")
        if len({actor.residual for actor in actors}) != 1:
            raise ValueError("an ensemble mixes residual and non-residual members")
        self.actors = nn.ModuleList(actors)
        self.member_latent_dim = int(member_latent_dim)
        self.residual = actors[0].residual
        """Residual members read the same reference controller's ratio (the caller checks their gains agree)."""

    def act(self, observation: torch.Tensor) -> torch.Tensor:
        width, d = obs_dim(self.residual), self.member_latent_dim
        obs = observation[..., :width]
        ratios = []
        for k, member in enumerate(self.actors):
            actor = cast(TanhGaussianPolicy, member)  # built from TanhGaussianPolicy; ModuleList yields Module
            z = observation[..., width + k * d : width + (k + 1) * d]
            ratios.append(actor.act(torch.cat([obs, z], dim=-1) if d else obs))
        logs = torch.log(torch.clamp(torch.stack(ratios, dim=-1), min=RATIO_FLOOR))
        return torch.exp(median_last(logs))


def ensemble_of(
    actors: Sequence[TanhGaussianPolicy], encoders: Sequence[PosteriorEncoder | None]
) -> tuple[EnsembleActor, EnsembleEncoder | None]:
    """The ensemble of K (actor, encoder) pairs: all Bayesian (CBRL) or none."""
    present = [e for e in encoders if e is not None]
    if present and len(present) != len(encoders):
        raise ValueError("an ensemble mixes members with and without a posterior encoder")
    encoder = EnsembleEncoder(present) if present else None
    actor = EnsembleActor(actors, encoder.member_latent_dim if encoder is not None else 0)
    actor.eval()
    if encoder is not None:
        encoder.eval()
    return actor, encoder
