"""``rcb export --plan``: the planner on a market's train days as a model directory the service runs.

The planner (:mod:`model.planner`) needs no graph: its scenarios (``scenarios.npz``), the parameters ``rcb
evaluate`` tunes for ``plan`` (the same tuning cache, :mod:`training.bidders.tuned`, so ``onnx:OUT`` plays the
``plan`` rows), its depth alerts calibrated on the train days, and the market's PID as the shield's and the
fallback's reference (the gains ``shield:plan`` plays). Numpy only: no torch.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path

import numpy as np

from model.artifact import (
    CARD_FILE,
    FORMAT_VERSION,
    SCENARIOS_FILE,
    EvaluationInfo,
    ModelCard,
    PlannerInfo,
    TrainingInfo,
    file_sha256,
)
from model.contract import Setting
from model.controller import GAIN_FIELDS
from model.planner import VERSION as PLANNER_VERSION
from model.planner import calibrated_alerts, save_scenarios
from training.bidders import planner as planner_bidder
from training.bidders.tuned import tuned_baseline
from training.evaluation.evaluate import split_days
from training.export.destination import ExportError, check_market_export
from training.export.replay_parity import replayed_gap
from training.files import atomic_write_text, built_beside
from training.market.dataset import Market

PLANNER_PARITY_DAYS = 3
"""Train days the exported planner replays against the tuned one before it replaces the destination."""

Progress = Callable[[str], None]


def check_planner_export(market_dir: Path, out: Path, force: bool = False) -> Market:
    """The refusals :func:`export_planner` makes before any work (:func:`check_market_export`)."""
    return check_market_export(market_dir, out, force, "the planner's scenarios are the train days")


def export_planner(
    market_dir: Path, setting: Setting, out: Path, force: bool = False, progress: Progress | None = None
) -> ModelCard:
    """The planner (:mod:`model.planner`) on ``market_dir``'s train days as a model directory ``out``: its scenarios
    (``scenarios.npz``), the parameters ``rcb evaluate`` tunes for ``plan`` (the same cache, so ``onnx:OUT`` plays
    the ``plan`` rows) and the market's PID as the shield's and the fallback's reference (the gains
    ``shield:plan`` plays). Checked before it replaces ``out``: loaded back, and its ratios equal to the tuned
    planner's over the first train days played (``parity.ratio``)."""
    market = check_planner_export(market_dir, out, force)
    if progress:
        progress("tuning")
    _, train = split_days(market, "train", setting)
    tuned, record = tuned_baseline(market, "plan", setting, train)
    pid, _ = tuned_baseline(market, "pid", setting, train)
    assert isinstance(tuned, planner_bidder.Planner)
    params, gains = tuned.params(), pid.params()
    profile = tuple(float(x) for x in gains.pop("traffic_profile"))
    days = train()
    if progress:
        progress("alerts")
    train_edge, train_misfit = planner_bidder.train_depth(tuned, days)
    edge_alert, misfit_alert = calibrated_alerts(train_edge, train_misfit)
    with built_beside(out) as building:
        if progress:
            progress(SCENARIOS_FILE)
        save_scenarios(tuned.scenarios, building / SCENARIOS_FILE)
        card = ModelCard(
            format_version=FORMAT_VERSION,
            kind="planner",
            algorithm="plan",
            setting=Setting(setting),
            features=(),
            obs_dim=0,
            latent_dim=0,
            created=dt.datetime.now(dt.UTC).replace(microsecond=0),
            source_run=f"plan:{market.root}",
            files={SCENARIOS_FILE: file_sha256(building / SCENARIOS_FILE)},
            training=TrainingInfo(
                run=f"plan:{market.root}",
                market=str(market.root),
                data_fingerprint=market.split_fingerprint("train"),
                epochs=0,
                config={
                    "tuner_version": planner_bidder.TUNER_VERSION,
                    **params,
                    "train_edge_max": float(train_edge.max(initial=0.0)),
                    "train_misfit_max": float(train_misfit.max(initial=0.0)),
                },
                traffic_profile=profile,
                controller={k: float(gains[k]) for k in GAIN_FIELDS},
            ),
            evaluation=EvaluationInfo(
                metric="planner: train_score = mean over train days, each played without its own scenario, of "
                "D / D* x 1[feasible]; test and OOD figures: evaluation.measured"
            ),
            planner=PlannerInfo(
                version=PLANNER_VERSION,
                margin=float(params["margin"]),
                cost_sd=float(params["cost_sd"]),
                noise_aware=bool(params.get("noise_aware", False)),
                train_days=tuned.scenarios.days,
                train_score=float(record["train_score"]),
                edge_alert=edge_alert,
                misfit_alert=misfit_alert,
            ),
            producer={"numpy": np.__version__},
        )
        atomic_write_text(building / CARD_FILE, card.to_json())
        if progress:
            progress("parity")
        artifact, worst = replayed_gap(building, tuned, days, PLANNER_PARITY_DAYS, "planner")
        assert artifact.planner is not None
        if not worst == 0:  # NaN included
            raise ExportError(f"the exported planner does not reproduce the tuned one: ratios off by {worst:.2e}")
        card = card.model_copy(update={"parity": {"ratio": worst}})
        atomic_write_text(building / CARD_FILE, card.to_json())
    return card
