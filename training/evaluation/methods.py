"""The methods ``rcb evaluate`` plays, as written on its ``--methods`` list, and the bidder each one names.

A method is a baseline name (``rm``, ``pid``, ``cem``, ``plan``: tuned on the market's train days,
:mod:`training.bidders.tuned`), a hindsight reference row (``oracle-day``, ``oracle-slot``: for scale only), a
training run directory, ``LABEL=GLOB`` (one method's training runs, one per seed), ``ensemble:LABEL=GLOB`` (those
runs as one bidder) or an exported model ``onnx:MODEL_DIR`` (``rcb export``: a policy, a planner or a controller,
each played as the service plays it); ``shield:METHOD`` plays METHOD
behind the safety shield (:mod:`training.evaluation.shielding`). Here: the syntax (:func:`parse_methods`, the
prefixes, the labels rows carry), the training runs behind a method, and the factories of its bidder
(:func:`method_bidder`). A training run's actor needs torch: :func:`run_bidder` and :func:`ensemble_bidder` import
:mod:`training.rl.runs` when called, so baselines and exported models evaluate on an install without torch (the
``offline`` extra).
"""

from __future__ import annotations

import glob
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from model.artifact import ArtifactError, ModelCard, read_card
from model.contract import Setting
from training.bidders.base import Bidder
from training.bidders.onnx import OnnxBidder
from training.bidders.tuned import BASELINES, Progress, tuned_baseline
from training.evaluation.curves import CurveError, split_group
from training.market.dataset import Market
from training.replay.dayset import DaySet
from training.replay.oracle import OracleKind

REFERENCES: dict[str, OracleKind] = {"oracle-day": OracleKind.DAY, "oracle-slot": OracleKind.SLOT}
"""Hindsight reference rows (not bidders: they see the whole day)."""
ONNX_PREFIX = "onnx:"
"""``onnx:MODEL_DIR`` names an exported model as a method."""
SHIELD_PREFIX = "shield:"
"""``shield:METHOD`` plays METHOD behind the safety shield (:mod:`model.shield`), as the service can."""
ENSEMBLE_PREFIX = "ensemble:"
"""``ensemble:LABEL=GLOB`` plays a group's runs as one bidder (:mod:`training.rl.ensemble`), once per seed."""


class EvaluationError(ValueError):
    """A request `rcb evaluate` cannot serve (unknown method, empty split, ...)."""


def known_methods() -> list[str]:
    return [*BASELINES, *REFERENCES]


def is_run_dir(method: str) -> bool:
    """A training run directory (``rcb train --out RUN``) is a method too."""
    return (Path(method) / "run.json").is_file()


def is_model_method(method: str) -> bool:
    """``onnx:MODEL_DIR``: an exported model artifact (validated in full when it is loaded)."""
    return method.startswith(ONNX_PREFIX) and (Path(method[len(ONNX_PREFIX) :]) / "model.json").is_file()


def runs_matching(pattern: str) -> list[Path]:
    """The training run directories a glob matches, sorted: the members of ``LABEL=GLOB`` here and of ``rcb export
    --run 'GLOB'``, so both read one pattern as the same runs in the same order."""
    return [p for p in sorted(Path(p) for p in glob.glob(pattern)) if is_run_dir(str(p))]


def run_group(method: str) -> tuple[str, list[Path]] | None:
    """``LABEL=GLOB``: the training runs of one method, one per seed (``cbrl=runs/sc/cbrl-s*``), or None.

    Run ``k`` of the sorted match plays with evaluation seed ``k``, and its episodes are the method's
    seed ``k``: the table's spread over seeds is then the spread over training seeds.
    """
    try:
        group = split_group(method)
    except CurveError as exc:
        raise EvaluationError(str(exc)) from None
    if group is None:
        return None
    label, pattern = group
    runs = runs_matching(pattern)
    if not runs:
        raise EvaluationError(f"{method!r}: {pattern} matches no training run directory (with a run.json)")
    return label, runs


def unshielded(method: str) -> tuple[str, bool]:
    """``(METHOD, True)`` for ``shield:METHOD``, else ``(method, False)``."""
    if method.startswith(SHIELD_PREFIX):
        return method[len(SHIELD_PREFIX) :], True
    return method, False


