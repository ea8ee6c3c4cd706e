"""`rcb market generate` and `rcb market report` through the real console app."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rcb.cli import app
from training.market.dataset import Market

runner = CliRunner()


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cli") / "market"
    result = runner.invoke(
        app,
        [
            "market",
            "generate",
            "--out",
            str(out),
            "--days-id",
            "6",
            "--days-ood",
            "3",
            "--impressions-per-day",
            "20000",
            "--seed",
            "5",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    return out


def test_generate_writes_market_and_json_summary(generated: Path):
    market = Market.open(generated)
    assert [len(market.split(s)) for s in ("train", "test", "ood")] == [3, 3, 3]


def test_generate_refuses_to_overwrite_without_force(generated: Path):
    result = runner.invoke(app, ["market", "generate", "--out", str(generated), "--days-id", "1", "--days-ood", "0"])
    assert result.exit_code == 2
    assert "--force" in result.output
    assert len(Market.open(generated).days) == 9  # nothing lost


def test_generate_rejects_empty_market(tmp_path: Path):
    result = runner.invoke(
        app, ["market", "generate", "--out", str(tmp_path / "x"), "--days-id", "0", "--days-ood", "0"]
    )
    assert result.exit_code == 2
    assert "at least one day" in result.output


def test_report_writes_png_and_summary(generated: Path, tmp_path: Path):
    png = tmp_path / "report.png"
    result = runner.invoke(app, ["market", "report", str(generated), "--out", str(png), "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout.strip().splitlines()[-1])
    assert png.exists() and png.stat().st_size > 10_000
    summary = payload["summary"]
    assert set(summary) == {"train", "test", "ood"}
    for split in summary.values():
        assert 0.0 <= split["sc_roi_binds_share"] <= 1.0
        assert split["day_ratio_mean"] > 0
        # The slot-wise oracle can always play the day-wise ratio in every slot.
        assert split["slot_over_day_oracle_gain"] >= -1e-9
    # Second run is served from the oracle cache and gives the same summary.
    again = runner.invoke(app, ["market", "report", str(generated), "--out", str(png), "--json"])
    assert json.loads(again.stdout.strip().splitlines()[-1])["summary"] == summary


def test_report_on_missing_dir_is_a_clear_error(tmp_path: Path):
    result = runner.invoke(app, ["market", "report", str(tmp_path / "nope")])
    assert result.exit_code == 2
    assert "manifest.json" in result.output


def test_report_table_has_a_heading_and_goes_to_stdout(generated: Path, tmp_path: Path):
    png = tmp_path / "r.png"
    result = runner.invoke(app, ["market", "report", str(generated), "--out", str(png)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "non-stationarity per split" in lines[0]
    assert lines[2].split() == ["per", "split", "train", "test", "ood"]
    assert "plot:" in result.stderr and "plot:" not in result.stdout


def test_generate_prints_its_summary_on_stdout(tmp_path: Path):
    out = tmp_path / "m"
    args = ["market", "generate", "--out", str(out), "--days-id", "2", "--days-ood", "0"]
    result = runner.invoke(app, [*args, "--impressions-per-day", "500", "--workers", "1"])
    assert result.exit_code == 0, result.output
    assert "wrote 2 days (1 train / 1 test / 0 ood)" in result.stdout


def test_subset_keeps_the_first_train_days_and_every_held_out_day(generated: Path, tmp_path: Path):
    source = Market.open(generated)
    out = tmp_path / "subset"
    result = runner.invoke(app, ["market", "subset", str(generated), "--out", str(out), "--train-days", "2", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["days"] == {"train": 2, "test": 3, "ood": 3}
    subset = Market.open(out)
    assert [e.day for e in subset.split("train")] == [e.day for e in source.split("train")[:2]]
    for split in ("test", "ood"):
        assert subset.split(split) == source.split(split)  # same entries: constraints, regimes, hashes
        assert subset.split_fingerprint(split) == source.split_fingerprint(split)
    day = subset.split("train")[1].day
    assert subset.load(day).n_impressions == source.load(day).n_impressions
    assert subset.source["subset"] == {"of": str(generated), "train_days": 2, "source_train_days": 3}


def test_subset_refuses_more_train_days_than_the_source_has(generated: Path, tmp_path: Path):
    out = tmp_path / "subset"
    result = runner.invoke(app, ["market", "subset", str(generated), "--out", str(out), "--train-days", "4"])
    assert result.exit_code == 2
    assert "has 3 train days; asked for 4" in result.output
    assert not (out / "manifest.json").exists()


def test_subset_refuses_to_overwrite_its_source(generated: Path):
    result = runner.invoke(app, ["market", "subset", str(generated), "--out", str(generated), "--train-days", "1"])
    assert result.exit_code == 2
    assert "must differ" in result.output
    assert len(Market.open(generated).days) == 9
