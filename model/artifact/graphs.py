"""The files of a model directory and the I/O contract of its two ONNX graphs.

Names, element types and shapes of each graph's inputs and outputs (``batch`` and ``length`` dynamic): the
exporter (``training/export/onnx.py``) builds the graphs from these specs and the loader
(:mod:`model.artifact.loader`) refuses a graph that does not match them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from model.contract import SLOTS_PER_DAY

CARD_FILE = "model.json"
POLICY_FILE = "policy.onnx"
ENCODER_FILE = "encoder.onnx"
SCENARIOS_FILE = "scenarios.npz"
"""A planner model's train-day slot curves (:func:`model.planner.save_scenarios`)."""
MAX_STEPS = SLOTS_PER_DAY
"""The longest trajectory the encoder reads: one transition per slot of the day."""
BATCH, LENGTH = "batch", "length"
"""Names of the dynamic axes: any batch size >= 1, trajectory length 1..48."""


@dataclass(frozen=True)
class TensorSpec:
    """One graph input or output: name, element type and shape (a str marks a dynamic axis)."""

    name: str
    dtype: Literal["float32", "bool"]
    shape: tuple[int | str, ...]

    @property
    def onnx_type(self) -> str:
        """onnxruntime's spelling of the element type (``NodeArg.type``)."""
        return {"float32": "tensor(float)", "bool": "tensor(bool)"}[self.dtype]


@dataclass(frozen=True)
class GraphSpec:
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    @property
    def input_names(self) -> list[str]:
        return [s.name for s in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [s.name for s in self.outputs]


def policy_spec(obs_dim: int, latent_dim: int) -> GraphSpec:
    """``obs (batch, F)`` [+ ``z (batch, latent)``] -> ``ratio (batch,)``, the deterministic ratio in [0, 4]."""
    inputs = [TensorSpec("obs", "float32", (BATCH, obs_dim))]
    if latent_dim > 0:
        inputs.append(TensorSpec("z", "float32", (BATCH, latent_dim)))
    return GraphSpec(tuple(inputs), (TensorSpec("ratio", "float32", (BATCH,)),))


def encoder_spec(transition_dim: int, latent_dim: int) -> GraphSpec:
    """``steps (batch, length, D)`` + ``mask (batch, length)`` -> ``mean``, ``std`` each ``(batch, latent)``.

    ``mask`` is True on valid steps, which come first (a prefix: the transitions seen so far); a row
    with no valid step answers the prior-like output of the heads' biases, never NaN.
    """
    return GraphSpec(
        (
            TensorSpec("steps", "float32", (BATCH, LENGTH, transition_dim)),
            TensorSpec("mask", "bool", (BATCH, LENGTH)),
        ),
        (TensorSpec("mean", "float32", (BATCH, latent_dim)), TensorSpec("std", "float32", (BATCH, latent_dim))),
    )
