"""`rcb market import --format rcb`, constraints files and `--delivery`, on logs built here (deterministic).

The logs are made in each test from a seeded generator: every row's utility is distinct, so a test can tell where
each row ended up (merging files, ordering by timestamp).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from cli_checks import assert_one_line_error
from typer.testing import CliRunner

from rcb.cli import app
from rcb.commands.market_import import Delivery, LogFormat
from training.market.constraints import curve_of, draw_market_constraints
from training.market.dataset import MANIFEST, Market
from training.market.importers import DELIVERY_MODES, SUPPORTED_FORMATS, import_market
from training.market.importers.constraints_file import UNUSED_REASON
from training.market.importers.rcb_logs import TIMESTAMP_RANGE
from training.market.schema import SchemaError
from training.replay.simulator import DayIndex

FIXTURES = Path(__file__).parent / "fixtures"
CBRL = FIXTURES / "cbrl_syn"
AUCTIONNET = FIXTURES / "auctionnet"

runner = CliRunner()


def schema_rows(rng: np.random.Generator, day: int, n: int, timed: bool = False) -> pd.DataFrame:
    """``n`` valid impressions of ``day`` in the schema, with ``timestamp`` (seconds of the day) or ``slot``."""
    seconds = np.round(rng.uniform(0, 86400, n), 3)
    utility = np.round(rng.uniform(0.05, 1.0, n), 6)
    frame = pd.DataFrame(
        {
            "day": day,
            "utility": utility,
            "market_price": np.round(utility * rng.lognormal(0.0, 0.5, n), 6),
            "delivery": np.round(np.where(rng.random(n) < 0.5, utility * rng.uniform(1.0, 3.0, n), 0.0), 6),
        }
    )
    if timed:
        frame.insert(1, "timestamp", seconds)
    else:
        frame.insert(1, "slot", (seconds // 1800).astype(int))
    return frame


def expected_day(parts: list[pd.DataFrame], day: int) -> pd.DataFrame:
    """What the importer must make of ``day``: the parts in file order, timestamp order where given, slot order."""
    rows = pd.concat([p[p["day"] == day] for p in parts], ignore_index=True)
    if "timestamp" in rows.columns:
        rows = rows.sort_values("timestamp", kind="stable", ignore_index=True)
        rows["slot"] = np.floor(rows["timestamp"] / 1800).astype(int)
    return rows.sort_values("slot", kind="stable", ignore_index=True)


def assert_day_is(market: Market, day: int, expected: pd.DataFrame) -> None:
    log = market.load(day)
    np.testing.assert_array_equal(log.slot, expected["slot"].to_numpy())
    np.testing.assert_array_equal(log.utility, expected["utility"].to_numpy())
    np.testing.assert_array_equal(log.market_price, expected["market_price"].to_numpy())
    np.testing.assert_array_equal(log.delivery, expected["delivery"].to_numpy())
    cost = expected["cost"] if "cost" in expected.columns else expected["market_price"]
    np.testing.assert_array_equal(log.cost, cost.to_numpy())


def day_digest(log) -> str:
    """A digest of a day's content (offsets and the float64 columns), independent of the Parquet writer."""
    digest = hashlib.sha256()
    for values in (log.slot_offsets.astype(np.int64), log.utility, log.market_price, log.delivery, log.cost):
        digest.update(np.ascontiguousarray(values).tobytes())
    return digest.hexdigest()[:16]


def write_constraints(path: Path, rows: dict[int, tuple[float, float]]) -> Path:
    frame = pd.DataFrame([{"day": d, "roi_target": r, "budget": b} for d, (r, b) in rows.items()])
    if path.suffix == ".parquet":
        frame.to_parquet(path, index=False)
    else:
        frame.to_csv(path, index=False)
    return path


# ----------------------------------------------------------------------------------------------------------------------
# Files, days and arrival order


