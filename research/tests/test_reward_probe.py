"""research/reward_probe.py: the PID scaled by constant corrections, scored and rewarded side by side."""

from __future__ import annotations

import json

import numpy as np
import pytest
import typer
from artifact_fixtures import SETTING, exported_runs
from typer.testing import CliRunner

from research.reward_probe import ScaledBidder, main, probe
from training.bidders.tuned import tuned_baseline
from training.market.dataset import Market
from training.replay.dayset import DaySet, split_validation
from training.rl.loop import play_days, score


@pytest.fixture(scope="module")
def market_days(tmp_path_factory: pytest.TempPathFactory):
    market = Market.open(exported_runs(tmp_path_factory).market)
    days = DaySet.load(market, "train", SETTING)
    pid, _ = tuned_baseline(market, "pid", SETTING, lambda: days)
    return market, days, pid


def test_m_1_is_the_pid_and_the_rewards_bound_each_other(market_days):
    _, days, pid = market_days
    table = probe(days, pid, multipliers=(0.5, 1.0, 2.0), margins=(0.0, 0.05, 0.3))
    assert table["multiplier"].tolist() == [0.5, 1.0, 2.0]
    learn, _ = split_validation(days)
    outcome, _ = play_days(pid, days, learn, 1, seed=0)
    assert table.loc[1, "score"] == pytest.approx(score(outcome, days, learn), abs=1e-12)
    # Eq. 5 at margin 0 is the score on feasible days and negative on the others; a margin only lowers it.
    assert (table["reward_margin_0"] <= table["score"] + 1e-12).all()
    np.testing.assert_allclose(table.loc[table["csr"] == 1, "reward_margin_0"], table.loc[table["csr"] == 1, "score"])
    assert (table["reward_margin_0.05"] <= table["reward_margin_0"] + 1e-12).all()
    assert (table["reward_margin_0.3"] <= table["reward_margin_0.05"] + 1e-12).all()
    assert table["score"].nunique() > 1  # the corrections do change the days


def test_noise_makes_the_scaled_bidder_stochastic(market_days):
    _, days, pid = market_days
    assert ScaledBidder(pid, np.ones(1)).deterministic and not ScaledBidder(pid, np.ones(1), noise=0.1).deterministic
    quiet = probe(days, pid, multipliers=(1.0,), margins=(0.0,))
    noisy = probe(days, pid, multipliers=(1.0,), margins=(0.0,), noise=0.3, repeats=3)
    assert noisy.loc[0, "score"] != pytest.approx(quiet.loc[0, "score"], abs=1e-9)


def test_the_cli_prints_a_table_or_json(market_days):
    market, _, _ = market_days
    app = typer.Typer()
    app.command()(main)
    args = [str(market.root), "--setting", SETTING, "--multiplier", "0.9", "--multiplier", "1.1", "--margin", "0"]
    table = CliRunner().invoke(app, args)
    assert table.exit_code == 0, table.output
    assert "| m | score | csr | reward_margin_0 |" in table.output and "| 1.1 |" in table.output
    plot = market.root.parent / "probe.png"
    records = json.loads(CliRunner().invoke(app, [*args, "--json", "--plot", str(plot)]).output)
    assert [r["multiplier"] for r in records[str(market.root)]] == [0.9, 1.1]
    assert plot.stat().st_size > 1000
    bad = CliRunner().invoke(app, [str(market.root), "--multiplier", "0"])
    assert bad.exit_code == 2 and "must be > 0" in bad.output


def test_another_validation_fold_probes_the_days_that_fold_learns_from(market_days):
    """``--validation-fold K``: the probe plays the days a run of fold K learns from, not fold 0's."""
    market, days, pid = market_days
    other = probe(days, pid, multipliers=(1.0,), margins=(0.0,), validation_fold=1)
    learn, _ = split_validation(days, fold=1)
    assert not np.array_equal(learn, split_validation(days)[0])
    outcome, _ = play_days(pid, days, learn, 1, seed=0)
    assert other.loc[0, "score"] == pytest.approx(score(outcome, days, learn), abs=1e-12)
    app = typer.Typer()
    app.command()(main)
    refused = CliRunner().invoke(app, [str(market.root), "--setting", SETTING, "--validation-fold", "5"])
    assert refused.exit_code == 2 and "--validation-fold must be below 5" in refused.output
