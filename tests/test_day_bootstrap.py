"""training/replay/day_bootstrap.py: Poisson(1) resamples of a logged day for training's collection."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from model.contract import Setting
from rcb.cli import app
from training.bidders.rm import ConstantRatio
from training.market.dataset import Market
from training.market.schema import DayLog
from training.replay.day_bootstrap import bootstrap_index, bootstrap_log
from training.replay.dayset import DaySet, split_validation
from training.replay.simulator import DayIndex
from training.rl import loop
from training.rl.loop import play_days


def small_day(counts: list[int], seed: int = 0) -> DayLog:
    """A day whose slot ``t`` holds ``counts[t]`` rows with distinct utilities (so rows can be traced)."""
    rng = np.random.default_rng(seed)
    n = sum(counts)
    return DayLog(
        day=7,
        utility=np.arange(1, n + 1, dtype=np.float64),
        market_price=rng.uniform(0.1, 2.0, n),
        delivery=(rng.random(n) < 0.1).astype(np.float64),
        cost=rng.uniform(0.1, 2.0, n),
        slot_offsets=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
    )


def test_a_resample_copies_rows_within_their_slots_and_in_arrival_order():
    log = small_day([5, 0, 8, 3, 0])  # empty slots inside and at the end
    source_slot = dict(zip(log.utility.tolist(), log.slot.tolist(), strict=True))
    for seed in range(20):
        resampled = bootstrap_log(log, np.random.default_rng(seed))
        assert resampled.day == log.day and len(resampled.slot_offsets) == len(log.slot_offsets)
        assert np.all(np.diff(resampled.slot_offsets) >= 0) and resampled.slot_offsets[-1] == resampled.n_impressions
        # every row is a copy of a logged row, in the logged row's slot, and rows keep their arrival order
        rows = resampled.utility.astype(int) - 1
        assert [source_slot[u] for u in resampled.utility.tolist()] == resampled.slot.tolist()
        assert np.all(np.diff(rows) >= 0)
        for column in ("market_price", "delivery", "cost"):
            np.testing.assert_array_equal(getattr(resampled, column), getattr(log, column)[rows])
        assert np.diff(resampled.slot_offsets)[[1, 4]].tolist() == [0, 0]


def test_resamples_are_drawn_from_the_generator_and_centred_on_the_day():
    log = small_day([400, 300, 300])
    same = [bootstrap_log(log, np.random.default_rng(3)) for _ in range(2)]
    np.testing.assert_array_equal(same[0].utility, same[1].utility)
    rng = np.random.default_rng(0)
    draws = [bootstrap_log(log, rng) for _ in range(400)]
    assert len({d.n_impressions for d in draws}) > 10  # each draw is new luck
    counts = np.array([np.diff(d.slot_offsets) for d in draws])
    np.testing.assert_allclose(counts.mean(axis=0), [400, 300, 300], rtol=0.02)
    # Poisson(1) copies: a slot's count varies as a fresh Poisson draw of the same size would
    np.testing.assert_allclose(counts.var(axis=0), [400, 300, 300], rtol=0.25)
    delivered = np.array([d.delivery.sum() for d in draws])
    assert abs(delivered.mean() - log.delivery.sum()) < 3 * delivered.std() / np.sqrt(len(draws))


def tied_day(counts: list[int], seed: int = 0) -> DayLog:
    """A day whose critical ratios repeat (prices a few multiples of the utility): ties a sort must break alike."""
    day = small_day(counts, seed)
    levels = np.random.default_rng(seed + 1).choice([0.5, 1.0, 1.25], day.n_impressions)
    return DayLog(day.day, day.utility, day.utility * levels, day.delivery, day.cost, day.slot_offsets)


INDEX_ARRAYS = ("segment_offsets", "order", "critical", "prefix_delivery", "prefix_cost", "auctions", "bucket_auctions")


@pytest.mark.parametrize("make_day", [small_day, tied_day])
def test_the_resampled_index_is_the_index_of_the_resample(make_day):
    log = make_day([50, 0, 80, 30, *[5] * 44])  # 48 slots, one empty
    logged = DayIndex(log)
    ratios = np.array([0.3, 0.5, 1.0, 1.25, 2.0, 40.0, 4000.0])
    for seed in range(10):
        fast = bootstrap_index(logged, np.random.default_rng(seed))
        slow = DayIndex(bootstrap_log(log, np.random.default_rng(seed)))  # the same draw, indexed from scratch
        for column in ("utility", "market_price", "delivery", "cost", "slot_offsets"):
            np.testing.assert_array_equal(getattr(fast.log, column), getattr(slow.log, column))
        for name in (*INDEX_ARRAYS, "bucket"):
            np.testing.assert_array_equal(getattr(fast, name), getattr(slow, name), err_msg=name)
        for t in range(48):
            a, b = fast.slot_outcome(t, ratios), slow.slot_outcome(t, ratios)
            np.testing.assert_array_equal(a.delivery, b.delivery)
            np.testing.assert_array_equal(a.wins, b.wins)
            scans = fast.slot_scan(t, 1.0, 3.0), slow.slot_scan(t, 1.0, 3.0)
            for field in ("delivery", "cost", "wins", "auctions", "total_cost", "exhausted"):
                np.testing.assert_array_equal(*(getattr(scan, field) for scan in scans))
    # the logged day's index is untouched
    np.testing.assert_array_equal(logged.order, DayIndex(log).order)


def test_a_bucketed_index_is_resampled_from_scratch_and_bad_counts_are_refused():
    log = tied_day([20] * 48)
    fast = bootstrap_index(DayIndex(log, buckets=3), np.random.default_rng(4))
    slow = DayIndex(bootstrap_log(log, np.random.default_rng(4)), buckets=3)
    for name in (*INDEX_ARRAYS, "bucket"):
        np.testing.assert_array_equal(getattr(fast, name), getattr(slow, name), err_msg=name)
    with pytest.raises(ValueError, match="one bucket"):
        DayIndex(log, buckets=3).resampled(log, np.ones(log.n_impressions, dtype=np.int64))
    with pytest.raises(ValueError, match="one count per impression"):
        DayIndex(log).resampled(log, np.full(log.n_impressions, 2))
    copies = np.zeros(log.n_impressions, dtype=np.int64)
    copies[0] = log.n_impressions  # as many rows as the day, all in slot 0: not the logged slots' copies
    with pytest.raises(ValueError, match="slots do not hold the copies"):
        DayIndex(log).resampled(log, copies)


def test_collection_replays_resampled_days_with_the_logged_days_normalizer(tiny_market: Market):
    days = DaySet.load(tiny_market, "train", Setting.SC)
    chosen = np.arange(len(days))
    bidder = ConstantRatio(1.2)
    plain, plain_oracle = play_days(bidder, days, chosen, repeats=2, seed=5)
    resampled, oracle = play_days(bidder, days, chosen, repeats=2, seed=5, bootstrap=True)
    again, _ = play_days(bidder, days, chosen, repeats=2, seed=5, bootstrap=True)
    other, _ = play_days(bidder, days, chosen, repeats=2, seed=6, bootstrap=True)
    np.testing.assert_array_equal(resampled.cost, again.cost)  # drawn from the seed
    assert not np.allclose(resampled.cost, plain.cost) and not np.allclose(resampled.cost, other.cost)
    # one resample a day per call: a day's episodes replay the same resample (a constant ratio plays it alike)
    half = len(chosen)
    np.testing.assert_array_equal(resampled.cost[:half], resampled.cost[half:])
    np.testing.assert_array_equal(oracle, plain_oracle)  # D* stays the logged day's
    np.testing.assert_array_equal(resampled.history.registration.roi_target, plain.history.registration.roi_target)
    # the logged days themselves are untouched: a plain replay after the resampled one equals the first
    np.testing.assert_array_equal(play_days(bidder, days, chosen, repeats=2, seed=5)[0].cost, plain.cost)
    # the days out of order: each episode replays its own day's resample (by day, not by position)
    subset = chosen[::-1]
    picked, _ = play_days(bidder, days, subset, repeats=1, seed=5, bootstrap=True)
    np.testing.assert_array_equal(picked.cost, resampled.cost[subset])


def test_train_records_bootstrap_days_and_a_resumed_run_keeps_it(
    tiny_market: Market, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    resampled: list[int] = []  # the days training resampled, in order

    def spy(index: DayIndex, rng: np.random.Generator) -> DayIndex:
        resampled.append(index.day)
        return bootstrap_index(index, rng)

    monkeypatch.setattr(loop, "bootstrap_index", spy)
    out = tmp_path / "run"
    args = ["train", "--data", str(tiny_market.root), "--setting", "sc", "--algo", "crl", "--out", str(out)]
    fast = ["--updates-per-epoch", "2", "--json"]
    result = CliRunner().invoke(app, [*args, "--epochs", "1", *fast, "--bootstrap-days"])
    assert result.exit_code == 0, result.output
    # one resample of each train day the epoch collected from; the validation days are played as logged
    days = DaySet.load(tiny_market, "train", Setting.SC)
    learn, _ = split_validation(days)
    assert sorted(resampled) == sorted(days.logs[i].day for i in learn)
    assert json.loads((out / "run.json").read_text())["config"]["bootstrap_days"] is True
    result = CliRunner().invoke(app, [*args, "--epochs", "2", *fast, "--resume"])
    assert result.exit_code == 0, result.output
    body = json.loads((out / "run.json").read_text())
    assert body["config"]["bootstrap_days"] is True and len(body["history"]) == 2
