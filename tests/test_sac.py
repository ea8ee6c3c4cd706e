"""SAC mechanics: policy range and densities, relabeled replay, learning steps, seeding."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from conftest import random_day_log

from model.contract import RATIO_MAX, SLOTS_PER_DAY
from model.features import N_FEATURES
from model.history import Registration
from training.bidders.base import play
from training.replay.dayset import split_validation
from training.replay.simulator import DayIndex
from training.rl.buffer import EpisodeBuffer
from training.rl.config import RESIDUAL_ROI_MARGIN, SACConfig, last_quarter
from training.rl.curriculum import PAPER_CURRICULUM, stage_at
from training.rl.networks import PREV_RATIO, TanhGaussianPolicy, TwinQ
from training.rl.policy_bidder import PolicyBidder
from training.rl.rewards import curriculum_reward, indicator_reward
from training.rl.sac import OPTIMIZERS, SACAgent


def test_policy_ratios_stay_in_range_and_log_density_integrates_to_one():
    torch.manual_seed(0)
    policy = TanhGaussianPolicy(N_FEATURES, hidden=16)
    obs = torch.randn(512, N_FEATURES) * 3
    with torch.no_grad():
        ratio, action, log_prob = policy.sample(obs)
    assert torch.allclose(policy.to_action(obs, ratio), action, atol=1e-5)
    assert ratio.shape == (512,) and log_prob.shape == (512,)
    assert float(ratio.min()) >= 0.0 and float(ratio.max()) <= RATIO_MAX
    assert torch.all((policy.act(obs) >= 0) & (policy.act(obs) <= RATIO_MAX))
    # The density of the squashed, scaled ratio integrates to ~1 over [0, 4] (change of variables is right).
    one = obs[:1]
    with torch.no_grad():
        mean, log_std = policy.distribution(one)
    grid = torch.linspace(1e-4, RATIO_MAX - 1e-4, 20001)
    squashed = (grid - 2.0) / 2.0
    u = torch.atanh(squashed)
    std = log_std.exp()
    density = torch.exp(-0.5 * ((u - mean) / std) ** 2) / (std * math.sqrt(2 * math.pi)) / (2.0 * (1 - squashed**2))
    assert float(torch.trapezoid(density, grid)) == pytest.approx(1.0, abs=0.02)
    q1, q2 = TwinQ(N_FEATURES, hidden=16)(obs, action)
    assert q1.shape == q2.shape == (512,)


def test_relative_actions_scale_the_last_ratio_and_invert():
    torch.manual_seed(0)
    policy = TanhGaussianPolicy(N_FEATURES, hidden=16, step=0.3, start_ratio=0.9)
    obs = torch.rand(256, N_FEATURES)
    obs[:128, PREV_RATIO] = 0.0  # the first slot: no previous ratio
    with torch.no_grad():
        ratio, action, log_prob = policy.sample(obs)
        mean_ratio = policy.act(obs)
    base = torch.where(obs[:, PREV_RATIO] > 0, obs[:, PREV_RATIO] * RATIO_MAX, torch.tensor(0.9))
    unclipped = base * torch.exp(0.3 * action)
    assert torch.allclose(ratio, unclipped.clamp(max=RATIO_MAX), atol=1e-5)
    assert bool(torch.all(ratio[:128] >= 0.9 * math.exp(-0.3) - 1e-6)) and bool(
        torch.all(ratio[:128] <= 0.9 * math.exp(0.3) + 1e-6)
    )
    assert bool(torch.all((mean_ratio > 0) & (mean_ratio <= RATIO_MAX)))
    inside = ratio < RATIO_MAX  # a clipped one's action is the bound's (critic_action), not its tanh(u)
    assert torch.allclose(policy.to_action(obs, ratio), action, atol=1e-5)
    # The log-density is of the log-ratio change: no term in the ratio level (which would pay to bid high).
    with torch.no_grad():
        mean, log_std = policy.distribution(obs)
    u = torch.atanh(action.clamp(-1 + 1e-6, 1 - 1e-6))
    expected = torch.distributions.Normal(mean, log_std.exp()).log_prob(u) - torch.log(0.3 * (1 - action**2) + 1e-6)
    steady = (action.abs() < 0.99) & inside
    assert torch.allclose(log_prob[steady], expected[steady], atol=1e-3)


def _filled_buffer() -> EpisodeBuffer:
    log = random_day_log(np.random.default_rng(2), n=3000)
    registration = Registration.of(roi_target=1.2, budget=400.0, n=4)
    torch.manual_seed(0)
    bidder = PolicyBidder(TanhGaussianPolicy(N_FEATURES, hidden=16), stochastic=True)
    outcome = play(bidder, [DayIndex(log)], np.zeros(4, np.int64), registration, 0)
    buffer = EpisodeBuffer(capacity=3)
    buffer.add(outcome.history, np.full(4, 500.0))  # 4 episodes into 3 slots: the oldest is overwritten
    return buffer


def test_buffer_relabels_rewards_with_the_current_stage():
    buffer = _filled_buffer()
    assert buffer.size == 3
    stage = stage_at(0, PAPER_CURRICULUM)
    batch = buffer.sample(np.random.default_rng(0), 64, stage)
    assert batch.obs.shape == (64, N_FEATURES) and batch.next_obs.shape == (64, N_FEATURES)
    # Recompute by hand for every sampled transition: the reward is the stage's reward of that (episode, slot).
    dense = curriculum_reward(buffer.delivery, buffer.cost, buffer.roi_target, buffer.budget, buffer.oracle, b=0.1)
    sparse = indicator_reward(buffer.delivery, buffer.cost, buffer.roi_target, buffer.budget, buffer.oracle)
    rng = np.random.default_rng(0)
    episode = np.repeat(rng.integers(0, 3, 4), 16)  # 4 episodes, 16 transitions each
    slot = rng.integers(0, SLOTS_PER_DAY, 64)
    np.testing.assert_array_equal(batch.episode.numpy(), np.repeat(np.arange(4), 16))
    np.testing.assert_allclose(batch.reward.numpy(), dense[episode, slot], rtol=1e-6, atol=1e-7)
    later = buffer.sample(np.random.default_rng(0), 64, stage_at(6, PAPER_CURRICULUM))
    np.testing.assert_allclose(later.reward.numpy(), sparse[episode, slot], rtol=1e-6, atol=1e-7)
    assert torch.equal(later.done, torch.as_tensor(slot == SLOTS_PER_DAY - 1, dtype=torch.float32))
    # --roi-margin: the rewards hold the episodes to L (1 + margin); the observations are untouched.
    tighter = buffer.sample(np.random.default_rng(0), 64, stage_at(6, PAPER_CURRICULUM), roi_margin=0.3)
    held = indicator_reward(buffer.delivery, buffer.cost, 1.3 * buffer.roi_target, buffer.budget, buffer.oracle)
    np.testing.assert_allclose(tighter.reward.numpy(), held[episode, slot], rtol=1e-6, atol=1e-7)
    assert not np.array_equal(held, sparse) and torch.equal(tighter.obs, later.obs)


def test_n_step_returns_sum_discounted_rewards_and_bootstrap_n_slots_ahead():
    buffer = _filled_buffer()
    stage = stage_at(0, PAPER_CURRICULUM)
    n, gamma = 5, 0.9
    batch = buffer.sample(np.random.default_rng(0), 64, stage, n_step=n, gamma=gamma)
    dense = curriculum_reward(buffer.delivery, buffer.cost, buffer.roi_target, buffer.budget, buffer.oracle, b=0.1)
    rng = np.random.default_rng(0)
    episode = np.repeat(rng.integers(0, 3, 4), 16)
    slot = rng.integers(0, SLOTS_PER_DAY, 64)
    for k in range(64):
        e, t = episode[k], slot[k]
        end = min(t + n, SLOTS_PER_DAY)
        expected = sum(gamma ** (i - t) * dense[e, i] for i in range(t, end))
        assert float(batch.reward[k]) == pytest.approx(expected, rel=1e-5, abs=1e-6)
        np.testing.assert_array_equal(batch.next_obs[k].numpy(), buffer.obs[e, end])
        assert bool(batch.done[k]) == (end == SLOTS_PER_DAY)
        assert float(batch.discount[k]) == pytest.approx(gamma ** (end - t))


def test_updates_fit_the_critic_and_are_seeded():
    buffer = _filled_buffer()
    stage = stage_at(6, PAPER_CURRICULUM)
    batch = buffer.sample(np.random.default_rng(1), 128, stage)
    runs = []
    for _ in range(2):  # one after the other: the policy's noise comes from torch's seeded global generator
        agent = SACAgent(SACConfig(seed=3, hidden=32))
        runs.append([agent.update(batch).critic_loss for _ in range(60)])
    losses = np.array(runs)
    np.testing.assert_array_equal(losses[0], losses[1])  # same seed, same batch: same trajectory
    assert losses[0, -5:].mean() < losses[0, :5].mean()  # the critic fits the fixed batch
    assert agent.updates == 60
    stats = agent.update(batch)
    assert 0.0 <= stats.clipped <= 1.0 and np.isnan(agent.update(batch, train_actor=False).clipped)


def test_agent_state_round_trips_by_name_and_loads_positional_checkpoints():
    buffer = _filled_buffer()
    batch = buffer.sample(np.random.default_rng(1), 64, stage_at(6, PAPER_CURRICULUM))
    config = SACConfig(seed=3, hidden=32)
    trained = SACAgent(config)
    for _ in range(3):
        trained.update(batch)
    state = trained.state_dict()
    assert list(state["optimizers"]) == list(OPTIMIZERS) == list(state["schedulers"])
    # Checkpoints written before the optimizers had names list them in OPTIMIZERS order.
    positional = {**state, "optimizers": [state["optimizers"][n] for n in OPTIMIZERS]}
    positional["schedulers"] = [state["schedulers"][n] for n in OPTIMIZERS]
    resumed = []
    for saved in (state, positional):
        agent = SACAgent(config)
        agent.load_state(copy.deepcopy(saved))  # Adam adopts the loaded moment tensors and updates them in place
        assert agent.updates == 3
        resumed.append([agent.update(batch).critic_loss for _ in range(3)])
    assert resumed[0] == resumed[1]
    with pytest.raises(ValueError, match="optimizers"):
        SACAgent(config).load_state({**state, "optimizers": positional["optimizers"][:2]})


def test_config_and_validation_split():
    with pytest.raises(ValueError, match="unknown algo"):
        SACConfig(algo="nope")

    # The default config: CBRL learns a residual of the tuned PID, in MC with a ROI margin, in SC from the controller
    # and without the margin; the rivals stay the paper's. The setting's defaults are filled by resolve().
    def resolved(setting: str, **kwargs) -> tuple:
        config = SACConfig(**kwargs).resolve(setting)
        return config.residual, config.roi_margin, config.start_at_controller

    assert resolved("mc", algo="cbrl") == (True, RESIDUAL_ROI_MARGIN["mc"], False) == (True, 0.05, False)
    assert resolved("sc", algo="cbrl") == (True, 0.0, True)
    assert resolved("mc", algo="crl") == resolved("sc", algo="crl") == (False, 0.0, False)
    assert resolved("mc", algo="cbrl", residual=False) == (False, 0.0, False)
    assert resolved("sc", algo="cbrl", roi_margin=0.1, start_at_controller=False) == (True, 0.1, False)
    assert resolved("mc", algo="hard", residual=True) == (True, 0.05, False)
    assert SACConfig(algo="cbrl").roi_margin is None  # unresolved until the setting is known
    # Model selection's noise streams: 5 for CBRL in SC, else 1; a choice given is kept, 0 is refused.
    assert [SACConfig(algo=a).resolve(s).selection_seeds for a in ("cbrl", "crl") for s in ("sc", "mc")] == [5, 1, 1, 1]
    assert SACConfig(algo="cbrl", selection_seeds=2).resolve("sc").selection_seeds == 2
    with pytest.raises(ValueError, match="selection_seeds must be >= 1"):
        SACConfig(algo="cbrl", selection_seeds=0)

    # Bootstrap days and late-epoch selection (the last quarter of the epochs): CBRL in SC, else off; a choice given
    # is kept.
    def late(setting: str, **kwargs) -> tuple:
        config = SACConfig(**kwargs).resolve(setting)
        return config.bootstrap_days, config.select_from

    assert late("sc", algo="cbrl") == (True, 18) and last_quarter(24) == 18
    assert late("mc", algo="cbrl") == late("sc", algo="crl") == late("mc", algo="crl") == (False, 0)
    assert [late("sc", algo="cbrl", epochs=e)[1] for e in (1, 2, 3, 4, 8)] == [0, 1, 2, 3, 6]
    assert late("sc", algo="cbrl", bootstrap_days=False, select_from=0) == (False, 0)
    assert late("mc", algo="cbrl", bootstrap_days=True, select_from=5) == (True, 5)
    assert SACConfig(algo="cbrl").bootstrap_days is None and SACConfig(algo="cbrl").select_from is None
    with pytest.raises(ValueError, match=r"select_from must be in 0\.\.2"):
        SACConfig(algo="cbrl", epochs=3, select_from=3)
    config = SACConfig(algo="cbrl").resolve("sc")
    assert config.resolve("mc").roi_margin == 0.0  # idempotent: a value once filled is kept
    assert (config.bootstrap_days, config.select_from) == (True, 18)
    assert SACConfig(algo="hard").curriculum[0].b is None
    assert [s.b for s in SACConfig(algo="crl").curriculum] == [0.1, 0.2, None]
    # Without the relaxed stages a curriculum algo plays the original problem from the first epoch.
    assert [s.name for s in SACConfig(algo="cbrl", relaxed_stages=False).curriculum] == ["original problem"]
    assert [s.name for s in SACConfig(algo="uscb", relaxed_stages=False).curriculum] == ["uscb"]  # no relaxed stages

    class Days:  # split_validation only needs len()
        def __len__(self) -> int:
            return 30

    train_days, validation_days = split_validation(Days(), 0.2)  # type: ignore[arg-type]
    assert len(validation_days) == 6 and len(train_days) == 24
    assert not set(train_days) & set(validation_days)
    # The five folds are disjoint, cover the train days, and fold 0 is the default split.
    folds = [split_validation(30, 0.2, fold)[1] for fold in range(5)]
    assert sorted(np.concatenate(folds).tolist()) == list(range(30))
    assert np.array_equal(folds[0], validation_days) and np.array_equal(folds[2], np.arange(2, 30, 5))
    with pytest.raises(ValueError, match="out of range"):
        split_validation(30, 0.2, 5)
    with pytest.raises(ValueError, match=r"validation_fold must be in 0\.\.4"):
        SACConfig(algo="cbrl", validation_fold=5)
    assert SACConfig(algo="crl", validation_fraction=0.0).validation_fold == 0  # nothing held out: one fold
    with pytest.raises(ValueError, match=r"validation_fold must be in 0\.\.0"):
        SACConfig(algo="crl", validation_fraction=0.0, validation_fold=1)


def test_soft_combination_rivals_use_their_rewards(tiny_market):
    from training.replay.dayset import DaySet
    from training.rl.curriculum import LagrangianStage, USCBStage
    from training.rl.loop import train

    assert isinstance(SACConfig(algo="uscb", uscb_gamma=5.0).curriculum[0], USCBStage)
    assert SACConfig(algo="uscb", uscb_gamma=5.0).curriculum[0].gamma == 5.0
    config = SACConfig(algo="rcpo", epochs=2, updates_per_epoch=5, episodes_per_day=2, hidden=16, rcpo_multiplier=0.5)
    assert isinstance(config.curriculum[0], LagrangianStage) and config.curriculum[0].multiplier == 0.5
    days = DaySet.load(tiny_market, "train", "mc")
    agent, logs = train(config, days)
    assert len(logs) == 2 and {log.stage for log in logs} == {"rcpo"}
    # Dual ascent moved lambda by lr * the mean signed constraint gap of each epoch (it stays >= 0).
    assert agent.multiplier >= 0.0 and agent.multiplier != 0.5


def test_the_dual_step_reads_the_constraint_the_rewards_hold(tiny_market, monkeypatch):
    """With an ROI margin the rewards hold each episode to L (1 + margin), and so does the dual step: on plain L it
    would chase another constraint than the reward's."""
    from training.replay.dayset import DaySet
    from training.rl import loop

    seen = []

    def spy(delivery, cost, roi_target, budget):
        seen.append(np.asarray(roi_target, dtype=float).copy())
        return 0.0

    monkeypatch.setattr(loop, "constraint_gap", spy)
    days = DaySet.load(tiny_market, "train", "mc")
    config = SACConfig(algo="rcpo", epochs=1, updates_per_epoch=2, episodes_per_day=1, hidden=16, roi_margin=0.2)
    loop.train(config, days)
    assert seen and np.allclose(seen[0], days.registration().roi_target.repeat(1) * 1.2)


