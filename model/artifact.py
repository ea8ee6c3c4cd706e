"""The model artifact (SPEC 5): what `rcb export` writes, what evaluation and the service load.

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

The I/O contract of the two graphs (names, dtypes, shapes; ``batch`` and ``length`` dynamic) lives
here, next to the loader that enforces it, and the exporter (``training/export.py``) builds the
graphs from it. :func:`load_artifact` refuses anything it would not serve correctly, with an
:class:`ArtifactError` naming the problem. This module needs numpy, pydantic and onnxruntime only.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final, Literal

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from model.contract import RATIO_MAX, RATIO_MIN, SLOTS_PER_DAY, Setting
from model.controller import ControllerGains
from model.features import CONTROLLER_FEATURE, feature_set
from model.history import SLOT_STATS
from model.planner import EDGE_ALERT, MISFIT_ALERT, TunedPlanner, load_scenarios
from model.planner import VERSION as PLANNER_VERSION
from model.sampling import sample_posterior
from model.shield import ShieldConfig

FORMAT: Final = "rcb-model"
FORMAT_VERSION = 2
"""Bump when the card's schema or the graphs' I/O contract changes; loaders refuse other versions.

Version 2: scale-free features (no ``reference_delivery`` anywhere), ``auctions`` for the auctions
entered per slot, and the card declares the slot stats and registration fields the model reads.
"""
OLD_VERSIONS = {
    1: "version 1 models read a reference delivery (the train days' median hindsight oracle delivery) that no "
    "campaign can know, and 10 features; retrain and export them with this version of rcb (bash "
    "scripts/build_default_model.sh for the default model)",
}
CARD_FILE = "model.json"
POLICY_FILE = "policy.onnx"
ENCODER_FILE = "encoder.onnx"
SCENARIOS_FILE = "scenarios.npz"
"""A planner model's train-day slot curves (:func:`model.planner.save_scenarios`)."""
MAX_STEPS = SLOTS_PER_DAY
"""The longest trajectory the encoder reads: one transition per slot of the day."""
REGISTRATION_FIELDS: tuple[str, ...] = ("roi_target", "budget")
"""What a campaign registers per episode (SPEC 7); no scale, the features are scale-free."""
BATCH, LENGTH = "batch", "length"
"""Names of the dynamic axes: any batch size >= 1, trajectory length 1..48."""


class ArtifactError(ValueError):
    """A model directory that is missing, corrupted, incomplete or incompatible with this code."""


# --- The ONNX I/O contract ------------------------------------------------------------------------------


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


# --- The model card ---------------------------------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FeatureSpec(_Strict):
    name: str
    low: float
    high: float


class ActionRange(_Strict):
    low: float = RATIO_MIN
    high: float = RATIO_MAX


class TrainingInfo(BaseModel):
    """Where the weights come from: enough to retrain or to tell two models apart."""

    model_config = ConfigDict(frozen=True)
    run: str
    """The training run directory exported."""
    market: str
    """The market trained on; with :attr:`pooled_markets`, the home market (whose tuned PID a residual policy
    corrects)."""
    pooled_markets: list[str] = Field(default_factory=list)
    """``rcb train --data A --data B ...``: every market whose train days the run learned from, home first; empty:
    :attr:`market` alone."""
    data_fingerprint: str = Field(min_length=1)
    """sha256 over the train split's day files and constraints (``Market.split_fingerprint("train")``; pooled
    markets: over their fingerprints in order, ``pooled:`` first)."""
    epoch: int | None = None
    """The epoch whose actor was exported (the best on validation days; -1: the untrained policy of a
    ``--start-at-controller`` run, which bids its controller)."""
    traffic_profile: tuple[float, ...] | None = None
    """Mean share of a day's auctions in each of the 48 slots over the train days: the safety shield's and the
    fallback controller's budget pacing plan (uniform where absent)."""
    members: list[str] = Field(default_factory=list)
    """An ensemble's runs (``rcb export --run A --run B ...``: the median of their log-ratios); empty: one run."""
    controller: dict[str, float] | None = None
    """The PID law's gains tuned on the train days (``model.controller.GAIN_FIELDS``): the safety shield's and
    the fallback controller's reference, so both fit the market the model was trained on (the benchmark's
    defaults where absent)."""
    epochs: int = Field(ge=0)
    config: dict[str, Any]
    initialized_from: dict[str, Any] | None = None
    """A fine-tuned run's source (``rcb train --init-from``): its run directory, market, train days' fingerprint
    and epochs, as they were when the run started (and the source's own source, if it was fine-tuned too); an
    ensemble's: ``{"members": [...]}``, each member's (None for one trained afresh). The weights learned those
    days too (:meth:`learned_fingerprints`). None: fresh networks."""

    def learned_fingerprints(self) -> set[str]:
        """The train-split fingerprints whose days the weights learned from: the run's own and every fine-tuning
        source's, down the chain (a pooled market's individual ones are folded into its fingerprint)."""
        return {self.data_fingerprint} | {source["data_fingerprint"] for source in fine_tuning_sources(self)}


