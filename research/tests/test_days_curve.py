"""research/days_curve.py: a method's gap over its baseline against the number of train days."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from research.days_curve import main


def write(path: Path, ours: list[float], pid: list[float]) -> Path:
    rows = [("pid", 0, d, s, True) for d, s in enumerate(pid)] + [("x", 0, d, s, s > 0) for d, s in enumerate(ours)]
    pd.DataFrame(rows, columns=["method", "seed", "day", "score", "feasible"]).to_csv(path, index=False)
    return path


def test_prints_each_points_gap_and_draws_the_figure(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    few = write(tmp_path / "few.csv", [0.4, 0.0, 0.5], [0.5, 0.5, 0.5])
    many = write(tmp_path / "many.csv", [0.6, 0.6, 0.5], [0.5, 0.5, 0.5])
    out = tmp_path / "curve.png"
    code = main([str(out), "--method", "x", "--point", "test", "30", str(few), "--point", "test", "120", str(many)])
    assert code == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("test 30 train days, 3 days: ANS -0.200")  # (-0.1 - 0.5 + 0) / 3
    assert "CSR -0.33" in lines[0]
    assert lines[1].startswith("test 120 train days, 3 days: ANS +0.067")
    assert out.stat().st_size > 10_000  # a drawn PNG, not an empty file


def test_bad_points_are_clear_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    csv = write(tmp_path / "e.csv", [0.5], [0.5])
    assert main([str(tmp_path / "a.png"), "--method", "x", "--point", "test", "0", str(csv)]) == 2
    assert "positive integer" in capsys.readouterr().err
    assert main([str(tmp_path / "a.png"), "--method", "x", "--point", "test", "3", str(tmp_path / "no.csv")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main([str(tmp_path / "a.png"), "--method", "y", "--point", "test", "3", str(csv)]) == 2
    assert "no episodes of 'y'" in capsys.readouterr().err
    odd = tmp_path / "odd.csv"
    pd.DataFrame({"method": ["x"], "day": [0]}).to_csv(odd, index=False)
    assert main([str(tmp_path / "a.png"), "--method", "x", "--point", "test", "3", str(odd)]) == 2
    assert "not an `rcb evaluate` episodes.csv" in capsys.readouterr().err
    assert main([str(tmp_path), "--method", "x", "--point", "test", "3", str(csv)]) == 2
    assert "file path in an existing directory" in capsys.readouterr().err
    assert not (tmp_path / "a.png").exists()
