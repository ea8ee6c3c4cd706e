"""Learning curves across seeds (Fig. 6) and the speed measure: updates to reach a reference's final score."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from rcb.cli import app
from training.evaluation.curves import CurveError, expand_runs, load_group, speed_table, steps_to_reach


def _run(root: Path, name: str, scores: list[float], updates_per_epoch: int = 100) -> Path:
    run = root / name
    run.mkdir(parents=True)
    with (run / "curves.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=["epoch", "updates", "train_score", "validation_score"])
        writer.writeheader()
        for epoch, score in enumerate(scores):
            writer.writerow(
                {
                    "epoch": epoch,
                    "updates": (epoch + 1) * updates_per_epoch,
                    "train_score": 0,
                    "validation_score": score,
                }
            )
    return run


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    # hard's final (mean of its last 3 epochs, averaged over seeds) is 0.6; crl's mean curve reaches it at epoch 1.
    _run(tmp_path, "hard-s0", [0.1, 0.2, 0.3, 0.5, 0.6, 0.7])
    _run(tmp_path, "hard-s1", [0.1, 0.2, 0.3, 0.5, 0.6, 0.7])
    _run(tmp_path, "crl-s0", [0.4, 0.7, 0.7, 0.7, 0.7, 0.7, 0.9])  # one epoch longer: truncated to the shortest
    _run(tmp_path, "crl-s1", [0.4, 0.5, 0.7, 0.7, 0.7, 0.7])
    _run(tmp_path, "flat-s0", [0.1] * 6)
    return tmp_path


def test_groups_align_seeds_and_measure_updates_to_the_reference_final(runs: Path):
    hard = load_group("hard", expand_runs(f"{runs}/hard-s*"))
    crl = load_group("crl", expand_runs(f"{runs}/crl-s*"))
    flat = load_group("flat", expand_runs(f"{runs}/flat-s*"))
    assert crl.scores.shape == (2, 6) and list(crl.updates) == [100, 200, 300, 400, 500, 600]
    assert hard.final() == pytest.approx(0.6)
    np.testing.assert_allclose(crl.mean, [0.4, 0.6, 0.7, 0.7, 0.7, 0.7])
    assert steps_to_reach(crl, 0.6) == 200 and math.isinf(steps_to_reach(flat, 0.6))
    table = {row["method"]: row for row in speed_table([hard, crl, flat], "hard")}
    assert table["crl"]["share_of_reference_updates"] == pytest.approx(200 / 600)
    assert table["hard"]["updates_to_reference_final"] == 500  # hard's own mean first reaches 0.6 at epoch 4
    assert math.isinf(table["flat"]["share_of_reference_updates"])
    with pytest.raises(CurveError, match="reference 'cbrl'"):
        speed_table([hard, crl], "cbrl")
    with pytest.raises(CurveError, match="no training run"):
        expand_runs(f"{runs}/none-*")


def test_curves_command_plots_and_prints_the_table(runs: Path):
    out = runs / "fig" / "curves.png"
    result = CliRunner().invoke(app, ["curves", f"hard={runs}/hard-s*", f"crl={runs}/crl-s*", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert out.stat().st_size > 0
    assert "| crl | 0.700 | 200 | 0.33 |" in result.output
    bad = CliRunner().invoke(app, ["curves", "hard", "--out", str(out)])
    assert bad.exit_code == 2 and "LABEL=GLOB" in bad.output
