"""The one decision step: from what campaigns have reported, their next bid ratios (paper Sec. 3.2.4).

Stateless: everything is rebuilt from the registration, the stats of the finished slots and the
ratios bid, plus the noise key ``(seed, campaign, episode)``:

1. the observations ``o_0 .. o_t`` (:func:`observation_sequence`, :func:`model.features.observe`
   reads only ``history[:, :s]`` for ``o_s``, so rebuilding is exact);
2. CBRL's trajectory ``tau_t = {(o_i, a_i / 4, o_{i+1})}_{i<t}`` (:mod:`model.trajectory`), padded to
   the batch's longest with a prefix mask, so campaigns at different slots share one encoder call;
3. the posterior ``q(z | tau_t)`` and a sample ``z = mean + std * eps``, ``eps`` from the
   counter-based noise of :mod:`model.sampling` (slot ``t`` in the counter); the service computes the
   posterior incrementally (:meth:`Policy.use_incremental`, :mod:`model.incremental`): only the new
   transitions, over each campaign's cached keys and values, checked against the rebuilt trajectory;
4. the policy's deterministic ratio on ``(o_t, z)``, clipped to [0, 4].

Steps 1, 2 and the noise are :func:`decision_inputs`, shared by every driver: :class:`Policy` runs
the exported ONNX graphs (evaluation's ``onnx:MODEL_DIR`` and the service), training's torch bidder
runs its own networks on the same inputs. So a slot decided by the service, by ``rcb evaluate`` and
by the training run is one computation (tested to 1e-6 on the ratio, bit for bit on the noise).
A planner or a controller model (``kind: planner`` / ``controller``) has no graph: :class:`Policy` runs its law on
the campaigns' stats instead, the same function for the service and ``onnx:MODEL_DIR``.

The offline noise-key convention: episode ``k`` of a batch played with seed ``s`` is campaign
``episode-{k}`` of episode ``offline`` under seed ``s`` (:func:`offline_keys`). A service campaign
registered under those names and that seed decides exactly the ratios ``rcb evaluate`` plays.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from model.artifact import BID_SCALE_RANGE, Artifact
from model.contract import RATIO_MAX, RATIO_MIN
from model.controller import ControllerGains, Reference
from model.features import observation_sequence
from model.history import History
from model.incremental import IncrementalEncoder
from model.planner import Depth
from model.sampling import noise_batch, sample_posterior
from model.state import CampaignState, stack_histories
from model.trajectory import episode_steps


@dataclass(frozen=True)
class NoiseKey:
    """Whose posterior-sampling stream a row draws from: ``(seed, campaign, episode)``; the slot is the counter."""

    seed: int
    campaign: str
    episode: str


def offline_keys(seed: int, n: int) -> list[NoiseKey]:
    """The keys of offline play (training, ``rcb evaluate``): episode ``k`` is campaign ``episode-{k}``."""
    return [NoiseKey(seed, f"episode-{k}", "offline") for k in range(n)]


@dataclass(frozen=True)
class DecisionInputs:
    """What the networks read for one decision of ``n`` rows (campaigns may sit at different slots)."""

    obs: np.ndarray
    """``(n, F)`` float32: the current observation ``o_t`` of each row."""
    steps: np.ndarray | None
    """``(n, length, 2F + 1)`` float32 transitions so far, padded (None without an encoder)."""
    mask: np.ndarray | None
    """``(n, length)`` bool, a valid prefix per row (all False at slot 0: the encoder answers its prior)."""
    eps: np.ndarray | None
    """``(n, latent)`` float32 standard-normal draws for ``z = mean + std * eps``."""


def decision_inputs(
    histories: Sequence[History],
    keys: Sequence[NoiseKey],
    latent_dim: int,
    controller: Reference | None = None,
    own_ratio_scale: float = 1.0,
) -> DecisionInputs:
    """The inputs of one decision for the rows of ``histories`` (each at its own slot), concatenated in order.

    ``keys`` has one entry per row. ``latent_dim`` 0: a policy without posterior (only ``obs``). ``controller``:
    a residual model's reference controller (the observations then end with ``controller_ratio``).
    ``own_ratio_scale``: the bid scale of a model that builds on its last ratio
    (:attr:`model.artifact.ModelCard.builds_on_last_ratio`): the ratios bid are read back divided by it, the
    model's own, so its next ratio moves its own last one and the scale stays one factor instead of compounding.
    """
    n = sum(h.n for h in histories)
    if len(keys) != n:
        raise ValueError(f"{n} rows need {n} noise keys, got {len(keys)}")
    if own_ratio_scale != 1.0:
        histories = [_with_ratios_over(h, own_ratio_scale) for h in histories]
    sequences = [observation_sequence(h, controller) for h in histories]
    obs = np.concatenate([seq[:, -1] for seq in sequences], axis=0) if histories else np.zeros((0, 0), np.float32)
    if latent_dim == 0:
        return DecisionInputs(obs=obs, steps=None, mask=None, eps=None)
    parts = [episode_steps(seq, h.ratios[:, : h.slot]) for seq, h in zip(sequences, histories, strict=True)]
    length = max(steps.shape[1] for steps, _ in parts)
    width = parts[0][0].shape[2]
    steps = np.zeros((n, length, width), dtype=np.float32)
    mask = np.zeros((n, length), dtype=bool)
    row = 0
    for part_steps, part_mask in parts:
        k, t = part_mask.shape
        steps[row : row + k, :t] = part_steps
        mask[row : row + k, :t] = part_mask
        row += k
    slots = [h.slot for h in histories for _ in range(h.n)]
    eps = _noise(keys, slots, latent_dim)
    return DecisionInputs(obs=obs, steps=steps, mask=mask, eps=eps.astype(np.float32))


def _with_ratios_over(history: History, scale: float) -> History:
    """A copy of ``history`` whose ratios are divided by ``scale`` (the stats, as the market answered, unchanged)."""
    own = copy.copy(history)
    own.ratios = history.ratios / scale
    return own


def _noise(keys: Sequence[NoiseKey], slots: list[int], latent_dim: int) -> np.ndarray:
    out = np.empty((len(keys), latent_dim))
    by_seed: dict[int, list[int]] = {}
    for i, key in enumerate(keys):
        by_seed.setdefault(key.seed, []).append(i)
    for seed, rows in by_seed.items():
        out[rows] = noise_batch(
            seed,
            [keys[i].campaign for i in rows],
            [keys[i].episode for i in rows],
            [slots[i] for i in rows],
            latent_dim,
        )
    return out


@dataclass(frozen=True)
class Decision:
    """The ratios decided for ``n`` rows, with the posterior behind them (Bayesian models)."""

    ratio: np.ndarray
    """``(n,)`` float64 in [0, 4]."""
    mean: np.ndarray | None = None
    """``(n, latent)`` posterior mean of z, or None."""
    std: np.ndarray | None = None
    depth: Depth | None = None
    """A planner's signs of being out of its depth per row (:class:`model.planner.Depth`), or None."""


