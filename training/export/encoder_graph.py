"""The posterior encoder's serving graph, written node by node for onnxruntime (``encoder.onnx``).

``torch.onnx.export`` of :class:`~training.rl.encoder.PosteriorEncoder` decomposes each attention block
into dozens of small nodes (head reshapes and transposes, the padding and causal masks added to the scores,
softmax); on one CPU thread those cost more than the matrix products (BENCHMARKS.md, "The posterior
encoder's serving graph"). This module writes the same computation with one ``com.microsoft.Attention``
node per block (``unidirectional=1``: the QKV projection, causal attention over all heads and the head merge
in one onnxruntime kernel), the rest as plain MatMul, Add, LayerNormalization and ReLU nodes.

Only causal attention is kept, not the key-padding mask, and that is exact for the inputs the artifact
accepts: the mask marks a *prefix* of each row valid (:meth:`model.artifact.Artifact.posterior` refuses
anything else, and zeroes the padded steps), so a valid step, which attends to itself and earlier steps
only, never meets a padded key. Padded steps get finite hidden states that the masked mean pooling drops,
and an empty row (slot 0) pools to the heads' biases as in torch. :func:`training.export.onnx.check_parity`
compares this graph with the torch module on batches of every length, empty rows included.

An ensemble (:class:`~training.rl.ensemble.EnsembleEncoder`) is its members' graphs side by side, their
posteriors concatenated, as in torch.

The initializer and node names (``[m{k}.]embed.W``, ``block{i}.qkv.W``, ``block{i}.attention``, ``block{i}.norm1``
...) are a contract: :mod:`model.incremental` reads the weights back by them and runs the same computation one
transition at a time over cached keys and values, so an exported graph serves incrementally without re-export.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper
from torch import nn

from model.artifact import TensorSpec, encoder_spec
from training.rl.encoder import PosteriorEncoder
from training.rl.ensemble import EnsembleEncoder

OPSET = 20
"""ONNX opset of both graphs, this one and the traced policy's (:mod:`training.export.onnx`); onnxruntime >= 1.17
runs them; recorded in model.json."""
MS_DOMAIN = "com.microsoft"
"""onnxruntime's contrib operators (Attention); standard onnxruntime builds (PyPI's included) have them."""
MASKED_SCORE = -1e30
"""The masked score of a later step, set explicitly (the operator's documented default is -10,000; torch masks
with -inf): finite, so a row never sums to NaN, and its exp is 0 in float32 whatever the scores."""
STD_FLOOR = 1e-4
"""Added to the pooled std, as :meth:`PosteriorEncoder.forward` does."""


def members_of(encoder: PosteriorEncoder | EnsembleEncoder) -> list[PosteriorEncoder]:
    """The single encoder, or an ensemble's members in order (their posteriors are concatenated in that order)."""
    modules: list[nn.Module] = list(encoder.encoders) if isinstance(encoder, EnsembleEncoder) else [encoder]
    members = [m for m in modules if isinstance(m, PosteriorEncoder)]
    if len(members) != len(modules):
        kinds = sorted({type(m).__name__ for m in modules if not isinstance(m, PosteriorEncoder)})
        raise ValueError(f"cannot write the graph of a {', '.join(kinds)}, only of PosteriorEncoders")
    return members


def _check_block(block: nn.Module, where: str) -> nn.TransformerEncoderLayer:
    """The graph implements post-norm ReLU blocks without dropout, which is what PosteriorEncoder builds."""
    if not isinstance(block, nn.TransformerEncoderLayer):
        raise ValueError(f"{where}: not a TransformerEncoderLayer")
    attention = block.self_attn
    if block.norm_first or block.activation is not F.relu or attention.in_proj_weight is None:
        raise ValueError(f"{where}: only post-norm ReLU blocks with a packed QKV projection are exported")
    if not attention.batch_first or attention.bias_k is not None or attention.add_zero_attn:
        raise ValueError(f"{where}: unsupported attention options")
    biases = (attention.in_proj_bias, attention.out_proj.bias, block.linear1.bias, block.linear2.bias)
    if any(b is None for b in biases) or block.norm1.bias is None or block.norm2.bias is None:
        raise ValueError(f"{where}: the graph writes every projection and norm with its bias")
    return block


