"""The training loop: each epoch collects episodes, takes gradient steps on them, and scores the policy for selection.

Each epoch the agent plays every training day ``episodes_per_day`` times with its stochastic policy through the
batched simulator, stores the whole episodes (:mod:`training.rl.buffer`), then takes gradient steps on
transitions sampled from them (:meth:`training.rl.sac.SACAgent.update`) under the curriculum stage in force
(:mod:`training.rl.curriculum`). Model selection scores the deterministic policy on validation days held out of
the train split (never test or OOD days); which epoch a run keeps is :mod:`training.rl.epoch_selection`'s rule,
applied by the run directory (:mod:`training.rl.runs`).

Variants of this one trainer: **Hard** (the sparse indicator reward, Eq. 5, from the first epoch), **CRL** (the
three-stage curriculum, Eq. 7 then Eq. 5), **CBRL** (CRL plus the posterior encoder q(z | tau) trained through the
critic's loss, the ELBO of Eq. 8, with posterior sampling when acting), and the soft-combination rivals **USCB**
and **RCPO**.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from model.history import History, Registration
from training.bidders.base import Bidder, Outcome, play
from training.bidders.tuning import episode_scores
from training.replay.day_bootstrap import bootstrap_index
from training.replay.dayset import DaySet, split_validation
from training.rl.buffer import EpisodeBuffer
from training.rl.config import SACConfig
from training.rl.curriculum import LagrangianStage, RegretCurriculum, stage_at
from training.rl.policy_bidder import PolicyBidder
from training.rl.rewards import DualAscent, constraint_gap
from training.rl.sac import SACAgent


@dataclass
class EpochLog:
    """One epoch of a run, as its ``history`` in run.json and curves.csv record it."""

    epoch: int
    stage: str
    b: float | None
    """The stage's ROI relaxation ``b_k`` (``None`` for the original problem and the rivals)."""
    updates: int
    train_score: float
    validation_score: float
    """Model selection's measure: the mean of :attr:`validation_scores`."""
    critic_loss: float
    actor_loss: float
    alpha: float
    entropy: float
    """Mean ``-log pi`` of the policy's actions over the epoch's updates."""
    seconds: float
    """Wall-clock time of the epoch (collection, updates, evaluation)."""
    validation_scores: list[float] = field(default_factory=list)
    """The validation score played with each seed ``0..selection_seeds-1``."""
    clipped_share: float = float("nan")
    """Mean share of the actor's sampled actions whose ratio clipped at ``RATIO_MAX`` over the epoch's updates
    (:meth:`TanhGaussianPolicy.critic_action`)."""


def train(
    config: SACConfig,
    days: DaySet,
    on_epoch: Callable[[EpochLog, SACAgent], None] | None = None,
    start_epoch: int = 0,
    state: dict[str, Any] | None = None,
    on_start: Callable[[float, SACAgent], None] | None = None,
    init: dict[str, Any] | None = None,
) -> tuple[SACAgent, list[EpochLog]]:
    """Train on ``days`` (a train split); ``on_epoch`` sees every epoch's log (checkpointing, progress).

    Resuming (``state`` from a checkpoint, ``start_epoch`` after the last finished epoch) restores the
    networks, optimizers, schedules and torch's generator; the replay buffer starts empty and refills.
    With :attr:`SACConfig.start_at_controller`, a fresh run first scores the untrained policy (its controller)
    on the validation days and hands that score to ``on_start``. ``init`` (a fresh run only): the networks to start
    from (:meth:`SACAgent.load_networks`, fine-tuning), scored in the controller's place.
    """
    config.resolve(days.setting)
    selection_seeds = config.selection_seeds
    assert selection_seeds is not None  # resolve() fills it
    torch.set_num_threads(config.torch_threads)
    rng = np.random.default_rng([config.seed, start_epoch])
    agent = SACAgent(config)
    if state is not None:
        agent.load_state(state)
    elif init is not None:
        agent.load_networks(init)
    buffer = EpisodeBuffer(config.buffer_episodes, agent.controller)
    train_days, validation_days = split_validation(days, config.validation_fraction, config.validation_fold)
    multiplier = float(state["multiplier"]) if state and "multiplier" in state else config.rcpo_multiplier
    dual = DualAscent(multiplier=multiplier, learning_rate=config.rcpo_learning_rate)
    auto = RegretCurriculum.of(config.curriculum) if config.auto_curriculum else None
    if auto is not None:  # the agent carries (and checkpoints) the learned b_k; resume from it
        auto.b.update(agent.curriculum_b)
        agent.curriculum_b = auto.b
    if config.start_at_controller and state is None and on_start is not None:
        on_start(greedy_score(agent, days, validation_days, selection_seeds), agent)
    logs = []
    for epoch in range(start_epoch, config.epochs):
        started = time.perf_counter()
        stage = stage_at(epoch, config.curriculum)
        if auto is not None:
            stage = auto.stage(stage)
        if isinstance(stage, LagrangianStage):
            stage = replace(stage, multiplier=dual.multiplier)

        # collection: every train day, episodes_per_day times, by the stochastic policy
        explorer = PolicyBidder(agent.actor, stochastic=True, encoder=agent.encoder, controller=agent.controller)
        collected, oracle = play_days(
            explorer,
            days,
            train_days,
            config.episodes_per_day,
            config.seed * 100_003 + epoch,
            bool(config.bootstrap_days),  # resolve() filled it
        )
        buffer.add(collected.history, oracle)
        # The constraint the rewards hold the episodes to (EpisodeBuffer.sample: L * (1 + roi_margin)): the dual
        # step and the learned curriculum read the same one, or they would chase another target than the reward.
        held_to = collected.history.registration.roi_target * (1.0 + (config.roi_margin or 0.0))
        if isinstance(stage, LagrangianStage):  # RCPO: lambda follows this epoch's mean constraint gap (dual ascent)
            registration = collected.history.registration
            gap = constraint_gap(collected.delivery, collected.cost, held_to, registration.budget)
            stage = replace(stage, multiplier=dual.update(gap))
        agent.multiplier = dual.multiplier
        if auto is not None and stage.b is not None:  # learn b_k on this epoch's episodes, relabel with it
            history = collected.history
            reg = history.registration
            auto.update(stage, history.delivery, history.cost, held_to, reg.budget, oracle)
            stage = auto.stage(stage)

        # updates: a new stage changes the reward under the critic, which is refitted before the actor follows it
        n_step = config.n_step if stage.terminal else 1
        refit = (
            config.stage_refit_updates if epoch > 0 and stage.name != stage_at(epoch - 1, config.curriculum).name else 0
        )
        stats = [
            agent.update(
                buffer.sample(
                    rng,
                    config.batch_size,
                    stage,
                    n_step=n_step,
                    gamma=config.gamma,
                    roi_margin=config.roi_margin or 0.0,
                ),
                train_actor=step >= refit,
            )
            for step in range(refit + config.updates_per_epoch)
        ]

        # selection's measure: the deterministic policy on the validation days, one score per noise stream
        by_seed = greedy_scores(agent, days, validation_days, selection_seeds)
        log = EpochLog(
            epoch=epoch,
            stage=stage.name,
            b=stage.b,
            updates=agent.updates,
            train_score=greedy_score(agent, days, train_days),
            validation_score=float(np.mean(by_seed)),
            validation_scores=by_seed,
            critic_loss=float(np.mean([s.critic_loss for s in stats])),
            actor_loss=float(np.nanmean([s.actor_loss for s in stats])),
            alpha=float(agent.log_alpha.detach().exp()),
            entropy=float(np.nanmean([s.entropy for s in stats])),
            clipped_share=float(np.nanmean([s.clipped for s in stats])),
            seconds=time.perf_counter() - started,
        )
        logs.append(log)
        if on_epoch:
            on_epoch(log, agent)
    return agent, logs


