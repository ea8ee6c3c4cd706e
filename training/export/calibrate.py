"""Calibrate a model on the market it will serve: ``rcb calibrate MODEL MARKET --out DIR``.

A model trained on one market and served on another (the shipped ``models/default`` on a user's own logs) bids
where its training market taught it to, and its card's controller, the one the shield and the fallback run around,
is its training market's PID. On the served market both may be wrong: the served market's own train days, which the
model never saw, say how far. The rule:

1. MARKET's PID is tuned on its train days (the tuning ``rcb evaluate`` plays as ``pid``). It becomes the copy's
   ``safety_controller``: the controller its shield and its fallback run around, so the shield keeps the model
   near a controller that fits the market served. A residual policy still corrects its own reference, its training
   market's PID (``training.controller``), which is what it learned to correct.
2. Each factor ``m`` of :data:`LADDER` on the model's ratios is played on those days behind the model's band
   centred on that PID, as the service would run the copy, 5 seeds; the PID once.
3. Eligible: the ``m`` whose CSR is at least the PID's there. Chosen: the eligible ``m`` with the highest median
   ANS; a tie goes to the ``m`` nearest 1.
4. No factor eligible: the model cannot hold the market's ROI even behind the shield, and the copy is refused
   (:class:`ModelUnfit`, which names the controller model to serve instead). ``force_unsafe`` writes it anyway, with
   the factor whose CSR comes nearest the PID's (:func:`nearest_scale`), and its card says so.

The chosen factor goes on a copy of the model as its card's ``bid_scale`` section, which the service and
``onnx:MODEL_DIR`` apply to every ratio before the shield (``model.policy.Policy``), and the PID as its
``safety_controller``. The graphs are untouched; the card's served hash, so the model's version in the service,
changes with the factor and the controller. The model's own train days are refused: there the factor would be chosen
on the days the model was selected on. A controller model is refused: it is tuned on a market, not calibrated to
one (``rcb export --controller``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from model.artifact import CARD_FILE, Artifact, BidScaleInfo, ControllerInfo, ModelCard, load_artifact
from training.bidders.onnx import OnnxBidder
from training.bidders.shielded import ShieldedBidder
from training.evaluation.evaluate import episode_rows, split_days, summarize
from training.export.controller import market_controller
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
    """A model or market the calibration cannot use (said in one line): bad input."""


class ModelUnfit(Exception):
    """No factor holds the market's PID's CSR: the model is not written (said in one line, which names what to serve
    instead). Not a :class:`CalibrationError`: the input is fine, the model does not fit the market."""


@dataclass(frozen=True)
class BidCalibration:
    """What the rule saw on the served market's train days and what it chose."""

    scale: float
    """The chosen factor; where none holds the PID's CSR, the one nearest to (:func:`nearest_scale`)."""
    rows: dict[str, dict[str, float]]
    """``pid`` and ``m=M`` per factor: median ANS (``ans``) and mean CSR (``csr``)."""
    days: int
    market: str
    data_fingerprint: str
    seeds: int
    """Seeds each factor was played with (1 where the shielded model is deterministic)."""
    safety_controller: ControllerInfo | None = None
    """The market's PID tuned on its train days: what the copy's shield and fallback run around."""
    holds: bool = True
    """Some factor holds the PID's CSR (:attr:`scale` is the rule's choice); False: none does."""

    def record(self) -> dict[str, Any]:
        """The card's ``bid_scale.calibration``: the rule, the figures it read and the choice."""
        return {
            "rule": "training/export/calibrate.py: behind the model's band, CSR at least the market PID's, best median "
            "ANS, ties to the nearest 1",
            "split": SPLIT,
            "days": self.days,
            "seeds": self.seeds,
            "rows": {name: {k: round(v, 4) for k, v in row.items()} for name, row in self.rows.items()},
            "scale": self.scale,
            "holds_pid_csr": self.holds,
            "shield_centred_on": "the market's PID" if self.safety_controller is not None else "the model's controller",
        }

    def best_csr(self) -> tuple[float, float]:
        """The factor whose CSR comes nearest the PID's, and that CSR."""
        scale = nearest_scale(self.rows, tuple(m for m in LADDER if row_name(m) in self.rows))
        return scale, self.rows[row_name(scale)]["csr"]

    def refusal(self, model_dir: Path | str, setting: str) -> str:
        """The one line that says the model cannot hold the market's ROI, with the command to serve its PID instead."""
        scale, csr = self.best_csr()
        return (
            f"{model_dir} cannot hold {self.market}'s ROI: best CSR {csr:.2f} (bid scale {scale:g}) against the PID's"
            f" {self.rows[REFERENCE]['csr']:.2f} on its {self.days} train days behind the shield; serve the PID"
            f" instead: rcb export --controller pid {self.market} --setting {setting} --out DIR"
        )


def row_name(scale: float) -> str:
    """The row of a factor: ``m=1.2``."""
    return f"m={scale:g}"


def eligible_scales(rows: dict[str, dict[str, float]], ladder: tuple[float, ...] = LADDER) -> list[float]:
    """The factors whose CSR is at least the PID's (to :data:`CSR_TOLERANCE`)."""
    pid_csr = rows[REFERENCE]["csr"]
    return [m for m in ladder if rows[row_name(m)]["csr"] >= pid_csr - CSR_TOLERANCE]