class _Graph:
    """Nodes and initializers under construction; names are prefixed per ensemble member."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []

    def const(self, name: str, value: np.ndarray | torch.Tensor | Sequence[float], dtype: type = np.float32) -> str:
        if isinstance(value, torch.Tensor):
            value = value.detach().cpu().numpy()
        self.initializers.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def node(self, op: str, inputs: list[str], output: str, domain: str = "", **attributes: Any) -> str:
        self.nodes.append(helper.make_node(op, inputs, [output], name=output, domain=domain, **attributes))
        return output


def _add_norm(graph: _Graph, x: str, update: str, norm: nn.LayerNorm, name: str) -> str:
    """``norm(x + update)``: a post-norm block's residual connection."""
    summed = graph.node("Add", [x, update], f"{name}.input")
    gain, bias = graph.const(f"{name}.g", norm.weight), graph.const(f"{name}.b", norm.bias)
    return graph.node("LayerNormalization", [summed, gain, bias], name, axis=-1, epsilon=float(norm.eps))


def _member(
    graph: _Graph, encoder: PosteriorEncoder, prefix: str, length: str, pooling: tuple[str, str, str]
) -> tuple[str, str]:
    """One encoder's nodes: ``steps -> (mean, std)`` of its posterior (names under ``prefix``)."""
    weights, count, any_valid = pooling
    p = prefix
    if encoder.blocks.norm is not None:
        raise ValueError(f"{p}encoder: a final norm after the blocks is not written")
    embedded = graph.node("MatMul", ["steps", graph.const(f"{p}embed.W", encoder.embed.weight.T)], f"{p}embed.matmul")
    embedded = graph.node("Add", [embedded, graph.const(f"{p}embed.b", encoder.embed.bias)], f"{p}embed")
    positions = graph.node(
        "Slice", [graph.const(f"{p}position", encoder.position), "zero", length, "zero"], f"{p}position.sliced"
    )
    x = graph.node("Add", [embedded, positions], f"{p}x0")
    for index, module in enumerate(encoder.blocks.layers):
        block = _check_block(module, f"{p}block {index}")
        b = f"{p}block{index}."
        attention = block.self_attn
        attended = graph.node(
            "Attention",
            [x, graph.const(f"{b}qkv.W", attention.in_proj_weight.T), graph.const(f"{b}qkv.b", attention.in_proj_bias)],
            f"{b}attention",
            domain=MS_DOMAIN,
            num_heads=int(attention.num_heads),
            unidirectional=1,
            mask_filter_value=MASKED_SCORE,
        )
        projected = graph.node("MatMul", [attended, graph.const(f"{b}out.W", attention.out_proj.weight.T)], f"{b}out")
        projected = graph.node("Add", [projected, graph.const(f"{b}out.b", attention.out_proj.bias)], f"{b}out.biased")
        x = _add_norm(graph, x, projected, block.norm1, f"{b}norm1")
        hidden = graph.node("MatMul", [x, graph.const(f"{b}ff1.W", block.linear1.weight.T)], f"{b}ff1.matmul")
        hidden = graph.node("Add", [hidden, graph.const(f"{b}ff1.b", block.linear1.bias)], f"{b}ff1")
        hidden = graph.node("Relu", [hidden], f"{b}relu")
        hidden = graph.node("MatMul", [hidden, graph.const(f"{b}ff2.W", block.linear2.weight.T)], f"{b}ff2.matmul")
        hidden = graph.node("Add", [hidden, graph.const(f"{b}ff2.b", block.linear2.bias)], f"{b}ff2")
        x = _add_norm(graph, x, hidden, block.norm2, f"{b}norm2")
    pooled = []
    for name, head in (("mean", encoder.mean_head), ("std", encoder.std_head)):
        h = graph.node("MatMul", [x, graph.const(f"{p}{name}.W", head.weight.T)], f"{p}{name}.matmul")
        h = graph.node("Add", [h, graph.const(f"{p}{name}.b", head.bias)], f"{p}{name}.head")
        if name == "std":
            h = graph.node("Softplus", [h], f"{p}std.softplus")
        h = graph.node("Mul", [h, weights], f"{p}{name}.masked")
        h = graph.node("ReduceSum", [h, "axis1"], f"{p}{name}.sum", keepdims=0)
        h = graph.node("Div", [h, count], f"{p}{name}.pooled")
        # An empty trajectory (slot 0) answers the heads' biases: the prior-like posterior, as in torch.
        prior = head.bias if name == "mean" else F.softplus(head.bias)
        pooled.append(
            graph.node("Where", [any_valid, h, graph.const(f"{p}{name}.prior", prior)], f"{p}{name}.posterior")
        )
    return pooled[0], pooled[1]


