"""scripts/quickstart_report.py: the main job's closing table, for a single-run and an ensemble default model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scripts.quickstart_report import describe_shipped, main


def summary(ans: float, csr: float, days: int = 8) -> dict:
    return {"ans_mean": ans, "csr": csr, "n_episodes": days}


@pytest.fixture
def main_job(tmp_path: Path) -> Path:
    out = tmp_path / "quickstart"
    offline = {"pid": summary(0.70, 0.88), f"shield:onnx:{out}/model": summary(0.73, 1.0)}
    offline["onnx:models/default"] = summary(0.72, 0.88)
    offline[f"shield:onnx:{out}/model-plan"] = summary(0.76, 1.0)
    for path, body in (
        ("evaluate/summary.json", offline),
        ("replay-fresh/summary.json", {"service": summary(0.73, 1.0)}),
        ("replay-plan/summary.json", {"service": summary(0.76, 1.0)}),
        ("replay-default/summary.json", {"service": summary(0.715, 0.88)}),
        ("model-plan/model.json", {"planner": {"train_days": 8, "margin": 0.05, "cost_sd": 0.3}}),
        ("model/model.json", {"training": {"epochs": 24}, "evaluation": {"best_validation_score": 0.813}}),
        ("evaluate/meta.json", {"setting": "mc", "split": "test"}),
    ):
        (out / path).parent.mkdir(parents=True, exist_ok=True)
        (out / path).write_text(json.dumps(body))
    return out


def card(best: float | None, members: list[float], setting: str = "mc") -> dict:
    return {"setting": setting, "evaluation": {"best_validation_score": best, "member_validation_scores": members}}


def test_the_table_labels_the_models_offline_and_through_the_service(main_job: Path, capsys):
    default = main_job.parent / "default"
    default.mkdir()
    (default / "model.json").write_text(json.dumps(card(None, [0.852, 0.871, 0.86])))  # an ensemble's card
    assert main([str(main_job), "--default-model", str(default)]) == 0
    text = capsys.readouterr().out
    assert "| CBRL trained now + shield, offline" in text and "|  0.730 |  1.00 |    8 |" in text
    assert "| CBRL default model + shield, through the service" in text
    assert "| planner (no RL) exported now + shield, offline" in text and "|  0.760 |  1.00 |    8 |" in text
    assert "| planner (no RL) exported now + shield, through the service" in text
    assert "same 8 train days as scenarios (margin 0.05, cost sd 0.3" in text
    assert "the ensemble of 3 runs" in text and "0.852-0.871" in text and "(best validation score 0.813)" in text
    assert main([str(main_job / "missing")]) == 2
    assert "run scripts/quickstart.sh" in capsys.readouterr().err


def test_a_single_run_default_is_described_by_its_own_score():
    assert "(best validation score 0.814)" in describe_shipped(card(0.814, []))
    assert "best validation" not in describe_shipped(card(None, []))


def test_a_run_of_the_other_setting_leaves_the_shipped_model_out(main_job: Path, capsys):
    """SETTING=sc bash scripts/quickstart.sh evaluated and replayed the MC shipped model on SC days (refused)."""
    default = main_job.parent / "default"
    default.mkdir()
    (default / "model.json").write_text(json.dumps(card(None, [0.852, 0.871], setting="mc")))
    (main_job / "evaluate" / "meta.json").write_text(json.dumps({"setting": "sc", "split": "test"}))
    offline = json.loads((main_job / "evaluate" / "summary.json").read_text())
    del offline["onnx:models/default"]
    (main_job / "evaluate" / "summary.json").write_text(json.dumps(offline))
    (main_job / "replay-default" / "summary.json").unlink()
    assert main([str(main_job), "--default-model", str(default)]) == 0
    text = capsys.readouterr().out
    assert text.lstrip().startswith("SC test days") and "CBRL default model +" not in text
    assert "is a mc model and sits out a SC run" in text
