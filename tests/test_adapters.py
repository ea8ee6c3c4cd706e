"""`rcb market import`: the cbrl-syn and auctionnet adapters on the committed fixtures, and the CLI.

The fixtures and their deliberately bad rows are made by ``tests/fixtures/make_fixtures.py``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from rcb.commands.market_import import import_command, parse_days
from training.market import importers as adapters
from training.market.constraints import curve_of, draw_market_constraints, draw_paper_constraints
from training.market.dataset import MANIFEST, Market, file_sha256
from training.market.importers import SUPPORTED_FORMATS, import_market, split_assignment
from training.market.importers import auctionnet as auctionnet_importer
from training.market.importers import market as market_writer
from training.market.schema import SchemaError
from training.replay.simulator import DayIndex

FIXTURES = Path(__file__).parent / "fixtures"
CBRL = FIXTURES / "cbrl_syn"
AUCTIONNET = FIXTURES / "auctionnet"

CBRL_INVALID = {
    "utility missing or not a finite number": 1,  # 0901.csv row 10: empty pctr
    "market_price < 0": 1,  # 0901.csv row 20: costprice -150
    "hr not an integer in 0..23": 1,  # 0902.csv row 5: hr 24
    "utility <= 0": 1,  # 0902.csv row 15: pctr 0
    "min not an integer in 0..59": 1,  # 0903.csv row 7: min 75
}
CBRL_NOTE = "rev missing, read as 0 (reference convention: rev.fillna(0))"  # 0903.csv row 12

AUCTIONNET_INVALID = {  # all on advertiser 12
    "utility missing or not a finite number": 1,  # period 7: empty pValue
    "market_price < 0": 1,  # period 7: leastWinningCost -0.05
    "timeStepIndex not an integer in 0..47": 1,  # period 8: timeStepIndex 48
    "utility <= 0": 1,  # period 9: pValue 0
}


def cbrl_expected(path: Path) -> pd.DataFrame:
    """The schema's rows a reference day file should give, computed independently of the adapter."""
    raw = pd.read_csv(path)
    ok = raw["hr"].between(0, 23) & raw["min"].between(0, 59) & (raw["pctr"] > 0) & (raw["costprice"] >= 0)
    raw = raw[ok]
    frame = pd.DataFrame(
        {
            "slot": (raw["hr"] * 2 + raw["min"] // 30).astype(int),
            "utility": raw["pctr"] * raw["pppc"],
            "market_price": raw["costprice"] / 1000,
            "delivery": raw["rev"].fillna(0.0),
        }
    )
    return frame.sort_values("slot", kind="stable", ignore_index=True)


def assert_day_matches(log, expected: pd.DataFrame) -> None:
    np.testing.assert_array_equal(log.slot, expected["slot"].to_numpy())
    np.testing.assert_array_equal(log.utility, expected["utility"].to_numpy())
    np.testing.assert_array_equal(log.market_price, expected["market_price"].to_numpy())
    np.testing.assert_array_equal(log.delivery, expected["delivery"].to_numpy())
    np.testing.assert_array_equal(log.cost, expected["market_price"].to_numpy())


@pytest.fixture(scope="module")
def cbrl_market(tmp_path_factory: pytest.TempPathFactory) -> tuple[Market, adapters.ImportSummary]:
    out = tmp_path_factory.mktemp("cbrl") / "market"
    summary = import_market("cbrl-syn", CBRL, out, seed=3, ood_days={903})
    return Market.open(out), summary


@pytest.fixture(scope="module")
def auctionnet_market(tmp_path_factory: pytest.TempPathFactory) -> tuple[Market, adapters.ImportSummary]:
    out = tmp_path_factory.mktemp("auctionnet") / "market"
    summary = import_market("auctionnet", AUCTIONNET, out, advertiser=12, value_per_conversion=30.0, seed=1)
    return Market.open(out), summary


# ----------------------------------------------------------------------------------------------------------------------
# cbrl-syn


def test_cbrl_reports_every_invalid_row_by_reason(cbrl_market):
    market, summary = cbrl_market
    assert summary.invalid_rows == CBRL_INVALID
    assert summary.notes == {CBRL_NOTE: 1}
    assert (summary.n_rows, summary.n_kept, summary.n_invalid) == (600, 595, 5)
    assert market.source["invalid_rows"] == CBRL_INVALID
    assert market.source["notes"] == {CBRL_NOTE: 1}
    assert market.source["kind"] == "import" and market.source["format"] == "cbrl-syn"
    assert market.source["files"] == {"0901.csv": 901, "0902.csv": 902, "0903.csv": 903}
    assert sum(d.n_impressions for d in market.days) == 595


def test_cbrl_mapping_is_exact(cbrl_market):
    market, _ = cbrl_market
    assert [d.day for d in market.days] == [901, 902, 903]
    for entry in market.days:
        log = market.load(entry.day)  # strict load: an imported market holds valid rows only
        assert entry.n_impressions == log.n_impressions
        assert entry.sha256 == file_sha256(market.root / entry.file)
        assert entry.file == f"day_{entry.day}.parquet"
        assert_day_matches(log, cbrl_expected(CBRL / f"0{entry.day}.csv"))
    # One row by hand: the first row of 0901.csv is hr 0, min 3, pppc 27.36, pctr 0.033416, costprice 1216, rev 0.0.
    first = market.load(901)
    assert first.utility[0] == 0.033416 * 27.36
    assert first.market_price[0] == first.cost[0] == 1.216
    assert first.delivery[0] == 0.0
    # The empty rev (0903.csv row 12) is kept, with delivery 0.
    assert market.load(903).n_impressions == 199


def test_cbrl_mc_constraints_follow_the_prior_recipe(cbrl_market):
    market, _ = cbrl_market
    curves = {e.day: curve_of(DayIndex(market.load(e.day))) for e in market.days}
    drawn = draw_market_constraints(curves, {e.day: e.split for e in market.days}, seed=3)
    for entry in market.days:
        assert (entry.mc.roi_target, entry.mc.budget) == (drawn[entry.day].roi_target, drawn[entry.day].budget)
        assert entry.regime == drawn[entry.day].regime_fields()
        assert entry.mc.roi_target > 0 and entry.mc.budget > 0
    assert market.source["constraints"].startswith("drawn: prior recipe")


def test_cbrl_mc_constraints_paper_recipe_on_request(tmp_path: Path):
    import_market("cbrl-syn", CBRL, tmp_path / "paper", seed=3, constraints="paper")
    market = Market.open(tmp_path / "paper")
    for entry in market.days:
        drawn = draw_paper_constraints(DayIndex(market.load(entry.day)), np.random.default_rng([3, entry.day, 1]))
        assert (entry.mc.roi_target, entry.mc.budget) == (drawn.roi_target, drawn.budget)
        assert entry.regime == drawn.regime_fields()
    assert market.source["constraints"].startswith("drawn: paper recipe")
    with pytest.raises(ValueError, match="unknown constraint recipe"):
        import_market("cbrl-syn", CBRL, tmp_path / "bad", constraints="hindsight")


def test_paper_recipe_budget_stays_positive_where_the_day_pays_nothing(tmp_path: Path):
    """A day whose only impression is free (no spend at any ratio) still gets a positive budget, as the service
    requires of a registration."""
    src = tmp_path / "src"
    src.mkdir()
    row = {"hr": 3, "min": 0, "pppc": 10.0, "pctr": 0.05, "costprice": 300, "rev": 0.0}
    pd.DataFrame([row]).to_csv(src / "0001.csv", index=False)
    pd.DataFrame([{**row, "hr": 5, "costprice": 0}]).to_csv(src / "0002.csv", index=False)
    summary = import_market("cbrl-syn", src, tmp_path / "out", constraints="paper", test_fraction=0.5)
    assert [d.mc.budget > 0 for d in summary.days] == [True, True], [d.mc for d in summary.days]


def test_cbrl_single_files_and_day_columns(tmp_path: Path):
    one = import_market("cbrl-syn", CBRL / "0902.csv", tmp_path / "one")
    assert [d.day for d in one.days] == [902]
    assert one.invalid_rows == {"hr not an integer in 0..23": 1, "utility <= 0": 1}

    # One file holding all days in a day_no column (the reference's combined data.csv) gives the same days.
    combined = pd.concat([pd.read_csv(p).assign(day_no=int(p.stem)) for p in sorted(CBRL.glob("*.csv"))])
    combined.to_csv(tmp_path / "data.csv", index=False)
    many_summary = import_market("cbrl-syn", tmp_path / "data.csv", tmp_path / "many")
    assert many_summary.details["files"] == {"data.csv": "column day_no"}
    many = Market.open(many_summary.out)
    directory = Market.open(import_market("cbrl-syn", CBRL, tmp_path / "dir").out)
    assert [d.day for d in many.days] == [d.day for d in directory.days] == [901, 902, 903]
    for day in (901, 902, 903):
        pd.testing.assert_frame_equal(many.load(day).to_frame(), directory.load(day).to_frame())


def test_cbrl_day_ids_fall_back_to_name_order(tmp_path: Path):
    src = tmp_path / "src"
    src.mkdir()
    for name, fixture in (("monday.csv", "0902.csv"), ("sunday.csv", "0901.csv")):
        shutil.copy(CBRL / fixture, src / name)
    (src / ".hidden.csv").write_text("garbage")
    (src / "notes.txt").write_text("not a log")
    summary = import_market("cbrl-syn", src, tmp_path / "out")
    assert summary.details["files"] == {"monday.csv": 0, "sunday.csv": 1}
    market = Market.open(tmp_path / "out")
    assert_day_matches(market.load(0), cbrl_expected(CBRL / "0902.csv"))


def test_cbrl_aliases_and_missing_columns(tmp_path: Path):
    raw = pd.read_csv(CBRL / "0901.csv").rename(columns={"pppc": "ppc", "click": "clk1"})
    raw.to_csv(tmp_path / "0901.csv", index=False)
    summary = import_market("cbrl-syn", tmp_path / "0901.csv", tmp_path / "aliased")
    assert summary.n_kept == 198
    raw.drop(columns=["pctr", "rev"]).to_csv(tmp_path / "0902.csv", index=False)
    with pytest.raises(SchemaError, match=r"missing column\(s\) pctr, rev"):
        import_market("cbrl-syn", tmp_path / "0902.csv", tmp_path / "missing")


# ----------------------------------------------------------------------------------------------------------------------
# splits


def test_split_is_deterministic_under_seed(tmp_path: Path):
    first = import_market("cbrl-syn", CBRL, tmp_path / "a", seed=11)
    again = import_market("cbrl-syn", CBRL, tmp_path / "b", seed=11)
    assert [(d.day, d.split) for d in first.days] == [(d.day, d.split) for d in again.days]
    assert Market.open(tmp_path / "a").source["seed"] == 11

    draws = np.random.default_rng(11).random(3)
    assert [d.split for d in first.days] == ["test" if u < 0.5 else "train" for u in draws]


def test_split_assignment():
    days = list(range(40))
    split = split_assignment(days, {3, 7}, 0.25, seed=5)
    assert split == split_assignment(days, {3, 7}, 0.25, seed=5)
    assert split != split_assignment(days, {3, 7}, 0.25, seed=6)
    assert split[3] == split[7] == "ood"
    assert {split[d] for d in days if d not in (3, 7)} == {"train", "test"}
    assert set(split_assignment(days, set(), 0.0, seed=5).values()) == {"train"}
    assert set(split_assignment(days, set(), 1.0, seed=5).values()) == {"test"}


# ----------------------------------------------------------------------------------------------------------------------
# auctionnet


def test_auctionnet_reports_every_invalid_row_by_reason(auctionnet_market):
    market, summary = auctionnet_market
    assert summary.invalid_rows == AUCTIONNET_INVALID
    assert market.source["invalid_rows"] == AUCTIONNET_INVALID
    assert (summary.n_rows, summary.n_kept) == (360, 356)  # advertiser 12's rows only
    assert market.source["advertiser"] == 12 and market.source["value_per_conversion"] == 30.0
    assert [d.day for d in market.days] == [7, 8, 9]


def test_auctionnet_mapping_is_exact(auctionnet_market):
    market, _ = auctionnet_market
    value = 30.0
    for period in (7, 8, 9):
        raw = pd.read_csv(AUCTIONNET / f"period-{period}.csv")
        raw = raw[raw["advertiserNumber"] == 12]
        ok = raw["timeStepIndex"].between(0, 47) & (raw["pValue"] > 0) & (raw["leastWinningCost"] >= 0)
        raw = raw[ok].sort_values("pvIndex", kind="stable")
        expected = pd.DataFrame(
            {
                "slot": raw["timeStepIndex"].to_numpy(),
                "utility": raw["pValue"].to_numpy() * value,
                "market_price": raw["leastWinningCost"].to_numpy(),
                "delivery": raw["conversionAction"].to_numpy() * value,
            }
        ).sort_values("slot", kind="stable", ignore_index=True)
        log = market.load(period)
        assert_day_matches(log, expected)
        assert log.delivery.sum() > 0
    # One row by hand: period 7's first opportunity (pvIndex 7001) for advertiser 12.
    row = pd.read_csv(AUCTIONNET / "period-7.csv").query("pvIndex == 7001 and advertiserNumber == 12").iloc[0]
    first = market.load(7)
    assert first.utility[0] == row["pValue"] * value
    assert first.market_price[0] == row["leastWinningCost"]
    assert first.slot[0] == row["timeStepIndex"] == 0


def test_auctionnet_constraints_come_from_cpa_and_budget(auctionnet_market):
    market, _ = auctionnet_market
    # Fixture: advertiser 12 has CPA 30, 40, 25 and budget 5500, 7000, 4000 in periods 7, 8, 9.
    expected = {7: (30.0 / 30.0, 5500.0), 8: (30.0 / 40.0, 7000.0), 9: (30.0 / 25.0, 4000.0)}
    assert {d.day: (d.mc.roi_target, d.mc.budget) for d in market.days} == expected
    assert all(d.regime == {} for d in market.days)


def test_auctionnet_arrival_order_is_pv_index_and_formats_agree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    src = tmp_path / "src"
    src.mkdir()
    for i, path in enumerate(sorted(AUCTIONNET.glob("*.csv"))):
        frame = pd.read_csv(path).sample(frac=1.0, random_state=i)  # rows shuffled: order must come from pvIndex
        if i == 0:
            frame.to_parquet(src / path.name.replace(".csv", ".parquet"), index=False)
        else:
            frame.to_csv(src / path.name, index=False)
    monkeypatch.setattr(auctionnet_importer, "AUCTIONNET_CHUNK_ROWS", 37)  # exercise the chunked advertiser filter
    shuffled = import_market("auctionnet", src, tmp_path / "shuffled", advertiser=12, value_per_conversion=30.0)
    reference = import_market(
        "auctionnet", AUCTIONNET, tmp_path / "reference", advertiser=12, value_per_conversion=30.0
    )
    assert shuffled.invalid_rows == reference.invalid_rows == AUCTIONNET_INVALID
    a, b = Market.open(tmp_path / "shuffled"), Market.open(tmp_path / "reference")
    for day in (7, 8, 9):
        pd.testing.assert_frame_equal(a.load(day).to_frame(), b.load(day).to_frame())


def test_auctionnet_advertiser_choice(tmp_path: Path):
    with pytest.raises(ValueError, match=r"several advertisers \(12, 31\)"):
        import_market("auctionnet", AUCTIONNET, tmp_path / "a")
    with pytest.raises(ValueError, match=r"no rows of advertiser 99; advertisers present: 12, 31"):
        import_market("auctionnet", AUCTIONNET, tmp_path / "b", advertiser=99)
    assert not (tmp_path / "a" / MANIFEST).exists()

    # A log with a single advertiser needs no choice, and records which one it was.
    only31 = pd.read_csv(AUCTIONNET / "period-9.csv").query("advertiserNumber == 31")
    only31.to_csv(tmp_path / "only31.csv", index=False)
    assert import_market("auctionnet", tmp_path / "only31.csv", tmp_path / "e").details["advertiser"] == 31

    # A single advertiser's log may leave advertiserNumber out.
    single = pd.read_csv(AUCTIONNET / "period-9.csv").query("advertiserNumber == 31").drop(columns="advertiserNumber")
    single.to_csv(tmp_path / "period-9.csv", index=False)
    summary = import_market("auctionnet", tmp_path / "period-9.csv", tmp_path / "c", value_per_conversion=2.0)
    assert summary.n_kept == 120 and summary.invalid_rows == {}
    assert (summary.days[0].mc.roi_target, summary.days[0].mc.budget) == (2.0 / 40.0, 5500.0)  # CPA 40 in period 9
    with pytest.raises(SchemaError, match="advertiserNumber"):
        import_market("auctionnet", tmp_path / "period-9.csv", tmp_path / "d", advertiser=31)


def test_auctionnet_constraints_must_be_constant_per_period(tmp_path: Path):
    raw = pd.read_csv(AUCTIONNET / "period-8.csv")
    raw.loc[raw.index[-2:], "budget"] = 123.0
    raw.to_csv(tmp_path / "period-8.csv", index=False)
    with pytest.raises(ValueError, match=r"budget of advertiser 31 varies within deliveryPeriodIndex 8"):
        import_market("auctionnet", tmp_path / "period-8.csv", tmp_path / "out", advertiser=31)

    raw = pd.read_csv(AUCTIONNET / "period-8.csv")
    is31 = raw["advertiserNumber"] == 31
    raw.loc[raw.index[is31][:3], "CPAConstraint"] = [0.0, -5.0, np.nan]
    raw.loc[raw.index[is31][3], "budget"] = np.nan
    raw.to_csv(tmp_path / "period-8.csv", index=False)
    summary = import_market("auctionnet", tmp_path / "period-8.csv", tmp_path / "out", advertiser=31)
    assert summary.invalid_rows == {"CPAConstraint missing or <= 0": 3, "budget missing or <= 0": 1}


def test_auctionnet_missing_columns(tmp_path: Path):
    pd.read_csv(AUCTIONNET / "period-7.csv").drop(columns=["leastWinningCost", "CPAConstraint"]).to_csv(
        tmp_path / "period-7.csv", index=False
    )
    with pytest.raises(SchemaError, match=r"missing column\(s\) leastWinningCost, CPAConstraint"):
        import_market("auctionnet", tmp_path / "period-7.csv", tmp_path / "out", advertiser=12)


# ----------------------------------------------------------------------------------------------------------------------
# arguments and the output directory


def test_bad_arguments(tmp_path: Path):
    with pytest.raises(ValueError, match="unknown log format 'ipinyou'; supported: cbrl-syn, auctionnet, rcb"):
        import_market("ipinyou", CBRL, tmp_path / "x")
    assert SUPPORTED_FORMATS == ("cbrl-syn", "auctionnet", "rcb")
    with pytest.raises(ValueError, match="advertiser only applies"):
        import_market("cbrl-syn", CBRL, tmp_path / "x", advertiser=3)
    with pytest.raises(ValueError, match="value_per_conversion only applies"):
        import_market("cbrl-syn", CBRL, tmp_path / "x", value_per_conversion=2.0)
    with pytest.raises(ValueError, match="test_fraction"):
        import_market("cbrl-syn", CBRL, tmp_path / "x", test_fraction=1.5)
    with pytest.raises(ValueError, match="value_per_conversion"):
        import_market("auctionnet", AUCTIONNET, tmp_path / "x", value_per_conversion=0.0)
    with pytest.raises(ValueError, match=r"ood_days \[5\] are not in the logs"):
        import_market("cbrl-syn", CBRL, tmp_path / "x", ood_days={5, 901})
    with pytest.raises(FileNotFoundError):
        import_market("cbrl-syn", tmp_path / "absent", tmp_path / "x")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SchemaError, match="no log files"):
        import_market("cbrl-syn", tmp_path / "empty", tmp_path / "x")
    assert not (tmp_path / "x" / MANIFEST).exists()