def fine_tuning_sources(recorded: TrainingInfo | dict[str, Any] | None) -> list[dict[str, Any]]:
    """Every fine-tuning source behind a card's training (or a run.json's ``initialized_from``), down the chain and
    across an ensemble's members: each a record with the source's ``data_fingerprint`` (and, recorded since
    session 43, its ``validation_fold``)."""
    found = []
    pending: list[Any] = [recorded.initialized_from if isinstance(recorded, TrainingInfo) else recorded]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            if isinstance(item.get("data_fingerprint"), str):
                found.append(item)
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return found


class EvaluationInfo(BaseModel):
    """The run's own model-selection figures, copied from ``run.json`` (nothing recomputed)."""

    model_config = ConfigDict(frozen=True)
    metric: str = "score = mean over validation days of D / D* x 1[feasible] (held-out train days)"
    best_validation_score: float | None = None
    train_score_at_best: float | None = None
    history: list[dict[str, Any]] = Field(default_factory=list)
    """Per epoch: stage, train and validation score, losses (``run.json``'s history)."""
    member_validation_scores: list[float | None] = Field(default_factory=list)
    """An ensemble's members' own best validation scores, in ``training.members`` order."""
    measured: dict[str, Any] = Field(default_factory=dict)
    """Figures measured on the exported model after export (``training.export.record_figures``): per split of
    the training market, median ANS and mean CSR of the model alone, behind the shield, and of PID."""


class PlannerInfo(_Strict):
    """A planner model's law (:mod:`model.planner`) and its parameters, tuned on the train days it holds."""

    version: int
    """:data:`model.planner.VERSION` at export: another version is refused (its grid or priors differ)."""
    margin: float = Field(ge=0, le=1, allow_inf_nan=False)
    """Plan for a day ROI of ``L (1 + margin)``."""
    cost_sd: float = Field(gt=0, le=5, allow_inf_nan=False)
    """The log-normal sd of a slot's cost against a scenario's."""
    noise_aware: bool = False
    train_days: int = Field(ge=2)
    """Scenarios in ``scenarios.npz`` (the train days)."""
    train_score: float | None = None
    """The tuning's mean score on the train days, each played without its own scenario."""
    edge_alert: float = Field(default=EDGE_ALERT, gt=0, le=1, allow_inf_nan=False)
    misfit_alert: float = Field(default=MISFIT_ALERT, gt=0, allow_inf_nan=False)
    """When a campaign counts as out of the planner's depth (:class:`model.planner.Depth`): calibrated at export on
    the train days, each played without its own scenario (:func:`model.planner.calibrated_alerts`)."""


class ShieldInfo(_Strict):
    """The safety shield the service runs around this model (``rcb serve --shield``, ``shield:onnx:MODEL``): the
    fields of :class:`model.shield.ShieldConfig` it sets (the defaults for the others) and how they were chosen."""

    config: dict[str, StrictFloat | StrictInt] = Field(default_factory=dict)
    """``ShieldConfig`` fields, e.g. ``{"trust": 0.1}``; an unknown field, a value that is not a finite number or an
    invalid band is refused."""
    chosen_by: str = "defaults"
    """What set them: ``training.shield_calibration`` (its rule on the validation days), or a person."""
    calibration: dict[str, Any] = Field(default_factory=dict)
    """The figures the choice was made on (the calibration's validation rows), for the record."""

    @field_validator("config")
    @classmethod
    def _valid_band(cls, config: dict[str, float]) -> dict[str, float]:
        known = ShieldConfig.__dataclass_fields__
        for name, value in config.items():
            if name not in known:
                raise ValueError(f"shield.config: unknown field {name!r}; the fields are {', '.join(known)}")
            try:  # a JSON integer may be of any size: float() overflows where numpy would raise a TypeError
                finite = not isinstance(value, bool) and math.isfinite(float(value))
            except OverflowError:
                finite = False
            if not finite:
                raise ValueError(f"shield.config: {name} must be a finite number, not {value!r}")
            if name == "warmup_slots" and value != int(value):
                raise ValueError(f"shield.config: warmup_slots counts slots, not {value!r}")
        try:
            as_config(config)
        except ValueError as exc:
            raise ValueError(f"shield.config: {exc}") from None
        return config

    def shield_config(self) -> ShieldConfig:
        """The band: :attr:`config` over :class:`model.shield.ShieldConfig`'s defaults."""
        return as_config(self.config)


