"""The SAC agent of slot-wise ratio control (paper Sec. 3.2, appendix "Policy Learning"): one update, read first.

The agent's networks are a tanh-Gaussian actor and twin critics (:mod:`training.rl.networks`), with CBRL's posterior
encoder ``q(z | tau)`` (:mod:`training.rl.encoder`) trained through the critics' loss, the ELBO of Eq. 8. What it
learns from is :mod:`training.rl.buffer`'s batches; the loop that collects episodes, updates and selects an epoch is
:mod:`training.rl.loop`, and what it trains with is :class:`training.rl.config.SACConfig`.
"""

from __future__ import annotations

import copy
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from model.contract import RATIO_MAX
from model.features import obs_dim
from training.rl.buffer import Batch
from training.rl.config import SACConfig
from training.rl.encoder import PosteriorEncoder, kl_to_standard_normal, transition_dim
from training.rl.networks import TanhGaussianPolicy, TwinQ


class SACAgent:
    """Actor, twin critics with targets, learned temperature (and CBRL's encoder), their optimizers and schedules."""

    def update(self, batch: Batch, train_actor: bool = True) -> UpdateStats:
        """One SAC step (Haarnoja et al.; CleanRL's order): the target, the critics with the ELBO (Eq. 8), the actor,
        the temperature, then Polyak averaging. ``train_actor`` off: a critic-only step (the stage refit,
        :attr:`SACConfig.stage_refit_updates`), whose actor loss and entropy are NaN."""
        alpha = self.log_alpha.exp().detach()
        obs, next_obs, kl = self._condition(batch)

        # the target: r + gamma^n (min of the target critics - alpha log pi) at o_{t+n}, no gradient
        with torch.no_grad():
            _, next_action, next_log_prob = self.actor.sample(next_obs)
            target_q = torch.min(*self.critic_target(next_obs, next_action)) - alpha * next_log_prob
            y = self.config.reward_scale * batch.reward + (1 - batch.done) * batch.discount * target_q

        # the critics, and through them the encoder: squared Bellman errors + KL(q || N(0, I)), the ELBO of Eq. 8
        q1, q2 = self.critic(obs, self.actor.to_action(obs, batch.ratio))
        critic_loss = F.mse_loss(q1, y) + F.mse_loss(q2, y) + self.config.kl_weight * kl
        self.critic_optimizer.zero_grad()
        critic_loss.backward()
        self.critic_optimizer.step()
        if not train_actor:
            self._follow_targets()
            return UpdateStats(float(critic_loss.detach()), float("nan"), float("nan"))

        # the actor climbs the critics' value of its own sampled action plus the entropy bonus (not the encoder)
        obs = obs.detach()
        ratio, action, log_prob = self.actor.sample(obs)
        q1_pi, q2_pi = self.critic(obs, action)
        q_pi = 0.5 * (q1_pi + q2_pi) if self.config.actor_mean_q else torch.min(q1_pi, q2_pi)
        actor_loss = (alpha * log_prob - q_pi).mean()
        self.actor_optimizer.zero_grad()
        actor_loss.backward()
        self.actor_optimizer.step()

        # the temperature follows the policy's entropy toward its target
        alpha_loss = -(self.log_alpha.exp() * (log_prob.detach() + self.target_entropy)).mean()
        self.alpha_optimizer.zero_grad()
        alpha_loss.backward()
        self.alpha_optimizer.step()

        self._follow_targets()
        return UpdateStats(
            float(critic_loss.detach()),
            float(actor_loss.detach()),
            float(-log_prob.detach().mean()),
            float((ratio.detach() >= RATIO_MAX).float().mean()),
        )

    def _condition(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(o_t, o_{t+n}, KL)``: CBRL appends one ``z ~ q(z | tau_t)`` (reparameterized) to both observations, the
        task variable of Eq. 8 (the bootstrap's without gradient), and returns its mean KL to the prior; without an
        encoder, the observations and a KL of 0."""
        if self.encoder is None:
            return batch.obs, batch.next_obs, torch.zeros(())
        every_mean, every_std = self.encoder.every_prefix(batch.steps)  # one pass per sampled episode
        mean, std = every_mean[batch.episode, batch.slot], every_std[batch.episode, batch.slot]
        z = mean + std * torch.randn_like(std)
        kl = kl_to_standard_normal(mean, std).mean()
        return torch.cat([batch.obs, z], dim=1), torch.cat([batch.next_obs, z.detach()], dim=1), kl

    def _follow_targets(self) -> None:
        """Polyak-average the target critics, step the learning-rate schedules, count the update."""
        with torch.no_grad():
            for target, source in zip(self.critic_target.parameters(), self.critic.parameters(), strict=True):
                target.lerp_(source, self.config.tau)
        for scheduler in self.schedulers.values():
            scheduler.step()
        self.updates += 1

    def __init__(self, config: SACConfig):
        self.config = config
        torch.manual_seed(config.seed)
        self.controller = config.reference_controller()  # ValueError for a residual config without one
        self.encoder, self.actor, self.critic = learned_networks(config)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = torch.full((1,), float(np.log(config.initial_alpha)), requires_grad=True)
        self.target_entropy = config.target_entropy
        self.actor_optimizer = torch.optim.Adam(self.actor.parameters(), lr=config.learning_rate, foreach=True)
        # The encoder learns through the critic's loss (the ELBO of Eq. 8), so it shares that optimizer.
        self.critic_optimizer = torch.optim.Adam(
            [*self.critic.parameters(), *(self.encoder.parameters() if self.encoder else [])],
            lr=config.learning_rate,
            foreach=True,
        )
        self.alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=config.learning_rate)
        self.optimizers: dict[str, torch.optim.Optimizer] = {
            "actor": self.actor_optimizer,
            "critic": self.critic_optimizer,
            "alpha": self.alpha_optimizer,
        }
        """By name (:data:`OPTIMIZERS`), as checkpoints hold them."""
        self.schedulers = {
            name: torch.optim.lr_scheduler.MultiStepLR(o, milestones=list(config.lr_milestones), gamma=0.5)
            for name, o in self.optimizers.items()
        }
        self.updates = 0
        self.multiplier = config.rcpo_multiplier
        """RCPO's current Lagrange multiplier (checkpointed; unused by the other algos)."""
        self.curriculum_b: dict[str, float] = {}
        """The automated curriculum's learned ``b_k`` (checkpointed; empty unless it is on)."""

    def state_dict(self) -> dict[str, Any]:
        """Everything a checkpoint holds to resume training, by name (the inverse of :meth:`load_state`)."""
        return {
            "actor": self.actor.state_dict(),
            "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "encoder": self.encoder.state_dict() if self.encoder is not None else None,
            "log_alpha": self.log_alpha.detach().clone(),
            "optimizers": {name: o.state_dict() for name, o in self.optimizers.items()},
            "schedulers": {name: s.state_dict() for name, s in self.schedulers.items()},
            "updates": self.updates,
            "multiplier": self.multiplier,
            "curriculum_b": self.curriculum_b,
            "torch_rng": torch.get_rng_state(),
        }

    def load_networks(self, state: dict[str, Any]) -> None:
        """Start from another run's learned weights (:data:`NETWORKS` of its checkpoint), keeping this agent's own
        fresh optimizers, schedules and update count: fine-tuning (:attr:`SACConfig.init_from`). Raises
        ``ValueError`` when they do not fit (:func:`load_learned_networks`)."""
        load_learned_networks((self.encoder, self.actor, self.critic, self.critic_target), state)
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved (also older checkpoints, whose optimizers and schedules are
        lists in :data:`OPTIMIZERS` order). ``multiplier`` is restored by the training loop, which owns the dual."""
        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        self.critic_target.load_state_dict(state["critic_target"])
        if self.encoder is not None:
            self.encoder.load_state_dict(state["encoder"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        for parts, key in ((self.optimizers, "optimizers"), (self.schedulers, "schedulers")):
            saved = _by_name(state[key])
            if saved.keys() != parts.keys():
                raise ValueError(f"checkpoint {key} are {sorted(saved)}, expected {sorted(parts)}")
            for name, part in parts.items():
                part.load_state_dict(saved[name])
        self.updates = int(state["updates"])
        self.curriculum_b = dict(state.get("curriculum_b") or {})
        torch.set_rng_state(state["torch_rng"])


class UpdateStats(NamedTuple):
    """What one :meth:`SACAgent.update` measured."""

    critic_loss: float
    actor_loss: float
    """NaN on a critic-only step."""
    entropy: float
    """The policy's entropy estimate ``-mean log pi``; NaN on a critic-only step."""
    clipped: float = float("nan")
    """Share of the actor's sampled actions whose ratio clipped at ``RATIO_MAX`` (NaN on a critic-only step): where
    :meth:`TanhGaussianPolicy.critic_action` replaced the raw action."""


OPTIMIZERS: tuple[str, ...] = ("actor", "critic", "alpha")
"""The agent's optimizers by name; checkpoints before names existed list them in this order."""
NETWORKS = ("actor", "critic", "critic_target", "encoder", "log_alpha")
"""The parts of :meth:`SACAgent.state_dict` that are learned weights (what fine-tuning carries over)."""


def learned_networks(config: SACConfig) -> tuple[PosteriorEncoder | None, TanhGaussianPolicy, TwinQ]:
    """A fresh run's posterior encoder (CBRL only), actor and twin critics, sized by ``config``."""
    latent = config.latent_dim if config.bayesian else 0
    residual = bool(config.residual)  # never None after SACConfig.__post_init__
    width = obs_dim(residual)
    encoder = (
        PosteriorEncoder(transition_dim(residual), config.latent_dim, initial_std=config.posterior_initial_std)
        if config.bayesian
        else None
    )
    actor = TanhGaussianPolicy(
        width + latent,
        config.hidden,
        config.action_step,
        config.start_ratio,
        residual=residual,
        zero_start=bool(config.start_at_controller),
    )
    return encoder, actor, TwinQ(width + latent, config.hidden)


def load_learned_networks(
    networks: tuple[PosteriorEncoder | None, TanhGaussianPolicy, TwinQ, TwinQ], state: dict[str, Any]
) -> None:
    """Load a checkpoint's :data:`NETWORKS` into (encoder, actor, critic, target critic); ``ValueError`` says what
    does not fit: a part missing, an encoder on one side only, a tensor of another shape."""
    missing = [key for key in NETWORKS if key != "encoder" and state.get(key) is None]
    if missing:
        raise ValueError(f"the checkpoint lacks {', '.join(missing)}")
    encoder, actor, critic, critic_target = networks
    if (encoder is None) != (state.get("encoder") is None):
        raise ValueError("one of the two runs has a posterior encoder and the other has none")
    try:
        actor.load_state_dict(state["actor"])
        critic.load_state_dict(state["critic"])
        critic_target.load_state_dict(state["critic_target"])
        if encoder is not None:
            encoder.load_state_dict(state["encoder"])
        if torch.as_tensor(state["log_alpha"]).shape != (1,):
            raise ValueError("its temperature is not one number")
    except (RuntimeError, TypeError, AttributeError) as exc:  # torch's report: a heading, then a line per tensor
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        raise ValueError(f"the networks do not fit this run's: {' '.join(lines[:2])}") from None


def check_networks_fit(config: SACConfig, state: dict[str, Any]) -> None:
    """Whether a checkpoint's :data:`NETWORKS` load into a run of ``config`` (``ValueError`` if not), on throwaway
    networks: no controller, market or generator is touched."""
    encoder, actor, critic = learned_networks(config)
    load_learned_networks((encoder, actor, critic, copy.deepcopy(critic)), state)


def _by_name(saved: dict[str, Any] | list[Any]) -> dict[str, Any]:
    """A checkpoint's optimizers (or schedules) by name; older checkpoints list them in :data:`OPTIMIZERS` order."""
    if isinstance(saved, dict):
        return saved
    if len(saved) != len(OPTIMIZERS):
        raise ValueError(f"checkpoint lists {len(saved)} optimizers, expected {len(OPTIMIZERS)}")
    return dict(zip(OPTIMIZERS, saved, strict=True))
