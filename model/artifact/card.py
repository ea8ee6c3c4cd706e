"""The model card, ``model.json``: its schema (:class:`ModelCard` and its sections) and its reading.

:func:`read_card` parses and validates a card: format and version, schema, internal consistency and the features
against this code's. The card's files are checked by the loader (:mod:`model.artifact.loader`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any, Final, Literal

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

from model.artifact.errors import ArtifactError
from model.artifact.graphs import (
    CARD_FILE,
    ENCODER_FILE,
    MAX_STEPS,
    POLICY_FILE,
    SCENARIOS_FILE,
    GraphSpec,
    encoder_spec,
    policy_spec,
)
from model.artifact.lineage import EvaluationInfo, TrainingInfo
from model.contract import RATIO_MAX, RATIO_MIN, Setting
from model.controller import GAIN_FIELDS, RATIO_FLOOR, ConstantRatio, Controller, ControllerGains
from model.features import CONTROLLER_FEATURE, feature_set
from model.history import SLOT_STATS
from model.planner import EDGE_ALERT, MISFIT_ALERT
from model.planner import VERSION as PLANNER_VERSION
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
    "research/scripts/build_default_model.sh for the default model)",
}
REGISTRATION_FIELDS: tuple[str, ...] = ("roi_target", "budget")
"""What a campaign registers per episode (docs/http-api.md); no scale, the features are scale-free."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FeatureSpec(_Strict):
    name: str
    low: float
    high: float


class ActionRange(_Strict):
    low: float = RATIO_MIN
    high: float = RATIO_MAX


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


# --- Controllers tuned on a market ----------------------------------------------------------------------------


CONTROLLER_LAWS: Final = ("pid", "rm")
"""The laws a card's controller may name: the PID law of :mod:`model.controller` and the constant ratio (RM)."""


class ControllerInfo(_Strict):
    """A controller tuned on a market's train days (:func:`training.bidders.tuned.tuned_baseline`, the tuning ``rcb
    evaluate`` plays as ``pid`` or ``rm``): its law, its parameters and the days that tuned them.

    On a ``kind: controller`` card it is the model itself (``controller``); on any card it may be the controller the
    safety shield and the fallback run around (``safety_controller``, a PID: the band reads its budget plan)."""

    law: Literal["pid", "rm"]
    """``pid``: :class:`model.controller.ControllerGains`; ``rm``: :class:`model.controller.ConstantRatio`."""
    gains: dict[str, float]
    """``pid``: the :data:`model.controller.GAIN_FIELDS`; ``rm``: ``{"ratio": r}``."""
    traffic_profile: tuple[float, ...] | None = None
    """``pid``: the train days' share of a day's auctions per slot, the budget loop's plan (required); ``rm``: none."""
    market: str = Field(min_length=1)
    """The market whose train days tuned it (its directory, as given)."""
    data_fingerprint: str = Field(min_length=1)
    """Those train days' fingerprint (:meth:`training.market.dataset.Market.split_fingerprint`)."""
    tuned_on: Literal["train"] = "train"
    """The split that tuned it: the market's train days."""
    train_score: float | None = None
    """The tuning's mean score on those days (a record, as the tuning cache keeps it)."""
    chosen_by: str = "training.bidders.tuned"
    """What wrote it: ``rcb export --controller``, ``rcb calibrate``, or a person."""

    @model_validator(mode="after")
    def _runs(self) -> ControllerInfo:
        try:
            self.law_controller()
        except (TypeError, ValueError) as exc:
            raise ValueError(f"the {self.law} controller cannot run: {exc}") from None
        return self

    def law_controller(self) -> Controller:
        """The law with its parameters: what decides (a ``ValueError`` for parameters it cannot run)."""
        if self.law == "rm":
            if set(self.gains) != {"ratio"} or self.traffic_profile is not None:
                raise ValueError('an rm controller has one parameter, gains {"ratio": r}, and no traffic_profile')
            return ConstantRatio(float(self.gains["ratio"]))
        if sorted(self.gains) != sorted(GAIN_FIELDS):
            raise ValueError(f"a pid controller's gains are {', '.join(GAIN_FIELDS)}, not {', '.join(self.gains)}")
        if self.traffic_profile is None:
            raise ValueError("a pid controller needs the traffic_profile of the days that tuned it")
        return ControllerGains.with_profile(self.traffic_profile, self.gains)

    def pid_gains(self) -> ControllerGains:
        """The PID law's gains and profile (a ``ValueError`` for an ``rm`` controller, which has none)."""
        law = self.law_controller()
        if not isinstance(law, ControllerGains):
            raise ValueError("an rm controller is no PID: the shield's band is centred on a PID")
        return law

    def served(self) -> dict[str, Any]:
        """What decides, for :meth:`ModelCard.served_sha256`: the law and its parameters (not where they were tuned,
        a record)."""
        return {"law": self.law, "gains": self.gains, "traffic_profile": self.traffic_profile}

    def where(self) -> dict[str, Any]:
        """Where it was tuned: what the service shows (``/readyz``, ``/ui``)."""
        return {
            "law": self.law,
            "market": self.market,
            "data_fingerprint": self.data_fingerprint,
            "tuned_on": self.tuned_on,
        }