def as_config(fields: dict[str, float]) -> ShieldConfig:
    """``ShieldConfig`` with ``fields`` set (``warmup_slots`` as the whole number it was checked to be)."""
    return ShieldConfig(**{k: int(v) if k == "warmup_slots" else float(v) for k, v in fields.items()})  # type: ignore[arg-type]


BID_SCALE_RANGE: Final = (0.25, 4.0)
"""The bid scales a card may carry: from a quarter to four times the policy's ratio."""


class BidScaleInfo(_Strict):
    """A bid scale calibrated on the served market's own logs (:mod:`training.bid_calibration`): the service and
    ``onnx:MODEL_DIR`` bid the model's ratio times :attr:`scale` (clipped to [0, 4]), and the shield bounds that."""

    scale: float = Field(allow_inf_nan=False)
    """The factor on every ratio the model decides; 1 is the model as exported."""
    chosen_by: str = "a person"
    """What set it: ``training.bid_calibration`` (its rule on the served market's train days), or a person."""
    market: str = ""
    """The market whose train days chose it."""
    data_fingerprint: str = ""
    """Those train days' fingerprint (:meth:`training.market.dataset.Market.split_fingerprint`)."""
    calibration: dict[str, Any] = Field(default_factory=dict)
    """The figures the choice was made on, for the record."""

    @field_validator("scale")
    @classmethod
    def _in_range(cls, scale: float) -> float:
        low, high = BID_SCALE_RANGE
        if not low <= scale <= high:
            raise ValueError(f"bid_scale.scale must be in [{low:g}, {high:g}], not {scale!r}")
        return scale


RECORD_FIELDS: Final = ("created", "source_run", "evaluation", "parity", "producer")
"""Card fields that record how a model was made and measured; no decision reads them (`ModelCard.served_sha256`)."""