def test_days_merge_across_csv_and_parquet_files_in_file_order(tmp_path: Path):
    rng = np.random.default_rng(1)
    src = tmp_path / "logs"
    src.mkdir()
    day1 = schema_rows(rng, 1, 300)
    # part-1.parquet: days 0, 1 (first half) and 2; part-2.csv: the rest of day 1 (the same slots again) and day 3.
    first = pd.concat([schema_rows(rng, 0, 200), day1.iloc[:150], schema_rows(rng, 2, 250)], ignore_index=True)
    second = pd.concat([day1.iloc[150:], schema_rows(rng, 3, 180)], ignore_index=True)
    first.to_parquet(src / "part-1.parquet", index=False)
    second.to_csv(src / "part-2.csv", index=False)

    summary = import_market("rcb", src, tmp_path / "m", seed=2, ood_days={3})
    market = Market.open(tmp_path / "m")
    assert [d.day for d in market.days] == [0, 1, 2, 3]
    assert (summary.n_rows, summary.n_kept, summary.invalid_rows) == (930, 930, {})
    for day in range(4):
        assert_day_is(market, day, expected_day([first, second], day))
    # Within a slot of day 1, every row of part-1 comes before every row of part-2 (file order).
    log = market.load(1)
    busiest = int(np.argmax(np.diff(log.slot_offsets)))
    from_first = set(day1.iloc[:150]["utility"])
    in_slot = [u in from_first for u in log.utility[log.slot_rows(busiest)]]
    assert in_slot == sorted(in_slot, reverse=True) and any(in_slot) and not all(in_slot)
    files = market.source["files"]
    assert files["part-1.parquet"]["days"] == [0, 1, 2] and files["part-2.csv"]["days"] == [1, 3]
    assert market.source["format"] == "rcb" and market.source["delivery"] == "realized"
    assert {d.day: d.split for d in market.days}[3] == "ood"


def test_slot_and_arrival_order_from_timestamps(tmp_path: Path):
    rng = np.random.default_rng(2)
    src = tmp_path / "logs"
    src.mkdir()
    day = schema_rows(rng, 4, 400, timed=True).sample(frac=1.0, random_state=3, ignore_index=True)  # shuffled
    edges = pd.DataFrame(  # the slot boundaries, and a tie with a row of the other file (file order breaks it)
        {
            "day": 4,
            "timestamp": [0.0, 1799.999, 1800.0, 86399.5, 1800.0],
            "utility": [0.11, 0.12, 0.13, 0.14, 0.15],
            "market_price": 0.1,
            "delivery": 0.0,
        }
    )
    a = pd.concat([day.iloc[:200], edges.iloc[:4]], ignore_index=True)
    b = pd.concat([edges.iloc[4:], day.iloc[200:]], ignore_index=True)
    a.to_csv(src / "a.csv", index=False)
    b.to_parquet(src / "b.parquet", index=False)

    import_market("rcb", src, tmp_path / "m")
    market = Market.open(tmp_path / "m")
    assert_day_is(market, 4, expected_day([a, b], 4))
    log = market.load(4)
    slot_of = dict(zip(log.utility, log.slot, strict=True))
    assert [slot_of[u] for u in (0.11, 0.12, 0.13, 0.14, 0.15)] == [0, 0, 1, 47, 1]
    slot1 = list(log.utility[log.slot_rows(1)])
    assert slot1.index(0.13) + 1 == slot1.index(0.15)  # the same second: a.csv's row first
    assert market.source["mapping"]["slot"] == "floor(timestamp / 1800)"


def test_a_day_mixing_rows_with_and_without_timestamps_is_refused(tmp_path: Path):
    rng = np.random.default_rng(3)
    src = tmp_path / "logs"
    src.mkdir()
    schema_rows(rng, 1, 20, timed=True).to_csv(src / "a.csv", index=False)
    schema_rows(rng, 1, 20).to_csv(src / "b.csv", index=False)
    with pytest.raises(SchemaError, match=r"day 1 has rows with a timestamp \(a.csv\) and rows without one \(b.csv\)"):
        import_market("rcb", src, tmp_path / "m")
    (src / "b.csv").unlink()
    schema_rows(rng, 2, 20).to_csv(src / "b.csv", index=False)  # another day: each day's order is defined
    assert [d.day for d in import_market("rcb", src, tmp_path / "m").days] == [1, 2]