class Policy:
    """An exported model (:class:`model.artifact.Artifact`) as the stateless decision step."""

    def __init__(self, artifact: Artifact, bid_scale: float | None = None):
        self.artifact = artifact
        self.controller = artifact.reference_gains() if artifact.residual else None
        """A residual model's reference controller (it reads ``controller_ratio``), else None: the training market's
        PID, which the policy corrects, whatever PID the shield runs around."""
        self.bid_scale = artifact.card.bid_scale_factor() if bid_scale is None else float(bid_scale)
        """The factor on every decided ratio: the card's calibrated ``bid_scale`` (1 without one), or the one given
        (:mod:`training.export.calibrate` plays candidates with it)."""
        low, high = BID_SCALE_RANGE
        if not low <= self.bid_scale <= high:  # also refuses nan: a card's own factor is checked the same way
            raise ValueError(f"bid scale must be in [{low:g}, {high:g}], not {self.bid_scale!r}")
        self.own_ratio_scale = self.bid_scale if artifact.card.builds_on_last_ratio else 1.0
        """What the ratios read back are divided by (:func:`decision_inputs`): the scale, for a model that builds
        on its last ratio; 1 for a residual or absolute one (its base is not what it bid)."""
        self.incremental: IncrementalEncoder | None = None
        """The encoder run over each campaign's new transitions only, with its per-process belief cache
        (:meth:`use_incremental`); None: every decision encodes the whole trajectory (``encoder.onnx``)."""

    def use_incremental(self, capacity: int) -> bool:
        """Decide through :class:`model.incremental.IncrementalEncoder` (a cache of ``capacity`` campaigns' beliefs)
        where the model has a posterior encoder whose graph it can read; whether it does. The posterior is the full
        pass's within float32 rounding, and a campaign it has no belief of (or a stale one) costs one full pass."""
        graph = self.artifact.encoder_graph
        if not self.artifact.bayesian or graph is None or capacity <= 0:
            return False
        try:
            self.incremental = IncrementalEncoder.from_onnx(graph, capacity)
        except (ValueError, KeyError, IndexError):  # an encoder graph of another writer: the full pass decides
            self.incremental = None
            return False
        return True

    @property
    def latent_dim(self) -> int:
        return self.artifact.latent_dim

    def decide(self, histories: Sequence[History], keys: Sequence[NoiseKey]) -> Decision:
        """Next ratios of every row of ``histories`` (rows in order; each History at its own slot)."""
        if not histories or not any(h.n for h in histories):
            raise ValueError("no campaign histories to decide")
        if self.artifact.controller is not None:  # a controller model: its law on the stats, no features or noise
            law = self.artifact.controller
            return Decision(ratio=self._scaled(np.concatenate([law.ratios(h) for h in histories])))
        if self.artifact.planner is not None:  # a planner model reads the stats themselves, no features or noise
            planner = self.artifact.planner
            decided = [planner.decide(h) for h in histories]
            ratio = np.concatenate([r for r, _ in decided])
            return Decision(ratio=self._scaled(ratio), depth=Depth.concat([d for _, d in decided]))
        inputs = decision_inputs(histories, keys, self.latent_dim, self.controller, self.own_ratio_scale)
        return self.decide_inputs(inputs, [(k.campaign, k.episode) for k in keys])

    def decide_inputs(self, inputs: DecisionInputs, campaigns: Sequence[tuple[str, str]] | None = None) -> Decision:
        """The decision on ``inputs``; ``campaigns``, the ``(campaign, episode)`` of each row, lets
        :attr:`incremental` encode from the rows' cached beliefs (without them, or without it, the full pass)."""
        if inputs.steps is None:
            ratio = self.artifact.act(inputs.obs)
            return Decision(ratio=self._scaled(ratio))
        assert inputs.mask is not None and inputs.eps is not None
        if self.incremental is not None and campaigns is not None:
            mean, std = self.incremental.posterior(campaigns, inputs.steps, inputs.mask)
        else:
            mean, std = self.artifact.posterior(inputs.steps, inputs.mask)
        ratio = self.artifact.act(inputs.obs, sample_posterior(mean, std, inputs.eps))
        return Decision(ratio=self._scaled(ratio), mean=mean.astype(np.float64), std=std.astype(np.float64))

    def _scaled(self, ratio: np.ndarray) -> np.ndarray:
        """The ratios in [0, 4], times the bid scale first (x 1.0 leaves every float as it was)."""
        return _clip(np.asarray(ratio, dtype=np.float64) * self.bid_scale)

    def decide_states(self, states: Sequence[CampaignState]) -> Decision:
        """Next ratios of campaigns at any slots: rows grouped by slot, one encoder and one policy call."""
        if self.artifact.planner is not None or self.artifact.controller is not None:
            # decide's step on the slot groups (a law on the stats), answered in the order of states
            groups = slot_groups(states)
            decision = self.decide([stack_histories([states[i] for i in rows]) for rows in groups], [])
            inverse = np.argsort([i for rows in groups for i in rows])
            depth = None if decision.depth is None else decision.depth.take(inverse)
            return Decision(ratio=decision.ratio[inverse], depth=depth)
        inputs = states_inputs(states, self.latent_dim, self.controller, self.own_ratio_scale)
        return self.decide_inputs(inputs, [(s.campaign, s.episode) for s in states])