class ModelCard(_Strict):
    """``model.json``. Validation checks its internal consistency; :func:`load_artifact` checks it against the code."""

    format: Literal["rcb-model"] = FORMAT
    format_version: int
    kind: Literal["policy", "planner"] = "policy"
    """``policy``: ONNX graphs decide; ``planner``: :mod:`model.planner` on ``scenarios.npz`` (no graph)."""
    algorithm: str
    setting: Setting
    features: tuple[FeatureSpec, ...]
    slot_stats: tuple[str, ...] = SLOT_STATS
    """What the ad engine reports at the end of each slot, in order (delivery attributed during the slot,
    cost, auctions won, auctions entered): the service asks for exactly these."""
    registration: tuple[str, ...] = REGISTRATION_FIELDS
    """What a campaign registers per episode (L, and B or none): all known before the day."""
    obs_dim: int = Field(ge=0)
    """Width of the observation the policy reads (0 for a planner, which reads the history's stats directly)."""
    latent_dim: int = Field(ge=0)
    """0: a non-Bayesian policy (no ``encoder.onnx``, the policy reads the observation alone)."""
    transition_dim: int | None = None
    """``2 * obs_dim + 1`` (o_i, a_i / 4, o_{i+1}) with an encoder, else None."""
    max_steps: int = MAX_STEPS
    action: ActionRange = ActionRange()
    opset: int | None = Field(default=None, gt=0)
    """The ONNX opset of the graphs (none for a planner)."""
    created: dt.datetime
    source_run: str
    files: dict[str, str]
    """sha256 of each ONNX file: a corrupted or swapped file is refused."""
    training: TrainingInfo
    evaluation: EvaluationInfo
    parity: dict[str, float] = Field(default_factory=dict)
    """Largest |torch - onnxruntime| measured right after export, per output."""
    producer: dict[str, str] = Field(default_factory=dict)
    planner: PlannerInfo | None = None
    """A planner model's law and parameters (``kind: planner``), else None."""
    shield: ShieldInfo | None = None
    """The safety shield to run around this model; absent: :class:`model.shield.ShieldConfig`'s defaults."""
    bid_scale: BidScaleInfo | None = None
    """A factor on the model's ratios calibrated on the served market (``rcb calibrate``); absent: 1."""

    @property
    def is_planner(self) -> bool:
        return self.kind == "planner"

    @property
    def bayesian(self) -> bool:
        return self.latent_dim > 0

    @property
    def residual(self) -> bool:
        """The policy corrects the reference controller's ratio (it reads ``controller_ratio``, last)."""
        return reads_controller(self.features)

    @property
    def builds_on_last_ratio(self) -> bool:
        """The policy's ratio is its last one moved (relative actions, not residual: ``prev_ratio`` is its base), so a
        bid scale must be divided out of the ratios it reads back, or the factor would compound slot after slot
        (:func:`model.policy.decision_inputs`). Runs recorded before relative actions were absolute."""
        return not self.is_planner and not self.residual and float(self.training.config.get("action_step", 0.0)) > 0

    @property
    def expected_files(self) -> tuple[str, ...]:
        if self.is_planner:
            return (SCENARIOS_FILE,)
        return (POLICY_FILE, ENCODER_FILE) if self.bayesian else (POLICY_FILE,)

    @model_validator(mode="after")
    def _consistent(self) -> ModelCard:
        if self.is_planner:
            if self.planner is None:
                raise ValueError("a planner model (kind: planner) needs its law's parameters: planner")
            if self.features or self.obs_dim or self.latent_dim or self.transition_dim is not None:
                raise ValueError("a planner model reads no features: features [], obs_dim 0, latent_dim 0")
        else:
            if self.planner is not None:
                raise ValueError("planner parameters on a policy model (kind: policy): set kind: planner")
            if self.obs_dim == 0 or self.opset is None:
                raise ValueError("a policy model needs its features (obs_dim > 0) and the graphs' opset")
        if self.obs_dim != len(self.features):
            raise ValueError(f"obs_dim {self.obs_dim} differs from the {len(self.features)} features listed")
        if self.bayesian and self.transition_dim != 2 * self.obs_dim + 1:
            expected = 2 * self.obs_dim + 1
            raise ValueError(f"transition_dim must be 2 * obs_dim + 1 = {expected}, not {self.transition_dim}")
        if not self.bayesian and self.transition_dim is not None:
            raise ValueError("transition_dim must be null when latent_dim is 0 (no encoder)")
        if tuple(self.slot_stats) != SLOT_STATS:
            raise ValueError(
                f"slot_stats must be {list(SLOT_STATS)} (what this code observes), not {list(self.slot_stats)}"
            )
        if tuple(self.registration) != REGISTRATION_FIELDS:
            raise ValueError(f"registration must be {list(REGISTRATION_FIELDS)}, not {list(self.registration)}")
        if self.max_steps != MAX_STEPS:
            raise ValueError(f"max_steps must be {MAX_STEPS} (slots per day), not {self.max_steps}")
        if self.residual and (self.training.controller is None or self.training.traffic_profile is None):
            raise ValueError(
                "a residual model (feature controller_ratio) needs its reference controller on the card: "
                "training.controller and training.traffic_profile"
            )
        if sorted(self.files) != sorted(self.expected_files):
            raise ValueError(f"files must list exactly {', '.join(self.expected_files)}; got {', '.join(self.files)}")
        try:  # the shield's and the fallback's reference: a card the service could not run them from is refused here
            ControllerGains.with_profile(self.training.traffic_profile, self.training.controller)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"training.controller / traffic_profile: {exc}") from None
        return self

    def shield_config(self) -> ShieldConfig:
        """The band the service and ``shield:onnx:`` run around this model: the ``shield`` section, else the
        defaults."""
        return self.shield.shield_config() if self.shield is not None else ShieldConfig()

    def bid_scale_factor(self) -> float:
        """The factor on the model's ratios: the ``bid_scale`` section's, else 1."""
        return self.bid_scale.scale if self.bid_scale is not None else 1.0

    def served_sha256(self) -> str:
        """sha256 of the card without the records that say how the model was made and measured
        (:data:`RECORD_FIELDS`, the shield's and the bid scale's ``chosen_by`` and ``calibration``, which
        ``record_figures``, ``write_trust`` and ``rcb calibrate`` write without changing a decision), the graphs' (or
        scenarios') hashes included, the shield as the band it runs (:meth:`shield_config`) and the bid scale as the
        factor it applies (only where it is not 1). The service's model version."""
        # Fields at their defaults are left out, so a field a later version of the code adds (with a default) does
        # not rename every deployed model; the shield goes in as the band it runs, defaults and all.
        served = self.model_dump(
            mode="json", exclude=set(RECORD_FIELDS) | {"shield", "bid_scale"}, exclude_defaults=True
        )
        served["shield"] = asdict(self.shield_config())
        if self.bid_scale_factor() != 1.0:
            served["bid_scale"] = self.bid_scale_factor()
        return hashlib.sha256(json.dumps(served, sort_keys=True, separators=(",", ":")).encode()).hexdigest()

    def policy_spec(self) -> GraphSpec:
        return policy_spec(self.obs_dim, self.latent_dim)

    def encoder_spec(self) -> GraphSpec:
        assert self.transition_dim is not None
        return encoder_spec(self.transition_dim, self.latent_dim)

    def to_json(self) -> str:
        return self.model_dump_json(indent=1)