def test_residual_actions_scale_the_controllers_ratio_and_invert():
    """``--residual``: the base is the controller's ratio (the ``controller_ratio`` feature), not the last ratio."""
    from model.features import CONTROLLER_INDEX

    torch.manual_seed(0)
    policy = TanhGaussianPolicy(N_FEATURES + 1, hidden=16, step=0.5, residual=True)
    obs = torch.rand(256, N_FEATURES + 1)
    obs[:, CONTROLLER_INDEX] = torch.linspace(0.01, 0.9, 256)
    with torch.no_grad():
        ratio, action, _ = policy.sample(obs)
    unclipped = obs[:, CONTROLLER_INDEX] * RATIO_MAX * torch.exp(0.5 * action)
    assert torch.allclose(ratio, unclipped.clamp(max=RATIO_MAX), atol=1e-5)
    assert torch.allclose(policy.to_action(obs, ratio), action, atol=1e-5)
    with pytest.raises(ValueError, match="relative action step"):
        TanhGaussianPolicy(N_FEATURES + 1, hidden=16, step=0.0, residual=True)


def test_the_critics_see_a_clipped_ratio_as_the_action_the_buffer_holds_for_it():
    """A ratio clipped at RATIO_MAX is stored, and learned by the critics, as ``to_action`` of the bound; the actor and
    the bootstrap must read the critics at that same action, with no gradient through the clip, and leave every
    unclipped action's value and gradient as they were."""
    from model.features import CONTROLLER_INDEX

    torch.manual_seed(0)
    policy = TanhGaussianPolicy(N_FEATURES + 1, hidden=16, step=0.3, residual=True)
    obs = torch.rand(512, N_FEATURES + 1)
    obs[:, CONTROLLER_INDEX] = torch.linspace(0.6, 0.99, 512)  # bases 2.4-3.96: above 4 exp(-0.3) = 2.96 clips
    with torch.no_grad():
        mean, log_std = policy.distribution(obs)
    mean = mean.requires_grad_()  # a leaf, to read the action's gradient in the policy's mean
    policy.distribution = lambda _: (mean, log_std)  # type: ignore[method-assign]
    torch.manual_seed(1)
    ratio, action, _ = policy.sample(obs)
    torch.manual_seed(1)
    squashed = torch.tanh(mean + log_std.exp() * torch.randn_like(mean))
    clipped = ratio >= RATIO_MAX
    assert 50 < int(clipped.sum()) < 500  # both kinds are in the batch
    assert torch.equal(action[~clipped], squashed[~clipped])  # bit for bit: runs that never clip do not move
    bound = torch.log(RATIO_MAX / (obs[:, CONTROLLER_INDEX] * RATIO_MAX)) / 0.3
    assert torch.allclose(action[clipped], bound[clipped], atol=1e-5)
    assert bool(torch.all(action[clipped] < squashed[clipped]))  # the raw action overstated how far it went
    (grad,) = torch.autograd.grad(action.sum(), mean)
    assert bool(torch.all(grad[clipped] == 0)) and bool(torch.all(grad[~clipped] > 0))
    absolute = TanhGaussianPolicy(N_FEATURES, hidden=16)
    _, action, _ = absolute.sample(obs[:, :N_FEATURES])
    assert torch.allclose(
        absolute.to_action(obs[:, :N_FEATURES], absolute.to_ratio(obs[:, :N_FEATURES], action)), action, atol=1e-5
    )


