"""The auction market: second price against the highest competing bid, budgets that stop a bidder, pacing that
reacts to its own spend, prices that follow the competition, determinism, and logs in the project's schema."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from rcb.cli import app
from training.market.auction import (
    DESCRIPTION,
    AuctionConfig,
    draw_population,
    pace,
    run_auctions,
    simulate_day,
    write_logs,
)
from training.market.logs import read_frame
from training.market.schema import REQUIRED_COLUMNS, validate_frame

runner = CliRunner()

TINY = AuctionConfig(days=3, impressions_per_day=6_000, agents=12, seed=5)


@pytest.fixture(scope="module")
def tiny_day():
    return simulate_day(1, TINY)


def test_price_is_the_highest_competing_bid_and_the_winner_pays_the_second():
    bids = np.array([[1.0, 3.0, 2.0], [0.5, 0.2, 0.1], [0.05, 0.01, 0.0], [4.0, 4.5, 0.0]])
    got = run_auctions(bids, reserve=0.3, remaining=np.full(3, np.inf))
    np.testing.assert_array_equal(got.market_price, [3.0, 0.5, 0.3, 4.5])
    np.testing.assert_array_equal(got.winner, [1, 0, -1, 1])  # row 2: no bid above the reserve, unsold
    np.testing.assert_array_equal(got.cost, [2.0, 0.3, 0.0, 4.0])  # second price, at least the reserve


def test_a_bidder_stops_at_the_first_win_that_would_overspend():
    bids = np.array([[5.0, 1.0], [5.0, 2.0], [5.0, 3.0], [5.0, 1.5]])
    got = run_auctions(bids, reserve=0.0, remaining=np.array([3.5, np.inf]))
    # bidder 0 pays 1 then 2 (3 <= 3.5); its third win would cost 3 more, so it stops and bidder 1 takes the rest
    np.testing.assert_array_equal(got.winner, [0, 0, 1, 1])
    assert got.stopped_at[0] == 2
    assert got.cost[got.winner == 0].sum() <= 3.5
    np.testing.assert_array_equal(got.market_price, [5.0, 5.0, 3.0, 1.5])


def test_pacing_lowers_the_bid_of_an_overspender_and_raises_an_underspender():
    budget = np.full(4, 100.0)
    target = np.full(4, 1.0)
    multiplier = np.ones(4)
    planned = np.full(4, 20.0)
    spend = np.array([40.0, 5.0, 20.0, 5.0])  # ahead of plan, behind, on plan, behind
    won = np.array([80.0, 10.0, 10.0, 2.0])  # ROI 2, 2, 0.5, 0.4
    nxt = pace(multiplier, spend, planned, won, budget, target, gain=np.full(4, 0.3))
    assert nxt[0] < 1.0  # overspends: down, whatever its ROI
    assert nxt[1] > 1.0  # behind plan with ROI above target: up
    assert nxt[2] < 1.0 and nxt[3] < 1.0  # ROI below target: down, even behind plan


def test_competitors_pace_slot_by_slot_from_their_own_spend(tiny_day):
    """In the simulation, a competitor that has spent ahead of its plan bids lower in the next slot."""
    day = tiny_day
    slack = 0.5 * day.budget / 48
    ahead = day.spend > day.planned + slack  # (slot, competitor)
    lowered = day.multiplier[1:] < day.multiplier[:-1]
    at_floor = np.isclose(day.multiplier[1:], 0.05 / draw_population(TINY).roi_target)
    bidding = day.present & (np.arange(48)[:, None] < day.out_slot[None, :])  # out of budget: out for the day
    checked = ahead & bidding & ~at_floor
    assert checked.sum() > 5
    assert lowered[checked].all()
    out = day.out_slot < 48
    assert out.any() and all(np.ptp(day.multiplier[day.out_slot[k] + 1 :, k]) == 0 for k in np.flatnonzero(out))
    assert np.all(day.spend[-1] <= day.budget + 1e-9)  # a bidder never spends past its budget
    moving = np.ptp(day.multiplier[:, day.present], axis=0) > 0
    assert moving.mean() > 0.5


def test_prices_follow_the_competitions_budgets():
    """The same population with budgets a tenth as large paces its bids down: our campaign faces lower prices."""
    rich = AuctionConfig(days=1, impressions_per_day=6_000, agents=12, seed=5, budget_share=(2.0, 2.0))
    poor = replace(rich, budget_share=(0.1, 0.1))
    price_rich = simulate_day(0, rich).log.market_price
    price_poor = simulate_day(0, poor).log.market_price
    assert np.median(price_poor) < 0.7 * np.median(price_rich)


def test_days_are_deterministic_and_independent_of_the_day_count(tiny_day):
    again = simulate_day(1, replace(TINY, days=9))
    np.testing.assert_array_equal(again.log.market_price, tiny_day.log.market_price)
    np.testing.assert_array_equal(again.log.delivery, tiny_day.log.delivery)
    other = simulate_day(1, replace(TINY, seed=6))
    assert other.log.n_impressions != tiny_day.log.n_impressions or not np.array_equal(
        other.log.utility, tiny_day.log.utility
    )


def test_deliveries_are_sparse_whole_conversions_and_utility_predicts_them(tiny_day):
    log = tiny_day.log
    conversions = log.delivery / TINY.conversion_value
    np.testing.assert_array_equal(conversions, np.round(conversions))
    assert 0 < np.mean(log.delivery > 0) < 0.05
    np.testing.assert_array_equal(log.cost, log.market_price)
    # utility is a noisy, mean-one prediction of the expected delivery
    assert log.utility.sum() == pytest.approx(tiny_day.expected_delivery.sum(), rel=0.05)
    assert np.corrcoef(np.log(log.utility), np.log(tiny_day.expected_delivery))[0, 1] > 0.8


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_written_logs_validate_against_the_schema(tmp_path: Path, fmt: str):
    description = write_logs(tmp_path / "logs", TINY, days_per_file=2, fmt=fmt)
    assert len(description["files"]) == 2 and len(description["days"]) == TINY.days
    days = set()
    for name in description["files"]:
        frame = read_frame(tmp_path / "logs" / name)
        assert {*REQUIRED_COLUMNS, "slot", "cost"} <= set(frame.columns)
        valid, report = validate_frame(frame, source=name)
        assert report.n_invalid == 0 and len(valid) == len(frame)
        days.update(valid["day"].unique().tolist())
    assert days == set(range(TINY.days))
    written = json.loads((tmp_path / "logs" / DESCRIPTION).read_text())
    assert written["config"]["seed"] == TINY.seed


def test_logs_import_as_a_market_with_the_days_simulated(tmp_path: Path):
    """Round trip through `rcb market import --format rcb`: the market holds the simulated days row for row."""
    from training.market.dataset import Market
    from training.market.importers import SUPPORTED_FORMATS

    if "rcb" not in SUPPORTED_FORMATS:
        pytest.skip("this checkout's importer has no rcb format")
    logs, out = tmp_path / "logs", tmp_path / "market"
    simulated = runner.invoke(
        app,
        [
            *("market", "simulate-auction", "--out", str(logs), "--days", "3", "--impressions-per-day", "6000"),
            *("--agents", "12", "--seed", "5", "--days-per-file", "2", "--json"),
        ],
    )
    assert simulated.exit_code == 0, simulated.output
    imported = runner.invoke(app, ["market", "import", "--format", "rcb", str(logs), "--out", str(out)])
    assert imported.exit_code == 0, imported.output
    market = Market.open(out)
    assert sorted(d.day for d in market.days) == [0, 1, 2]
    day = simulate_day(1, TINY).log
    loaded = market.load(1)
    np.testing.assert_array_equal(loaded.slot_offsets, day.slot_offsets)
    for column in ("utility", "market_price", "delivery", "cost"):
        np.testing.assert_array_equal(getattr(loaded, column), getattr(day, column))


def test_cli_refuses_a_directory_it_did_not_write(tmp_path: Path):
    (tmp_path / "notes.txt").write_text("mine")
    result = runner.invoke(app, ["market", "simulate-auction", "--out", str(tmp_path), "--days", "1"])
    assert result.exit_code == 2 and "not empty" in result.output
    logs = tmp_path / "logs"
    args = ["market", "simulate-auction", "--out", str(logs), "--days", "1", "--impressions-per-day", "2000"]
    assert runner.invoke(app, args).exit_code == 0
    again = runner.invoke(app, args)
    assert again.exit_code == 2 and "--force" in again.output
    assert runner.invoke(app, [*args, "--force", "--format", "csv"]).exit_code == 0
    assert sorted(p.name for p in logs.iterdir()) == ["auction.json", "auction_day_000.csv"]