def code_features(residual: bool = False) -> tuple[FeatureSpec, ...]:
    """The feature list this code computes (:func:`model.features.feature_set`: the base features, plus
    ``controller_ratio`` for a residual model), as the card writes it."""
    return tuple(FeatureSpec(name=f.name, low=f.low, high=f.high) for f in feature_set(residual))


def reads_controller(features: tuple[FeatureSpec, ...]) -> bool:
    """A residual model's feature list: it ends with ``controller_ratio``."""
    return bool(features) and features[-1].name == CONTROLLER_FEATURE.name


def file_sha256(path: Path) -> str:
    """The file's sha256, read in 1 MiB chunks (market day files are large)."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as f:
        for chunk in iter(lambda: f.read(2**20), b""):
            digest.update(chunk)
    return digest.hexdigest()


# --- Loading ----------------------------------------------------------------------------------------------


def read_card(directory: Path) -> ModelCard:
    """Parse and validate ``model.json`` (format, schema, features against this code); files are not opened."""
    return _parse_card(Path(directory) / CARD_FILE, _card_bytes(Path(directory)))


def _card_bytes(directory: Path) -> bytes:
    path = directory / CARD_FILE
    if not directory.is_dir():
        raise ArtifactError(f"{directory}: no such model directory")
    if not path.is_file():
        raise ArtifactError(f"{directory}: incomplete model artifact, {CARD_FILE} is missing")
    try:
        return path.read_bytes()
    except OSError as exc:  # unreadable, or gone since is_file() (an export swapping the directory)
        raise ArtifactError(f"{path}: cannot read it ({type(exc).__name__}: {exc})") from None


def _parse_card(path: Path, data: bytes) -> ModelCard:
    """:func:`read_card` of the bytes read from ``path`` (read once: the loader hashes the same bytes)."""
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # RecursionError: JSON nested too deep
        raise ArtifactError(f"{path}: not valid JSON ({type(exc).__name__}: {str(exc)[:200]})") from None
    if not isinstance(raw, dict):
        raise ArtifactError(f"{path}: expected a JSON object, got {type(raw).__name__}")
    if raw.get("format") != FORMAT:
        raise ArtifactError(f"{path}: format {str(raw.get('format'))[:80]!r} is not an rcb model ({FORMAT!r})")
    if not isinstance(raw.get("format_version"), int) or isinstance(raw.get("format_version"), bool):
        raise ArtifactError(f"{path}: format_version must be an integer, got {str(raw.get('format_version'))[:80]!r}")
    if raw.get("format_version") in OLD_VERSIONS:
        version = raw["format_version"]
        raise ArtifactError(f"{path}: format version {version} is no longer supported: {OLD_VERSIONS[version]}")
    if raw.get("format_version") != FORMAT_VERSION:
        raise ArtifactError(
            f"{path}: format version {raw.get('format_version')!r} is not supported; this code reads version "
            f"{FORMAT_VERSION} (re-export the run with this version of rcb)"
        )
    try:
        card = ModelCard.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'model.json'}: {e['msg']}" for e in exc.errors())
        raise ArtifactError(f"{path}: invalid model card: {problems}") from None
    except (TypeError, OverflowError) as exc:  # a validator meeting a value of a type it did not expect
        raise ArtifactError(f"{path}: invalid model card: {type(exc).__name__}: {exc}") from None
    if card.is_planner:
        assert card.planner is not None
        if card.planner.version != PLANNER_VERSION:
            raise ArtifactError(
                f"{path}: planner version {card.planner.version} is not this code's ({PLANNER_VERSION}): its grid or "
                "priors differ; export it again with this version of rcb (rcb export --plan MARKET)"
            )
    else:
        check_features(card.features, path)
    if (card.action.low, card.action.high) != (RATIO_MIN, RATIO_MAX):
        raise ArtifactError(
            f"{path}: action range [{card.action.low}, {card.action.high}] differs from [{RATIO_MIN}, {RATIO_MAX}]"
        )
    return card


def check_features(features: tuple[FeatureSpec, ...], where: Path | str) -> None:
    """The artifact's features must be this code's, same names, order and clip ranges (or it reads garbage).

    Two lists are this code's: the base features, and the same plus ``controller_ratio`` (a residual model)."""
    ours = code_features(reads_controller(features))
    if tuple(features) == ours:
        return
    if [f.name for f in features] != [f.name for f in ours]:
        theirs_names, our_names = [f.name for f in features], [f.name for f in ours]
        unknown = [n for n in theirs_names if n not in our_names]
        missing = [n for n in our_names if n not in theirs_names]
        detail = []
        if unknown:
            detail.append(f"features this code does not know: {', '.join(unknown)}")
        if missing:
            detail.append(f"features the model lacks: {', '.join(missing)}")
        if not detail:
            first = next(i for i, (a, b) in enumerate(zip(theirs_names, our_names, strict=True)) if a != b)
            detail.append(
                f"order differs from position {first}: model has {theirs_names[first]!r}, code {our_names[first]!r}"
            )
        raise ArtifactError(f"{where}: feature list differs from model.features ({'; '.join(detail)})")
    changed = [
        f"{a.name} [{a.low}, {a.high}] vs code [{b.low}, {b.high}]"
        for a, b in zip(features, ours, strict=True)
        if (a.low, a.high) != (b.low, b.high)
    ]
    raise ArtifactError(f"{where}: feature clip ranges differ from model.features: {', '.join(changed)}")


