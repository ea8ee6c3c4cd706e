"""Calibrate a model's bid scale on the market it will serve: ``rcb calibrate MODEL MARKET --out DIR``.

A model trained on one market and served on another (the shipped ``models/default`` on a user's own logs) bids
where its training market taught it to, around a controller tuned there. Its ratios times a factor ``m`` may fit the
served market better; the served market's own train days, which the model never saw, can say which. The rule:

1. Each ``m`` of :data:`LADDER` is played on MARKET's train days behind the model's shield (the card's band around
   the card's controller: the scaled ratio is what the shield bounds), as the service would run it, 5 seeds; the
   market's PID, tuned on the same days, once.
2. Eligible: the ``m`` whose CSR is at least the PID's there. Chosen: the eligible ``m`` with the highest median
   ANS; a tie goes to the ``m`` nearest 1.

The chosen factor goes on a copy of the model as its card's ``bid_scale`` section, which the service and
``onnx:MODEL_DIR`` apply to every ratio before the shield (``model.policy.Policy``). The graphs are untouched; the
card's served hash, so the model's version in the service, changes with the factor. The model's own train days are
refused: there the factor would be chosen on the days the model was selected on.

Measured (RESULTS.md), each market's calibrated copy against the model as shipped, both behind the shield, on
held-out days: on a suite generated with seed 1 +0.000 to +0.025 median ANS on all 8 MC rows (summed +0.094; `sparse`
+0.024 / +0.020, `shifted` +0.010 / +0.025), the shield's bound held on every row; on the suite of record `shifted`
and `volatile` +0.015 to +0.024, `sparse` +0.002 to +0.004.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from model.artifact import CARD_FILE, Artifact, BidScaleInfo, ModelCard, load_artifact
from training.bidders.onnx import OnnxBidder
from training.bidders.shielded import ShieldedBidder
from training.bidders.tuned import tuned_baseline
from training.evaluation.evaluate import episode_rows, split_days, summarize
from training.files import atomic_write_text, built_beside
from training.market.dataset import Market, MarketError

LADDER = (0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4, 1.5)
"""The factors played: 1 is the model as exported."""
SPLIT = "train"
"""The days the rule reads: the served market's train days (the days its PID is tuned on), none seen by the model."""
CSR_TOLERANCE = 1e-9
"""CSRs are means of per-seed shares: equal shares may differ in the last bit, and equal is eligible."""
CHOSEN_BY = "training.export.calibrate"
REFERENCE = "pid"
SEEDS = 5

Progress = Callable[[str], None]


class CalibrationError(ValueError):
    """A model or market the calibration cannot use (said in one line)."""


@dataclass(frozen=True)
class BidCalibration:
    """What the rule saw on the served market's train days and what it chose."""

    scale: float
    rows: dict[str, dict[str, float]]
    """``pid`` and ``m=M`` per factor: median ANS (``ans``) and mean CSR (``csr``)."""
    days: int
    market: str
    data_fingerprint: str
    seeds: int
    """Seeds each factor was played with (1 where the shielded model is deterministic)."""

    def record(self) -> dict[str, Any]:
        """The card's ``bid_scale.calibration``: the rule, the figures it read and the choice."""
        return {
            "rule": "training/export/calibrate.py: CSR at least the PID's, best median ANS, ties to the nearest 1",
            "split": SPLIT,
            "days": self.days,
            "seeds": self.seeds,
            "rows": {name: {k: round(v, 4) for k, v in row.items()} for name, row in self.rows.items()},
            "scale": self.scale,
        }


def row_name(scale: float) -> str:
    """The row of a factor: ``m=1.2``."""
    return f"m={scale:g}"


def choose_scale(rows: dict[str, dict[str, float]], ladder: tuple[float, ...] = LADDER) -> float:
    """The rule (module docstring) on the rows ``pid`` and ``m=M``: the best eligible factor, ties to the nearest 1.
    1 is always a candidate: when no factor is eligible the model stays as it is."""
    pid_csr = rows[REFERENCE]["csr"]
    eligible = [m for m in ladder if rows[row_name(m)]["csr"] >= pid_csr - CSR_TOLERANCE]
    if not eligible:
        return 1.0
    best = max(rows[row_name(m)]["ans"] for m in eligible)
    return min((m for m in eligible if rows[row_name(m)]["ans"] == best), key=lambda m: (abs(m - 1.0), m))


def calibrate(
    model_dir: Path,
    market_dir: Path,
    seeds: int = SEEDS,
    progress: Progress | None = None,
    warn: Callable[[str], None] | None = None,
) -> tuple[BidCalibration, pd.DataFrame]:
    """Play every factor of :data:`LADDER` on ``market_dir``'s train days behind ``model_dir``'s shield (module
    docstring); the choice and the episodes (rows ``pid`` and ``m=M``). ``warn``: told what could not be checked."""
    return play_ladder(prepare(model_dir, market_dir, warn), seeds, progress)


@dataclass(frozen=True)
class CalibrationInputs:
    """A model and a served market, loaded and checked (:func:`prepare`): what :func:`play_ladder` plays."""

    model_dir: Path
    market_dir: Path
    artifact: Artifact
    market: Market
    fingerprint: str