def test_a_residual_agent_needs_its_reference_controller():
    with pytest.raises(ValueError, match="reference controller"):
        SACAgent(SACConfig(algo="cbrl", residual=True))
    with pytest.raises(ValueError, match="reference controller"):
        PolicyBidder(TanhGaussianPolicy(N_FEATURES + 1, hidden=16, step=0.3, residual=True), stochastic=False)


def test_a_zero_start_residual_policy_bids_its_controller_until_it_learns():
    """``start_at_controller``: the untrained mean is 0, so the deterministic ratio is the controller's for any
    observation and latent; sampling still explores around it."""
    from model.features import CONTROLLER_INDEX

    torch.manual_seed(0)
    policy = TanhGaussianPolicy(N_FEATURES + 1 + 8, hidden=16, step=0.3, residual=True, zero_start=True)
    obs = torch.rand(256, N_FEATURES + 1 + 8) * 4 - 2  # the latent's columns take any value
    obs[:, CONTROLLER_INDEX] = torch.linspace(0.01, 0.99, 256)
    with torch.no_grad():
        assert torch.allclose(policy.act(obs), obs[:, CONTROLLER_INDEX] * RATIO_MAX, atol=1e-6)
        sampled, _, _ = policy.sample(obs)
    assert (sampled - obs[:, CONTROLLER_INDEX] * RATIO_MAX).abs().max() > 0.01
    plain = TanhGaussianPolicy(N_FEATURES + 1 + 8, hidden=16, step=0.3, residual=True)
    with torch.no_grad():
        assert not torch.allclose(plain.act(obs), obs[:, CONTROLLER_INDEX] * RATIO_MAX, atol=1e-3)
    with pytest.raises(ValueError, match="zero_start needs a residual"):
        TanhGaussianPolicy(N_FEATURES, hidden=16, step=0.3, zero_start=True)
    with pytest.raises(ValueError, match="start_at_controller needs a residual"):
        SACConfig(algo="crl", start_at_controller=True)
    assert SACConfig(algo="cbrl", start_at_controller=True).start_at_controller


