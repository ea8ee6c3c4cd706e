"""`rcb market generate`, `rcb market subset` and `rcb market report` through the real console app."""

from __future__ import annotations

import json
import shutil
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


def test_report_never_overwrites_a_json_that_is_not_its_own(generated: Path, tmp_path: Path):
    market = tmp_path / "market"
    shutil.copytree(generated, market)
    manifest = (market / "manifest.json").read_bytes()
    beside_manifest = runner.invoke(app, ["market", "report", str(market), "--out", str(market / "manifest.png")])
    assert beside_manifest.exit_code == 2 and "not a market report" in beside_manifest.output
    assert (market / "manifest.json").read_bytes() == manifest and not (market / "manifest.png").exists()
    for body in ('{"rm": {"ans": 0.5}}', "{}"):  # an evaluation's summary; an empty object is no report either
        (tmp_path / "summary.json").write_text(body)
        other = runner.invoke(app, ["market", "report", str(market), "--out", str(tmp_path / "summary.png")])
        assert other.exit_code == 2 and (tmp_path / "summary.json").read_text() == body


def test_report_summary_file_is_strict_json(generated: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import training.market.report as report

    real = report.summarize

    def without_a_figure(facts):  # what a split with no winning slot or no delivering day reports
        summary = real(facts)
        summary["train"]["slot_over_day_oracle_gain"] = float("nan")
        return summary

    monkeypatch.setattr(report, "summarize", without_a_figure)
    png = tmp_path / "r.png"
    assert runner.invoke(app, ["market", "report", str(generated), "--out", str(png)]).exit_code == 0
    text = png.with_suffix(".json").read_text()
    assert "NaN" not in text
    assert json.loads(text)["train"]["slot_over_day_oracle_gain"] is None
    again = runner.invoke(app, ["market", "report", str(generated), "--out", str(png)])  # its own file: replaced
    assert again.exit_code == 0, again.output


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
    assert subset.source["subset"] == {"of": str(generated.resolve()), "train_days": 2, "source_train_days": 3}
    entry = subset.split("test")[0]
    assert (out / entry.file).stat().st_ino == (generated / entry.file).stat().st_ino  # linked, not copied


def test_subset_force_replaces_a_subset_and_leaves_the_source_alone(generated: Path, tmp_path: Path):
    out = tmp_path / "subset"
    before = {e.file: e.sha256 for e in Market.open(generated).days}
    assert (
        runner.invoke(app, ["market", "subset", str(generated), "--out", str(out), "--train-days", "3"]).exit_code == 0
    )
    again = runner.invoke(app, ["market", "subset", str(generated), "--out", str(out), "--train-days", "1"])
    assert again.exit_code == 2 and "--force" in again.output
    assert len(Market.open(out).split("train")) == 3  # refused: nothing lost
    forced = ["market", "subset", str(generated), "--out", str(out), "--train-days", "1", "--force"]
    assert runner.invoke(app, forced).exit_code == 0
    subset = Market.open(out)
    assert len(subset.split("train")) == 1
    assert sorted(p.name for p in out.glob("*.parquet")) == sorted(e.file for e in subset.days)  # no stale days
    source = Market.open(generated)
    assert {e.file: e.sha256 for e in source.days} == before
    for entry in source.days:
        source.fingerprint(entry.day)  # every source file still matches its manifest


def test_a_day_rewritten_in_a_subset_does_not_change_the_source(generated: Path, tmp_path: Path):
    from training.market.logs import write_day

    out = tmp_path / "subset"
    assert (
        runner.invoke(app, ["market", "subset", str(generated), "--out", str(out), "--train-days", "1"]).exit_code == 0
    )
    subset, source = Market.open(out), Market.open(generated)
    first, other = subset.split("test")[0], subset.split("test")[1]
    write_day(subset.load(other.day), out / first.file)  # e.g. a generator run with --force into the subset
    source.fingerprint(first.day)  # the source's file is untouched (write_day replaces, never rewrites in place)


def test_subset_of_an_edited_source_writes_nothing(generated: Path, tmp_path: Path):
    source = tmp_path / "source"
    assert (
        runner.invoke(app, ["market", "subset", str(generated), "--out", str(source), "--train-days", "3"]).exit_code
        == 0
    )
    broken = Market.open(source).split("ood")[-1]
    (source / broken.file).unlink()
    out = tmp_path / "subset"
    result = runner.invoke(app, ["market", "subset", str(source), "--out", str(out), "--train-days", "1"])
    assert result.exit_code == 2
    assert "is missing" in result.output
    assert not out.exists() or not any(out.iterdir())


def test_subset_refuses_more_train_days_than_the_source_has(generated: Path, tmp_path: Path):
    out = tmp_path / "subset"
    result = runner.invoke(app, ["market", "subset", str(generated), "--out", str(out), "--train-days", "4"])
    assert result.exit_code == 2
    assert "has 3 train days; asked for 4" in result.output
    assert not (out / "manifest.json").exists()


def test_subset_refuses_to_overwrite_its_source(generated: Path):
    args = ["market", "subset", str(generated), "--out", str(generated), "--train-days", "1", "--force"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert "must differ" in result.output
    assert len(Market.open(generated).days) == 9


def test_a_forced_generate_over_a_bigger_market_leaves_only_its_own_days(tmp_path: Path):
    from training.market.dataset import MANIFEST, Market
    from training.market.generator import config_with, generate_market

    out = tmp_path / "m"
    generate_market(out, config_with(days_id=6, days_ood=2, impressions_per_day=2000, seed=1), workers=1)
    generate_market(out, config_with(days_id=4, days_ood=0, impressions_per_day=2000, seed=2), workers=1)
    market = Market.open(out)
    assert len(market.days) == 4
    assert sorted(p.name for p in out.glob("*.parquet")) == sorted(e.file for e in market.days)
    for entry in market.days:
        market.fingerprint(entry.day)  # every listed file is the one the manifest hashed
    assert (out / MANIFEST).exists()


def test_a_report_path_without_a_suffix_names_the_png_written(tmp_path: Path):
    from training.market.generator import config_with, generate_market

    market = tmp_path / "m"
    generate_market(market, config_with(days_id=4, days_ood=0, impressions_per_day=2000, seed=1), workers=1)
    result = runner.invoke(app, ["market", "report", str(market), "--out", str(tmp_path / "rep")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "rep.png").is_file() and f"plot: {tmp_path / 'rep.png'}" in " ".join(result.output.split())