def play_days(
    bidder: Bidder, days: DaySet, chosen: np.ndarray, repeats: int, seed: int, bootstrap: bool = False
) -> tuple[Outcome, np.ndarray]:
    """Play ``days[chosen]``, each ``repeats`` times (in the order of :func:`episode_days`); the outcome and the
    per-episode D*. ``bootstrap``: each chosen day replayed as one Poisson(1) resample of it drawn
    from ``seed`` (:mod:`training.replay.day_bootstrap`; its D* the logged day's)."""
    episodes = episode_days(chosen, repeats)
    registration = days.registration().take(episodes)
    indexes = days.indexes()
    if bootstrap:
        draws = np.random.default_rng([seed, 0xB007])
        indexes = list(indexes)
        for day in np.unique(chosen).tolist():
            indexes[day] = bootstrap_index(indexes[day], draws)
    outcome = play(bidder, indexes, episodes, registration, seed)
    return outcome, days.oracle_delivery[episodes]


def episode_days(chosen: np.ndarray, repeats: int) -> np.ndarray:
    """The day of each episode when ``days[chosen]`` are each played ``repeats`` times (:func:`play_days`)."""
    return np.tile(chosen, repeats)


def score(outcome: Outcome, days: DaySet, chosen: np.ndarray) -> float:
    """Mean ``D / D* * 1[feasible]`` over the episodes of ``chosen`` (played once each)."""
    return float(episode_scores(outcome.delivery, outcome.cost, days.subset(chosen)).mean())


def greedy_scores(agent: SACAgent, days: DaySet, chosen: np.ndarray, seeds: int = 1) -> list[float]:
    """:func:`score` of the agent's deterministic policy on ``days[chosen]``, played once with each seed
    ``0..seeds-1`` (model selection's measure is their mean; :attr:`SACConfig.selection_seeds`)."""
    greedy = PolicyBidder(agent.actor, stochastic=False, encoder=agent.encoder, controller=agent.controller)
    return [score(play_days(greedy, days, chosen, 1, seed=seed)[0], days, chosen) for seed in range(seeds)]


def greedy_score(agent: SACAgent, days: DaySet, chosen: np.ndarray, seeds: int = 1) -> float:
    """The mean of :func:`greedy_scores`."""
    return float(np.mean(greedy_scores(agent, days, chosen, seeds)))


class RandomBidder(Bidder):
    """Uniform random ratios in [0, 4]: the floor any agent must beat."""

    def start(self, registration: Registration, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def bid(self, history: History) -> np.ndarray:
        return self.rng.uniform(0.0, 4.0, history.n)


def random_policy_score(days: DaySet, seed: int = 0) -> float:
    """The score of :class:`RandomBidder` on every day."""
    chosen = np.arange(len(days))
    outcome, _ = play_days(RandomBidder(), days, chosen, 1, seed)
    return score(outcome, days, chosen)