def test_datetimes_are_refused_as_timestamps(tmp_path: Path):
    rng = np.random.default_rng(4)
    rows = schema_rows(rng, 1, 10, timed=True)
    stamped = rows.assign(timestamp=pd.Timestamp("2021-09-01") + pd.to_timedelta(rows["timestamp"], unit="s"))
    stamped.to_csv(tmp_path / "iso.csv", index=False)
    with pytest.raises(SchemaError, match=r"timestamp must be seconds since the day's midnight.*'2021-09-01"):
        import_market("rcb", tmp_path / "iso.csv", tmp_path / "m")
    stamped.to_parquet(tmp_path / "typed.parquet", index=False)
    with pytest.raises(SchemaError, match=r"seconds since the day's midnight.*datetime64"):
        import_market("rcb", tmp_path / "typed.parquet", tmp_path / "m")
    assert not (tmp_path / "m").exists()


def test_bad_rows_are_counted_by_reason(tmp_path: Path):
    rng = np.random.default_rng(5)
    src = tmp_path / "logs"
    src.mkdir()
    slotted = schema_rows(rng, 5, 40)
    slotted["cost"] = np.round(slotted["market_price"] * 0.9, 6)
    slotted.loc[0, "market_price"] = -1.0
    slotted.loc[1, "utility"] = np.nan
    slotted.loc[2, "slot"] = 48
    slotted.loc[3, "slot"] = -1
    slotted.loc[4, "delivery"] = -0.5
    slotted.loc[5, "cost"] = -2.0
    slotted.loc[6, "utility"] = 0.0
    slotted["day"] = slotted["day"].astype(float)
    slotted.loc[7, "day"] = 5.5
    slotted["slot"] = slotted["slot"].astype(float)
    slotted.loc[8, "slot"] = 2.5
    slotted.to_csv(src / "a.csv", index=False)
    timed = schema_rows(rng, 6, 30, timed=True).astype({"timestamp": object})
    timed.loc[0, "timestamp"] = 86400.0
    timed.loc[1, "timestamp"] = -1.0
    timed.loc[2, "timestamp"] = np.nan
    timed.loc[3, "timestamp"] = "noon-ish"  # text that is no date either: a bad row, not a refused file
    timed.to_csv(src / "b.csv", index=False)
    both = schema_rows(rng, 7, 20, timed=True)
    both["slot"] = (both["timestamp"] // 1800).astype(int)
    both.loc[0, "slot"] = (both.loc[0, "slot"] + 1) % 48
    both.to_parquet(src / "c.parquet", index=False)

    summary = import_market("rcb", src, tmp_path / "m")
    expected = {
        "market_price < 0": 1,
        "utility missing or not a finite number": 1,
        "slot outside 0..47": 2,
        "delivery < 0": 1,
        "cost < 0": 1,
        "utility <= 0": 1,
        "day not an integer": 1,
        "slot not an integer": 1,
        TIMESTAMP_RANGE: 2,
        "timestamp missing or not a number": 2,
        "slot does not match timestamp": 1,
    }
    assert summary.invalid_rows == expected
    assert (summary.n_rows, summary.n_kept) == (90, 90 - 14)
    market = Market.open(tmp_path / "m")
    assert market.source["invalid_rows"] == expected
    assert [d.n_impressions for d in market.days] == [31, 26, 19]
    np.testing.assert_array_equal(
        np.sort(market.load(5).cost), np.sort(slotted["cost"].to_numpy()[9:])
    )  # the cost column is imported, not replaced by market_price


def test_missing_columns_and_empty_sources(tmp_path: Path):
    rng = np.random.default_rng(6)
    rows = schema_rows(rng, 1, 10)
    rows.drop(columns=["market_price"]).to_csv(tmp_path / "a.csv", index=False)
    with pytest.raises(SchemaError, match=r"a.csv: missing column\(s\) market_price"):
        import_market("rcb", tmp_path / "a.csv", tmp_path / "m")
    rows.drop(columns=["slot"]).to_csv(tmp_path / "b.csv", index=False)
    with pytest.raises(SchemaError, match=r"missing column\(s\) slot \(or timestamp\)"):
        import_market("rcb", tmp_path / "b.csv", tmp_path / "m")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SchemaError, match="no log files"):
        import_market("rcb", tmp_path / "empty", tmp_path / "m")


