"""The posterior encoder's input, built with numpy alone: the transitions of one day so far.

CBRL's encoder reads ``tau_t = {(o_i, a_i / 4, o_{i+1})}_{i<t}``, the transitions an episode has seen
so far. Offline evaluation of an exported model (``onnx:MODEL_DIR``) and the live service build it
here, and so does training's torch bidder, so the same history gives the same posterior everywhere.
The encoder's attention is causal, so a trajectory cut after its ``t`` valid steps encodes exactly like
the same one padded to 48 (tested): cutting it makes slot ``t`` cost ``O(t)``, not ``O(48)``.
"""

from __future__ import annotations

import numpy as np

from model.contract import RATIO_MAX, SLOTS_PER_DAY


def transitions(observations: np.ndarray, ratios: np.ndarray) -> np.ndarray:
    """``(o_i, a_i / 4, o_{i+1})`` for i = 0..T-1 from ``observations (n, T+1, F)`` and ``ratios (n, T)``.

    float32 throughout, as the networks were trained (the division by 4 is exact in float32).
    """
    observations = np.asarray(observations, dtype=np.float32)
    scaled = np.asarray(ratios, dtype=np.float32) / np.float32(RATIO_MAX)
    if observations.ndim != 3 or scaled.shape != (observations.shape[0], observations.shape[1] - 1):
        raise ValueError(
            f"observations must be (n, T+1, F) and ratios (n, T); got {observations.shape} and {scaled.shape}"
        )
    return np.concatenate([observations[:, :-1], scaled[..., None], observations[:, 1:]], axis=-1)


def prefix_mask(lengths: np.ndarray, steps: int = SLOTS_PER_DAY) -> np.ndarray:
    """``mask[k, i]`` is True for the ``lengths[k]`` first steps (the transitions observed so far)."""
    return np.arange(steps)[None, :] < np.asarray(lengths).reshape(-1, 1)


def episode_steps(observations: np.ndarray, ratios: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The encoder's input after ``t`` slots of a batch of episodes: ``max(t, 1)`` steps.

    ``observations (n, t+1, F)`` are the features seen before slots ``0..t`` (the last one is the
    current observation) and ``ratios (n, t)`` the ratios bid in slots ``0..t-1``. Returns
    ``steps (n, max(t, 1), 2F+1)`` float32 and ``mask`` of the same length, all valid; at ``t = 0``
    one zero step, masked out, so the encoder answers its prior.
    """
    observations = np.asarray(observations, dtype=np.float32)
    n, seen, features = observations.shape
    t = seen - 1
    if not 0 <= t <= SLOTS_PER_DAY:
        raise ValueError(f"a day has {SLOTS_PER_DAY} slots; got observations of {seen} slots")
    if t == 0:
        return np.zeros((n, 1, 2 * features + 1), dtype=np.float32), np.zeros((n, 1), dtype=bool)
    steps = transitions(observations, np.asarray(ratios, dtype=np.float32).reshape(n, t))
    return steps, np.ones((n, t), dtype=bool)