def encoder_graph(encoder: PosteriorEncoder | EnsembleEncoder) -> onnx.ModelProto:
    """The serving graph of ``encoder`` (one encoder or an ensemble), opset :data:`OPSET` + onnxruntime's contrib ops;
    inputs and outputs are :func:`model.artifact.encoder_spec`'s."""
    members = members_of(encoder)  # never empty: an EnsembleEncoder refuses no members
    transition_dim = int(members[0].embed.in_features)
    latent = sum(int(m.latent_dim) for m in members)
    spec = encoder_spec(transition_dim, latent)
    graph = _Graph()
    graph.const("zero", [0], np.int64)
    graph.const("axis1", [1], np.int64)
    graph.const("axis2", [2], np.int64)
    graph.const("one", [1.0])
    graph.const("std_floor", [STD_FLOOR])
    length = graph.node("Shape", ["steps"], "length", start=1, end=2)
    valid = graph.node("Cast", ["mask"], "valid", to=TensorProto.FLOAT)
    weights = graph.node("Unsqueeze", [valid, "axis2"], "pool.weights")
    count = graph.node(
        "Max", [graph.node("ReduceSum", [weights, "axis1"], "pool.valid", keepdims=0), "one"], "pool.count"
    )
    any_valid = graph.node(
        "Cast",
        [graph.node("ReduceMax", [valid, "axis1"], "pool.any", keepdims=1)],
        "pool.nonempty",
        to=TensorProto.BOOL,
    )
    posteriors = [
        _member(graph, member, f"m{k}." if len(members) > 1 else "", length, (weights, count, any_valid))
        for k, member in enumerate(members)
    ]
    if len(posteriors) == 1:
        mean, std = posteriors[0]
    else:
        mean = graph.node("Concat", [m for m, _ in posteriors], "members.mean", axis=-1)
        std = graph.node("Concat", [s for _, s in posteriors], "members.std", axis=-1)
    graph.node("Identity", [mean], spec.output_names[0])
    graph.node("Add", [std, "std_floor"], spec.output_names[1])
    types = {"float32": TensorProto.FLOAT, "bool": TensorProto.BOOL}

    def value_info(s: TensorSpec) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(s.name, types[s.dtype], list(s.shape))

    body = helper.make_graph(
        graph.nodes,
        "posterior_encoder",
        [value_info(s) for s in spec.inputs],
        [value_info(s) for s in spec.outputs],
        graph.initializers,
    )
    model = helper.make_model(
        body,
        opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid(MS_DOMAIN, 1)],
        producer_name="rcb.training.export.encoder_graph",
    )
    model.ir_version = 10  # the IR version torch's exporter writes for opset 20
    return model
