"""The replay buffer: whole played episodes, relabelled with the curriculum stage's rewards when sampled.

Rewards are computed at sample time from the stored slot stats under the stage in force
(:mod:`training.rl.curriculum`), so a stage change re-labels old experience instead of mixing reward functions.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from model.contract import SLOTS_PER_DAY
from model.controller import Reference
from model.features import obs_dim, observation_sequence
from model.history import History
from model.trajectory import transitions
from training.rl.curriculum import Stage


class Batch(NamedTuple):
    """``B`` sampled transitions ``(o_t, a_t, R_t, o_{t+n}, done, discount)`` of :meth:`EpisodeBuffer.sample`, drawn
    ``per_episode`` at a time from ``E = B // per_episode`` episodes (SB3's ``ReplayBufferSamples``)."""

    steps: torch.Tensor
    """``(E, T, transition dim)``: each sampled episode's transitions, read once by CBRL's encoder."""
    episode: torch.Tensor
    """``(B,)``: which of :attr:`steps`' episodes each transition is from."""
    slot: torch.Tensor
    """``(B,)``: the transition's slot ``t`` (also the slots seen before it: the encoder's prefix length)."""
    obs: torch.Tensor
    """``(B, F)``: ``o_t``."""
    ratio: torch.Tensor
    """``(B,)``: the ratio bid in slot ``t``."""
    reward: torch.Tensor
    """``(B,)``: the ``n``-step return ``R_t`` under the stage sampled with."""
    next_obs: torch.Tensor
    """``(B, F)``: ``o_{t+n}``, the observation the return bootstraps from (``o_T`` at the day's end)."""
    next_slot: torch.Tensor
    """``(B,)``: ``t + n`` cut at the day's end: the slot of :attr:`next_obs` (the encoder's prefix length there)."""
    done: torch.Tensor
    """``(B,)``: 1 when the day ended before ``t + n``."""
    discount: torch.Tensor
    """``(B,)``: ``gamma^n``, the bootstrap's weight (fewer steps when the day ends first)."""


class EpisodeBuffer:
    """Whole episodes: features before every slot (and after the last), ratios, slot stats, constraints, D*."""

    def __init__(self, capacity: int, controller: Reference | None = None):
        self.capacity = capacity
        self.controller = controller
        """A residual run's reference controller (the observations then end with ``controller_ratio``)."""
        self.obs = np.zeros((capacity, SLOTS_PER_DAY + 1, obs_dim(controller is not None)), dtype=np.float32)
        self.ratios = np.zeros((capacity, SLOTS_PER_DAY), dtype=np.float32)
        self.delivery = np.zeros((capacity, SLOTS_PER_DAY))
        self.cost = np.zeros((capacity, SLOTS_PER_DAY))
        self.roi_target = np.zeros(capacity)
        self.budget = np.zeros(capacity)
        self.oracle = np.zeros(capacity)
        self.size = 0
        self.cursor = 0

    def add(self, history: History, oracle: np.ndarray) -> None:
        """Keep the finished episodes of ``history`` and their days' D* (``oracle``), the oldest let go first."""
        obs = observation_sequence(history, self.controller)  # o_0 .. o_48 of each episode
        for k in range(history.n):
            i = self.cursor
            self.obs[i] = obs[k]
            self.ratios[i] = history.ratios[k]
            self.delivery[i] = history.delivery[k]
            self.cost[i] = history.cost[k]
            self.roi_target[i] = history.registration.roi_target[k]
            self.budget[i] = history.registration.budget[k]
            self.oracle[i] = oracle[k]
            self.cursor = (self.cursor + 1) % self.capacity
            self.size = min(self.size + 1, self.capacity)

    def sample(
        self,
        rng: np.random.Generator,
        batch: int,
        stage: Stage,
        per_episode: int = 16,
        n_step: int = 1,
        gamma: float = 0.99,
        roi_margin: float = 0.0,
    ) -> Batch:
        """``batch`` transitions ``(o_t, a_t, R_t, o_{t+n}, done, discount)`` with rewards under ``stage``.

        ``R_t = sum_{k<n} gamma^k r_{t+k}`` is the ``n``-step return, cut at the day's end; ``o_{t+n}`` the
        observation it bootstraps from and ``discount = gamma^n`` its weight (``done`` when the day ended
        first). They come ``per_episode`` at a time from ``batch // per_episode`` episodes, so CBRL's encoder
        reads each sampled episode once (``steps``) and ``episode`` says which of them a transition is from.
        ``roi_margin``: the rewards hold the episodes to ``L * (1 + roi_margin)`` (the observations keep ``L``).
        """
        groups = max(1, batch // per_episode)
        chosen = rng.integers(0, self.size, groups)
        group = np.repeat(np.arange(groups), per_episode)  # which sampled episode, per transition
        episode = chosen[group]  # its index in the buffer
        slot = rng.integers(0, SLOTS_PER_DAY, groups * per_episode)
        stats = (self.delivery, self.cost, self.roi_target * (1.0 + roi_margin), self.budget, self.oracle)
        rewards = stage.rewards(*(x[chosen] for x in stats))
        ahead = slot[:, None] + np.arange(n_step)[None, :]  # the slots an n-step return sums
        inside = ahead < SLOTS_PER_DAY
        returns = (
            rewards[group[:, None], np.minimum(ahead, SLOTS_PER_DAY - 1)] * inside * gamma ** np.arange(n_step)
        ).sum(1)
        bootstrap = np.minimum(slot + n_step, SLOTS_PER_DAY)

        def as_tensor(x: np.ndarray) -> torch.Tensor:
            return torch.as_tensor(x, dtype=torch.float32)

        return Batch(
            steps=torch.as_tensor(transitions(self.obs[chosen], self.ratios[chosen])),
            episode=torch.as_tensor(group),
            slot=torch.as_tensor(slot),
            obs=as_tensor(self.obs[episode, slot]),
            ratio=as_tensor(self.ratios[episode, slot]),
            reward=as_tensor(returns),
            next_obs=as_tensor(self.obs[episode, bootstrap]),
            next_slot=torch.as_tensor(bootstrap),
            done=as_tensor(bootstrap == SLOTS_PER_DAY),
            discount=as_tensor(gamma ** (bootstrap - slot)),
        )
