"""research.slot_trace: a method's ratios, its shield's reference and its spend beside the market's PID, by slot."""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest
import typer
from artifact_fixtures import SETTING, exported_runs, rewrite_card
from typer.testing import CliRunner

from model.artifact import load_artifact
from model.contract import SLOTS_PER_DAY
from research.slot_trace import COLUMNS, trace
from research.slot_trace import main as slot_trace_main
from training.evaluation.evaluate import EvaluationError


def test_the_trace_pairs_a_model_with_the_pid_slot_by_slot(tmp_path_factory: pytest.TempPathFactory):
    exported = exported_runs(tmp_path_factory)
    model = f"onnx:{exported.cbrl_model}"
    shielded = trace(exported.market, "test", SETTING, model)
    assert tuple(shielded.columns) == COLUMNS and len(shielded) == SLOTS_PER_DAY
    assert shielded["slot"].tolist() == list(range(SLOTS_PER_DAY))
    # Spend is cumulative, and the PID's ends at its own whole day.
    for column in ("spent", "pid_spent"):
        assert np.all(np.diff(shielded[column]) >= -1e-12) and shielded[column].min() >= 0
    assert shielded["pid_spent"].iloc[-1] == pytest.approx(1.0)
    # Before any slot is reported the shield's reference is the card's controller's opening ratio.
    assert shielded["reference"].iloc[0] == pytest.approx(
        load_artifact(exported.cbrl_model).controller_gains().initial_ratio
    )
    # Alone, the same model on the same days: the PID's columns are unchanged, the method's are its own.
    alone = trace(exported.market, "test", SETTING, model, shielded=False)
    pd.testing.assert_series_equal(alone["pid_ratio"], shielded["pid_ratio"])
    pd.testing.assert_series_equal(alone["pid_spent"], shielded["pid_spent"])
    with pytest.raises(EvaluationError):
        trace(exported.market, "test", SETTING, "pid")  # the PID is the reference, not a method to trace


def test_a_card_with_its_own_band_is_traced_behind_that_band(tmp_path_factory: pytest.TempPathFactory):
    """As served: the card's ``shield`` section, not the code's default band."""
    exported = exported_runs(tmp_path_factory)
    directory = tmp_path_factory.mktemp("banded") / "model"
    shutil.copytree(exported.cbrl_model, directory)
    pinned = {"wide": 0.01, "tight": 0.01, "tight_above": 0.0}  # the ratio pinned to the controller's, within 1%
    rewrite_card(directory, lambda raw: raw.update(shield={"config": pinned, "chosen_by": "test"}))
    frame = trace(exported.market, "test", SETTING, f"onnx:{directory}")
    default = trace(exported.market, "test", SETTING, f"onnx:{exported.cbrl_model}")
    assert np.allclose(frame["ratio"], frame["reference"], rtol=0.011)
    assert not np.allclose(default["ratio"], default["reference"], rtol=0.011)


def test_the_command_writes_its_table_and_plot_and_refuses_a_bad_split(tmp_path_factory: pytest.TempPathFactory):
    exported = exported_runs(tmp_path_factory)
    app = typer.Typer()
    app.command()(slot_trace_main)
    out = tmp_path_factory.mktemp("trace") / "sparse"
    base = [str(exported.market), "--method", f"onnx:{exported.cbrl_model}", "--setting", SETTING, "--out", str(out)]
    result = CliRunner().invoke(app, [*base, "--split", "test"])
    assert result.exit_code == 0, result.output
    written = pd.read_csv(out / "slots.csv")
    assert tuple(written.columns) == COLUMNS and len(written) == SLOTS_PER_DAY
    assert (out / "slots.png").stat().st_size > 0
    result = CliRunner().invoke(app, [*base, "--split", "tomorrow"])
    assert result.exit_code == 2 and "tomorrow" in result.output and "Traceback" not in result.output