def test_the_critic_target_reads_the_z_of_slot_t_at_the_bootstrap(monkeypatch: pytest.MonkeyPatch):
    """Eq. 8's one task variable per transition: the bootstrap ``o_{t+n}`` reads the ``z`` drawn from
    ``q(z | tau_t)`` for ``o_t``, not a posterior of its own slot."""
    buffer = _filled_buffer()
    batch = buffer.sample(np.random.default_rng(1), 64, stage_at(6, PAPER_CURRICULUM), n_step=5)
    agent = SACAgent(SACConfig(algo="cbrl", residual=False, seed=3, hidden=16))
    assert agent.encoder is not None
    latent = agent.config.latent_dim

    def known_posterior(steps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # the posterior after t transitions has mean t in every coordinate and no spread
        t = torch.arange(steps.shape[1] + 1, dtype=torch.float32).view(1, -1, 1)
        mean = t.expand(steps.shape[0], -1, latent).clone().requires_grad_()
        return mean, torch.full_like(mean, 1e-12)

    monkeypatch.setattr(agent.encoder, "every_prefix", known_posterior)
    seen: dict[str, torch.Tensor] = {}
    target = agent.critic_target.forward

    def recording_target(obs: torch.Tensor, action: torch.Tensor):
        seen["z"] = obs[:, -latent:].detach().clone()
        return target(obs, action)

    monkeypatch.setattr(agent.critic_target, "forward", recording_target)
    agent.update(batch)
    assert not torch.equal(batch.next_slot, batch.slot)
    np.testing.assert_allclose(seen["z"].numpy(), batch.slot.float().view(-1, 1).expand(-1, latent).numpy(), atol=1e-5)
