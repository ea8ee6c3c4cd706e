"""The candidates of a fit, each fitted on the train days less the held-out ones and played there as it would be
served.

The held-out days (:class:`HeldOut`) are the validation fold of the train days: fold 0 of
:func:`training.replay.dayset.split_validation`, the days ``rcb evaluate --split validation`` reads and CBRL's runs
hold out. No candidate is fitted on them: the baselines are tuned on the other train days (:func:`tuned_for_choice`,
cached in the work directory, as the market's tuning cache keeps the baselines tuned on all of them); the planner's
scenarios and parameters are those days too; CBRL trains on them and corrects the PID tuned on them. Its epoch is
kept by its run's own model selection, which reads the held-out days: that selection is the one place the choice's
days are seen before the choice. A model given with ``--candidate`` is refused where it learned or was calibrated on
the held-out days (:func:`check_existing`).

Each is played as it would be served: the PID and RM as they are (a controller model's shield never moves its ratio),
the planner and every model behind the safety shield, the band its card sets (the defaults where none), around the
PID tuned on the same days (the written model's shield runs around the PID tuned on all the train days, its
``safety_controller``). CEM is played too, as a reference row: it has no served form.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from model.artifact import Artifact, ArtifactError, load_artifact
from model.contract import Setting
from model.controller import ControllerGains
from model.shield import ShieldConfig
from training.bidders.base import Bidder
from training.bidders.onnx import OnnxBidder
from training.bidders.shielded import ShieldedBidder
from training.bidders.tuned import BASELINES, TUNING_SEED, tuning_key
from training.evaluation.leakage import check_not_in_sample, check_sources_validation_fold, validation_folds_of
from training.evaluation.methods import ONNX_PREFIX, EvaluationError
from training.fit.rule import PID, Kind
from training.fit.workdir import WorkDir, days_fingerprint, key_of, read_json, write_json
from training.market.dataset import Market
from training.replay.dayset import VALIDATION_FRACTION, DaySet, split_validation

Progress = Callable[[str], None]
BUILT_IN = ("pid", "rm", "cem", "plan", "cbrl")
"""The candidates a fit makes itself (the names an existing candidate may not take)."""


class FitError(ValueError):
    """Input a fit cannot use (said in one line): bad input, exit 2."""


@dataclass
class HeldOut:
    """A market's train days split for the choice: the held-out days and the days the candidates are fitted on."""

    market: Market
    setting: Setting
    train: DaySet
    fit_rows: np.ndarray
    held_rows: np.ndarray
    _fit: DaySet | None = field(default=None, repr=False)
    _held: DaySet | None = field(default=None, repr=False)

    @classmethod
    def of(cls, train: DaySet) -> HeldOut:
        fit_rows, held_rows = split_validation(train, VALIDATION_FRACTION, 0)
        return cls(train.market, train.setting, train, fit_rows, held_rows)

    @property
    def fit(self) -> DaySet:
        """The train days less the held-out ones: what every candidate is fitted on."""
        if self._fit is None:
            self._fit = self.train.subset(self.fit_rows)
        return self._fit

    @property
    def held(self) -> DaySet:
        """The held-out days: where every candidate is played for the choice."""
        if self._held is None:
            self._held = self.train.subset(self.held_rows)
        return self._held

    def fingerprint(self) -> str:
        """The held-out days' fingerprint (their files and constraints)."""
        return days_fingerprint(self.market, self.held.entries)

    def describe(self) -> dict[str, Any]:
        """What the card's ``fit`` section records of the days."""
        return {
            "held_out_days": self.held.days,
            "held_out_fingerprint": self.fingerprint(),
            "fitted_on_days": self.fit.days,
            "train_days": len(self.train),
            "train_fingerprint": self.market.split_fingerprint("train"),
            "how": f"the validation fold of the train days (fold 0, every {round(1 / VALIDATION_FRACTION)}th day: rcb"
            " evaluate --split validation); every candidate is fitted on the other train days",
        }


@dataclass(frozen=True)
class Candidate:
    """One candidate: what it is, how it plays the held-out days, and how it is fitted for serving."""

    name: str
    kind: Kind
    about: str
    """One line: what it is and how it is played."""
    bidder: Bidder
    """As played on the held-out days (behind the shield where it is served so)."""
    identity: dict[str, Any]
    """What decides its plays (its parameters or its model's served digest, and the shield around it): part of its
    cached plays' key."""
    serve: tuple[str, str]
    """How it is written for serving: ``("controller", LAW)``, ``("planner", "")`` or ``("model", MODEL_DIR)``."""


def tuned_for_choice(
    held: HeldOut, method: str, work: WorkDir, progress: Progress | None = None
) -> tuple[Bidder, dict[str, Any]]:
    """Baseline ``method`` tuned on the train days less the held-out ones (with the market cache's tuner and seed),
    from the work directory's cache when the days and the tuner are unchanged; and its record."""
    module = BASELINES[method]
    key = key_of(
        {
            "market_cache_key": tuning_key(held.market, method, held.setting),
            "fitted_on_days": held.fit.days,
            "fitted_on_fingerprint": days_fingerprint(held.market, held.fit.entries),
        }
    )
    path = work.tuning(method, str(held.setting))
    cached = read_json(path)
    if cached is not None and cached.get("key") == key and isinstance(cached.get("params"), dict):
        try:
            return module.from_params(cached["params"], lambda: held.fit), cached
        except (KeyError, TypeError):
            pass  # parameters missing or of the wrong type: tune again
    bidder, score = module.tune(held.fit, seed=TUNING_SEED, progress=progress)
    record = {"key": key, "method": method, "setting": str(held.setting), "fit_score": score, "params": bidder.params()}
    write_json(path, record)
    return bidder, record


