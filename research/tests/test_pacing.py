"""research/pacing.py: per-slot trajectories of bidders, where their days end, and its CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
import typer
from artifact_fixtures import SETTING
from typer.testing import CliRunner

from model.contract import SLOTS_PER_DAY
from research.pacing import main, pace
from training.evaluation.evaluate import evaluate
from training.market.dataset import Market


def test_the_trajectories_end_where_the_evaluation_does(exported):
    model = f"onnx:{exported.cbrl_model}"
    paced = pace(exported.market, SETTING, "test", ["pid", model, f"shield:{model}"])
    summary = evaluate(Market.open(exported.market), SETTING, "test", ["pid", model], seeds=1).summary
    for method in ("pid", model):
        trajectory, end = paced[method]
        assert {k: v.shape for k, v in trajectory.items()} == {k: (SLOTS_PER_DAY,) for k in trajectory}
        assert end["feasible"] == pytest.approx(summary[method]["csr"])
        assert np.isnan(end["spent_share"]) and np.isnan(trajectory["spent_share"]).all()  # SC: no budget
        assert (trajectory["ratio"] > 0).all() and np.nanmax(trajectory["roi_over_target"]) > 0
    assert not np.allclose(paced["pid"][0]["ratio"], paced[model][0]["ratio"])


def test_the_cli_prints_plots_and_refuses_an_unknown_method(exported, tmp_path):
    app = typer.Typer()
    app.command()(main)
    args = [str(exported.market), "--setting", SETTING, "--split", "test", "--method", "pid"]
    plot = tmp_path / "pacing.png"
    table = CliRunner().invoke(app, [*args, "--plot", str(plot)])
    assert table.exit_code == 0, table.output
    assert "| pid | n/a (no budget) |" in table.output and plot.stat().st_size > 0  # SC: no spent share
    ends = json.loads(CliRunner().invoke(app, [*args, "--json"]).output)
    assert set(ends[str(exported.market)]["pid"]) == {"spent_share", "roi_over_target", "feasible"}
    assert ends[str(exported.market)]["pid"]["spent_share"] is None  # SC: no budget, null rather than NaN
    refused = CliRunner().invoke(app, [*args, "--method", "nonsense"])
    assert refused.exit_code == 2 and "expected a baseline" in refused.output


def test_the_planner_paces_its_own_train_days_leaving_each_out_as_rcb_evaluate_plays_them(exported):
    """``plan`` holds the train days as scenarios: on ``--split train`` (pacing's default) it plays each day without
    its own, as ``rcb evaluate`` does, not in sample."""
    from training.bidders.base import play
    from training.bidders.tuned import tuned_baseline
    from training.evaluation.evaluate import split_days

    (_, end) = pace(exported.market, SETTING, "train", ["plan"])["plan"]
    market = Market.open(exported.market)
    episodes = evaluate(market, SETTING, "train", ["plan"], seeds=1).episodes
    assert end["roi_over_target"] == pytest.approx(float(np.median(episodes["roi"] / episodes["roi_target"])))
    assert end["feasible"] == pytest.approx(float(episodes["feasible"].mean()))
    days, train = split_days(market, "train", SETTING)
    in_sample = play(
        tuned_baseline(market, "plan", SETTING, train)[0], days.indexes(), days.episode_days(), days.registration(), 0
    )
    assert end["roi_over_target"] != pytest.approx(
        float(np.median(in_sample.delivery / in_sample.cost / days.roi_target))
    )
