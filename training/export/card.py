"""What an exported policy's model card says: where the weights come from, and figures measured after export.

:class:`Provenance` is read from a run's own records (``run.json``, ``best.pt``), nothing recomputed
(:func:`run_provenance`); :func:`policy_card` is the card of the exported graphs, and :func:`record_figures` writes
figures measured on the exported model into its card, leaving the graphs and their hashes as they are. The card's
schema is :mod:`model.artifact`'s (docs/model-artifact.md).
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from model.artifact import (
    CARD_FILE,
    FORMAT_VERSION,
    ActionRange,
    EvaluationInfo,
    ModelCard,
    TrainingInfo,
    code_features,
    read_card,
)
from model.contract import Setting
from model.controller import ControllerGains, Reference
from model.features import obs_dim as features_width
from training.export.encoder_graph import OPSET
from training.files import atomic_write_text
from training.market.dataset import Market, MarketError
from training.rl.runs import pooled_fingerprint, reference_controller


@dataclass(frozen=True)
class Provenance:
    """What the card says about where the weights come from (everything but dims, files and parity)."""

    algorithm: str
    setting: str
    source_run: str
    training: TrainingInfo
    evaluation: EvaluationInfo


def run_provenance(
    run: Path, body: dict[str, Any], saved: dict[str, Any], reference: Reference | None = None
) -> Provenance:
    """From ``run.json`` and ``best.pt``: only figures the run recorded, nothing recomputed. ``reference``: the
    controller a residual run is trained around (its loaded bidder's), which the card carries exactly; a
    non-residual run's card carries its market's PID where the market is here (:func:`train_days_reference`)."""
    history = body.get("history", [])
    epoch = saved.get("epoch")
    at_best: dict[str, Any] = next((h for h in history if h.get("epoch") == epoch), {})
    best_score = body.get("best_validation_score")
    if best_score is None and at_best:
        best_score = at_best.get("validation_score")
    config = body.get("config", saved.get("config", {}))
    if reference is not None and not isinstance(reference, ControllerGains):
        raise ValueError(f"{run}: the card carries a PID reference, not a {type(reference).__name__}")
    if reference is not None:  # the reference the policy was trained around, exactly (it reads its ratio)
        profile: tuple[float, ...] | None = reference.traffic_profile
        controller: dict[str, float] | None = reference.tuned()
    else:
        profile, controller = train_days_reference(body)
    jsonable = lambda x: json.loads(json.dumps(x, default=str))  # noqa: E731 - tuples, paths -> JSON types
    return Provenance(
        algorithm=str(config.get("algo", "unknown")),
        setting=body["setting"],
        source_run=str(run),
        training=TrainingInfo(
            run=str(run),
            market=str(body.get("market", "")),
            pooled_markets=[str(m) for m in body.get("pooled_markets", [])],
            data_fingerprint=body["data_fingerprint"],
            epoch=None if epoch is None else int(epoch),
            epochs=len(history),
            config=jsonable(config),
            traffic_profile=profile,
            controller=controller,
            initialized_from=body.get("initialized_from"),
        ),
        evaluation=EvaluationInfo(
            best_validation_score=best_score,
            train_score_at_best=at_best.get("train_score"),
            history=jsonable(history),
        ),
    )


def train_days_reference(body: dict[str, Any]) -> tuple[tuple[float, ...] | None, dict[str, float] | None]:
    """The shield's and the fallback controller's reference for a non-residual run: the one a residual run trains
    around (:func:`training.rl.runs.reference_controller`, its market's train days). ``(None, None)`` when it cannot
    be had here (the run's market is not on this machine, has no train days, or its train days are not the ones the
    run trained on: a market regenerated at the same path would give another market's PID)."""
    try:
        paths = [Path(str(p)) for p in body.get("pooled_markets") or [body.get("market", "")]]
        markets = [Market.open(path) for path in paths]
        if not markets[0].split("train"):
            return None, None
        if pooled_fingerprint([m.split_fingerprint("train") for m in markets]) != body.get("data_fingerprint"):
            return None, None
        reference = reference_controller(markets[0], Setting(body["setting"]))
    except (MarketError, OSError, ValueError, KeyError):
        return None, None
    profile = tuple(float(x) for x in reference.pop("traffic_profile"))
    return profile, reference


def policy_card(
    provenance: Provenance,
    residual: bool,
    latent: int,
    transition_dim: int | None,
    files: dict[str, str],
    producer: dict[str, str],
) -> ModelCard:
    """The card of an exported policy (and encoder): the code's features, dims, opset and files, with ``provenance``
    and the ``producer``'s library versions; no ``shield`` section (the service runs the shield's defaults)."""
    return ModelCard(
        format_version=FORMAT_VERSION,
        algorithm=provenance.algorithm,
        setting=Setting(provenance.setting),
        features=code_features(residual),
        obs_dim=features_width(residual),
        latent_dim=latent,
        transition_dim=transition_dim,
        action=ActionRange(),
        opset=OPSET,
        created=dt.datetime.now(dt.UTC).replace(microsecond=0),
        source_run=provenance.source_run,
        files=files,
        training=provenance.training,
        evaluation=provenance.evaluation,
        producer=producer,
    )


def record_figures(model_dir: Path, measured: dict[str, Any]) -> ModelCard:
    """Write figures measured on an exported model into its card (``evaluation.measured``); the ONNX files and
    their hashes are untouched. Returns the new card."""
    card = read_card(Path(model_dir))
    evaluation = card.evaluation.model_copy(update={"measured": measured})
    updated = card.model_copy(update={"evaluation": evaluation})
    ModelCard.model_validate_json(updated.to_json())  # what is written must read back
    atomic_write_text(Path(model_dir) / CARD_FILE, updated.to_json())
    return updated