# ----------------------------------------------------------------------------------------------------------------------
# MC constraints: the prior recipe, or a constraints file


@pytest.fixture
def four_days(tmp_path: Path) -> Path:
    rng = np.random.default_rng(7)
    src = tmp_path / "logs"
    src.mkdir()
    pd.concat([schema_rows(rng, d, 240) for d in range(4)], ignore_index=True).to_csv(src / "all.csv", index=False)
    return src


def test_constraints_are_drawn_by_the_prior_recipe_without_a_file(four_days: Path, tmp_path: Path):
    import_market("rcb", four_days, tmp_path / "m", seed=4)
    market = Market.open(tmp_path / "m")
    curves = {e.day: curve_of(DayIndex(market.load(e.day))) for e in market.days}
    drawn = draw_market_constraints(curves, {e.day: e.split for e in market.days}, seed=4)
    for entry in market.days:
        assert (entry.mc.roi_target, entry.mc.budget) == (drawn[entry.day].roi_target, drawn[entry.day].budget)
        assert entry.regime == drawn[entry.day].regime_fields()
    assert market.source["constraints"].startswith("drawn: prior recipe")


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_constraints_come_from_the_file(four_days: Path, tmp_path: Path, suffix: str):
    given = {0: (0.9, 120.0), 1: (1.1, 80.5), 2: (1.0, 64.25), 3: (1.25, 99.0), 17: (1.0, 10.0), 18: (1.0, 10.0)}
    path = write_constraints(tmp_path / f"mc{suffix}", given)
    summary = import_market("rcb", four_days, tmp_path / "m", constraints_file=path)
    market = Market.open(tmp_path / "m")
    assert {e.day: (e.mc.roi_target, e.mc.budget) for e in market.days} == {d: given[d] for d in range(4)}
    assert all(set(e.regime) == {"roi_reachable"} for e in market.days)
    record = market.source["constraints_file"]
    assert record["n_rows"] == 6 and record["n_used"] == 4
    assert record["left_out"] == {UNUSED_REASON: 2} and record["days_not_in_logs"] == [17, 18]
    assert summary.details["constraints_file"] == record
    assert market.source["constraints"] == f"from file {path} (roi_target, budget per day)"


def test_a_constraints_file_must_cover_every_day_and_be_well_formed(four_days: Path, tmp_path: Path):
    short = write_constraints(tmp_path / "short.csv", {0: (1.0, 50.0), 2: (1.0, 50.0)})
    with pytest.raises(ValueError, match=r"no row for day\(s\) \[1, 3\] of the logs"):
        import_market("rcb", four_days, tmp_path / "m", constraints_file=short)
    bad = tmp_path / "bad.csv"
    bad.write_text("day,roi_target,budget\n0,1.0,50\n1,,50\n2,1.0,0\n0,1.1,60\n2.5,1,1\n")
    with pytest.raises(SchemaError) as refused:
        import_market("rcb", four_days, tmp_path / "m", constraints_file=bad)
    message = str(refused.value)
    assert "row 2 (day 1): roi_target nan is not a positive number" in message
    assert "row 3 (day 2): budget 0 is not a positive number" in message
    assert "row 4: day 0 already given in row 1" in message and "and 1 more" in message
    (tmp_path / "cols.csv").write_text("day,L,B\n0,1,2\n")
    with pytest.raises(SchemaError, match=r"missing column\(s\) roi_target, budget"):
        import_market("rcb", four_days, tmp_path / "m", constraints_file=tmp_path / "cols.csv")
    full = write_constraints(tmp_path / "full.csv", {d: (1.0, 50.0) for d in range(4)})
    with pytest.raises(ValueError, match="give one"):
        import_market("rcb", four_days, tmp_path / "m", constraints_file=full, constraints="paper")
    with pytest.raises(ValueError, match="CPAConstraint and budget"):
        import_market("auctionnet", AUCTIONNET, tmp_path / "m", advertiser=12, constraints_file=full)
    assert not (tmp_path / "m").exists()