def test_existing_market_is_kept_unless_overwritten(tmp_path: Path):
    out = tmp_path / "out"
    import_market("cbrl-syn", CBRL, out)
    with pytest.raises(ValueError, match="already holds a market"):
        import_market("cbrl-syn", CBRL / "0902.csv", out)
    # A failed import leaves the old market alone, even with overwrite.
    with pytest.raises(ValueError, match="ood_days"):
        import_market("cbrl-syn", CBRL / "0902.csv", out, overwrite=True, ood_days={1})
    assert [d.day for d in Market.open(out).days] == [901, 902, 903]
    import_market("cbrl-syn", CBRL / "0902.csv", out, overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == ["day_902.parquet", MANIFEST]
    assert [d.day for d in Market.open(out).days] == [902]


def test_an_import_that_fails_while_writing_keeps_the_old_market(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    out = tmp_path / "out"
    import_market("cbrl-syn", CBRL, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    written: list[Path] = []

    def failing_write(log, path: Path) -> None:
        if written:
            raise OSError("disk full")
        written.append(path)
        real_write(log, path)

    real_write = market_writer.write_day
    monkeypatch.setattr(market_writer, "write_day", failing_write)
    with pytest.raises(OSError, match="disk full"):
        import_market("cbrl-syn", CBRL, out, overwrite=True, test_fraction=1.0)
    with pytest.raises(OSError, match="disk full"):
        import_market("cbrl-syn", CBRL, out, overwrite=True)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # nothing of the failed imports is left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # nor their staging directories
    assert [d.day for d in Market.open(out).days] == [901, 902, 903]


def test_a_failed_first_import_leaves_no_directory_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The staging directory lives inside --out (one file system: moving the days in is a rename, never a copy
    across devices); an import that fails before its commit removes the directory it made."""
    seen: list[Path] = []

    def failing_write(log, path: Path) -> None:
        seen.append(path)
        raise OSError("disk full")

    monkeypatch.setattr(market_writer, "write_day", failing_write)
    out = tmp_path / "new" / "market"
    with pytest.raises(OSError, match="disk full"):
        import_market("cbrl-syn", CBRL, out)
    assert seen[0].parent.parent == out and seen[0].parent.name.startswith(".import-")
    assert not out.exists()


def test_day_ids_outside_the_schema_and_negative_cbrl_factors_are_rows_left_out(tmp_path: Path):
    rows = pd.read_csv(CBRL / "0902.csv")
    frames = [rows.assign(day_no=-1), rows.assign(day_no=2**31), rows.assign(day_no=7)]
    combined = pd.concat(frames, ignore_index=True)
    valid = (combined["day_no"] == 7) & (combined["pctr"] * combined["pppc"] > 0) & combined["hr"].between(0, 23)
    first = combined.index[valid][:2]
    combined.loc[first[0], ["pctr", "pppc"]] = [-0.05, -10.0]  # a positive product of two bad factors
    combined.loc[first[1], "pppc"] = -1.0
    combined.to_csv(tmp_path / "data.csv", index=False)
    summary = import_market("cbrl-syn", tmp_path / "data.csv", tmp_path / "out")
    assert [d.day for d in summary.days] == [7]
    reasons = summary.invalid_rows
    # of 0902.csv's rows only its bad hour is found before the day (the adapter checks it; the schema, the rest):
    # every other row of the two out-of-range days is left out for its day
    assert reasons[f"day outside 0..{2**31 - 1}"] == 2 * (len(rows) - 1)
    assert reasons["pctr < 0"] == 1 and reasons["pppc < 0"] == 1


# ----------------------------------------------------------------------------------------------------------------------
# CLI


def cli() -> typer.Typer:
    """A local app with the command under `import`, as the lead registers it under `rcb market`."""
    app = typer.Typer()

    @app.callback()
    def market() -> None:
        """Market logs."""

    app.command("import")(import_command)
    return app


def test_cli_json(tmp_path: Path):
    out = tmp_path / "out"
    args = ["import", "--format", "auctionnet", str(AUCTIONNET), "--out", str(out), "--advertiser", "12"]
    result = CliRunner().invoke(cli(), [*args, "--value-per-conversion", "30", "--ood-days", "8-9", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["days_per_split"]["ood"] == 2
    assert summary["invalid_rows"] == AUCTIONNET_INVALID
    assert summary["n_kept"] == 356
    assert [d["roi_target"] for d in summary["days"]] == [1.0, 0.75, 1.2]
    assert {d.day: d.split for d in Market.open(out).days}.items() >= {8: "ood", 9: "ood"}.items()


def stderr_of(result) -> str:
    """The command's stderr with rich's line wrapping undone."""
    return " ".join(result.stderr.split())


def test_cli_table_and_errors(tmp_path: Path):
    runner = CliRunner()
    result = runner.invoke(cli(), ["import", "--format", "cbrl-syn", str(CBRL), "--out", str(tmp_path / "m")])
    assert result.exit_code == 0, result.output
    for text in ("rows kept", "595", "hr not an integer in 0..23", "rev missing"):
        assert text in result.stdout  # the import's summary table is its result: stdout

    again = runner.invoke(cli(), ["import", "--format", "cbrl-syn", str(CBRL), "--out", str(tmp_path / "m")])
    assert again.exit_code == 2 and "already holds a market" in stderr_of(again)
    forced = runner.invoke(
        cli(), ["import", "--format", "cbrl-syn", str(CBRL), "--out", str(tmp_path / "m"), "--force"]
    )
    assert forced.exit_code == 0, forced.output

    several = runner.invoke(cli(), ["import", "--format", "auctionnet", str(AUCTIONNET), "--out", str(tmp_path / "a")])
    assert several.exit_code == 2 and "12, 31" in stderr_of(several)
    unknown = runner.invoke(cli(), ["import", "--format", "ipinyou", str(CBRL), "--out", str(tmp_path / "b")])
    assert unknown.exit_code == 2 and "cbrl-syn" in unknown.output
    bad_days = runner.invoke(
        cli(), ["import", "--format", "cbrl-syn", str(CBRL), "--out", str(tmp_path / "c"), "--ood-days", "9x"]
    )
    assert bad_days.exit_code == 2 and "9x" in stderr_of(bad_days)


def test_parse_days():
    assert parse_days("") == set()
    assert parse_days("3, 5,10-12,") == {3, 5, 10, 11, 12}
    for bad in ("a", "5-3", "1-", "1-20210901"):  # the last a typo that would name twenty million days
        with pytest.raises(ValueError, match="bad day"):
            parse_days(bad)
    assert len(parse_days("1-100000")) == 100_000


def test_unknown_ood_days_are_named_in_a_short_message(tmp_path: Path):
    with pytest.raises(ValueError) as refused:
        import_market("cbrl-syn", CBRL, tmp_path / "m", ood_days=set(range(1000, 1100)))
    assert str(refused.value) == (
        "ood_days [1000, 1001, 1002, 1003, 1004, 1005, 1006, 1007, 1008, 1009 and 90 more] are not in the logs"
        " (days 901..903)"
    )


def test_auctionnet_value_defaults_to_the_period_cpa(tmp_path: Path):
    """Without --value-per-conversion, V = CPAConstraint per period: L = 1 and utility = pValue * CPA."""
    out = tmp_path / "default-v"
    summary = import_market("auctionnet", AUCTIONNET, out, advertiser=12, seed=1)
    market = Market.open(out)
    assert all(entry.mc.roi_target == 1.0 for entry in market.days)
    assert market.source["value_per_conversion"] == "CPAConstraint"
    cpa = market.source["cpa_constraint"]
    scaled = import_market("auctionnet", AUCTIONNET, tmp_path / "v1", advertiser=12, value_per_conversion=1.0)
    for entry in market.days:
        reference = Market.open(tmp_path / "v1").load(entry.day)
        np.testing.assert_allclose(market.load(entry.day).utility, reference.utility * cpa[str(entry.day)], rtol=1e-6)
    assert summary.n_kept == scaled.n_kept
