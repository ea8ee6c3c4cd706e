"""Every `rcb` command that writes refuses an unusable output path before any work, with one line and exit 2.

The heavy step of each command is replaced by a function that fails the test if it is reached: the check
must come first. The same goes for the input checks (ratios, --days-id, --resume, an evaluation method
made for the other setting), and results go to stdout while progress and messages go to stderr.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from cli_checks import assert_one_line_error
from typer.testing import CliRunner

from model.contract import SLOTS_PER_DAY, Setting
from rcb.cli import app
from training.market.dataset import Market, MarketError

runner = CliRunner()
REPO = Path(__file__).resolve().parents[1]


def _never(*args, **kwargs):
    raise AssertionError("the heavy work started before the output path was checked")


@pytest.fixture
def no_heavy_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each command's expensive call fails the test when reached."""
    import training.evaluation.curves
    import training.evaluation.evaluate
    import training.export.onnx
    import training.market.generator
    import training.market.importers
    import training.market.report
    import training.rl.runs

    for module, name in [
        (training.market.generator, "generate_market"),
        (training.market.importers, "import_market"),
        (training.market.report, "collect_facts"),
        (training.evaluation.evaluate, "evaluate"),
        (training.rl.runs, "run_training"),
        (training.export.onnx, "export_run"),
        (training.evaluation.curves, "load_group"),
    ]:
        monkeypatch.setattr(module, name, _never)


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """Just enough of a finished training run for the commands' own checks (never loaded: see no_heavy_work)."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"setting": "sc", "config": {"algo": "crl"}, "history": []}))
    (run / "best.pt").write_bytes(b"not really")
    (run / "curves.csv").write_text("epoch,updates,train_score,validation_score\n0,10,0.1,0.1\n")
    return run


def commands(market: Path, run: Path, out: str) -> dict[str, list[str]]:
    """Each writing command with ``out`` as its output path."""
    src = REPO / "tests" / "fixtures" / "cbrl_syn"
    return {
        "market generate": ["market", "generate", "--out", out, "--days-id", "4", "--days-ood", "0"],
        "market import": ["market", "import", "--format", "cbrl-syn", str(src), "--out", out],
        "market report": ["market", "report", str(market), "--out", out],
        "evaluate": ["evaluate", str(market), "--setting", "sc", "--methods", "rm", "--seeds", "1", "--out", out],
        "train": ["train", "--data", str(market), "--setting", "sc", "--out", out],
        "export": ["export", "--run", str(run), "--out", out],
        "curves": ["curves", f"a={run}", "--out", out],
    }


WANTS_FILE = {"market report", "curves"}
"""Commands whose --out is a file; the others write a directory."""


@pytest.mark.parametrize(
    "command", ["market generate", "market import", "market report", "evaluate", "train", "export", "curves"]
)
def test_out_under_a_file_is_refused_before_work(
    command: str, tiny_market: Market, run_dir: Path, tmp_path: Path, no_heavy_work: None
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    for out in ("/dev/null/x", str(blocker / "sub" / "x.png")):
        result = runner.invoke(app, commands(tiny_market.root, run_dir, out)[command])
        assert_one_line_error(result, "--out", "is not a directory")


@pytest.mark.parametrize(
    "command", ["market generate", "market import", "market report", "evaluate", "train", "export", "curves"]
)
def test_out_of_the_wrong_kind_is_refused_before_work(
    command: str, tiny_market: Market, run_dir: Path, tmp_path: Path, no_heavy_work: None
) -> None:
    if command in WANTS_FILE:
        wrong = tmp_path / "a-dir.png"
        wrong.mkdir()
        expected = "is a directory"
    else:
        wrong = tmp_path / "a-file"
        wrong.write_text("x")
        expected = "is a file"
    result = runner.invoke(app, commands(tiny_market.root, run_dir, str(wrong))[command])
    assert_one_line_error(result, str(wrong), expected)


@pytest.mark.parametrize(
    "command", ["market generate", "market import", "market report", "evaluate", "train", "export", "curves"]
)
def test_unwritable_out_is_refused_before_work(
    command: str, tiny_market: Market, run_dir: Path, tmp_path: Path, no_heavy_work: None
) -> None:
    if os.geteuid() == 0:  # root writes through permissions; a read-only file system stops it
        if not Path("/proc/self").is_dir():
            pytest.skip("needs /proc (running as root, permissions do not stop writes)")
        out = "/proc/rcb-test/out"
    else:
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o500)
        out = str(locked / "out")
    result = runner.invoke(app, commands(tiny_market.root, run_dir, out)[command])
    assert_one_line_error(result, "--out", "not writable")


def test_default_report_path_of_the_wrong_kind_is_named(tiny_market: Market, no_heavy_work: None) -> None:
    (tiny_market.root / "report.png").mkdir()
    result = runner.invoke(app, ["market", "report", str(tiny_market.root)])
    assert_one_line_error(result, "report.png", "is a directory")


# --- Input checks before any work --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ratios", "message"),
    [
        ("9", "outside the bid-ratio range [0, 4]"),
        (",".join(["1"] * 47 + ["4.5"]), "slot 47"),
        ("a,b,c", "not a number"),
        ("1,2,3", "expected 48"),
    ],
)
def test_simulate_ratios(tiny_market: Market, ratios: str, message: str) -> None:
    result = runner.invoke(
        app, ["simulate", str(tiny_market.root), "--day", "0", "--setting", "sc", "--ratios", ratios]
    )
    assert_one_line_error(result, message)


def test_simulate_accepts_the_range_ends(tiny_market: Market) -> None:
    ratios = ",".join(["0", "4"] * (SLOTS_PER_DAY // 2))
    result = runner.invoke(
        app, ["simulate", str(tiny_market.root), "--day", "0", "--setting", "sc", "--ratios", ratios]
    )
    assert result.exit_code == 0, result.output
    assert "total" in result.stdout


@pytest.mark.parametrize("days_id", ["0", "1"])
def test_generate_needs_a_train_and_a_test_day(tmp_path: Path, days_id: str, no_heavy_work: None) -> None:
    args = ["market", "generate", "--out", str(tmp_path / "m"), "--days-id", days_id, "--days-ood", "3"]
    result = runner.invoke(app, args)
    assert_one_line_error(result, "at least 1 train and 1 test day", "--days-id 2 or more")
    assert not (tmp_path / "m").exists()


def test_generate_library_refuses_a_market_without_train_days(tmp_path: Path) -> None:
    from training.market.generator import config_with, generate_market

    with pytest.raises(ValueError, match="at least 1 train and 1 test day"):
        generate_market(tmp_path / "m", config_with(days_id=1, days_ood=2, impressions_per_day=100), workers=1)
    assert not (tmp_path / "m").exists()


def test_resume_without_a_run_is_an_error(tiny_market: Market, tmp_path: Path, no_heavy_work: None) -> None:
    args = ["train", "--data", str(tiny_market.root), "--setting", "sc", "--out", str(tmp_path / "none"), "--resume"]
    assert_one_line_error(runner.invoke(app, args), "--resume", "holds no run")
    assert not (tmp_path / "none").exists()


def test_train_refusals_come_before_the_bar(tiny_market: Market, run_dir: Path, no_heavy_work: None) -> None:
    base = ["train", "--data", str(tiny_market.root), "--out", str(run_dir)]
    assert_one_line_error(runner.invoke(app, [*base, "--setting", "sc"]), "--resume")
    assert_one_line_error(runner.invoke(app, [*base, "--setting", "mc", "--resume"]), "cannot be resumed")
    assert_one_line_error(runner.invoke(app, [*base, "--setting", "sc", "--algo", "cbrl", "--resume"]), "trains crl")


def test_a_market_without_train_days_is_refused_before_the_bar(
    tiny_market: Market, tmp_path: Path, no_heavy_work: None
) -> None:
    untrained = Market(
        root=tiny_market.root,
        days=[replace(e, split="test") if e.split == "train" else e for e in tiny_market.days],
        source=tiny_market.source,
    )
    untrained.save()
    root = str(tiny_market.root)
    trained = runner.invoke(app, ["train", "--data", root, "--setting", "sc", "--out", str(tmp_path / "run")])
    assert_one_line_error(trained, "has no train days")
    planned = runner.invoke(app, ["export", "--plan", root, "--setting", "sc", "--out", str(tmp_path / "plan")])
    assert_one_line_error(planned, "has no train days")
    missing = runner.invoke(app, ["export", "--plan", str(tmp_path / "nowhere"), "--setting", "sc", "--out", "x"])
    assert_one_line_error(missing, "nowhere")
    assert not (tmp_path / "run").exists() and not (tmp_path / "plan").exists()


def test_evaluate_refuses_a_method_for_the_other_setting_before_work(
    tiny_market: Market, run_dir: Path, tmp_path: Path, no_heavy_work: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import model.artifact

    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "model.json").write_text("{")
    base = ["evaluate", str(tiny_market.root), "--seeds", "1", "--out", str(tmp_path / "out")]
    result = runner.invoke(app, [*base, "--setting", "sc", "--methods", f"rm,onnx:{model_dir}"])
    assert_one_line_error(result, f"onnx:{model_dir}", "not valid JSON")  # the card itself is read first

    # A valid card for MC (the card's schema is model.artifact's business; only its setting matters here).
    monkeypatch.setattr(model.artifact, "read_card", lambda directory: SimpleNamespace(setting=Setting.MC))
    result = runner.invoke(app, [*base, "--setting", "sc", "--methods", f"rm,pid,onnx:{model_dir}"])
    assert_one_line_error(result, f"onnx:{model_dir}", "trained for mc, not sc")
    result = runner.invoke(app, [*base, "--setting", "mc", "--methods", f"rm,{run_dir}"])
    assert_one_line_error(result, str(run_dir), "trained for sc, not mc")
    result = runner.invoke(app, [*base, "--setting", "mc", "--methods", f"rm,crl={run_dir}*"])
    assert_one_line_error(result, "(in crl)", "trained for sc, not mc")
    assert not (tmp_path / "out").exists()


def test_evaluate_bar_has_a_total(tiny_market: Market, tmp_path: Path) -> None:
    args = ["evaluate", str(tiny_market.root), "--setting", "sc", "--methods", "oracle-day", "--seeds", "2"]
    result = runner.invoke(app, [*args, "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "1/1" in result.stderr and "/?" not in result.stderr  # a hindsight reference plays once, whatever --seeds
    assert "| `oracle-day` |" in result.stdout  # the table is the result: stdout


# --- Edited data files ---------------------------------------------------------------------------------------


def test_an_edited_day_file_is_refused_on_load(tmp_path: Path) -> None:
    from training.market.generator import config_with, generate_market

    market = generate_market(tmp_path / "m", config_with(days_id=2, days_ood=0, impressions_per_day=500), workers=1)
    entry = market.days[0]
    assert market.load(entry.day).day == entry.day  # untouched: loads
    other = market.root / market.days[1].file
    shutil.copyfile(other, market.root / entry.file)  # a valid Parquet file, but not the manifest's
    with pytest.raises(MarketError, match=entry.file) as caught:
        Market.open(market.root).load(entry.day)
    assert "sha256" in str(caught.value)
    result = runner.invoke(
        app, ["simulate", str(market.root), "--day", str(entry.day), "--setting", "sc", "--ratios", "1"]
    )
    assert_one_line_error(result, entry.file, "sha256")


def test_a_missing_day_file_is_named(tiny_market: Market) -> None:
    (tiny_market.root / tiny_market.days[0].file).unlink()
    with pytest.raises(MarketError, match="is missing"):
        tiny_market.load(tiny_market.days[0].day)


# --- Streams: results on stdout -----------------------------------------------------------------------------


def test_oracle_table_goes_to_stdout(tiny_market: Market) -> None:
    result = runner.invoke(app, ["oracle", str(tiny_market.root), "--setting", "mc", "--split", "test"])
    assert result.exit_code == 0, result.output
    assert "delivery" in result.stdout and "ratios" in result.stdout
    assert "delivery" not in result.stderr
    as_json = runner.invoke(app, ["oracle", str(tiny_market.root), "--setting", "mc", "--json"])
    assert [json.loads(line)["day"] for line in as_json.stdout.splitlines()] == [e.day for e in tiny_market.days]


def test_help_points_to_the_docs() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    text = " ".join(result.stdout.split())
    assert "docs/cli.md" in text and "Exit codes: 0 ok, 2 bad input" in text
    for doc in ("cli.md", "data-schema.md", "metrics.md"):
        assert (REPO / "docs" / doc).is_file()