def test_cbrl_syn_takes_a_constraints_file_too(tmp_path: Path):
    path = write_constraints(tmp_path / "mc.csv", {901: (1.0, 30.0), 902: (0.8, 20.0), 903: (1.2, 25.0)})
    summary = import_market("cbrl-syn", CBRL, tmp_path / "m", constraints_file=path)
    assert {d.day: (d.mc.roi_target, d.mc.budget) for d in summary.days} == {
        901: (1.0, 30.0),
        902: (0.8, 20.0),
        903: (1.2, 25.0),
    }


# ----------------------------------------------------------------------------------------------------------------------
# --delivery


DIGESTS_BEFORE_DELIVERY = {
    "cbrl-syn": {901: "ddecf824fdcbc165", 902: "d0d3ea36b395546d", 903: "1f71c0b4fab6f241"},
    "auctionnet": {7: "ec786015f26761b8", 8: "9d919b412e27592d", 9: "9060821375369732"},
}
""":func:`day_digest` of the fixture days as the importers wrote them before ``--delivery`` existed."""


def test_default_delivery_keeps_the_imported_days(tmp_path: Path):
    cbrl = Market.open(import_market("cbrl-syn", CBRL, tmp_path / "c", seed=3, ood_days={903}).out)
    auctionnet = import_market("auctionnet", AUCTIONNET, tmp_path / "a", advertiser=12, value_per_conversion=30.0)
    for fmt, market in (("cbrl-syn", cbrl), ("auctionnet", Market.open(auctionnet.out))):
        assert {e.day: day_digest(market.load(e.day)) for e in market.days} == DIGESTS_BEFORE_DELIVERY[fmt]
        assert market.source["delivery"] == "realized"


def test_rcb_delivery_expected(tmp_path: Path):
    rng = np.random.default_rng(8)
    rows = schema_rows(rng, 1, 100)
    rows["expected_delivery"] = np.round(rows["utility"] * 1.5, 6)
    rows.to_csv(tmp_path / "with.csv", index=False)
    rows.drop(columns=["expected_delivery", "delivery"]).to_csv(tmp_path / "without.csv", index=False)
    realized = Market.open(import_market("rcb", tmp_path / "with.csv", tmp_path / "r").out).load(1)
    expected = Market.open(import_market("rcb", tmp_path / "with.csv", tmp_path / "e", delivery="expected").out)
    assert expected.source["delivery"] == "expected" and expected.source["mapping"]["delivery"] == "expected_delivery"
    order = np.argsort(rows["slot"].to_numpy(), kind="stable")
    np.testing.assert_array_equal(realized.delivery, rows["delivery"].to_numpy()[order])
    np.testing.assert_array_equal(expected.load(1).delivery, rows["expected_delivery"].to_numpy()[order])
    # Without an expected_delivery column, expected delivery is the utility; no delivery column is needed then.
    utility = Market.open(import_market("rcb", tmp_path / "without.csv", tmp_path / "u", delivery="expected").out)
    np.testing.assert_array_equal(utility.load(1).delivery, utility.load(1).utility)
    assert utility.source["mapping"]["delivery"] == "utility"
    with pytest.raises(SchemaError, match=r"missing column\(s\) delivery"):
        import_market("rcb", tmp_path / "without.csv", tmp_path / "x")
    rows.loc[0, "expected_delivery"] = -1.0
    rows.loc[1, "expected_delivery"] = np.nan
    rows.to_csv(tmp_path / "bad.csv", index=False)
    bad = import_market("rcb", tmp_path / "bad.csv", tmp_path / "b", delivery="expected")
    assert bad.invalid_rows == {"expected_delivery < 0": 1, "expected_delivery missing or not a finite number": 1}
    with pytest.raises(ValueError, match="unknown delivery 'hoped'"):
        import_market("rcb", tmp_path / "with.csv", tmp_path / "h", delivery="hoped")


