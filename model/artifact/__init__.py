"""The model artifact (docs/model-artifact.md): what `rcb export` writes, what evaluation and the service load.

A model directory holds

* ``policy.onnx``: observation (+ latent ``z``) -> the deterministic bid ratio in [0, 4];
* ``encoder.onnx`` (CBRL only): a trajectory of up to 48 transitions + its mask -> the posterior
  mean and standard deviation of ``z``;
* ``model.json``: the model card, :class:`ModelCard` (format version, the feature list with clip
  ranges, dims, action range, algorithm, training data fingerprint, the run's own evaluation
  metrics, the measured torch/ONNX parity, opset, creation time, sha256 of each ONNX file).

Non-Bayesian algorithms (hard, crl, uscb, rcpo) have no posterior: their card says ``latent_dim: 0``,
the directory has no ``encoder.onnx`` and ``policy.onnx`` takes the observation alone.

A **planner** model (``kind: planner``, ``rcb export --plan MARKET``) has no network: ``scenarios.npz`` holds the
train days' slot curves and the card the tuned parameters of :mod:`model.planner`'s law, which decides each slot
(numpy, no graph, no features read: ``features`` is empty and ``obs_dim`` 0).

A **controller** model (``kind: controller``, ``rcb export --controller pid|rm MARKET``) has no file but its card:
the card's ``controller`` section is a PID (:class:`model.controller.ControllerGains`) or a constant ratio (RM)
tuned on a market's train days, which decides each slot from the campaign's stats; it is its own fallback and the
shield never moves its ratio. Any card may name a ``safety_controller``, the served market's PID the shield and the
fallback run around (``rcb calibrate``), apart from the training market's PID a residual policy corrects.

The package, one concept a module (each imports only those before it):

* :mod:`~model.artifact.errors`: :class:`ArtifactError`, what every refusal raises;
* :mod:`~model.artifact.graphs`: the directory's file names and the two graphs' I/O contract (names, dtypes,
  shapes; ``batch`` and ``length`` dynamic), which the exporter (``training/export/onnx.py``) builds the graphs from;
* :mod:`~model.artifact.lineage`: the card's ``training`` and ``evaluation`` sections, where the weights come from;
* :mod:`~model.artifact.card`: the card's schema and :func:`read_card`;
* :mod:`~model.artifact.runtime`: :class:`Artifact`, a loaded model's entry points;
* :mod:`~model.artifact.loader`: :func:`load_artifact`, which refuses anything it would not serve correctly.

It needs numpy, pydantic and onnxruntime only (onnxruntime once a model is loaded).
"""

from model.artifact.card import (
    BID_SCALE_RANGE,
    CONTROLLER_LAWS,
    FORMAT,
    FORMAT_VERSION,
    OLD_VERSIONS,
    OPEN_BAND,
    RECORD_FIELDS,
    REGISTRATION_FIELDS,
    ActionRange,
    BidScaleInfo,
    ControllerInfo,
    FeatureSpec,
    ModelCard,
    PlannerInfo,
    ShieldInfo,
    as_config,
    check_features,
    code_features,
    read_card,
    reads_controller,
)
from model.artifact.errors import ArtifactError
from model.artifact.graphs import (
    BATCH,
    CARD_FILE,
    ENCODER_FILE,
    LENGTH,
    MAX_STEPS,
    POLICY_FILE,
    SCENARIOS_FILE,
    GraphSpec,
    TensorSpec,
    encoder_spec,
    policy_spec,
)
from model.artifact.lineage import EvaluationInfo, TrainingInfo, file_sha256, fine_tuning_sources
from model.artifact.loader import load_artifact
from model.artifact.runtime import Artifact

__all__ = [
    "BATCH",
    "BID_SCALE_RANGE",
    "CARD_FILE",
    "CONTROLLER_LAWS",
    "ENCODER_FILE",
    "FORMAT",
    "FORMAT_VERSION",
    "LENGTH",
    "MAX_STEPS",
    "OLD_VERSIONS",
    "OPEN_BAND",
    "POLICY_FILE",
    "RECORD_FIELDS",
    "REGISTRATION_FIELDS",
    "SCENARIOS_FILE",
    "ActionRange",
    "Artifact",
    "ArtifactError",
    "BidScaleInfo",
    "ControllerInfo",
    "EvaluationInfo",
    "FeatureSpec",
    "GraphSpec",
    "ModelCard",
    "PlannerInfo",
    "ShieldInfo",
    "TensorSpec",
    "TrainingInfo",
    "as_config",
    "check_features",
    "code_features",
    "encoder_spec",
    "file_sha256",
    "fine_tuning_sources",
    "load_artifact",
    "policy_spec",
    "read_card",
    "reads_controller",
]