# --- The shield's band and the bid scale ------------------------------------------------------------------


SERVED_BAND_EXTRA: Final = {"trust": 0.0}
"""Hashed beside the band's fields in :meth:`ModelCard.served_sha256`: ``trust`` at 0, the one value a card may
give it (:func:`as_config`), so a card's model version is the same whether or not its band names it."""


def _without_trust(fields: Mapping[str, Any]) -> dict[str, Any]:
    """``fields`` less a ``trust`` of 0 (the band as it is: no widening beyond its own widths); a ``ValueError`` for
    any other ``trust``, which the band does not have."""
    if "trust" not in fields:
        return dict(fields)
    trust = fields["trust"]
    if isinstance(trust, bool) or not isinstance(trust, int | float) or trust != 0:
        raise ValueError(f"the band sets trust ({str(trust)[:40]}), which this version does not support")
    return {name: value for name, value in fields.items() if name != "trust"}


def as_config(fields: Mapping[str, Any]) -> ShieldConfig:
    """``ShieldConfig`` with ``fields`` set (``warmup_slots`` as the whole number it was checked to be). A ``trust``
    of 0 is left out; any other ``trust`` is a ``ValueError``."""
    fields = _without_trust(fields)
    return ShieldConfig(**{k: int(v) if k == "warmup_slots" else float(v) for k, v in fields.items()})  # type: ignore[arg-type]


class ShieldInfo(_Strict):
    """The safety shield the service runs around this model (``rcb serve --shield``, ``shield:onnx:MODEL``): the
    fields of :class:`model.shield.ShieldConfig` it sets (the defaults for the others) and what set them."""

    config: dict[str, StrictFloat | StrictInt] = Field(default_factory=dict)
    """``ShieldConfig`` fields, e.g. ``{"warmup_slots": 2}``; an unknown field, a value that is not a finite number,
    an invalid band or a ``trust`` other than 0 is refused (a ``trust`` of 0 is dropped)."""
    chosen_by: str = "defaults"
    """What set them: the exporter, for a model trained behind the shield (the band it trained behind), or a
    person."""
    calibration: dict[str, Any] = Field(default_factory=dict)
    """The figures the choice was made on, for the record."""

    @field_validator("config")
    @classmethod
    def _valid_band(cls, config: dict[str, float]) -> dict[str, float]:
        try:
            config = _without_trust(config)
        except ValueError as exc:
            raise ValueError(f"shield.config: {exc}") from None
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


OPEN_BAND: Final = ShieldConfig(wide=6.0, tight=6.0, tight_above=6.0)
"""The band around a controller model (``kind: controller``): each edge exp(6) (about 403) times the controller's
ratio away, so for any ratio in [0.01, 4] the band spans [0.01, 4], the whole range, and the shield never moves the
controller's own ratio. The controller is the safe law the shield exists to keep a learned policy near: served
with the shield on or off, it bids what ``rcb evaluate``'s ``pid`` or ``rm`` rows play."""
assert math.exp(OPEN_BAND.wide) * RATIO_FLOOR >= RATIO_MAX


BID_SCALE_RANGE: Final = (0.25, 4.0)
"""The bid scales a card may carry: from a quarter to four times the policy's ratio."""


class BidScaleInfo(_Strict):
    """A bid scale calibrated on the served market's own logs (:mod:`training.export.calibrate`): the service and
    ``onnx:MODEL_DIR`` bid the model's ratio times :attr:`scale` (clipped to [0, 4]), and the shield bounds that."""

    scale: float = Field(allow_inf_nan=False)
    """The factor on every ratio the model decides; 1 is the model as exported."""
    chosen_by: str = "a person"
    """What set it: ``training.export.calibrate`` (its rule on the served market's train days), or a person."""
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


# --- The card ---------------------------------------------------------------------------------------------


RECORD_FIELDS: Final = ("created", "source_run", "evaluation", "parity", "producer", "fit")
"""Card fields that record how a model was made and measured; no decision reads them (`ModelCard.served_sha256`)."""


