"""``rcb export --controller pid|rm MARKET``: a controller tuned on a market's train days as a model directory.

A controller model (``kind: controller``) has no file beside its card: the card's ``controller`` section holds the
law (the PID of :mod:`model.controller`, or RM's constant ratio), its parameters and the market whose train days
tuned them. The tuning is the one ``rcb evaluate`` plays as ``pid`` or ``rm`` (:func:`training.bidders.tuned.
tuned_baseline`, the same cache), so ``onnx:OUT`` plays the ``pid`` or ``rm`` rows, and the service serves them.
Numpy only: no torch, no onnxruntime.

:func:`market_controller` is also what ``rcb calibrate`` writes as a model's ``safety_controller``: the PID of the
market served.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from model.artifact import (
    CARD_FILE,
    CONTROLLER_LAWS,
    FORMAT_VERSION,
    ControllerInfo,
    EvaluationInfo,
    ModelCard,
    TrainingInfo,
)
from model.contract import Setting
from model.controller import GAIN_FIELDS
from training.bidders.base import Bidder
from training.bidders.tuned import tuned_baseline
from training.evaluation.evaluate import split_days
from training.export.destination import ExportError, check_market_export
from training.export.replay_parity import replayed_gap
from training.files import atomic_write_text, built_beside
from training.market.dataset import Market
from training.replay.dayset import DaySet

CONTROLLER_PARITY_DAYS = 3
"""Train days the exported controller replays against the tuned one before it replaces the destination."""
PARITY_TOLERANCE = 1e-9
"""Largest ratio gap allowed between the exported law and the tuned bidder: the stateless PID law sums its integrals
in one pass where the bidder adds slot by slot (about 1e-14 apart); the constant ratio is exact."""
CHOSEN_BY = "rcb export --controller (training.bidders.tuned)"

Progress = Callable[[str], None]


def market_controller(
    market: Market, law: str, setting: Setting, train: Callable[[], DaySet], chosen_by: str = CHOSEN_BY
) -> tuple[ControllerInfo, Bidder, dict[str, Any]]:
    """The ``law`` (``pid`` or ``rm``) tuned on ``market``'s train days as a card's controller section, with the tuned
    bidder and the tuning's record (:func:`training.bidders.tuned.tuned_baseline`: the cache ``rcb evaluate``
    reads)."""
    if law not in CONTROLLER_LAWS:
        raise ExportError(f"unknown controller {law!r}; the controllers are {', '.join(CONTROLLER_LAWS)}")
    bidder, record = tuned_baseline(market, law, setting, train)
    params = bidder.params()
    if law == "pid":
        gains = {k: float(params[k]) for k in GAIN_FIELDS}
        profile: tuple[float, ...] | None = tuple(float(x) for x in params["traffic_profile"])
    else:
        gains, profile = {"ratio": float(params["ratio"])}, None
    info = ControllerInfo(
        law=law,  # type: ignore[arg-type]
        gains=gains,
        traffic_profile=profile,
        market=str(market.root),
        data_fingerprint=market.split_fingerprint("train"),
        train_score=float(record["train_score"]),
        chosen_by=chosen_by,
    )
    return info, bidder, record


def check_controller_export(market_dir: Path, out: Path, force: bool = False) -> Market:
    """The refusals :func:`export_controller` makes before any work (:func:`check_market_export`)."""
    return check_market_export(market_dir, out, force, "a controller is tuned on the train days")


def controller_card(info: ControllerInfo, setting: Setting, record: dict[str, Any]) -> ModelCard:
    """The card of a controller model: ``kind: controller``, no features, no file, the law in ``controller``."""
    source = f"controller:{info.law}:{info.market}"
    return ModelCard(
        format_version=FORMAT_VERSION,
        kind="controller",
        algorithm=info.law,
        setting=Setting(setting),
        features=(),
        obs_dim=0,
        latent_dim=0,
        created=dt.datetime.now(dt.UTC).replace(microsecond=0),
        source_run=source,
        files={},
        training=TrainingInfo(
            run=source,
            market=info.market,
            data_fingerprint=info.data_fingerprint,
            epochs=0,
            config={"law": info.law, "tuning_key": record.get("key"), "train_score": info.train_score},
        ),
        evaluation=EvaluationInfo(
            metric="controller: train_score = mean over the train days of D / D* x 1[feasible], the tuning's; test "
            "and OOD figures: evaluation.measured"
        ),
        controller=info,
        producer={"numpy": np.__version__},
    )


def export_controller(
    market_dir: Path, law: str, setting: Setting, out: Path, force: bool = False, progress: Progress | None = None
) -> ModelCard:
    """The ``law`` (``pid`` or ``rm``) tuned on ``market_dir``'s train days as a controller model ``out`` (module
    docstring). Checked before it replaces ``out``: loaded back, and its ratios equal to the tuned bidder's over the
    first train days played (``parity.ratio``)."""
    market = check_controller_export(market_dir, out, force)
    if progress:
        progress("tuning")
    _, train = split_days(market, "train", setting)
    info, tuned, record = market_controller(market, law, setting, train)
    card = controller_card(info, setting, record)
    with built_beside(out) as building:
        atomic_write_text(building / CARD_FILE, card.to_json())
        if progress:
            progress("parity")
        _, worst = replayed_gap(building, tuned, train(), CONTROLLER_PARITY_DAYS, "controller")
        if not worst <= PARITY_TOLERANCE:  # NaN included
            raise ExportError(f"the exported controller does not reproduce the tuned one: ratios off by {worst:.2e}")
        card = card.model_copy(update={"parity": {"ratio": worst}})
        atomic_write_text(building / CARD_FILE, card.to_json())
    return card
