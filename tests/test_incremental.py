"""The incremental posterior (model/incremental.py) against the full pass of encoder.onnx.

Each slot update encodes only its campaign's new transition over the cached keys and values; the posterior and the
ratio must be the full pass's within float32 rounding, slot after slot of whole days, for the shipped ensemble and
the exported fixture models, whatever the cache holds (nothing, a stale belief, an evicted one).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from artifact_fixtures import Exported

from model.artifact import load_artifact
from model.contract import SLOTS_PER_DAY
from model.incremental import BeliefCache, EncoderWeights, IncrementalEncoder, read_graph
from model.policy import Policy
from model.state import CampaignState

RATIO_TOLERANCE = 1e-6
POSTERIOR_TOLERANCE = 1e-5
DEFAULT_MODEL = Path(__file__).resolve().parent.parent / "models" / "default"


def _report(state: CampaignState, rng: np.random.Generator) -> CampaignState:
    auctions = float(rng.integers(50, 2000))
    wins = auctions * float(rng.uniform(0.0, 1.0))
    cost = wins * float(rng.uniform(0.05, 2.0))
    delivery = cost * float(rng.uniform(0.0, 3.0))
    return state.reported(delivery, cost, wins, auctions)


def _fresh(n: int, rng: np.random.Generator, prefix: str = "c") -> list[CampaignState]:
    return [
        CampaignState.new(
            f"{prefix}{i}", "day-1", float(rng.uniform(0.5, 3.0)), float(rng.uniform(50, 5000)) if i % 3 else None, 7
        )
        for i in range(n)
    ]


def _assert_same(full, incremental) -> None:
    np.testing.assert_allclose(incremental.ratio, full.ratio, rtol=0, atol=RATIO_TOLERANCE)
    np.testing.assert_allclose(incremental.mean, full.mean, rtol=0, atol=POSTERIOR_TOLERANCE)
    np.testing.assert_allclose(incremental.std, full.std, rtol=0, atol=POSTERIOR_TOLERANCE)


def _day_alike(model: Path, n: int, seed: int) -> Policy:
    """Play ``n`` random campaigns through a whole day, each slot decided by both paths; returns the incremental."""
    artifact = load_artifact(model)
    full, incremental = Policy(artifact), Policy(artifact)
    assert incremental.use_incremental(capacity=n)
    rng = np.random.default_rng(seed)
    states = _fresh(n, rng)
    for slot in range(SLOTS_PER_DAY + 1):
        if slot:
            states = [_report(s, rng) for s in states]
        a, b = full.decide_states(states), incremental.decide_states(states)
        _assert_same(a, b)
        states = [s.decided(float(a.ratio[k]), "v") for k, s in enumerate(states)]
    return incremental


def test_a_whole_day_of_the_shipped_ensemble_decides_as_the_full_pass():
    incremental = _day_alike(DEFAULT_MODEL, 48, seed=0)
    assert incremental.incremental is not None
    cache = incremental.incremental.cache
    assert cache.misses == 48 and cache.hits == 48 * SLOTS_PER_DAY  # slot 0's first look-up, then hits only


@pytest.mark.parametrize("which", ["cbrl_model", "residual_model"])
def test_a_whole_day_of_the_exported_models_decides_as_the_full_pass(exported: Exported, which: str):
    _day_alike(getattr(exported, which), 32, seed=1)


def test_the_weights_are_the_graphs_initializers():
    import onnx
    from onnx import numpy_helper

    data = (DEFAULT_MODEL / "encoder.onnx").read_bytes()
    initializers, nodes = read_graph(data)
    model = onnx.load_from_string(data)
    for tensor in model.graph.initializer:
        assert np.array_equal(initializers[tensor.name], numpy_helper.to_array(tensor)), tensor.name
    assert nodes["m0.block0.attention"][1]["num_heads"] == 4
    weights = EncoderWeights.from_onnx(data)
    assert weights.layout == (5, 3, 4, 8)


def test_random_trajectories_at_every_length_and_a_batch_at_mixed_lengths():
    artifact = load_artifact(DEFAULT_MODEL)
    assert artifact.encoder_graph is not None
    encoder = IncrementalEncoder.from_onnx(artifact.encoder_graph)
    rng = np.random.default_rng(2)
    n = 40
    trajectories = rng.normal(size=(n, SLOTS_PER_DAY, encoder.transition_dim)).astype(np.float32)
    keys = [(f"c{i}", "e") for i in range(n)]
    for t in range(SLOTS_PER_DAY + 1):
        mask = np.zeros((n, max(t, 1)), bool)
        mask[:, :t] = True
        expected = artifact.posterior(trajectories[:, : max(t, 1)], mask)
        got = encoder.posterior(keys, trajectories[:, : max(t, 1)], mask)
        for e, g in zip(expected, got, strict=True):
            np.testing.assert_allclose(g, e, rtol=0, atol=POSTERIOR_TOLERANCE)
    # rows at different lengths, some cached at an earlier length, some never seen: one call
    encoder.cache.clear()
    lengths = rng.integers(0, SLOTS_PER_DAY + 1, size=n)
    for i in range(0, n, 2):  # half the rows have a belief some slots back
        short = int(lengths[i]) // 2
        encoder.posterior([keys[i]], trajectories[i : i + 1, : max(short, 1)], (np.arange(max(short, 1)) < short)[None])
    mask = np.arange(SLOTS_PER_DAY)[None, :] < lengths[:, None]
    steps = np.where(mask[..., None], trajectories, np.float32(0))
    expected = artifact.posterior(steps, mask)
    got = encoder.posterior(keys, steps, mask)
    for e, g in zip(expected, got, strict=True):
        np.testing.assert_allclose(g, e, rtol=0, atol=POSTERIOR_TOLERANCE)


def test_a_stale_belief_is_not_used_the_trajectory_is_encoded_again():
    artifact = load_artifact(DEFAULT_MODEL)
    full, incremental = Policy(artifact), Policy(artifact)
    assert incremental.use_incremental(capacity=100)
    rng = np.random.default_rng(3)
    states = _fresh(6, rng)
    for _ in range(10):
        states = [_report(s, rng) for s in states]
        incremental.decide_states(states)
    # another replica wrote other stats for the last slot: the cached belief holds a transition that never landed
    rewritten = [CampaignState(**{**s.__dict__, "stats": s.stats.copy()}) for s in states]
    for s in rewritten:
        s.stats[2, -1] *= 1.5  # cost of the last slot
    assert incremental.incremental is not None
    misses = incremental.incremental.cache.misses
    _assert_same(full.decide_states(rewritten), incremental.decide_states(rewritten))
    assert incremental.incremental.cache.misses == misses + len(states)
    # the next slot extends the rebuilt beliefs
    advanced = [_report(s, rng) for s in rewritten]
    _assert_same(full.decide_states(advanced), incremental.decide_states(advanced))
    assert incremental.incremental.cache.misses == misses + len(states)


def test_an_evicted_or_lost_belief_costs_one_full_pass_and_the_same_posterior():
    artifact = load_artifact(DEFAULT_MODEL)
    full, incremental = Policy(artifact), Policy(artifact)
    assert incremental.use_incremental(capacity=3)  # fewer entries than campaigns: evictions every slot
    rng = np.random.default_rng(4)
    states = _fresh(5, rng)
    for slot in range(12):
        states = [_report(s, rng) for s in states]
        for row in range(len(states)):  # one campaign at a time, as single slot updates
            _assert_same(full.decide_states(states[row : row + 1]), incremental.decide_states(states[row : row + 1]))
        if slot == 6:
            incremental.incremental.cache.clear()  # type: ignore[union-attr]  # a restart
    assert len(incremental.incremental.cache) == 3  # type: ignore[union-attr]


def test_the_cache_hands_a_belief_to_one_decision_at_a_time():
    cache = BeliefCache(capacity=2)
    encoder = IncrementalEncoder.from_onnx((DEFAULT_MODEL / "encoder.onnx").read_bytes())
    belief = encoder.empty()
    cache.put([("a", "e")], [belief])
    assert cache.take([("a", "e")]) == [belief]
    assert cache.take([("a", "e")]) == [None]  # taken: a concurrent decision encodes from the first transition
    cache.put([("a", "e"), ("b", "e"), ("c", "e")], [belief, belief, belief])
    assert len(cache) == 2
    size = belief.nbytes
    assert size == 184_320 + 48 * encoder.transition_dim * 4 + 5 * 2 * 8 * 8  # the shipped ensemble's belief


def test_a_model_without_an_encoder_or_an_unreadable_graph_keeps_the_full_pass(exported: Exported):
    hard = Policy(load_artifact(exported.hard_model))
    assert not hard.use_incremental(capacity=10)
    policy = Policy(load_artifact(DEFAULT_MODEL))
    policy.artifact.encoder_graph = b"\x00\x01"
    assert not policy.use_incremental(capacity=10)
    assert policy.incremental is None


def test_the_service_runner_decides_incrementally_unless_told_not_to(monkeypatch: pytest.MonkeyPatch):
    from service.runner import BELIEF_CACHE_ENV, ModelRunner

    runner = ModelRunner(DEFAULT_MODEL)
    runner.load()
    assert runner.policy is not None and runner.policy.incremental is not None
    rng = np.random.default_rng(5)
    states = [_report(_report(s, rng), rng) for s in _fresh(3, rng)]
    first = runner.decide(states)
    assert runner.policy.incremental.cache.misses == 3
    full = Policy(runner.policy.artifact).decide_states(states)
    np.testing.assert_allclose(first.ratio, full.ratio, rtol=0, atol=RATIO_TOLERANCE)
    monkeypatch.setenv(BELIEF_CACHE_ENV, "0")
    runner.load()
    assert runner.policy is not None and runner.policy.incremental is None
