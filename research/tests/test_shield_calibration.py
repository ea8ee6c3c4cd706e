"""research.shield_calibration: the pre-registered rule that earns a model its shield trust on validation days."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest
import typer
from artifact_fixtures import SETTING, exported_runs, rewrite_card
from typer.testing import CliRunner

from model.artifact import load_artifact, read_card
from model.shield import ShieldConfig
from research.shield_calibration import TRUST_LADDER, choose_trust, row_name
from research.shield_calibration import main as calibration_main
from training.evaluation.evaluate import evaluate, parse_methods
from training.market.dataset import Market

DAYS = 10


def played(method: str, scores: list[float], feasible: list[bool], seeds: int = 2) -> pd.DataFrame:
    """Episodes of ``method`` scoring ``scores`` (D / D*, oracle 1) on days 0.., each seed alike."""
    delivery = np.asarray(scores, dtype=float)
    cost = np.where(feasible, delivery / 1.5, delivery * 2)  # ROI 1.5 or 0.5 against L = 1
    frames = [
        pd.DataFrame(
            {
                "method": method,
                "seed": seed,
                "day": np.arange(len(scores)),
                "delivery": delivery,
                "cost": cost,
                "roi": delivery / cost,
                "feasible": feasible,
                "oracle_delivery": 1.0,
                "roi_target": 1.0,
                "budget": np.inf,
                "score": delivery * np.asarray(feasible),
            }
        )
        for seed in range(seeds)
    ]
    return pd.concat(frames, ignore_index=True)


def sweep_of(pid: float, alone: list[float], rows: dict[float, tuple[float, int]]) -> pd.DataFrame:
    """A validation sweep: the PID at ``pid`` every day, the model alone at ``alone``, and per trust its daily
    score and how many days it loses (infeasible)."""
    every = [True] * DAYS
    frames = [played("pid", [pid] * DAYS, every, seeds=1), played("unshielded", alone, every)]
    for trust, (score, lost) in rows.items():
        frames.append(played(row_name(trust), [score] * DAYS, [i >= lost for i in range(DAYS)]))
    return pd.concat(frames, ignore_index=True)


LADDER_ROWS = {0.0: (0.80, 0), 0.1: (0.82, 0), 0.2: (0.90, 1), 0.35: (0.8205, 0), 0.5: (0.81, 0)}


def test_an_earned_trust_is_the_best_eligible_one_the_smallest_of_a_tie():
    """0.2 scores most but loses a day the PID keeps (not eligible); 0.35 is best of the rest and 0.1 within
    0.001 of it: the smaller wins."""
    calibration = choose_trust(sweep_of(0.7, [0.8] * DAYS, LADDER_ROWS))
    assert calibration.earned and calibration.margin.ans_low > 0 and calibration.margin.days == DAYS
    assert calibration.trust == 0.1
    assert calibration.rows[row_name(0.2)]["csr"] == pytest.approx(0.9)
    record = calibration.record()
    assert record["trust"] == 0.1 and record["earned"] and record["days"] == DAYS
    assert set(record["rows"]) == {"pid", "unshielded", *(row_name(t) for t in TRUST_LADDER)}


def test_no_trust_without_a_sure_margin_over_the_pid():
    # Ahead on average (+0.02) but the days disagree: the interval reaches below 0.
    mixed = [0.9, 0.5] * (DAYS // 2)
    calibration = choose_trust(sweep_of(0.68, mixed, LADDER_ROWS))
    assert calibration.margin.ans > 0 and calibration.margin.ans_low <= 0
    assert not calibration.earned and calibration.trust == 0.0
    # Surely ahead in ANS, but it loses a day the PID keeps: not earned either.
    frames = sweep_of(0.5, [0.9] * DAYS, LADDER_ROWS)
    alone = frames["method"] == "unshielded"
    frames.loc[alone & (frames["day"] == 0), ["feasible", "score"]] = [False, 0.0]
    frames.loc[alone & (frames["day"] == 0), "cost"] *= 3  # ROI 0.5: infeasible, as the score says
    calibration = choose_trust(frames)
    assert calibration.margin.ans_low > 0 and calibration.rows["unshielded"]["csr"] < calibration.rows["pid"]["csr"]
    assert not calibration.earned and calibration.trust == 0.0
    # Earned, but every trust loses a day the PID keeps, 0 too: the band stays as it is.
    losing = {trust: (0.85, 1) for trust in TRUST_LADDER}
    calibration = choose_trust(sweep_of(0.7, [0.8] * DAYS, losing))
    assert calibration.earned and calibration.trust == 0.0
    with pytest.raises(ValueError, match="starts at 0"):
        choose_trust(frames, ladder=(0.1, 0.2))


def test_the_command_plays_the_validation_days_and_writes_the_card(tmp_path_factory: pytest.TempPathFactory):
    """``python -m research.shield_calibration MODEL MARKET --write``: the card's ``shield`` then holds the trust
    chosen with its figures, and ``shield:onnx:MODEL`` plays the band it names."""
    exported = exported_runs(tmp_path_factory)
    model = tmp_path_factory.mktemp("calibrated") / "model"
    shutil.copytree(exported.cbrl_model, model)
    app = typer.Typer()
    app.command()(calibration_main)
    result = CliRunner().invoke(app, [str(model), str(exported.market), "--seeds", "2", "--json"])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    assert shown["written"] is False and read_card(model).shield is None
    assert shown["trust"] in TRUST_LADDER and set(shown["rows"]) >= {"pid", "unshielded", "trust=0"}
    result = CliRunner().invoke(app, [str(model), str(exported.market), "--seeds", "2", "--write"])
    assert result.exit_code == 0, result.output
    card = read_card(model)
    assert card.shield is not None and card.shield.chosen_by == "research.shield_calibration"
    assert card.shield.calibration["trust"] == shown["trust"]  # the same plays, the same choice
    assert load_artifact(model).shield_config() == ShieldConfig(trust=shown["trust"])
    # A person's other fields stay theirs: a rewrite keeps them and says who chose what.
    rewrite_card(model, lambda card: card.update(shield={"config": {"tight_above": 0.0}, "chosen_by": "ops"}))
    result = CliRunner().invoke(app, [str(model), str(exported.market), "--seeds", "1", "--write"])
    assert result.exit_code == 0, result.output
    card = read_card(model)
    assert card.shield is not None and card.shield.chosen_by == "ops; trust: research.shield_calibration"
    assert card.shield_config().tight_above == 0.0
    # A card's band is what shield:onnx: plays: a wide trust written by hand moves fewer slots than none.
    rewrite_card(model, lambda card: card["shield"].update(config={"trust": 1.0}))
    market = Market.open(exported.market)
    acted = {}
    for name, directory in (("plain", exported.cbrl_model), ("trusted", model)):
        method = f"shield:onnx:{directory}"
        evaluation = evaluate(market, SETTING, "test", parse_methods(method), seeds=1)
        acted[name] = np.mean(evaluation.meta["tuned"][method]["shield_acted_share"])
    assert acted["trusted"] < acted["plain"]
    # Not a model: a clear error, exit 2.
    result = CliRunner().invoke(app, [str(exported.market), str(exported.market)])
    assert result.exit_code == 2 and "model.json" in result.output and "Traceback" not in result.output
