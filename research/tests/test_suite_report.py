"""research/suite_report.py and the suite's market presets (training/market/suite.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from rcb.cli import app
from research.suite_report import main, table, verdicts
from training.market.generator import generate_day
from training.market.suite import PRESETS, preset


def row(ans: float, csr: float, seeds: int = 1, days: int = 10, zero: int = 0) -> dict:
    return {"ans_median": ans, "csr": csr, "n_seeds": seeds, "n_episodes": days * seeds, "n_zero_oracle": zero * seeds}


def test_verdicts_say_what_is_missed_and_by_how_much():
    summary = {
        "pid": row(0.70, 0.90),
        "cbrl": row(0.72, 0.95, seeds=5),
        "ensemble:cbrl": row(0.75, 0.92, seeds=5),
        "shield:cbrl": row(0.71, 0.80, seeds=5),
        "shield:ensemble:cbrl": row(0.74, 0.88, seeds=5),
    }
    got = verdicts(summary)
    assert got["cbrl_first"] == "missed: ANS by 0.010"
    assert got["ensemble_first"] == "met"
    assert got["shield_bound"] == "missed by 0.05 (`shield:cbrl`)"
    summary["cbrl"] = row(0.80, 0.85, seeds=5)
    assert verdicts(summary)["cbrl_first"] == "missed: CSR by 0.05"
    assert got["selected_first"] == "—"  # no validation days evaluated
    assert verdicts(summary, row(0.74, 0.95))["selected_first"] == "met"
    # The selected model behind the shield (what the service ships) has its own verdict.
    both = verdicts(summary, row(0.74, 0.95), row(0.72, 0.89))
    assert both["selected_first"] == "met" and both["shielded_first"] == "missed: ANS by 0.010, CSR by 0.01"
    assert verdicts({"cbrl": row(0.8, 1.0)}) == {
        "cbrl_first": "—",
        "ensemble_first": "—",
        "selected_first": "—",
        "shielded_first": "—",
        "shield_bound": "—",
    }


def test_table_has_a_row_per_market_setting_and_split(tmp_path: Path):
    for market, split in (("bench", "test"), ("sparse", "ood")):
        out = tmp_path / market / f"mc-{split}"
        out.mkdir(parents=True)
        summary = {"pid": row(0.7, 0.9, days=30, zero=2), "cbrl": row(0.8, 0.95, seeds=5, days=30)}
        (out / "summary.json").write_text(json.dumps(summary))
    text = table(tmp_path)
    assert "| bench | MC | test | 30 | 2 |" in text and "| sparse | MC | ood | 30 | 2 |" in text
    assert text.count("| met |") == 2  # no validation days: nothing selected
    assert main([str(tmp_path / "missing")]) == 2
    assert main([str(tmp_path), "--plot", str(tmp_path / "suite.png")]) == 0
    assert (tmp_path / "suite.png").read_bytes()[:4] == b"\x89PNG"
    renamed = table(tmp_path, "residual CBRL")  # rcb train --residual runs, labelled cbrl in the summaries
    assert "# Market suite (residual CBRL)" in renamed and "| residual CBRL ensemble |" in renamed
    assert "residual CBRL >= PID + 0.03" in renamed and renamed.count("| met |") == 2
    assert main([str(tmp_path), "--name", "residual CBRL"]) == 0
    assert "| CRL |" not in text  # the rivals' columns appear only where they played
    summary["crl"] = row(0.6, 0.8, seeds=5, days=30)
    (tmp_path / "bench" / "mc-test" / "summary.json").write_text(json.dumps(summary))
    with_rivals = table(tmp_path)
    assert "| CRL |" in with_rivals and "| 0.600 (0.80) |" in with_rivals and "| Hard |" not in with_rivals


def test_presets_differ_from_the_benchmark_in_what_they_say():
    bench, _ = generate_day(0, False, preset("bench", impressions_per_day=20_000))
    shifted, _ = generate_day(0, False, preset("shifted", impressions_per_day=20_000))
    sparse, _ = generate_day(0, False, preset("sparse"))
    # Same draws, money 50x larger: utility and prices scale together.
    np.testing.assert_allclose(np.median(shifted.utility) / np.median(bench.utility), 50.0, rtol=0.01)
    np.testing.assert_allclose(np.median(shifted.market_price) / np.median(bench.market_price), 50.0, rtol=0.01)
    assert sparse.n_impressions < 0.25 * PRESETS["bench"].impressions_per_day
    assert sparse.delivery.astype(bool).mean() < 0.5 * bench.delivery.astype(bool).mean()
    _, volatile = generate_day(0, False, preset("volatile"))
    _, calm = generate_day(0, False, preset("bench"))
    assert np.std(np.diff(volatile["log_price_path"])) > np.std(np.diff(calm["log_price_path"]))
    with pytest.raises(ValueError, match="unknown market preset"):
        preset("lunar")


def test_cli_offers_exactly_the_suite_presets(tmp_path: Path):
    from rcb.commands.common import ConstraintRecipeName
    from rcb.commands.market import PRESET_NAMES
    from training.market.constraints import RECIPES

    assert tuple(PRESETS) == PRESET_NAMES
    assert tuple(ConstraintRecipeName) == RECIPES  # the CLI's choices are the recipes, spelled without importing them
    result = CliRunner().invoke(app, ["market", "generate", "--preset", "lunar", "--out", str(tmp_path / "m")])
    assert result.exit_code == 2 and "lunar" in result.output and "sparse" in result.output
    assert not (tmp_path / "m").exists()