def choose_scale(rows: dict[str, dict[str, float]], ladder: tuple[float, ...] = LADDER) -> float | None:
    """The rule (module docstring) on the rows ``pid`` and ``m=M``: the best eligible factor, ties to the nearest 1;
    None when no factor holds the PID's CSR (the model does not fit the market)."""
    eligible = eligible_scales(rows, ladder)
    if not eligible:
        return None
    best = max(rows[row_name(m)]["ans"] for m in eligible)
    return min((m for m in eligible if rows[row_name(m)]["ans"] == best), key=lambda m: (abs(m - 1.0), m))


def nearest_scale(rows: dict[str, dict[str, float]], ladder: tuple[float, ...] = LADDER) -> float:
    """The factor whose CSR comes nearest the PID's: the highest CSR, then the highest median ANS, then the factor
    nearest 1 (what ``--force-unsafe`` writes when none holds it)."""
    return min(ladder, key=lambda m: (-rows[row_name(m)]["csr"], -rows[row_name(m)]["ans"], abs(m - 1.0), m))


def calibrate(
    model_dir: Path,
    market_dir: Path,
    seeds: int = SEEDS,
    progress: Progress | None = None,
    warn: Callable[[str], None] | None = None,
    keep_controller: bool = False,
) -> tuple[BidCalibration, pd.DataFrame]:
    """Play every factor of :data:`LADDER` on ``market_dir``'s train days behind ``model_dir``'s shield (module
    docstring); the choice and the episodes (rows ``pid`` and ``m=M``). ``warn``: told what could not be checked.
    ``keep_controller``: :func:`play_ladder`'s."""
    return play_ladder(prepare(model_dir, market_dir, warn), seeds, progress, keep_controller)


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
    if card.is_controller:
        raise CalibrationError(
            f"{model_dir} is a controller model ({card.algorithm}, tuned on {card.training.market}): a controller is "
            f"tuned on the market it serves, not calibrated to it; rcb export --controller {card.algorithm} "
            f"{market_dir} --setting {card.setting} --out DIR"
        )
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
    inputs: CalibrationInputs, seeds: int = SEEDS, progress: Progress | None = None, keep_controller: bool = False
) -> tuple[BidCalibration, pd.DataFrame]:
    """The rule's plays (module docstring) on checked inputs: the choice and the episodes. ``keep_controller``: the
    shield stays around the model's own controller (:meth:`model.artifact.Artifact.controller_gains`) and no
    ``safety_controller`` is chosen: a candidate for markets of the training market's kind, where the band around the
    card's controller scores higher (RESULTS.md)."""
    artifact, market, market_dir, fingerprint = inputs.artifact, inputs.market, inputs.market_dir, inputs.fingerprint
    card = artifact.card
    days, train = split_days(market, SPLIT, card.setting)
    market_pid, pid, _ = market_controller(market, REFERENCE, card.setting, train, chosen_by=CHOSEN_BY)
    # the market as the user named it, as bid_scale records it
    safety: ControllerInfo | None = (
        None if keep_controller else market_pid.model_copy(update={"market": str(market_dir)})
    )
    played = days.play(pid, 0)
    frames = [episode_rows(REFERENCE, 0, days, played.delivery, played.cost)]
    # the copy's shield, as the service and shield:onnx: will run it: the card's band around the market's PID (or,
    # keeping the controller, around the card's own)
    gains = artifact.controller_gains() if safety is None else safety.pid_gains()
    config = card.shield_config()
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
    choice = choose_scale(rows)
    chosen = BidCalibration(
        nearest_scale(rows) if choice is None else choice,
        rows,
        len(days),
        str(market_dir),
        fingerprint,
        played_seeds,
        safety_controller=safety,
        holds=choice is not None,
    )
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


def write_calibrated(
    model_dir: Path,
    out: Path,
    calibration: BidCalibration,
    force: bool = False,
    force_unsafe: bool = False,
    setting: str | None = None,
) -> ModelCard:
    """Copy ``model_dir`` to ``out`` with the chosen factor as its card's ``bid_scale`` and the market's PID as its
    ``safety_controller`` (graphs untouched). A calibration where no factor holds the PID's CSR raises
    :class:`ModelUnfit` and writes nothing, unless ``force_unsafe``."""
    out = Path(out)
    card = ModelCard.model_validate_json((Path(model_dir) / CARD_FILE).read_text())
    if not calibration.holds and not force_unsafe:
        raise ModelUnfit(calibration.refusal(model_dir, setting or str(card.setting)))
    check_destination(model_dir, out, force)
    info = BidScaleInfo(
        scale=calibration.scale,
        chosen_by=CHOSEN_BY,
        market=calibration.market,
        data_fingerprint=calibration.data_fingerprint,
        calibration=calibration.record(),
    )
    # The card's measured figures were the model's without the factor (on its training market): not this copy's.
    evaluation = card.evaluation.model_copy(update={"measured": {}})
    update: dict[str, Any] = {"bid_scale": info, "evaluation": evaluation}
    if calibration.safety_controller is not None:
        update["safety_controller"] = calibration.safety_controller
    updated = card.model_copy(update=update)
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