def states_inputs(
    states: Sequence[CampaignState],
    latent_dim: int,
    controller: ControllerGains | None = None,
    own_ratio_scale: float = 1.0,
) -> DecisionInputs:
    """:func:`decision_inputs` for campaign states, answered in the order of ``states``.

    Rows at the same slot share one History (so rebuilding 10,000 campaigns' observations is 48
    vectorized calls, not 480,000); the result is permuted back.
    """
    if not states:
        raise ValueError("no campaign states to decide")
    groups = slot_groups(states)
    order = [i for rows in groups for i in rows]
    histories = [stack_histories([states[i] for i in rows]) for rows in groups]
    keys = [NoiseKey(states[i].seed, states[i].campaign, states[i].episode) for i in order]
    grouped = decision_inputs(histories, keys, latent_dim, controller, own_ratio_scale)
    inverse = np.empty(len(order), dtype=np.int64)
    inverse[np.asarray(order)] = np.arange(len(order))

    def back(a: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else a[inverse]

    return DecisionInputs(
        obs=grouped.obs[inverse], steps=back(grouped.steps), mask=back(grouped.mask), eps=back(grouped.eps)
    )


def slot_groups(states: Sequence[CampaignState]) -> list[list[int]]:
    """Row indices grouped by slot, in order of first appearance (a History holds campaigns at one slot)."""
    by_slot: dict[int, list[int]] = {}
    for i, state in enumerate(states):
        by_slot.setdefault(state.slot, []).append(i)
    return list(by_slot.values())


def _clip(ratio: np.ndarray) -> np.ndarray:
    return np.clip(np.asarray(ratio, dtype=np.float64), RATIO_MIN, RATIO_MAX)