def method_label(method: str) -> str:
    """The name a method's rows carry: a run group's label (``shield:`` kept), else the method as written."""
    inner, shielded = unshielded(method)
    try:
        group = split_group(inner)  # the label only: no glob (run_group checked the runs when the list was parsed)
    except CurveError as exc:
        raise EvaluationError(str(exc)) from None
    if group is None:
        return method
    return SHIELD_PREFIX + group[0] if shielded else group[0]


def parse_methods(text: str) -> list[str]:
    """The comma list ``--methods`` gives, trimmed; refused: an unknown method, a reference behind the shield, an
    ``onnx:`` directory without a model, a label listed twice."""
    listed = [m.strip() for m in text.split(",") if m.strip()]
    if not listed:
        raise EvaluationError("no methods given")
    references = [m for m in listed if m.startswith(SHIELD_PREFIX) and unshielded(m)[0] in REFERENCES]
    if references:
        raise EvaluationError(f"{', '.join(references)}: the hindsight references are not bidders; nothing to shield")
    methods = [unshielded(m)[0] for m in listed]
    groups = [m for m in methods if run_group(m) is not None]
    missing_models = [m for m in methods if m.startswith(ONNX_PREFIX) and not is_model_method(m)]
    if missing_models:
        raise EvaluationError(
            f"{', '.join(missing_models)}: no model.json there; {ONNX_PREFIX}MODEL_DIR names a directory written by"
            " rcb export"
        )
    unknown = [
        m for m in methods if m not in BASELINES and m not in REFERENCES and not is_run_dir(m) and m not in groups
    ]
    unknown = [m for m in unknown if not is_model_method(m)]
    if unknown:
        raise EvaluationError(
            f"unknown method(s) {', '.join(unknown)}; known: {', '.join(known_methods())}, a training run directory"
            f", {ONNX_PREFIX}MODEL_DIR (a directory written by rcb export), LABEL=GLOB (training runs, one per seed)"
            f" or {ENSEMBLE_PREFIX}LABEL=GLOB (those runs as one bidder)"
        )
    if len({method_label(m) for m in listed}) != len(listed):
        raise EvaluationError(f"a method is listed twice in {text!r}")
    return listed


def method_warnings(listed: list[str]) -> list[str]:
    """What a parsed method list probably does not mean, to print before the work (nothing is refused).

    ``shield:LABEL=GLOB`` shields the *runs* labelled LABEL, one bidder per seed. Listed beside
    ``ensemble:LABEL=...``, it reads as the shielded ensemble, which is ``shield:ensemble:LABEL=GLOB``.
    """
    ensembles = set()
    for method in listed:
        group = split_group(unshielded(method)[0])
        if group is not None and group[0].startswith(ENSEMBLE_PREFIX):
            ensembles.add(group[0][len(ENSEMBLE_PREFIX) :])
    warnings = []
    for method in listed:
        inner, shielded = unshielded(method)
        group = split_group(inner)
        if shielded and group is not None and group[0] in ensembles:
            label, pattern = group
            warnings.append(
                f"{method!r} plays the runs labelled {label!r} one by one behind the shield, not the ensemble"
                f" {ENSEMBLE_PREFIX}{label}; for the shielded ensemble write"
                f" {SHIELD_PREFIX}{ENSEMBLE_PREFIX}{label}={pattern}"
            )
    return warnings


def exported_card(method: str) -> ModelCard | None:
    """The card of an exported model's method (``onnx:MODEL_DIR``, shielded or not), or None: another kind of method,
    or a card that cannot be read (it fails where the model is loaded, with its own message)."""
    method = unshielded(method)[0]
    if not method.startswith(ONNX_PREFIX):
        return None
    try:
        return read_card(Path(method[len(ONNX_PREFIX) :]))
    except ArtifactError:
        return None


def runs_behind(method: str) -> list[Path]:
    """The training run directories a method plays: a run directory or a run group (``LABEL=GLOB``, ``ensemble:``,
    ``shield:``); none for a baseline or an exported model."""
    method = unshielded(method)[0]
    group = run_group(method)
    return group[1] if group is not None else [Path(method)] if is_run_dir(method) else []


