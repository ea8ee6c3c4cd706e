"""The posterior encoder run incrementally: each slot update encodes its new transition only (KV caching).

The encoder's attention is causal, so what a block computed for the first ``t - 1`` transitions of a day does not
change when transition ``t`` arrives. :class:`IncrementalEncoder` keeps, per campaign, every block's keys and values
of the transitions so far and the running sums of the two heads' outputs (the mean pooling); a new transition
computes its own embedding, its q/k/v per block, attends over the cache and adds its heads' outputs to the sums.
The posterior is the full pass's (:meth:`model.artifact.Artifact.posterior`) within float32 rounding (tested
against ``encoder.onnx`` on random histories and on exported models, the shipped ensemble included).

The weights are read from ``encoder.onnx``'s initializers (:class:`EncoderWeights`, by the names
``training/export/encoder_graph.py`` gives them), so an exported model runs incrementally as it is: no re-export,
no new file, the same served digest. The graph is parsed with a small protobuf reader (:func:`_fields`): the
service does not depend on the ``onnx`` package.

The carried state (:class:`Belief`) is a cache, never the record: the store keeps raw stats only
(:mod:`model.state`). :class:`BeliefCache` is per process and per loaded model (a reload starts an empty one). An
entry is used only if the transitions it encoded equal, bit for bit, the first ones of the trajectory rebuilt from
the stored stats; otherwise (a restart, another replica's write, an eviction, a report that lost its
compare-and-set) the campaign is encoded from its first transition, one full pass, and cached again. So whatever
the cache holds, the posterior is a function of the stored stats alone.
"""

from __future__ import annotations

import os
import struct
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
from threadpoolctl import threadpool_limits

from model.contract import SLOTS_PER_DAY

STD_FLOOR = np.float32(1e-4)
"""Added to the pooled std, as the encoder graph does."""
CHUNK = 128
"""Rows encoded together: the batch's arrays stay in cache (a 10,000-row miss at slot 47 in one piece is several
times slower)."""