def test_cbrl_delivery_expected_is_the_utility(tmp_path: Path):
    realized = Market.open(import_market("cbrl-syn", CBRL, tmp_path / "r", seed=3).out)
    summary = import_market("cbrl-syn", CBRL, tmp_path / "e", seed=3, delivery="expected")
    expected = Market.open(tmp_path / "e")
    assert summary.notes == {}  # rev is not read, so no missing rev is noted
    assert expected.source["mapping"]["delivery"] == "pctr * pppc" and expected.source["delivery"] == "expected"
    for day in (901, 902, 903):
        a, b = realized.load(day), expected.load(day)
        np.testing.assert_array_equal(b.delivery, b.utility)
        np.testing.assert_array_equal(a.utility, b.utility)  # the same rows, only what they deliver differs
        assert not np.array_equal(a.delivery, b.delivery)
    pd.read_csv(CBRL / "0901.csv").drop(columns="rev").to_csv(tmp_path / "0901.csv", index=False)
    assert import_market("cbrl-syn", tmp_path / "0901.csv", tmp_path / "n", delivery="expected").n_kept == 198
    with pytest.raises(SchemaError, match=r"missing column\(s\) rev"):
        import_market("cbrl-syn", tmp_path / "0901.csv", tmp_path / "x")


def test_auctionnet_delivery_expected_is_pvalue_times_v(tmp_path: Path):
    kwargs = {"advertiser": 12, "value_per_conversion": 30.0}
    realized = Market.open(import_market("auctionnet", AUCTIONNET, tmp_path / "r", **kwargs).out)
    import_market("auctionnet", AUCTIONNET, tmp_path / "e", delivery="expected", **kwargs)
    expected = Market.open(tmp_path / "e")
    assert expected.source["mapping"]["delivery"] == "pValue * V"
    for period in (7, 8, 9):
        raw = pd.read_csv(AUCTIONNET / f"period-{period}.csv").query("advertiserNumber == 12")
        raw = raw[raw["timeStepIndex"].between(0, 47) & (raw["pValue"] > 0) & (raw["leastWinningCost"] >= 0)]
        raw = raw.sort_values("pvIndex", kind="stable").sort_values("timeStepIndex", kind="stable")
        log = expected.load(period)
        np.testing.assert_array_equal(log.delivery, raw["pValue"].to_numpy() * 30.0)
        # Realized delivery is conversions only: zero wherever the logged advertiser did not convert.
        assert (realized.load(period).delivery > 0).sum() < (log.delivery > 0).sum() == log.n_impressions
    no_outcome = pd.read_csv(AUCTIONNET / "period-7.csv").drop(columns="conversionAction")
    no_outcome.to_csv(tmp_path / "period-7.csv", index=False)
    assert import_market("auctionnet", tmp_path / "period-7.csv", tmp_path / "n", delivery="expected", **kwargs).n_kept
    with pytest.raises(SchemaError, match=r"missing column\(s\) conversionAction"):
        import_market("auctionnet", tmp_path / "period-7.csv", tmp_path / "x", **kwargs)


# ----------------------------------------------------------------------------------------------------------------------
# A market read back in its own format


def test_a_market_reimported_in_its_own_format_is_the_same_market(tmp_path: Path):
    from training.market.generator import config_with, generate_market

    source = tmp_path / "generated"
    generate_market(source, config_with(days_id=2, days_ood=1, impressions_per_day=1500, seed=3), workers=1)
    market = Market.open(source)
    frames = [pd.read_parquet(source / e.file) for e in market.days]
    src = tmp_path / "logs"
    src.mkdir()
    pd.concat(frames[:2], ignore_index=True).to_parquet(src / "first-two.parquet", index=False)
    # float64 first: a float32 column would be written as its shortest float32 decimal, read back as another float64
    frames[2].astype({c: "float64" for c in ("utility", "market_price", "delivery", "cost")}).to_csv(
        src / "last.csv", index=False
    )
    mc = write_constraints(tmp_path / "mc.csv", {e.day: (e.mc.roi_target, e.mc.budget) for e in market.days})
    ood = {e.day for e in market.split("ood")}
    import_market("rcb", src, tmp_path / "again", constraints_file=mc, ood_days=ood)
    again = Market.open(tmp_path / "again")
    assert [(e.day, e.file, e.sha256, e.mc) for e in again.days] == [
        (e.day, e.file, e.sha256, e.mc) for e in market.days
    ]