def _check_io(session: Any, spec: GraphSpec, path: Path) -> None:
    """The graph's inputs and outputs must be the contract's: names and order, element types, ranks, fixed dims."""

    def describe(args: list[Any]) -> str:
        return ", ".join(f"{a.name} {a.type} {list(a.shape)}" for a in args)

    for kind, actual, expected in (
        ("inputs", session.get_inputs(), spec.inputs),
        ("outputs", session.get_outputs(), spec.outputs),
    ):
        wanted = ", ".join(f"{s.name} {s.onnx_type} {list(s.shape)}" for s in expected)
        if [a.name for a in actual] != [s.name for s in expected]:
            raise ArtifactError(f"{path}: {kind} are [{describe(actual)}]; the contract is [{wanted}]")
        for a, s in zip(actual, expected, strict=True):
            fits = a.type == s.onnx_type and len(a.shape) == len(s.shape)
            # A dynamic axis must stay dynamic (any str or None); a fixed one must have the contract's size.
            dims = zip(a.shape, s.shape, strict=True)
            fits = fits and all((not isinstance(d, int)) if isinstance(e, str) else d == e for d, e in dims)
            if not fits:
                raise ArtifactError(
                    f"{path}: {kind[:-1]} {a.name!r} is {a.type} {list(a.shape)}; the contract is "
                    f"{s.onnx_type} {list(s.shape)}"
                )