def prepare(model_dir: Path, market_dir: Path, warn: Callable[[str], None] | None = None) -> CalibrationInputs:
    """Load ``model_dir`` and ``market_dir`` and make every refusal (a market without train days, the model's own
    train days) before anything is played, so a command can check first and draw its progress bar after."""
    artifact = load_artifact(model_dir)
    card = artifact.card
    market = Market.open(market_dir)
    if not market.split(SPLIT):
        raise CalibrationError(f"{market_dir} has no train days: the rule reads the served market's train days")
    fingerprint = market.split_fingerprint(SPLIT)
    trained, unread = _trained_fingerprints(card)
    if unread and warn:
        warn(
            f"{model_dir} was pooled over markets that cannot be opened from here ({', '.join(unread)}): whether"
            f" {market_dir} is one of them cannot be checked; calibrate only on a market it was not trained on"
        )
    if fingerprint in trained:
        raise CalibrationError(
            f"{market_dir}'s train days are the ones {model_dir} was trained and selected on; calibrate it on a market"
            " it will serve and has not seen"
        )
    return CalibrationInputs(Path(model_dir), Path(market_dir), artifact, market, fingerprint)


def play_ladder(
    inputs: CalibrationInputs, seeds: int = SEEDS, progress: Progress | None = None
) -> tuple[BidCalibration, pd.DataFrame]:
    """The rule's plays (module docstring) on checked inputs: the choice and the episodes."""
    artifact, market, market_dir, fingerprint = inputs.artifact, inputs.market, inputs.market_dir, inputs.fingerprint
    card = artifact.card
    days, train = split_days(market, SPLIT, card.setting)
    pid, _ = tuned_baseline(market, REFERENCE, card.setting, train)
    played = days.play(pid, 0)
    frames = [episode_rows(REFERENCE, 0, days, played.delivery, played.cost)]
    gains, config = artifact.controller_gains(), card.shield_config()
    bidders = {scale: ShieldedBidder(OnnxBidder(artifact, bid_scale=scale), gains, config) for scale in LADDER}
    played_seeds = 1 if next(iter(bidders.values())).deterministic else seeds  # the model's, any factor
    for scale, bidder in bidders.items():
        for seed in range(played_seeds):
            played = days.play(bidder, seed)
            frames.append(episode_rows(row_name(scale), seed, days, played.delivery, played.cost))
        if progress:
            progress(row_name(scale))
    episodes = pd.concat(frames, ignore_index=True)
    names = [REFERENCE, *(row_name(m) for m in LADDER)]
    summary = summarize(episodes, names)
    rows = {name: {"ans": float(summary[name]["ans_median"]), "csr": float(summary[name]["csr"])} for name in names}
    chosen = BidCalibration(choose_scale(rows), rows, len(days), str(market_dir), fingerprint, played_seeds)
    return chosen, episodes


def _trained_fingerprints(card: ModelCard) -> tuple[set[str], list[str]]:
    """The train-split fingerprints the model saw (its card's, a fine-tuned model's sources', and each pooled
    market's that can still be opened: a pooled card holds only their fold), and the pooled markets that could not
    be opened."""
    seen, unread = card.training.learned_fingerprints(), []
    for path in card.training.pooled_markets:
        try:
            seen.add(Market.open(Path(path)).split_fingerprint(SPLIT))
        except (MarketError, OSError, KeyError, TypeError):
            unread.append(path)  # moved, deleted or relative to another directory: only the fold can say
    return seen, unread


def check_destination(model_dir: Path, out: Path, force: bool = False) -> None:
    """Refuse ``out`` before any play: the model itself, the current directory (or one holding it), a file, a
    directory holding something other than a model, or a model without ``force``."""
    out, here, model = Path(out).resolve(), Path.cwd().resolve(), Path(model_dir).resolve()
    if out == model:
        raise CalibrationError(f"--out {out} is the model itself; the calibrated copy goes to a new directory")
    if model in out.parents:  # the copy would be built inside what it copies
        raise CalibrationError(f"--out {out} is inside the model {model_dir}; the calibrated copy goes beside it")
    if out == here or out in here.parents:
        raise CalibrationError(f"--out {out} is the current directory or holds it; name a model directory")
    if out.exists() and not out.is_dir():
        raise CalibrationError(f"{out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()):
        if not (out / CARD_FILE).exists():
            raise CalibrationError(f"{out} is a non-empty directory that holds no model; choose another --out")
        if not force:
            raise CalibrationError(f"{out} already holds a model; pass --force to overwrite it")


def write_calibrated(model_dir: Path, out: Path, calibration: BidCalibration, force: bool = False) -> ModelCard:
    """Copy ``model_dir`` to ``out`` with the chosen factor as its card's ``bid_scale`` (graphs untouched)."""
    out = Path(out)
    check_destination(model_dir, out, force)
    card = ModelCard.model_validate_json((Path(model_dir) / CARD_FILE).read_text())
    info = BidScaleInfo(
        scale=calibration.scale,
        chosen_by=CHOSEN_BY,
        market=calibration.market,
        data_fingerprint=calibration.data_fingerprint,
        calibration=calibration.record(),
    )
    # The card's measured figures were the model's without the factor (on its training market): not this copy's.
    evaluation = card.evaluation.model_copy(update={"measured": {}})
    updated = card.model_copy(update={"bid_scale": info, "evaluation": evaluation})
    ModelCard.model_validate_json(updated.to_json())  # what is written must read back
    # A crash or a copy that does not load leaves ``out`` as it was; ``out`` is checked again under the swap's lock,
    # so a second calibration into a new ``out`` at the same time is refused rather than overwritten.
    with built_beside(out, before_swap=lambda: check_destination(model_dir, out, force)) as building:
        # The files' contents, not their modes: a read-only model (0555) still gives a copy whose card can be written.
        shutil.copytree(model_dir, building, dirs_exist_ok=True, copy_function=shutil.copyfile)
        for directory, _, _ in os.walk(building):
            Path(directory).chmod(0o755)
        atomic_write_text(building / CARD_FILE, updated.to_json())
        load_artifact(building)  # the copy loads as a model before it takes the destination
    return updated
