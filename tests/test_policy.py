"""The stateless decision step (model/policy.py) against the offline bidders, torch and ONNX.

The offline bidders (training's torch ``PolicyBidder`` and ``OnnxBidder``) are what every number in
RESULTS.md comes from; the service decides with :class:`model.policy.Policy` from stored stats. They
must agree at every slot, on histories the policy produced and on arbitrary ones.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from artifact_fixtures import SETTING, Exported
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from model.artifact import load_artifact
from model.contract import SLOTS_PER_DAY
from model.history import History, Registration
from model.policy import NoiseKey, Policy, decision_inputs, offline_keys
from model.sampling import noise
from model.state import CampaignState
from training.bidders.base import play
from training.bidders.onnx import OnnxBidder
from training.market.dataset import Market
from training.replay.dayset import DaySet
from training.rl.runs import load_run_bidder

RATIO_TOLERANCE = 1e-6


@pytest.fixture(scope="module")
def played(exported: Exported) -> History:
    """Every test day played once by the exported CBRL model (seed 3): real histories of the policy."""
    days = DaySet.load(Market.open(exported.market), "test", SETTING)
    bidder = OnnxBidder.load(exported.cbrl_model)
    return play(bidder, days.indexes(), days.episode_days(), days.registration(), seed=3).history


def states_at(history: History, slot: int, seed: int, model_version: str = "") -> list[CampaignState]:
    """What a store holds for each episode of ``history`` after ``slot`` reported slots (offline noise keys)."""
    states = []
    for k, key in enumerate(offline_keys(seed, history.n)):
        budget = float(history.registration.budget[k])
        state = CampaignState.new(
            key.campaign,
            key.episode,
            float(history.registration.roi_target[k]),
            None if np.isinf(budget) else budget,
            seed,
        )
        for s in range(slot):
            state = state.decided(history.ratios[k, s], model_version).reported(
                history.delivery[k, s], history.cost[k, s], history.wins[k, s], history.auctions[k, s]
            )
        states.append(state)
    return states


def test_the_stateless_step_replays_every_slot_of_the_played_days(exported: Exported, played: History):
    """At every slot, deciding from the stored stats gives the ratio the offline ONNX bidder bid there."""
    policy = Policy(load_artifact(exported.cbrl_model))
    for slot in range(SLOTS_PER_DAY):
        decision = policy.decide_states(states_at(played, slot, seed=3))
        np.testing.assert_allclose(decision.ratio, played.ratios[:, slot], atol=RATIO_TOLERANCE, rtol=0)
        assert decision.mean is not None and decision.std is not None and np.all(decision.std > 0)


def random_history(rng: np.random.Generator, n: int, slot: int) -> History:
    registration = Registration(
        roi_target=rng.uniform(0.5, 2.0, n), budget=np.where(rng.random(n) < 0.5, np.inf, rng.uniform(10, 1000, n))
    )
    auctions = rng.integers(0, 500, (n, slot)).astype(float)
    wins = np.floor(auctions * rng.random((n, slot)))
    cost = wins * rng.lognormal(0, 1, (n, slot))
    delivery = np.where(rng.random((n, slot)) < 0.3, 0.0, cost * rng.lognormal(0, 0.7, (n, slot)))
    return History.of_stats(
        registration,
        slot,
        ratios=rng.uniform(0, 4, (n, slot)),
        delivery=delivery,
        cost=cost,
        wins=wins,
        auctions=auctions,
    )


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 2**31 - 1),
    slot=st.integers(0, SLOTS_PER_DAY),
    play_seed=st.integers(0, 1000),
    residual=st.booleans(),
)
def test_random_histories_decide_alike_in_torch_onnx_and_the_stateless_step(
    exported: Exported, seed: int, slot: int, play_seed: int, residual: bool
):
    """Arbitrary stats (not the policy's own), any slot: torch run, ONNX bidder and stored states agree (a CBRL
    model and a residual one, whose base ratio is the controller's on the same stats)."""
    run, model = (
        (exported.residual_run, exported.residual_model) if residual else (exported.cbrl_run, exported.cbrl_model)
    )
    history = random_history(np.random.default_rng(seed), 3, slot)
    torch_bidder, _ = load_run_bidder(run)
    torch_bidder.start(history.registration, play_seed)
    onnx_bidder = OnnxBidder.load(model)
    onnx_bidder.start(history.registration, play_seed)
    stateless = Policy(onnx_bidder.artifact).decide_states(states_at(history, slot, play_seed)).ratio
    np.testing.assert_allclose(onnx_bidder.bid(history), stateless, atol=RATIO_TOLERANCE, rtol=0)
    np.testing.assert_allclose(torch_bidder.bid(history), stateless, atol=RATIO_TOLERANCE, rtol=0)


def test_the_noise_is_the_shared_counter_based_draw_bit_for_bit(played: History):
    inputs = decision_inputs([played], offline_keys(7, played.n), latent_dim=8)
    assert inputs.eps is not None
    for k in range(played.n):
        expected = noise(7, f"episode-{k}", "offline", played.slot, 8).astype(np.float32)
        assert inputs.eps[k].tobytes() == expected.tobytes()


def test_the_noise_takes_numpy_slots_and_refuses_fractional_ones():
    from model.sampling import noise_batch

    assert noise(7, "c", "e", np.int64(3), 4).tobytes() == noise(7, "c", "e", 3, 4).tobytes()
    assert noise_batch(7, ["c"], ["e"], np.int64(3), 4).tobytes() == noise_batch(7, ["c"], ["e"], 3, 4).tobytes()
    with pytest.raises(TypeError):  # slot 3.7 was truncated into slot 3's counter
        noise(7, "c", "e", 3.7, 4)  # type: ignore[arg-type]


def test_ids_holding_the_key_separator_are_refused_not_given_another_campaigns_stream():
    with pytest.raises(ValueError, match="campaign id must not contain"):
        noise(7, "a\x1fb", "c", 0, 4)  # before: the stream of campaign "a", episode "b\x1fc"
    with pytest.raises(ValueError, match="episode id must not contain"):
        noise(7, "a", "b\x1fc", 0, 4)


def test_deciding_nothing_is_a_clear_error(exported: Exported):
    with pytest.raises(ValueError, match="no campaign histories to decide"):
        Policy(load_artifact(exported.cbrl_model)).decide([], [])


def test_a_batch_at_mixed_slots_equals_deciding_one_by_one(exported: Exported, played: History):
    policy = Policy(load_artifact(exported.cbrl_model))
    mixed = [states_at(played, slot, seed=5)[k % played.n] for k, slot in enumerate((0, 1, 17, 47, 17, 0))]
    together = policy.decide_states(mixed)
    for k, state in enumerate(mixed):
        alone = policy.decide_states([state])
        assert together.ratio[k] == pytest.approx(alone.ratio[0], abs=RATIO_TOLERANCE)
        assert together.mean is not None and alone.mean is not None
        np.testing.assert_allclose(together.mean[k], alone.mean[0], atol=1e-5)


def test_a_non_bayesian_model_decides_from_the_observation_alone(exported: Exported, played: History):
    policy = Policy(load_artifact(exported.hard_model))
    decision = policy.decide_states(states_at(played, 20, seed=0))
    bidder = OnnxBidder.load(exported.hard_model)
    cut = played.until(20)
    np.testing.assert_allclose(decision.ratio, bidder.bid(cut), atol=RATIO_TOLERANCE, rtol=0)
    assert decision.mean is None and decision.std is None


def test_a_state_rebuilt_from_bytes_mid_episode_decides_like_the_uninterrupted_one(exported: Exported, played: History):
    policy = Policy(load_artifact(exported.cbrl_model))
    uninterrupted = states_at(played, 30, seed=2)
    rebuilt = [CampaignState.from_bytes(s.to_bytes()) for s in uninterrupted]
    assert rebuilt == uninterrupted
    np.testing.assert_array_equal(policy.decide_states(rebuilt).ratio, policy.decide_states(uninterrupted).ratio)


def test_the_service_noise_key_is_the_campaign_and_episode(exported: Exported, played: History):
    """A live campaign draws from its own (seed, campaign, episode) stream: other names, other ratios."""
    policy = Policy(load_artifact(exported.cbrl_model))
    states = states_at(played, 10, seed=2)
    inputs_a = decision_inputs([states[0].history()], [NoiseKey(2, "episode-0", "offline")], 8)
    inputs_b = decision_inputs([states[0].history()], [NoiseKey(2, "shop-42", "2026-11-26")], 8)
    assert inputs_a.eps is not None and inputs_b.eps is not None
    assert not np.array_equal(inputs_a.eps, inputs_b.eps)
    assert policy.decide_inputs(inputs_a).ratio[0] == pytest.approx(policy.decide_states(states[:1]).ratio[0])


def test_serving_runs_without_torch_pandas_or_training(exported: Exported):
    """model/ runs the shipped decision step with torch, pandas and training/ made unimportable."""
    script = textwrap.dedent(
        f"""
        import importlib.abc, sys

        class Refuse(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("torch", "pandas", "training", "pyarrow", "matplotlib"):
                    raise ImportError(f"serving must not import {{name}}")
                return None

        sys.meta_path.insert(0, Refuse())
        from model.artifact import load_artifact
        from model.policy import Policy
        from model.state import CampaignState

        policy = Policy(load_artifact({str(exported.cbrl_model)!r}))
        state = CampaignState.new("c", "e", 1.0, None, 0)
        state = state.decided(1.0, "v").reported(10.0, 8.0, 5.0, 100.0)
        ratio = policy.decide_states([CampaignState.from_bytes(state.to_bytes())]).ratio[0]
        assert 0.0 <= ratio <= 4.0, ratio
        print("ok", ratio)
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok")
