"""The chosen candidate fitted for serving and written as ``MODEL_DIR``, with the card's ``fit`` section.

* The PID or RM: re-tuned on all the train days, as ``rcb export --controller`` writes it (the market's tuning
  cache, so ``onnx:MODEL_DIR`` plays ``rcb evaluate``'s ``pid`` or ``rm`` rows).
* The planner: on all the train days, as ``rcb export --plan`` writes it.
* CBRL: the run (or the ensemble of the runs) as trained and exported for the choice.
* A model given with ``--candidate``: copied.

Every model but a controller gets the market's PID, tuned on all the train days, as its card's ``safety_controller``,
the controller its shield and fallback run around (what ``rcb calibrate`` writes: :func:`training.export.controller.
market_controller`); a controller model is its own. The model is built in a directory beside ``MODEL_DIR``, loaded
back as the service loads it, and only then takes ``MODEL_DIR``'s place, so ``rcb serve --model MODEL_DIR`` serves it
and nothing else is needed.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from model.artifact import CARD_FILE, ArtifactError, ModelCard, load_artifact, read_card
from model.contract import Setting
from training.bidders.tuned import tuning_key
from training.evaluation.evaluate import split_days
from training.export.controller import export_controller, market_controller
from training.export.planner import export_planner
from training.files import atomic_write_text, built_beside
from training.fit.candidates import Candidate, FitError
from training.fit.workdir import WorkDir, code_version, key_of
from training.market.dataset import Market

CHOSEN_BY = "rcb fit (training.fit)"


def check_out(out: Path, work: WorkDir, market: Market, setting: Setting, force: bool) -> None:
    """``out`` can take the model: not the current directory (or one holding it), not a file, not a directory holding
    something other than a model, and not a model unless ``force`` or a model an earlier fit of this market and
    setting wrote (a rerun replaces it); the work directory not inside it (the model replaces ``out`` whole)."""
    out, here, root = Path(out).resolve(), Path.cwd().resolve(), work.root.resolve()
    if out == here or out in here.parents:
        raise FitError(f"--out {out} is the current directory or holds it; name a model directory, e.g. models/mine")
    if root == out or out in root.parents:
        raise FitError(f"--work {work.root} is inside --out {out}, which the model replaces; put it beside it")
    if out.exists() and not out.is_dir():
        raise FitError(f"--out {out} exists and is not a directory")
    if not out.is_dir() or not any(out.iterdir()) or force:
        if out.is_dir() and any(out.iterdir()) and not (out / CARD_FILE).exists():
            raise FitError(f"--out {out} is a non-empty directory that holds no model; choose another --out")
        return
    if not (out / CARD_FILE).exists():
        raise FitError(f"--out {out} is a non-empty directory that holds no model; choose another --out")
    try:
        fit = read_card(out).fit or {}
    except ArtifactError:
        fit = {}
    if fit.get("train_fingerprint") != market.split_fingerprint("train") or fit.get("setting") != str(setting):
        raise FitError(f"--out {out} already holds a model; pass --force to replace it")


def served_as(candidate: Candidate, train_days: int) -> str:
    """How the chosen candidate is fitted for serving, in one sentence (the card's ``fit.served``)."""
    how, what = candidate.serve
    around = f"its shield and fallback run around the PID tuned on all {train_days} train days"
    if how == "controller":
        return (
            f"the {what} re-tuned on all {train_days} train days (rcb export --controller {what}), its own shield's"
            " and fallback's controller"
        )
    if how == "planner":
        return f"the planner on all {train_days} train days (rcb export --plan); {around}"
    if candidate.name == "cbrl":
        return f"the CBRL model as trained and chosen, exported (rcb export --run); {around}"
    return f"{what} copied; {around}"


def _exported(
    market: Market, market_dir: Path, setting: Setting, how: str, law: str, source: Path, key_file: Path
) -> ModelCard:
    """The controller (``law``) or the planner exported on all the train days into ``source``; an export of the same
    tunings (the market cache's keys) that still loads is reused."""
    methods = [law] if how == "controller" else ["plan", "pid"]
    key = key_of({"tunings": [tuning_key(market, m, setting) for m in methods], "code": code_version()})
    if key_file.exists() and key_file.read_text().strip() == key:
        try:
            return load_artifact(source).card
        except ArtifactError:
            pass  # a damaged export: write it again
    key_file.parent.mkdir(parents=True, exist_ok=True)
    key_file.unlink(missing_ok=True)
    if how == "controller":
        card = export_controller(market_dir, law, setting, source, force=True)
    else:
        card = export_planner(market_dir, setting, source, force=True)
    key_file.write_text(key + "\n")
    return card


def serve(
    candidate: Candidate,
    market_dir: Path,
    setting: Setting,
    out: Path,
    fit: dict[str, Any],
    work: WorkDir,
    force: bool = False,
) -> ModelCard:
    """Write ``candidate`` fitted for serving to ``out`` (module docstring), its card's ``fit`` section ``fit``."""
    how, what = candidate.serve
    market = Market.open(market_dir)
    if how == "reference":
        raise FitError(f"{candidate.name} has no served form")
    if how in ("controller", "planner"):
        source = work.export(candidate.name)
        card = _exported(market, market_dir, setting, how, what, source, work.root / "export" / f"{source.name}.key")
    else:
        source = Path(what)
        card = read_card(source)
        if candidate.name != "cbrl":  # a copy: figures measured on the model elsewhere are not this one's
            card = card.model_copy(update={"evaluation": card.evaluation.model_copy(update={"measured": {}})})
    update: dict[str, Any] = {"fit": fit}
    if not card.is_controller:
        _, train = split_days(market, "train", setting)
        safety, _, _ = market_controller(market, "pid", setting, train, chosen_by=CHOSEN_BY)
        update["safety_controller"] = safety.model_copy(update={"market": str(market_dir)})
    card = card.model_copy(update=update)
    ModelCard.model_validate_json(card.to_json())  # what is written must read back
    with built_beside(out, before_swap=lambda: check_out(out, work, market, setting, force)) as building:
        # the files' contents, not their modes: a read-only model still gives a copy whose card can be written
        shutil.copytree(source, building, dirs_exist_ok=True, copy_function=shutil.copyfile)
        for directory, _, _ in os.walk(building):
            Path(directory).chmod(0o755)
        atomic_write_text(building / CARD_FILE, card.to_json())
        try:
            load_artifact(building)
        except ArtifactError as exc:
            raise FitError(f"the chosen model does not load: {exc}") from None
    return card