def _first_line(exc: BaseException) -> str:
    """The first line of an error's message (onnxruntime's run to pages), its type where it has none."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _session(path: Path, graph: bytes, threads: int) -> Any:
    """An onnxruntime session of ``graph``, the bytes read (and hashed) from ``path``."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # errors only: a refused file is reported by ArtifactError
    try:
        return ort.InferenceSession(graph, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own exception types for unreadable graphs
        raise ArtifactError(f"{path}: onnxruntime cannot load it ({_first_line(exc)})") from None


def load_artifact(directory: Path | str, intra_op_threads: int = 1) -> Artifact:
    """Load and validate a model directory; every problem is an :class:`ArtifactError` naming it.

    ``intra_op_threads`` is onnxruntime's intra-op parallelism per session (1: predictable latency,
    the service scales out by processes).
    """
    directory = Path(directory)
    try:
        return _load(directory, intra_op_threads)
    except OSError as exc:  # a file that exists but cannot be read (permissions, I/O error): the model is not usable
        raise ArtifactError(f"{directory}: cannot read the model ({type(exc).__name__}: {exc})") from None


def _load(directory: Path, intra_op_threads: int) -> Artifact:
    # Every file is read once, and what is hashed is what is served: an export replacing the directory while this
    # runs (rcb export --force beside a reload) cannot pair one card with another export's graphs.
    card_data = _card_bytes(directory)
    card = _parse_card(directory / CARD_FILE, card_data)
    card_sha256 = hashlib.sha256(card_data).hexdigest()
    files: dict[str, bytes] = {}
    for name in card.expected_files:
        path = directory / name
        if not path.is_file():
            raise ArtifactError(f"{directory}: incomplete model artifact, {name} is missing")
        files[name] = path.read_bytes()
        if hashlib.sha256(files[name]).hexdigest() != card.files[name]:
            raise ArtifactError(f"{path}: corrupted or replaced (sha256 differs from {CARD_FILE})")
    if card.is_planner:
        planner = _planner(directory / SCENARIOS_FILE, files[SCENARIOS_FILE], card)
        return Artifact(directory, card, None, None, planner, card_sha256=card_sha256)
    sessions = {name: _session(directory / name, data, intra_op_threads) for name, data in files.items()}
    _check_io(sessions[POLICY_FILE], card.policy_spec(), directory / POLICY_FILE)
    if card.bayesian:
        _check_io(sessions[ENCODER_FILE], card.encoder_spec(), directory / ENCODER_FILE)
    artifact = Artifact(directory, card, sessions[POLICY_FILE], sessions.get(ENCODER_FILE), card_sha256=card_sha256)
    _smoke_test(artifact)
    return artifact


def _smoke_test(artifact: Artifact) -> None:
    """Run the graphs on the shapes the contract allows (batches of 1 and 2; trajectories of 1 and 48 steps, one
    row empty): a graph whose declared inputs match but whose body fails on some of them (a positional table cut
    short) is refused now, not found by every later decision falling back. A few milliseconds."""
    card = artifact.card
    try:
        for n in (1, 2):
            z = np.zeros((n, artifact.latent_dim), np.float32) if artifact.bayesian else None
            ratio = artifact.act(np.zeros((n, card.obs_dim), np.float32), z)
            if ratio.shape != (n,) or not np.all(np.isfinite(ratio)):
                raise ValueError(f"the policy answered {ratio!r} for {n} zero observation(s)")
            if not artifact.bayesian:
                continue
            assert card.transition_dim is not None
            for length in (1, MAX_STEPS):
                mask = np.ones((n, length), dtype=bool)
                mask[0, :] = False  # an episode before its first report
                mean, std = artifact.posterior(np.zeros((n, length, card.transition_dim), np.float32), mask)
                if mean.shape != (n, artifact.latent_dim) or not (np.all(np.isfinite(mean)) and np.all(std > 0)):
                    raise ValueError(f"the encoder answered a non-finite or non-positive posterior at length {length}")
    except Exception as exc:  # onnxruntime's own error types, or the checks above
        raise ArtifactError(
            f"{artifact.directory}: the model fails on inputs the contract allows ({_first_line(exc)})"
        ) from None


def _planner(path: Path, data: bytes, card: ModelCard) -> TunedPlanner:
    """A planner model's law on its scenarios (``data``, read from ``path``), checked against its card."""
    assert card.planner is not None
    try:
        scenarios = load_scenarios(io.BytesIO(data), name=str(path))
    except ValueError as exc:
        raise ArtifactError(f"{path}: {exc}") from None
    if scenarios.days != card.planner.train_days:
        raise ArtifactError(f"{path}: {scenarios.days} scenarios; the card says {card.planner.train_days} train days")
    info = card.planner
    return TunedPlanner(
        scenarios,
        info.margin,
        info.cost_sd,
        info.noise_aware,
        edge_alert=info.edge_alert,
        misfit_alert=info.misfit_alert,
    )


# --- Inference --------------------------------------------------------------------------------------------


class Artifact:
    """A loaded model: batch entry points over onnxruntime sessions, inputs checked against the card."""

    def __init__(
        self,
        directory: Path,
        card: ModelCard,
        policy: Any,
        encoder: Any | None,
        planner: TunedPlanner | None = None,
        *,
        card_sha256: str,
    ):
        self.directory = directory
        self.card = card
        self.card_sha256 = card_sha256
        """The sha256 of the ``model.json`` bytes this artifact was loaded from (the service's model version reads the
        card parsed from them: :meth:`ModelCard.served_sha256`)."""
        self._policy = policy
        self._encoder = encoder
        self.planner = planner
        """A planner model's law (``kind: planner``; no graphs), else None."""

    @property
    def bayesian(self) -> bool:
        return self.card.bayesian

    def controller_gains(self) -> ControllerGains:
        """The safety shield's and the fallback controller's reference: the PID gains and traffic profile of the
        model's train days where the card has them, else the defaults (what the service and ``shield:onnx:`` run)."""
        return ControllerGains.with_profile(self.card.training.traffic_profile, self.card.training.controller)

    def shield_config(self) -> ShieldConfig:
        """The band the service and ``shield:onnx:`` run around this model (:meth:`ModelCard.shield_config`)."""
        return self.card.shield_config()

    @property
    def residual(self) -> bool:
        """The policy reads the reference controller's ratio (:meth:`controller_gains`) and corrects it."""
        return self.card.residual

    @property
    def latent_dim(self) -> int:
        return self.card.latent_dim

    def posterior(self, steps: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``q(z | tau)``: ``steps (n, L, D)``, ``mask (n, L)`` with L in 1..48 -> ``(mean, std)`` each ``(n, latent)``.

        Valid steps must come first in each row (a prefix mask). Padded steps are zeroed before the
        graph runs, so whatever they held (even NaN) changes nothing.
        """
        if self._encoder is None:
            raise ArtifactError(f"{self.directory}: {self.card.algorithm} has no posterior encoder (latent_dim 0)")
        steps = np.asarray(steps, dtype=np.float32)
        mask = np.asarray(mask)
        transition_dim = self.card.transition_dim
        if steps.ndim != 3 or steps.shape[2] != transition_dim or not 1 <= steps.shape[1] <= MAX_STEPS:
            raise ValueError(f"steps must be (n, 1..{MAX_STEPS}, {transition_dim}); got {steps.shape}")
        if mask.shape != steps.shape[:2] or mask.dtype != np.bool_:
            raise ValueError(f"mask must be a bool array of shape {steps.shape[:2]}; got {mask.dtype} {mask.shape}")
        if np.any(mask[:, 1:] & ~mask[:, :-1]):
            raise ValueError("mask must mark a prefix of each row valid (the transitions seen so far come first)")
        n = steps.shape[0]
        if n == 0:
            empty = np.zeros((0, self.latent_dim), dtype=np.float32)
            return empty, empty.copy()
        steps = np.where(mask[..., None], steps, np.float32(0.0))
        mean, std = self._encoder.run(None, {"steps": steps, "mask": np.ascontiguousarray(mask)})
        return mean, std

    def act(self, obs: np.ndarray, z: np.ndarray | None = None) -> np.ndarray:
        """The deterministic ratio ``(n,)`` float32 in [0, 4] for ``obs (n, F)`` (and ``z (n, latent)`` if Bayesian)."""
        if self._policy is None:
            raise ArtifactError(f"{self.directory}: a planner model has no policy graph (model.planner decides)")
        obs = np.ascontiguousarray(obs, dtype=np.float32)
        if obs.ndim != 2 or obs.shape[1] != self.card.obs_dim:
            raise ValueError(f"obs must be (n, {self.card.obs_dim}); got {obs.shape}")
        feed = {"obs": obs}
        if self.bayesian:
            if z is None:
                raise ValueError(f"{self.card.algorithm} acts on (obs, z): z (n, {self.latent_dim}) is required")
            z = np.ascontiguousarray(z, dtype=np.float32)
            if z.shape != (obs.shape[0], self.latent_dim):
                raise ValueError(f"z must be ({obs.shape[0]}, {self.latent_dim}); got {z.shape}")
            feed["z"] = z
        elif z is not None:
            raise ValueError(f"{self.card.algorithm} has no latent (latent_dim 0): pass obs alone")
        if obs.shape[0] == 0:
            return np.zeros(0, dtype=np.float32)
        (ratio,) = self._policy.run(None, feed)
        return ratio

    def decide(
        self,
        obs: np.ndarray,
        steps: np.ndarray | None = None,
        mask: np.ndarray | None = None,
        eps: np.ndarray | None = None,
    ) -> np.ndarray:
        """One slot's ratios: for CBRL, posterior sampling ``z = mean + std * eps`` then :meth:`act`.

        ``eps (n, latent)`` is the standard-normal draw of :mod:`model.sampling`; the arithmetic is
        float32, as in training's torch bidder, so both give the same ratios.
        """
        if not self.bayesian:
            return self.act(obs)
        if steps is None or mask is None or eps is None:
            raise ValueError(f"{self.card.algorithm} samples z from the posterior: steps, mask and eps are required")
        mean, std = self.posterior(steps, mask)
        return self.act(obs, sample_posterior(mean, std, np.asarray(eps, dtype=np.float32)))