# ----------------------------------------------------------------------------------------------------------------------
# The command line


def test_log_formats_and_delivery_modes_match_the_importers():
    assert sorted(f.value for f in LogFormat) == sorted(SUPPORTED_FORMATS)
    assert tuple(d.value for d in Delivery) == DELIVERY_MODES


def test_cli_refuses_bad_input_in_one_line(four_days: Path, tmp_path: Path):
    out = str(tmp_path / "m")
    base = ["market", "import", "--format", "rcb"]
    rows = pd.read_csv(four_days / "all.csv")
    rows.to_csv(four_days / "a.csv", index=False)  # a first, good file: the bad one is found before any bar
    rows.drop(columns=["utility"]).to_csv(four_days / "b.csv", index=False)
    assert_one_line_error(
        runner.invoke(app, [*base, str(four_days), "--out", out]), "b.csv", "missing column(s) utility"
    )
    (tmp_path / "empty").mkdir()
    assert_one_line_error(runner.invoke(app, [*base, str(tmp_path / "empty"), "--out", out]), "no log files")
    (four_days / "b.csv").unlink()
    (four_days / "a.csv").unlink()
    missing = ["--constraints-file", str(tmp_path / "absent.csv")]
    assert_one_line_error(runner.invoke(app, [*base, str(four_days), "--out", out, *missing]), "absent.csv")
    short = write_constraints(tmp_path / "short.csv", {0: (1.0, 5.0)})
    result = runner.invoke(app, [*base, str(four_days), "--out", out, "--constraints-file", str(short)])
    assert result.exit_code == 2 and "no row for day(s) [1, 2, 3]" in " ".join(result.stderr.split())
    both = [*base, str(four_days), "--out", out, "--constraints-file", str(short), "--constraints", "paper"]
    assert_one_line_error(runner.invoke(app, both), "give one")
    assert not (tmp_path / "m").exists()


def test_cli_imports_reports_and_evaluates_an_rcb_market(four_days: Path, tmp_path: Path):
    out = tmp_path / "m"
    mc = write_constraints(tmp_path / "mc.csv", {**{d: (1.0, 40.0) for d in range(4)}, 9: (1.0, 1.0)})
    args = ["market", "import", "--format", "rcb", str(four_days), "--seed", "1", "--constraints-file", str(mc)]
    result = runner.invoke(app, [*args, "--out", str(out), "--delivery", "expected", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["delivery"] == "expected" and summary["constraints_file"]["days_not_in_logs"] == [9]
    assert summary["days_per_split"]["train"] >= 1 and summary["days_per_split"]["test"] >= 1
    assert (out / MANIFEST).exists()

    table = runner.invoke(app, [*args, "--out", str(tmp_path / "t")])
    assert table.exit_code == 0, table.output
    text = " ".join(table.stdout.split())
    assert "(realized delivery)" in text and f"constraints file, left out: {UNUSED_REASON}" in text

    report = runner.invoke(app, ["market", "report", str(out), "--out", str(tmp_path / "report.png"), "--json"])
    assert report.exit_code == 0, report.output
    assert set(json.loads(report.stdout.strip().splitlines()[-1])["summary"]) >= {"train", "test"}
    evaluate = ["evaluate", str(out), "--setting", "mc", "--methods", "pid", "--seeds", "1"]
    played = runner.invoke(app, [*evaluate, "--out", str(tmp_path / "eval"), "--json"])
    assert played.exit_code == 0, played.output
    assert "pid" in json.loads(played.stdout)
