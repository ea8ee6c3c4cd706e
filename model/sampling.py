"""Posterior sampling noise that offline evaluation, the exported model and the live service share.

CBRL acts by posterior sampling (paper Sec. 3.2.4): each slot it draws ``z ~ q(z | tau)`` and acts on
it. To make the draw reproducible everywhere, the standard-normal noise ``eps`` in
``z = mean + std * eps`` comes from a counter-based generator (Philox) keyed by
``(seed, campaign, episode)`` with the slot in the counter: no state to store between slots, the
same ``eps`` whichever process serves the slot, and independent streams per campaign and slot.
"""

from __future__ import annotations

import hashlib
import operator
from collections.abc import Sequence

import numpy as np


def stream_key(seed: int, campaign: str, episode: str) -> np.ndarray:
    """Philox's 128-bit key for one (seed, campaign, episode), from a BLAKE2b digest of the three.

    The three are joined by the unit separator (0x1f), so ids holding it are refused: campaign ``a<US>b`` of
    episode ``c`` and campaign ``a`` of episode ``b<US>c`` would share a stream (the service's ids cannot hold it;
    a library caller's could)."""
    for name, value in (("campaign", campaign), ("episode", episode)):
        if "\x1f" in value:
            raise ValueError(f"{name} id must not contain the unit separator \\x1f, got {value!r}")
    digest = hashlib.blake2b(f"{int(seed)}\x1f{campaign}\x1f{episode}".encode(), digest_size=16).digest()
    return np.frombuffer(digest, dtype=np.uint64).copy()


def noise(seed: int, campaign: str, episode: str, slot: int, dim: int) -> np.ndarray:
    """The ``dim`` standard-normal draws of one (seed, campaign, episode, slot).

    The slot sits in the counter's second word; Philox advances the first word within a draw, so
    the streams of different slots never overlap.
    """
    slot = operator.index(slot)  # an integer (numpy's too); a float slot would be truncated into the counter
    if not 0 <= slot < 2**63:
        raise ValueError(f"slot must be >= 0, not {slot}")
    counter = np.array([0, slot, 0, 0], dtype=np.uint64)
    return np.random.Generator(
        np.random.Philox(key=stream_key(seed, campaign, episode), counter=counter)
    ).standard_normal(dim)


def noise_batch(
    seed: int, campaigns: Sequence[str], episodes: Sequence[str], slot: int | Sequence[int], dim: int
) -> np.ndarray:
    """:func:`noise` for many episodes at once, shape ``(n, dim)``; ``slot`` may differ per episode."""
    slots = [operator.index(slot)] * len(campaigns) if np.ndim(slot) == 0 else list(slot)  # type: ignore[arg-type]
    if not len(campaigns) == len(episodes) == len(slots):
        raise ValueError("campaigns, episodes and slots must have one entry per episode")
    out = np.empty((len(campaigns), dim))
    for k, (campaign, episode, s) in enumerate(zip(campaigns, episodes, slots, strict=True)):
        out[k] = noise(seed, campaign, episode, s, dim)
    return out


def offline_noise(seed: int, n: int, slot: int, dim: int) -> np.ndarray:
    """The noise of offline play (training, ``rcb evaluate``): episode ``k`` of a batch is campaign
    ``episode-{k}`` of episode ``offline`` under the play seed, so torch and ONNX evaluation draw alike."""
    return noise_batch(seed, [f"episode-{k}" for k in range(n)], ["offline"] * n, slot, dim)


def sample_posterior(mean: np.ndarray, std: np.ndarray, eps: np.ndarray) -> np.ndarray:
    """``z = mean + std * eps`` (reparameterized posterior sample)."""
    return mean + std * eps
