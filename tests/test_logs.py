"""The impression-log loader (docs/data-schema.md): validation by reason, strict vs drop, CSV/Parquet, slot
derivation and order, IO, manifests."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import build_market, random_day_log

from model.contract import SLOTS_PER_DAY
from training.market.dataset import FORMAT, MANIFEST, Market, MarketError
from training.market.logs import read_frame, read_log, write_day
from training.market.schema import InvalidRowsError, SchemaError, split_days, validate_frame


def good_rows(n: int = 6, day: int = 0) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "day": [day] * n,
            "slot": [t % 3 for t in range(n)],
            "utility": [1.0 + t for t in range(n)],
            "market_price": [0.5 + t for t in range(n)],
            "delivery": [0.0, 2.0] * (n // 2),
        }
    )


def with_bad_rows() -> tuple[pd.DataFrame, dict[str, int]]:
    """Six good rows plus one row per reason, and one row bad twice (counted once, by its first reason)."""
    bad = pd.DataFrame(
        [
            {"day": 0, "slot": 1, "utility": np.nan, "market_price": 1.0, "delivery": 0.0},
            {"day": 0, "slot": 1, "utility": 1.0, "market_price": -0.1, "delivery": 0.0},
            {"day": 0, "slot": 48, "utility": 1.0, "market_price": 1.0, "delivery": 0.0},
            {"day": 0, "slot": -1, "utility": 1.0, "market_price": 1.0, "delivery": 0.0},
            {"day": 0, "slot": 2.5, "utility": 1.0, "market_price": 1.0, "delivery": 0.0},
            {"day": 0, "slot": 1, "utility": 0.0, "market_price": 1.0, "delivery": 0.0},
            {"day": 0, "slot": 1, "utility": 1.0, "market_price": 1.0, "delivery": -2.0},
            {"day": 0.5, "slot": 1, "utility": 1.0, "market_price": 1.0, "delivery": 0.0},
            {"day": 0, "slot": 1, "utility": "abc", "market_price": 1.0, "delivery": 0.0},
            # Both a negative utility and a negative price: one row, one count, under the first check.
            {"day": 0, "slot": 1, "utility": -1.0, "market_price": -1.0, "delivery": 0.0},
        ]
    )
    expected = {
        "utility missing or not a finite number": 2,
        "market_price < 0": 1,
        f"slot outside 0..{SLOTS_PER_DAY - 1}": 2,
        "slot not an integer": 1,
        "utility <= 0": 2,
        "delivery < 0": 1,
        "day not an integer": 1,
    }
    frame = pd.concat([good_rows(), bad], ignore_index=True)
    return frame, expected


def test_each_bad_row_is_counted_once_under_its_reason():
    frame, expected = with_bad_rows()
    valid, report = validate_frame(frame)
    assert dict(report.reasons) == expected
    assert report.n_rows == len(frame)
    assert report.n_invalid == sum(expected.values()) == len(frame) - 6
    assert report.n_valid == len(valid) == 6
    pd.testing.assert_series_equal(valid["utility"], good_rows()["utility"], check_names=False)
    assert report.to_dict()["n_invalid"] == report.n_invalid
    for reason in expected:
        assert reason in report.describe()


def test_cost_is_optional_defaults_to_market_price_and_is_validated():
    frame = good_rows()
    valid, _ = validate_frame(frame)
    np.testing.assert_array_equal(valid["cost"], valid["market_price"])
    valid, report = validate_frame(frame.assign(cost=[0.1, 0.2, -0.3, 0.4, np.nan, 0.6]))
    assert dict(report.reasons) == {"cost < 0": 1, "cost missing or not a finite number": 1}
    np.testing.assert_array_equal(valid["cost"], [0.1, 0.2, 0.4, 0.6])


def test_strict_read_raises_with_every_reason_and_drop_reports(tmp_path: Path):
    frame, expected = with_bad_rows()
    path = tmp_path / "log.csv"
    frame.to_csv(path, index=False)
    with pytest.raises(InvalidRowsError) as caught:
        read_log(path)
    assert caught.value.report.reasons == expected
    for reason in expected:
        assert reason in str(caught.value)
    assert str(path) in str(caught.value)
    days, report = read_log(path, on_invalid="drop")
    assert list(days) == [0]
    assert days[0].n_impressions == 6
    assert dict(report.reasons) == expected
    with pytest.raises(ValueError, match="on_invalid"):
        read_log(path, on_invalid="ignore")


def test_missing_columns_are_named(tmp_path: Path):
    frame = good_rows().drop(columns=["utility", "slot"])
    with pytest.raises(SchemaError) as caught:
        validate_frame(frame, source="x.csv")
    message = str(caught.value)
    assert "x.csv" in message and "utility" in message and "slot (or timestamp)" in message
    assert "market_price" not in message.split(";")[0]
    path = tmp_path / "bad.parquet"
    good_rows().drop(columns=["delivery"]).to_parquet(path)
    with pytest.raises(SchemaError, match="delivery"):
        read_log(path)


def test_csv_and_parquet_read_the_same(tmp_path: Path):
    frame = pd.concat([good_rows(day=3), good_rows(day=1)], ignore_index=True)
    frame.to_csv(tmp_path / "log.csv", index=False)
    frame.to_csv(tmp_path / "log.csv.gz", index=False)
    frame.to_parquet(tmp_path / "log.parquet")
    from_csv, _ = read_log(tmp_path / "log.csv")
    from_gz, _ = read_log(tmp_path / "log.csv.gz")
    from_parquet, _ = read_log(tmp_path / "log.parquet")
    assert list(from_csv) == list(from_parquet) == list(from_gz) == [1, 3]
    for day in (1, 3):
        pd.testing.assert_frame_equal(from_csv[day].to_frame(), from_parquet[day].to_frame())
        pd.testing.assert_frame_equal(from_csv[day].to_frame(), from_gz[day].to_frame())


def test_unreadable_paths(tmp_path: Path):
    with pytest.raises(FileNotFoundError):
        read_frame(tmp_path / "none.csv")
    (tmp_path / "log.json").write_text("{}")
    with pytest.raises(SchemaError, match="unknown log format"):
        read_frame(tmp_path / "log.json")
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "text.parquet").write_text("day,slot\n1,2\n")
    for name in ("empty.csv", "text.parquet"):  # the file is named: one bad file among many is found
        with pytest.raises(SchemaError, match=f"{name}: cannot be read"):
            read_frame(tmp_path / name)


def test_numeric_timestamps_give_slots_and_arrival_order():
    # Seconds since midnight; listed out of order, with a tie (equal stamps keep file order).
    frame = pd.DataFrame(
        {
            "day": [0, 0, 0, 0, 0],
            "timestamp": [3600.0 * 13 + 5, 60.0, 1799.0, 1800.0, 60.0],
            "utility": [1.0, 2.0, 3.0, 4.0, 5.0],
            "market_price": [1.0] * 5,
            "delivery": [0.0] * 5,
        }
    )
    valid, report = validate_frame(frame)
    assert report.n_invalid == 0
    assert list(valid["utility"]) == [2.0, 5.0, 3.0, 4.0, 1.0]
    assert list(valid["slot"]) == [0, 0, 0, 1, 26]


def test_datetime_timestamps_and_unparseable_ones():
    frame = pd.DataFrame(
        {
            "day": [0, 0, 0, 0],
            "timestamp": ["2024-05-01 23:59:59", "2024-05-01 00:30:00", "not a time", "2024-05-01 00:29:59"],
            "utility": [1.0, 2.0, 3.0, 4.0],
            "market_price": [1.0] * 4,
            "delivery": [0.0] * 4,
        }
    )
    valid, report = validate_frame(frame)
    assert dict(report.reasons) == {"timestamp missing or unparseable": 1}
    assert list(valid["utility"]) == [4.0, 2.0, 1.0]
    assert list(valid["slot"]) == [0, 1, 47]


def test_days_are_slot_ordered_with_arrival_order_kept_within_a_slot():
    frame = pd.DataFrame(
        {
            "day": [5, 5, 5, 5, 5, 2],
            "slot": [7, 0, 7, 0, 47, 3],
            "utility": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
            "market_price": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6],
            "delivery": [1.0, 0.0, 3.0, 0.0, 5.0, 6.0],
        }
    )
    valid, _ = validate_frame(frame)
    days = split_days(valid)
    assert list(days) == [2, 5]
    day = days[5]
    np.testing.assert_array_equal(day.utility, [2.0, 4.0, 1.0, 3.0, 5.0])
    np.testing.assert_array_equal(day.market_price, [0.2, 0.4, 0.1, 0.3, 0.5])
    np.testing.assert_array_equal(day.slot, [0, 0, 7, 7, 47])
    assert len(day.slot_offsets) == SLOTS_PER_DAY + 1
    assert day.slot_rows(7) == slice(2, 4)
    assert day.slot_rows(1) == slice(2, 2)


def test_write_day_round_trip_is_exact_and_narrows_only_when_lossless(tmp_path: Path, rng: np.random.Generator):
    exact = random_day_log(rng, n=2000, day=4)  # float32-representable values
    write_day(exact, tmp_path / "exact.parquet")
    schema = pq.read_schema(tmp_path / "exact.parquet")
    assert {schema.field(c).type for c in ("utility", "market_price", "delivery", "cost")} == {pa.float32()}
    back, report = read_log(tmp_path / "exact.parquet")
    assert report.n_invalid == 0
    pd.testing.assert_frame_equal(back[4].to_frame(), exact.to_frame())
    np.testing.assert_array_equal(back[4].slot_offsets, exact.slot_offsets)

    # Values float32 cannot hold stay float64, bit for bit.
    wide = random_day_log(rng, n=500, day=4)
    fine = wide.utility * (1 + 1e-12)
    wide = replace(wide, utility=fine)
    write_day(wide, tmp_path / "wide.parquet")
    schema = pq.read_schema(tmp_path / "wide.parquet")
    assert schema.field("utility").type == pa.float64()
    assert schema.field("market_price").type == pa.float32()
    back, _ = read_log(tmp_path / "wide.parquet")
    np.testing.assert_array_equal(back[4].utility, fine)


def make_market(root: Path, **kwargs) -> Market:
    root.mkdir(parents=True)  # build_market (conftest) does not create its directory
    return build_market(root, **kwargs)


def test_market_manifest_round_trip(tmp_path: Path):
    built = make_market(tmp_path / "m", n_days=6, n=400)
    opened = Market.open(tmp_path / "m")
    assert [d.to_dict() for d in opened.days] == [d.to_dict() for d in built.days]
    assert opened.source == built.source
    assert [d.day for d in opened.split("train")] == [0, 1]
    assert [d.day for d in opened.split("ood")] == [4, 5]
    log = opened.load(3)
    assert log.day == 3 and log.n_impressions == 400
    assert opened.fingerprint(3) == opened.fingerprint(3) != opened.fingerprint(2)


def test_market_errors(tmp_path: Path):
    with pytest.raises(MarketError, match=MANIFEST):
        Market.open(tmp_path / "nothing")
    root = tmp_path / "m"
    make_market(root, n_days=3, n=200)
    manifest = json.loads((root / MANIFEST).read_text())

    (root / MANIFEST).write_text("{not json")
    with pytest.raises(MarketError, match="not valid JSON"):
        Market.open(root)

    (root / MANIFEST).write_text(json.dumps({**manifest, "format": "rcb-market/0"}))
    with pytest.raises(MarketError, match=FORMAT):
        Market.open(root)

    days = [dict(d) for d in manifest["days"]]
    days[1]["split"] = "validation"
    (root / MANIFEST).write_text(json.dumps({**manifest, "days": days}))
    with pytest.raises(MarketError, match="validation"):
        Market.open(root)

    days = [dict(d) for d in manifest["days"]]
    del days[0]["mc"]
    (root / MANIFEST).write_text(json.dumps({**manifest, "days": days}))
    with pytest.raises(MarketError, match="malformed"):
        Market.open(root)

    (root / MANIFEST).write_text(json.dumps(manifest))
    market = Market.open(root)
    with pytest.raises(MarketError, match="unknown split"):
        market.split("valid")
    with pytest.raises(MarketError, match="no day 9"):
        market.load(9)
    # A day file holding another day's rows is caught on load.
    (root / market.entry(1).file).write_bytes((root / market.entry(0).file).read_bytes())
    with pytest.raises(MarketError, match="expected rows of day 1"):
        market.load(1)
