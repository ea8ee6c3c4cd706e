"""The posterior encoder's serving graph (:mod:`training.export.encoder_graph`): same posterior as torch, fused
nodes."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from torch import nn

from model.trajectory import prefix_mask
from training.export.encoder_graph import STD_FLOOR, encoder_graph
from training.export.onnx import ENCODER_ATOL
from training.rl.encoder import PosteriorEncoder
from training.rl.ensemble import EnsembleEncoder

TRANSITION_DIM = 19


def session(encoder: PosteriorEncoder | EnsembleEncoder) -> ort.InferenceSession:
    model = encoder_graph(encoder)
    onnx.checker.check_model(model)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def encoders(count: int) -> list[PosteriorEncoder]:
    torch.manual_seed(count)
    members = [PosteriorEncoder(TRANSITION_DIM, latent_dim=4, initial_std=0.3) for _ in range(count)]
    for member in members:  # trained weights are not the initial ones: move every parameter off its init
        with torch.no_grad():
            for parameter in member.parameters():
                parameter.add_(0.2 * torch.randn_like(parameter))
        member.eval()
    return members


@pytest.mark.parametrize("members", [1, 3])
@pytest.mark.parametrize("length", [1, 2, 24, 47, 48])
def test_the_graph_answers_the_torch_posterior_for_prefix_masks(members: int, length: int):
    parts = encoders(members)
    encoder = parts[0] if members == 1 else EnsembleEncoder(parts).eval()
    rng = np.random.default_rng(length)
    n = 64
    lengths = rng.integers(0, length + 1, n)
    lengths[:3] = [0, 1, length]  # an empty row (slot 0: the prior), one step, a full row
    mask = prefix_mask(lengths, length)
    steps = np.where(mask[..., None], rng.normal(size=(n, length, TRANSITION_DIM)), 0.0).astype(np.float32)
    with torch.no_grad():
        mean, std = encoder(torch.as_tensor(steps), torch.as_tensor(mask))
    got_mean, got_std = session(encoder).run(None, {"steps": steps, "mask": mask})
    assert got_mean.shape == (n, 4 * members) and got_std.shape == (n, 4 * members)
    np.testing.assert_allclose(got_mean, mean.numpy(), rtol=0, atol=ENCODER_ATOL)
    np.testing.assert_allclose(got_std, std.numpy(), rtol=0, atol=ENCODER_ATOL)
    # the empty row answers the heads' biases (per member), as torch does, and the std keeps its floor
    first = parts[0]
    np.testing.assert_allclose(got_mean[0, :4], first.mean_head.bias.detach().numpy(), atol=1e-6)
    prior_std = torch.nn.functional.softplus(first.std_head.bias).detach().numpy() + STD_FLOOR
    np.testing.assert_allclose(got_std[0, :4], prior_std, rtol=0, atol=1e-6)


def test_each_block_is_one_fused_causal_attention_node():
    model = encoder_graph(EnsembleEncoder(encoders(2)))
    ops = Counter(node.op_type for node in model.graph.node)
    layers = 2 * len(encoders(1)[0].blocks.layers)
    assert ops["Attention"] == layers
    assert all(n.domain == "com.microsoft" for n in model.graph.node if n.op_type == "Attention")
    assert all(
        next(a.i for a in n.attribute if a.name == "unidirectional") == 1
        for n in model.graph.node
        if n.op_type == "Attention"
    )
    # what tracing produced per block (head transposes, score masks, softmax) is gone
    assert ops["Transpose"] == 0 and ops["Softmax"] == 0
    assert len(model.graph.node) < 25 * layers


def test_padded_steps_do_not_change_a_rows_posterior():
    """Causal attention alone is exact for prefix masks: what a padded step holds never reaches a valid one."""
    encoder = encoders(1)[0]
    graph = session(encoder)
    rng = np.random.default_rng(0)
    steps = np.repeat(rng.normal(size=(1, 10, TRANSITION_DIM)), 2, axis=0).astype(np.float32)
    mask = prefix_mask(np.array([6, 6]), 10)
    steps[1, 6:] = 1e3 * rng.normal(size=(4, TRANSITION_DIM))  # row 1 differs only past its prefix
    mean, std = graph.run(None, {"steps": steps, "mask": mask})
    np.testing.assert_allclose(mean[0], mean[1], atol=1e-6)
    np.testing.assert_allclose(std[0], std[1], atol=1e-6)


def test_a_block_the_graph_does_not_implement_is_refused():
    encoder = encoders(1)[0]
    block = encoder.blocks.layers[0]
    assert isinstance(block, nn.TransformerEncoderLayer)
    block.norm_first = True
    with pytest.raises(ValueError, match="post-norm"):
        encoder_graph(encoder)


def test_modules_the_graph_does_not_write_are_refused():
    ensemble = EnsembleEncoder(encoders(2))
    ensemble.encoders[1] = nn.Linear(2, 2)
    with pytest.raises(ValueError, match="only of PosteriorEncoders"):
        encoder_graph(ensemble)
    encoder = encoders(1)[0]
    encoder.blocks.norm = nn.LayerNorm(32)
    with pytest.raises(ValueError, match="final norm"):
        encoder_graph(encoder)