class ModelCard(_Strict):
    """``model.json``. Validation checks its internal consistency; :func:`read_card` checks it against the code."""

    format: Literal["rcb-model"] = FORMAT
    format_version: int
    kind: Literal["policy", "planner", "controller"] = "policy"
    """``policy``: ONNX graphs decide; ``planner``: :mod:`model.planner` on ``scenarios.npz`` (no graph);
    ``controller``: the :attr:`controller` section's law (no file at all)."""
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
    controller: ControllerInfo | None = None
    """A controller model's law (``kind: controller``, ``rcb export --controller``), else None."""
    safety_controller: ControllerInfo | None = None
    """The PID the safety shield and the fallback run around, tuned on the market served (``rcb calibrate``); absent:
    the training market's, ``training.controller`` (a controller model runs around itself). A residual policy's own
    reference, what it corrects, stays ``training.controller`` either way."""
    fit: dict[str, Any] | None = None
    """How ``rcb fit`` chose this model for the market it serves (:mod:`training.fit`): the rule, the held-out train
    days it read and the train days' fingerprint, every candidate's figures there with their intervals, what was
    chosen and how the chosen one was fitted for serving. A record: no decision reads it."""

    @property
    def is_planner(self) -> bool:
        return self.kind == "planner"

    @property
    def is_controller(self) -> bool:
        return self.kind == "controller"

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
        (:func:`model.policy.decision_inputs`). A run whose config has no ``action_step`` bids absolute ratios."""
        if self.kind != "policy" or self.residual:
            return False
        return float(self.training.config.get("action_step", 0.0)) > 0

    @property
    def expected_files(self) -> tuple[str, ...]:
        if self.is_controller:
            return ()
        if self.is_planner:
            return (SCENARIOS_FILE,)
        return (POLICY_FILE, ENCODER_FILE) if self.bayesian else (POLICY_FILE,)

    @model_validator(mode="after")
    def _consistent(self) -> ModelCard:
        if self.controller is not None and not self.is_controller:
            raise ValueError(f"a controller section on a {self.kind} model: set kind: controller")
        if self.safety_controller is not None and self.safety_controller.law != "pid":
            raise ValueError("safety_controller must be a pid: the shield's band reads its ratio and budget plan")
        if self.is_controller:
            self._consistent_controller()
        elif self.is_planner:
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
        try:  # a residual's reference and the shield's by default: a card the service could not run is refused here
            self.reference_gains()
        except (TypeError, ValueError) as exc:
            raise ValueError(f"training.controller / traffic_profile: {exc}") from None
        return self

    def _consistent_controller(self) -> None:
        """A controller model: its law, nothing to read but the history (no features, no graph, no file), no band of
        its own and no factor (it bids its law's ratio; the law is tuned on the market it serves instead)."""
        if self.controller is None:
            raise ValueError("a controller model (kind: controller) needs its law: controller")
        if self.planner is not None:
            raise ValueError("planner parameters on a controller model (kind: controller): set kind: planner")
        if self.features or self.obs_dim or self.latent_dim or self.transition_dim is not None or self.opset:
            raise ValueError("a controller model reads no features: features [], obs_dim 0, latent_dim 0, no opset")
        if self.shield is not None or self.safety_controller is not None:
            raise ValueError(
                "a controller model is the shield's own reference: no shield or safety_controller section (the "
                "shield never moves its ratio)"
            )
        if self.bid_scale is not None:
            raise ValueError(
                "a controller model bids its law's ratio: no bid_scale (tune the controller on the market served: "
                "rcb export --controller)"
            )

    def shield_config(self) -> ShieldConfig:
        """The band the service and ``shield:onnx:`` run around this model: the ``shield`` section, else the
        defaults; a controller model's is :data:`OPEN_BAND`, the whole ratio range (the shield never moves it)."""
        if self.is_controller:
            return OPEN_BAND
        return self.shield.shield_config() if self.shield is not None else ShieldConfig()

    def reference_gains(self) -> ControllerGains:
        """A residual policy's reference, what it corrects: the training market's PID (``training.controller`` and
        ``traffic_profile``), else the defaults."""
        return ControllerGains.with_profile(self.training.traffic_profile, self.training.controller)

    def safety_gains(self) -> ControllerGains:
        """The PID the shield is centred on: the ``safety_controller`` section (the served market's PID, ``rcb
        calibrate``); a PID controller model's own law; else the training market's (:meth:`reference_gains`). An rm
        controller model has no PID: its band is open (:data:`OPEN_BAND`), so the one given is the training
        section's, which never moves a ratio."""
        if self.safety_controller is not None:
            return self.safety_controller.pid_gains()
        if self.controller is not None and self.controller.law == "pid":
            return self.controller.pid_gains()
        return self.reference_gains()

    def fallback_controller(self) -> Controller:
        """What decides when the model cannot: a controller model's own law; else the shield's PID
        (:meth:`safety_gains`)."""
        if self.controller is not None:
            return self.controller.law_controller()
        return self.safety_gains()

    def safety_source(self) -> dict[str, Any]:
        """Which controller the shield and the fallback run around and where it was tuned (what ``/readyz`` and
        ``/ui`` show): ``source`` is ``safety_controller`` (the served market's PID, on the card by ``rcb
        calibrate``), ``model`` (a controller model: itself), ``training`` (the training market's PID) or
        ``defaults`` (the benchmark market's gains, a card without any)."""
        if self.safety_controller is not None:
            return {"source": "safety_controller", **self.safety_controller.where()}
        if self.controller is not None:
            return {"source": "model", **self.controller.where()}
        if self.training.controller is not None:
            pooled = bool(self.training.pooled_markets)
            return {
                "source": "training",
                "law": "pid",
                "market": self.training.market,
                "data_fingerprint": None if pooled else self.training.data_fingerprint,
                "tuned_on": "train",
            }
        return {"source": "defaults", "law": "pid", "market": None, "data_fingerprint": None, "tuned_on": None}

    def bid_scale_factor(self) -> float:
        """The factor on the model's ratios: the ``bid_scale`` section's, else 1."""
        return self.bid_scale.scale if self.bid_scale is not None else 1.0

    def served_sha256(self) -> str:
        """sha256 of the card without the records that say how the model was made and measured
        (:data:`RECORD_FIELDS`, the shield's and the bid scale's ``chosen_by`` and ``calibration``, which
        ``record_figures`` and ``rcb calibrate`` write without changing a decision), the graphs' (or scenarios')
        hashes included, the shield as the band it runs (:meth:`shield_config`, with :data:`SERVED_BAND_EXTRA`),
        the bid scale as the factor it applies (only where it is not 1) and a controller or safety controller as
        the law it runs (:meth:`ControllerInfo.served`: not the market that tuned it). The service's model
        version."""
        # Fields at their defaults are left out, so a field a later version of the code adds (with a default) does
        # not rename every deployed model; the shield goes in as the band it runs, defaults and all.
        served = self.model_dump(
            mode="json",
            exclude=set(RECORD_FIELDS) | {"shield", "bid_scale", "controller", "safety_controller"},
            exclude_defaults=True,
        )
        served["shield"] = {**asdict(self.shield_config()), **SERVED_BAND_EXTRA}
        if self.bid_scale_factor() != 1.0:
            served["bid_scale"] = self.bid_scale_factor()
        for name in ("controller", "safety_controller"):  # the law that decides, not where it was tuned
            if (info := getattr(self, name)) is not None:
                served[name] = info.served()
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


# --- Reading ----------------------------------------------------------------------------------------------


def read_card(directory: Path) -> ModelCard:
    """Parse and validate ``model.json`` (format, schema, features against this code); files are not opened."""
    return parse_card(Path(directory) / CARD_FILE, card_bytes(Path(directory)))


def card_bytes(directory: Path) -> bytes:
    """The bytes of ``directory``'s card, read once (the loader hashes the same bytes it parses)."""
    path = directory / CARD_FILE
    if not directory.is_dir():
        raise ArtifactError(f"{directory}: no such model directory")
    if not path.is_file():
        raise ArtifactError(f"{directory}: incomplete model artifact, {CARD_FILE} is missing")
    try:
        return path.read_bytes()
    except OSError as exc:  # unreadable, or gone since is_file() (an export swapping the directory)
        raise ArtifactError(f"{path}: cannot read it ({type(exc).__name__}: {exc})") from None


def parse_card(path: Path, data: bytes) -> ModelCard:
    """:func:`read_card` of the bytes read from ``path``."""
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
    _refuse_trust(path, raw.get("shield"))
    try:
        card = ModelCard.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'model.json'}: {e['msg']}" for e in exc.errors())
        raise ArtifactError(f"{path}: invalid model card: {problems}") from None
    except (TypeError, OverflowError) as exc:  # a validator meeting a value of a type it did not expect
        raise ArtifactError(f"{path}: invalid model card: {type(exc).__name__}: {exc}") from None
    if card.is_controller:
        pass  # its law was checked with the card: it reads the history alone, no features
    elif card.is_planner:
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


def _refuse_trust(path: Path, shield: Any) -> None:
    """A ``shield`` section whose band sets a ``trust`` other than 0 is refused in one line (the schema's message
    would bury it among the validation's)."""
    if not (isinstance(shield, dict) and isinstance(shield.get("config"), dict)):
        return
    try:
        _without_trust(shield["config"])
    except ValueError:
        trust = str(shield["config"]["trust"])[:40]
        raise ArtifactError(
            f"{path}: {CARD_FILE}'s shield section sets trust ({trust}), which this version does not support; "
            "re-export the model"
        ) from None


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