def pid_gains(params: dict[str, Any]) -> ControllerGains:
    """A tuned PID's parameters as the shield's controller (gains and traffic profile)."""
    return ControllerGains.with_profile(params["traffic_profile"], params)


def baseline_candidates(
    held: HeldOut, work: WorkDir, progress: Progress | None = None
) -> tuple[list[Candidate], ControllerGains]:
    """The PID, RM, CEM (a reference row) and the planner, tuned on the days the candidates are fitted on; and the
    PID's gains, which every other candidate's shield runs around. ``progress(method)`` after each is tuned."""
    tuned: dict[str, tuple[Bidder, dict[str, Any]]] = {}
    for method in ("pid", "rm", "cem", "plan"):
        tuned[method] = tuned_for_choice(held, method, work)
        if progress:
            progress(method)
    gains = pid_gains(tuned["pid"][1]["params"])
    band = ShieldConfig()
    days = len(held.fit)
    out = [
        Candidate(
            PID,
            "controller",
            f"the PID tuned on {days} train days",
            tuned["pid"][0],
            {"params": tuned["pid"][1]["params"]},
            ("controller", "pid"),
        ),
        Candidate(
            "rm",
            "controller",
            f"the constant ratio tuned on {days} train days",
            tuned["rm"][0],
            {"params": tuned["rm"][1]["params"]},
            ("controller", "rm"),
        ),
        Candidate(
            "plan",
            "planner",
            f"the planner on {days} train days' scenarios, behind the shield",
            ShieldedBidder(tuned["plan"][0], gains, band),
            {"params": tuned["plan"][1]["params"], "shield": shield_identity(gains, band)},
            ("planner", ""),
        ),
        Candidate(
            "cem",
            "reference",
            f"CEM tuned on {days} train days (a reference: no served form)",
            tuned["cem"][0],
            {"params": tuned["cem"][1]["params"]},
            ("reference", ""),
        ),
    ]
    return out, gains


def shield_identity(gains: ControllerGains, band: ShieldConfig) -> dict[str, Any]:
    """The shield a candidate plays behind, as its plays' key reads it."""
    return {"gains": gains.tuned(), "profile": list(gains.traffic_profile or ()), "band": asdict(band)}


def model_candidate(name: str, directory: Path, gains: ControllerGains, about: str | None = None) -> Candidate:
    """An exported model as a candidate: played as ``shield:onnx:`` plays it, behind its card's band around
    ``gains`` (a controller model as it is: its band is open). ``about``: what it is (default: its directory and
    how it is played)."""
    try:
        artifact = load_artifact(directory)
    except ArtifactError as exc:
        raise FitError(f"{directory}: {exc}") from None
    card = artifact.card
    inner = OnnxBidder(artifact)
    if card.is_controller:
        about = about or f"{directory}, a {card.algorithm} controller tuned on {card.training.market}, as it is"
        return Candidate(name, "controller", about, inner, {"served": card.served_sha256()}, ("model", str(directory)))
    about = about or f"{directory} ({card.kind}, {card.algorithm}), behind the shield around this market's PID"
    band = artifact.shield_config()
    kind: Kind = "planner" if card.is_planner else "policy"
    return Candidate(
        name,
        kind,
        about,
        ShieldedBidder(inner, gains, band),
        {"served": card.served_sha256(), "shield": shield_identity(gains, band)},
        ("model", str(directory)),
    )


def check_existing(directory: Path, market: Market, setting: Setting) -> Artifact:
    """A model given with ``--candidate``: it loads, is of ``setting``, and neither learned nor was calibrated on the
    held-out days (a run of this market that held out another fold, a planner holding this market's train days, a
    controller or a bid scale tuned on them). Raises :class:`FitError` naming what is wrong."""
    try:
        artifact = load_artifact(directory)
    except ArtifactError as exc:
        raise FitError(f"--candidate {directory}: {exc}") from None
    card = artifact.card
    if str(card.setting) != str(setting):
        raise FitError(f"--candidate {directory} is a {card.setting} model, not {setting}")
    train = market.split_fingerprint("train")
    method = ONNX_PREFIX + str(directory)
    try:
        check_not_in_sample(method, market, "validation")
        check_sources_validation_fold([method], market)
    except EvaluationError as exc:
        raise FitError(f"--candidate {exc}") from None
    if train in card.training.learned_fingerprints():
        other = [fold for _, fold in validation_folds_of(method) if fold != 0]
        if other:
            raise FitError(
                f"--candidate {directory} learned from this market's train days holding out fold {other[0]}, not 0:"
                " the held-out days are its training days"
            )
    if card.controller is not None and card.controller.data_fingerprint == train:
        raise FitError(
            f"--candidate {directory} is the {card.controller.law} tuned on this market's train days, held-out days"
            " included; the fit tunes it itself"
        )
    if card.bid_scale is not None and card.bid_scale.data_fingerprint == train:
        raise FitError(
            f"--candidate {directory}: its bid scale was calibrated on this market's train days, held-out days included"
        )
    return artifact


def existing_candidates(directories: list[Path], gains: ControllerGains) -> list[Candidate]:
    """The models given with ``--candidate`` (checked by :func:`check_existing`), named as given."""
    return [model_candidate(str(d), Path(d), gains) for d in directories]