def run_records(method: str) -> list[tuple[Path, dict[str, Any]]]:
    """Each training run behind ``method`` (:func:`runs_behind`) with its run.json body; a run whose record cannot be
    read or is not an object is left out (it fails where it is loaded, with its own message)."""
    out = []
    for run_dir in runs_behind(method):
        try:
            body = json.loads((run_dir / "run.json").read_text())
        except (OSError, ValueError):
            continue
        if isinstance(body, dict):
            out.append((run_dir, body))
    return out


def method_bidder(
    method: str, market: Market, setting: Setting, train: Callable[[], DaySet], progress: Progress | None = None
) -> tuple[Bidder, dict[str, Any]]:
    """The one bidder an unshielded ``method`` names and what an evaluation records of it: a baseline tuned on the
    train days, ``onnx:MODEL_DIR``, ``ensemble:LABEL=GLOB`` or a training run directory (a reference row or a run
    group is not one bidder)."""
    if method.startswith(ENSEMBLE_PREFIX) and (group := run_group(method)) is not None:
        return ensemble_bidder(group[1], setting)
    if method in BASELINES:
        bidder, record = tuned_baseline(market, method, setting, train, progress)
        return bidder, {"train_score": record["train_score"], **record["params"]}
    if method.startswith(ONNX_PREFIX):
        return model_bidder(method, setting)
    if not is_run_dir(method):
        raise EvaluationError(
            f"{method!r}: expected a baseline, {ONNX_PREFIX}MODEL_DIR, {ENSEMBLE_PREFIX}LABEL=GLOB or a training run"
            " directory"
        )
    return run_bidder(Path(method), setting)


def run_bidder(run_dir: Path, setting: Setting) -> tuple[Bidder, dict[str, Any]]:
    """A training run's best actor, checked against the evaluation's setting (torch: imported here, when called)."""
    from training.rl.runs import load_run_bidder

    bidder, run = load_run_bidder(run_dir)
    if run["setting"] != str(setting):
        raise EvaluationError(f"{run_dir} was trained for {run['setting']}, not {setting}")
    return bidder, {
        "algo": run["config"]["algo"],
        "best_validation_score": run.get("best_validation_score"),
        "kept_epoch": run.get("kept_epoch"),
    }


def ensemble_bidder(runs: list[Path], setting: Setting) -> tuple[Bidder, dict[str, Any]]:
    """A group's runs as one bidder (what ``rcb export --run A --run B ...`` writes as one model; torch: imported
    here, when called)."""
    from training.rl.runs import RunError, load_ensemble_bidder

    try:
        bidder, bodies = load_ensemble_bidder(runs)
    except RunError as exc:
        raise EvaluationError(str(exc)) from None
    if bodies[0]["setting"] != str(setting):
        raise EvaluationError(f"{runs[0]} was trained for {bodies[0]['setting']}, not {setting}")
    return bidder, {
        "algo": bodies[0]["config"]["algo"],
        "runs": [str(r) for r in runs],
        "best_validation_score": [b.get("best_validation_score") for b in bodies],
        "kept_epoch": [b.get("kept_epoch") for b in bodies],
    }


def model_bidder(method: str, setting: Setting) -> tuple[Bidder, dict[str, Any]]:
    """``onnx:MODEL_DIR`` loaded (onnxruntime, no torch) and checked against the evaluation's setting."""
    try:
        bidder = OnnxBidder.load(method[len(ONNX_PREFIX) :])
    except ArtifactError as exc:
        raise EvaluationError(f"{method}: {exc}") from None
    card = bidder.artifact.card
    if card.setting != setting:
        raise EvaluationError(f"{method} was trained for {card.setting}, not {setting}")
    record: dict[str, Any] = {
        "algo": card.algorithm,
        "kind": card.kind,
        "best_validation_score": card.evaluation.best_validation_score,
        "source_run": card.source_run,
        "format_version": card.format_version,
        # the controller its shield and fallback run around, and the market that tuned it
        "safety_controller": card.safety_source(),
    }
    return bidder, record