# --- Reading encoder.onnx ---------------------------------------------------------------------------------------


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _fields(data: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """``(field number, wire type, value)`` of one protobuf message; length-delimited values as bytes."""
    pos, end = 0, len(data)
    while pos < end:
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 1:
            value, pos = int.from_bytes(data[pos : pos + 8], "little"), pos + 8
        elif wire == 2:
            size, pos = _varint(data, pos)
            value, pos = data[pos : pos + size], pos + size
        elif wire == 5:
            value, pos = int.from_bytes(data[pos : pos + 4], "little"), pos + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        yield number, wire, value


def _tensor(data: bytes) -> tuple[str, np.ndarray]:
    """A float32 or int64 ``TensorProto``: its name and values."""
    name, dims, dtype, raw = "", [], 0, b""
    floats: list[float] = []
    for number, wire, value in _fields(data):
        if number == 1:  # dims: packed or not
            if wire == 2:
                assert isinstance(value, bytes)
                pos = 0
                while pos < len(value):
                    dim, pos = _varint(value, pos)
                    dims.append(dim)
            else:
                assert isinstance(value, int)
                dims.append(value)
        elif number == 2:
            assert isinstance(value, int)
            dtype = value
        elif number == 8:
            assert isinstance(value, bytes)
            name = value.decode()
        elif number == 9:
            assert isinstance(value, bytes)
            raw = value
        elif number == 4:  # float_data
            if wire == 2:
                assert isinstance(value, bytes)
                floats.extend(struct.unpack(f"<{len(value) // 4}f", value))
            else:
                assert isinstance(value, int)
                floats.append(struct.unpack("<f", value.to_bytes(4, "little"))[0])
    kinds = {1: np.float32, 7: np.int64}
    if dtype not in kinds:
        raise ValueError(f"initializer {name!r}: element type {dtype} is not read")
    array = np.frombuffer(raw, dtype=kinds[dtype]).copy() if raw else np.asarray(floats, dtype=kinds[dtype])
    return name, array.reshape(dims)


def _node(data: bytes) -> tuple[str, str, dict[str, float | int]]:
    """A ``NodeProto``'s name, op type and scalar attributes (ints and floats)."""
    name, op = "", ""
    attributes: dict[str, float | int] = {}
    for number, _, value in _fields(data):
        if number == 3:
            assert isinstance(value, bytes)
            name = value.decode()
        elif number == 4:
            assert isinstance(value, bytes)
            op = value.decode()
        elif number == 5:
            assert isinstance(value, bytes)
            key, scalar = "", None
            for n, _, v in _fields(value):
                if n == 1:
                    assert isinstance(v, bytes)
                    key = v.decode()
                elif n == 2:  # f: fixed32
                    assert isinstance(v, int)
                    scalar = struct.unpack("<f", v.to_bytes(4, "little"))[0]
                elif n == 3:  # i: varint, two's complement
                    assert isinstance(v, int)
                    scalar = v - (1 << 64) if v >= 1 << 63 else v
            if scalar is not None:
                attributes[key] = scalar
    return name, op, attributes


def read_graph(model: bytes) -> tuple[dict[str, np.ndarray], dict[str, tuple[str, dict[str, float | int]]]]:
    """``encoder.onnx``'s initializers by name and its nodes by name (op type, scalar attributes)."""
    graph = next((v for n, _, v in _fields(model) if n == 7), None)
    if not isinstance(graph, bytes):
        raise ValueError("not an ONNX model: no graph")
    initializers: dict[str, np.ndarray] = {}
    nodes: dict[str, tuple[str, dict[str, float | int]]] = {}
    for number, _, value in _fields(graph):
        assert isinstance(value, bytes) or number not in (1, 5)
        if number == 5:
            assert isinstance(value, bytes)
            name, array = _tensor(value)
            initializers[name] = array
        elif number == 1:
            assert isinstance(value, bytes)
            name, op, attributes = _node(value)
            nodes[name] = (op, attributes)
    return initializers, nodes


# --- The weights ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    """One post-norm transformer block: packed QKV projection, causal attention, ReLU feed-forward."""

    heads: int
    qkv_w: np.ndarray
    qkv_b: np.ndarray
    out_w: np.ndarray
    out_b: np.ndarray
    norm1: tuple[np.ndarray, np.ndarray, np.float32]
    ff1_w: np.ndarray
    ff1_b: np.ndarray
    ff2_w: np.ndarray
    ff2_b: np.ndarray
    norm2: tuple[np.ndarray, np.ndarray, np.float32]


@dataclass(frozen=True)
class Member:
    """One encoder of the (ensemble's) graph."""

    embed_w: np.ndarray
    embed_b: np.ndarray
    position: np.ndarray
    blocks: tuple[Block, ...]
    mean_w: np.ndarray
    mean_b: np.ndarray
    std_w: np.ndarray
    std_b: np.ndarray

    @property
    def width(self) -> int:
        return int(self.embed_w.shape[1])

    @property
    def latent(self) -> int:
        return int(self.mean_w.shape[1])


@dataclass(frozen=True)
class EncoderWeights:
    """The members of an ``encoder.onnx`` written by ``training/export/encoder_graph.py``, in posterior order."""

    members: tuple[Member, ...]

    @classmethod
    def from_onnx(cls, model: bytes) -> EncoderWeights:
        """Read from the graph's bytes; :class:`ValueError` if it is not that writer's graph."""
        init, nodes = read_graph(model)

        def get(name: str) -> np.ndarray:
            if name not in init:
                raise ValueError(f"encoder graph has no initializer {name!r}")
            return init[name].astype(np.float32)

        def eps(name: str) -> np.float32:
            op, attributes = nodes.get(name, ("", {}))
            if op != "LayerNormalization":
                raise ValueError(f"encoder graph has no LayerNormalization {name!r}")
            return np.float32(attributes.get("epsilon", 1e-5))

        prefixes = [""] if "embed.W" in init else []
        k = 0
        while f"m{k}.embed.W" in init:
            prefixes.append(f"m{k}.")
            k += 1
        if not prefixes:
            raise ValueError("encoder graph has no embedding (embed.W)")
        members = []
        for p in prefixes:
            blocks = []
            index = 0
            while f"{p}block{index}.qkv.W" in init:
                b = f"{p}block{index}."
                op, attributes = nodes.get(f"{b}attention", ("", {}))
                if op != "Attention" or attributes.get("unidirectional") != 1:
                    raise ValueError(f"{b}attention is not a causal Attention node")
                blocks.append(
                    Block(
                        heads=int(attributes["num_heads"]),
                        qkv_w=get(f"{b}qkv.W"),
                        qkv_b=get(f"{b}qkv.b"),
                        out_w=get(f"{b}out.W"),
                        out_b=get(f"{b}out.b"),
                        norm1=(get(f"{b}norm1.g"), get(f"{b}norm1.b"), eps(f"{b}norm1")),
                        ff1_w=get(f"{b}ff1.W"),
                        ff1_b=get(f"{b}ff1.b"),
                        ff2_w=get(f"{b}ff2.W"),
                        ff2_b=get(f"{b}ff2.b"),
                        norm2=(get(f"{b}norm2.g"), get(f"{b}norm2.b"), eps(f"{b}norm2")),
                    )
                )
                index += 1
            if not blocks:
                raise ValueError(f"encoder graph member {p or '0'} has no blocks")
            members.append(
                Member(
                    embed_w=get(f"{p}embed.W"),
                    embed_b=get(f"{p}embed.b"),
                    position=get(f"{p}position"),
                    blocks=tuple(blocks),
                    mean_w=get(f"{p}mean.W"),
                    mean_b=get(f"{p}mean.b"),
                    std_w=get(f"{p}std.W"),
                    std_b=get(f"{p}std.b"),
                )
            )
        return cls(tuple(members))

    @property
    def layout(self) -> tuple[int, int, int, int]:
        """``(members, blocks, heads, head size)`` of the key/value cache (the members share one shape)."""
        first = self.members[0]
        shapes = {(len(m.blocks), m.width, *(b.heads for b in m.blocks)) for m in self.members}
        if len(shapes) != 1 or len({b.heads for b in first.blocks}) != 1:
            raise ValueError("the members' blocks differ in shape: no shared key/value cache layout")
        heads = first.blocks[0].heads
        return len(self.members), len(first.blocks), heads, first.width // heads


# --- The belief state and its cache ---------------------------------------------------------------------------


@dataclass
class Belief:
    """What one campaign's encoder has computed for its first ``length`` transitions.

    ``kv (members, blocks, 2, heads, 48, head size)`` float32: each block's keys (``[:, :, 0]``) and values of every
    transition so far; ``steps (48, D)`` float32 the transitions themselves (what a cache hit is checked against);
    ``sums (members, 2, latent)`` float64 the running sums of the mean head and of the softplus of the std head.
    The shipped ensemble (5 members x 3 blocks, width 32, 19 features a transition): 184,320 + 3,648 + 640
    bytes, 184 KiB, whatever the slot (the arrays hold the whole day from the first slot).
    """

    length: int
    steps: np.ndarray
    kv: np.ndarray
    sums: np.ndarray

    @property
    def nbytes(self) -> int:
        return int(self.steps.nbytes + self.kv.nbytes + self.sums.nbytes)


class BeliefCache:
    """Per-process beliefs by ``(campaign, episode)``, least recently used evicted past ``capacity`` entries.

    :meth:`take` removes the entry it answers: a decision owns its campaign's belief until it :meth:`put` s it back,
    so two decisions of one campaign in two threads never write one array (the second finds none and encodes from
    the first transition).
    """

    def __init__(self, capacity: int = 20_000):
        self.capacity = int(capacity)
        self._entries: OrderedDict[tuple[str, str], Belief] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def take(self, keys: Sequence[tuple[str, str]]) -> list[Belief | None]:
        with self._lock:
            return [self._entries.pop(key, None) for key in keys]

    def put(self, keys: Sequence[tuple[str, str]], beliefs: Sequence[Belief]) -> None:
        if self.capacity <= 0:
            return
        with self._lock:
            for key, belief in zip(keys, beliefs, strict=True):
                self._entries[key] = belief
                self._entries.move_to_end(key)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    @property
    def nbytes(self) -> int:
        with self._lock:
            return sum(b.nbytes for b in self._entries.values())


def single_threaded_blas() -> bool:
    """Run numpy's OpenBLAS on one thread in this process (where ``OPENBLAS_NUM_THREADS`` does not already say);
    whether it did.

    The step's products are small (128 rows x 32): on shared cores OpenBLAS's worker threads make each one
    about 100 times slower than computing it on the calling thread. The service scales out by processes and runs
    onnxruntime on one intra-op thread for the same reason.
    """
    if "OPENBLAS_NUM_THREADS" in os.environ:
        return False
    limited = threadpool_limits(limits=1, user_api="blas")  # in force for the process: nothing restores it
    return bool(limited.get_original_num_threads().get("blas"))


# --- The computation ------------------------------------------------------------------------------------------


def _layer_norm(x: np.ndarray, norm: tuple[np.ndarray, np.ndarray, np.float32]) -> np.ndarray:
    gain, bias, eps = norm
    mean = x.mean(axis=-1, keepdims=True)
    centered = x - mean
    var = (centered * centered).mean(axis=-1, keepdims=True)
    return centered / np.sqrt(var + eps) * gain + bias


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(np.float32(0.0), x)


class IncrementalEncoder:
    """The encoder of one loaded model, run over new transitions only, with a :class:`BeliefCache`."""

    def __init__(self, weights: EncoderWeights, cache: BeliefCache | None = None):
        self.weights = weights
        self.members, self.blocks, self.heads, self.head_size = weights.layout
        self.latent = weights.members[0].latent
        self.transition_dim = int(weights.members[0].embed_w.shape[0])
        self.cache = BeliefCache() if cache is None else cache
        self._prior_mean = np.concatenate([m.mean_b for m in weights.members]).astype(np.float32)
        self._prior_std = (np.concatenate([_softplus(m.std_b) for m in weights.members]) + STD_FLOOR).astype(np.float32)
        self._stacked = _Stacked.of(weights)

    @classmethod
    def from_onnx(cls, model: bytes, capacity: int = 20_000) -> IncrementalEncoder:
        return cls(EncoderWeights.from_onnx(model), BeliefCache(capacity))

    def empty(self) -> Belief:
        m, b, h, s = self.members, self.blocks, self.heads, self.head_size
        return Belief(
            length=0,
            steps=np.zeros((SLOTS_PER_DAY, self.transition_dim), np.float32),
            kv=np.zeros((m, b, 2, h, SLOTS_PER_DAY, s), np.float32),
            sums=np.zeros((m, 2, self.latent), np.float64),
        )

    def posterior(
        self, keys: Sequence[tuple[str, str]], steps: np.ndarray, mask: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`model.artifact.Artifact.posterior` of ``steps``/``mask`` (a valid prefix per row), row ``i`` being
        campaign ``keys[i]``: each row's cached belief is extended by its new transitions (all of them on a miss)."""
        steps = np.asarray(steps, dtype=np.float32)
        mask = np.asarray(mask, dtype=bool)
        if steps.ndim != 3 or steps.shape[2] != self.transition_dim or mask.shape != steps.shape[:2]:
            raise ValueError(
                f"steps must be (n, L, {self.transition_dim}) and mask (n, L); got {steps.shape}, {mask.shape}"
            )
        if len(keys) != steps.shape[0]:
            raise ValueError(f"{steps.shape[0]} rows need {steps.shape[0]} campaign keys, got {len(keys)}")
        if np.any(mask[:, 1:] & ~mask[:, :-1]):
            raise ValueError("mask must mark a prefix of each row valid (the transitions seen so far come first)")
        n = steps.shape[0]
        lengths = mask.sum(axis=1).astype(np.int64)
        beliefs = self.cache.take(keys)
        groups: dict[tuple[int, int], list[int]] = {}
        for i, belief in enumerate(beliefs):
            t = int(lengths[i])
            if (
                belief is None
                or belief.length > t
                or not np.array_equal(belief.steps[: belief.length], steps[i, :t][: belief.length])
            ):
                belief = beliefs[i] = self.empty()
                self.cache.misses += 1
            else:
                self.cache.hits += 1
            if t > belief.length:
                groups.setdefault((belief.length, t), []).append(i)
        for (past, total), rows in groups.items():
            for start in range(0, len(rows), CHUNK):  # bounded temporaries: a miss group holds whole trajectories
                part = rows[start : start + CHUNK]
                self._extend([beliefs[i] for i in part], steps[part, past:total], past)  # type: ignore[misc]
        mean = np.empty((n, self.members * self.latent), np.float32)
        std = np.empty_like(mean)
        for i, belief in enumerate(beliefs):
            assert belief is not None
            if belief.length == 0:
                mean[i], std[i] = self._prior_mean, self._prior_std
            else:
                pooled = (belief.sums / belief.length).astype(np.float32)
                mean[i] = pooled[:, 0].reshape(-1)
                std[i] = pooled[:, 1].reshape(-1) + STD_FLOOR
        self.cache.put(keys, beliefs)  # type: ignore[arg-type]
        return mean, std

    def _extend(self, beliefs: list[Belief], new: np.ndarray, past: int) -> None:
        """Encode ``new (n, m, D)``, transitions ``past .. past + m - 1`` of each row, over the rows' caches.

        The members run side by side (every product one stacked call over the members' weights), so a single
        campaign costs a few dozen numpy calls, not a few dozen per member.
        """
        n, m, _ = new.shape
        total, rows = past + m, n * m
        members, h, s = self.members, self.heads, self.head_size
        width = h * s
        w = self._stacked
        kv = np.empty((n, members, self.blocks, 2, h, total, s), np.float32)
        for i, belief in enumerate(beliefs):
            kv[i, ..., :past, :] = belief.kv[..., :past, :]
        scale = np.float32(1.0 / np.sqrt(s))
        hidden = np.arange(total)[None, :] > (past + np.arange(m))[:, None]  # new step j sees keys 0 .. past + j
        flat = new.reshape(1, rows, -1)
        x = (flat @ w.embed_w + w.embed_b).reshape(members, n, m, width) + w.position[:, None, past:total]
        x = x.reshape(members, rows, width)  # (members, n * m, width)
        for b in range(self.blocks):
            qkv = (x @ w.qkv_w[b] + w.qkv_b[b]).reshape(members, n, m, 3, h, s)
            q = qkv[:, :, :, 0].transpose(1, 0, 3, 2, 4)  # (n, members, h, m, s)
            kv[:, :, b, :, :, past:] = qkv[:, :, :, 1:].transpose(1, 0, 3, 4, 2, 5)
            scores = (q * scale) @ kv[:, :, b, 0].swapaxes(-1, -2)  # (n, members, h, m, total)
            if m > 1:
                scores = np.where(hidden, np.float32(-np.inf), scores)
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            attention = scores / scores.sum(axis=-1, keepdims=True)
            attended = (attention @ kv[:, :, b, 1]).transpose(1, 0, 3, 2, 4).reshape(members, rows, width)
            x = _layer_norm(x + (attended @ w.out_w[b] + w.out_b[b]), w.norm1[b])
            ff = np.maximum(x @ w.ff1_w[b] + w.ff1_b[b], np.float32(0.0)) @ w.ff2_w[b] + w.ff2_b[b]
            x = _layer_norm(x + ff, w.norm2[b])
        heads_mean = (x @ w.mean_w + w.mean_b).reshape(members, n, m, -1).sum(axis=2, dtype=np.float64)
        heads_std = _softplus(x @ w.std_w + w.std_b).reshape(members, n, m, -1).sum(axis=2, dtype=np.float64)
        sums = np.stack([heads_mean, heads_std], axis=1).transpose(2, 0, 1, 3)  # (n, members, 2, latent)
        for i, belief in enumerate(beliefs):
            belief.kv[..., past:total, :] = kv[i, ..., past:, :]
            belief.steps[past:total] = new[i]
            belief.sums += sums[i]
            belief.length = total


@dataclass(frozen=True)
class _Stacked:
    """The members' weights stacked on a leading axis (biases and norms shaped to broadcast over rows)."""

    embed_w: np.ndarray
    embed_b: np.ndarray
    position: np.ndarray
    qkv_w: list[np.ndarray]
    qkv_b: list[np.ndarray]
    out_w: list[np.ndarray]
    out_b: list[np.ndarray]
    norm1: list[tuple[np.ndarray, np.ndarray, np.float32]]
    ff1_w: list[np.ndarray]
    ff1_b: list[np.ndarray]
    ff2_w: list[np.ndarray]
    ff2_b: list[np.ndarray]
    norm2: list[tuple[np.ndarray, np.ndarray, np.float32]]
    mean_w: np.ndarray
    mean_b: np.ndarray
    std_w: np.ndarray
    std_b: np.ndarray

    @classmethod
    def of(cls, weights: EncoderWeights) -> _Stacked:
        members = weights.members

        def matrix(name: str, block: int | None = None) -> np.ndarray:
            parts = [getattr(m if block is None else m.blocks[block], name) for m in members]
            return np.ascontiguousarray(np.stack(parts))

        def bias(name: str, block: int | None = None) -> np.ndarray:
            return matrix(name, block)[:, None, :]

        def norm(b: int, which: str) -> tuple[np.ndarray, np.ndarray, np.float32]:
            parts = [getattr(m.blocks[b], which) for m in members]
            if len({float(p[2]) for p in parts}) != 1:
                raise ValueError("the members' layer norms differ in epsilon")
            return np.stack([p[0] for p in parts])[:, None, :], np.stack([p[1] for p in parts])[:, None, :], parts[0][2]

        blocks = range(len(members[0].blocks))
        return cls(
            embed_w=matrix("embed_w"),
            embed_b=bias("embed_b"),
            position=matrix("position"),
            qkv_w=[matrix("qkv_w", b) for b in blocks],
            qkv_b=[bias("qkv_b", b) for b in blocks],
            out_w=[matrix("out_w", b) for b in blocks],
            out_b=[bias("out_b", b) for b in blocks],
            norm1=[norm(b, "norm1") for b in blocks],
            ff1_w=[matrix("ff1_w", b) for b in blocks],
            ff1_b=[bias("ff1_b", b) for b in blocks],
            ff2_w=[matrix("ff2_w", b) for b in blocks],
            ff2_b=[bias("ff2_b", b) for b in blocks],
            norm2=[norm(b, "norm2") for b in blocks],
            mean_w=matrix("mean_w"),
            mean_b=bias("mean_b"),
            std_w=matrix("std_w"),
            std_b=bias("std_b"),
        )
