"""research/long_ood.py: the running gap to PID over days, and the gap on the first days against all of them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from research.long_ood import daily_gaps, first_and_all, main, running_mean


def episodes() -> pd.DataFrame:
    """40 days: the method is 0.1 ahead of PID on days 0-9, 0.1 behind on days 10-39; two seeds."""
    rows = []
    for day in range(40):
        pid = 0.5
        ahead = 0.1 if day < 10 else -0.1
        rows.append({"method": "pid", "seed": 0, "day": day, "score": pid, "feasible": True})
        for seed in (0, 1):  # the seeds straddle the day's value: their mean is pid + ahead
            value = pid + ahead + (0.02 if seed else -0.02)
            rows.append({"method": "shield:m", "seed": seed, "day": day, "score": value, "feasible": day % 4 != 0})
    return pd.DataFrame(rows).sample(frac=1.0, random_state=0)  # days out of order in the file


def test_the_running_gap_reads_days_in_order_and_averages_seeds():
    gaps = daily_gaps(episodes(), "shield:m")
    assert list(gaps.index) == list(range(40))
    np.testing.assert_allclose(gaps.to_numpy()[:10], 0.1)
    curve = running_mean(gaps)
    assert curve[9] == pytest.approx(0.1) and curve[-1] == pytest.approx((10 * 0.1 - 30 * 0.1) / 40)


def test_the_first_days_and_all_days_can_disagree():
    head, whole = first_and_all(episodes(), "shield:m", first=10)
    assert (head.days, whole.days) == (10, 40)
    assert head.ans == pytest.approx(0.1) and head.ans_low > 0
    assert whole.ans == pytest.approx(-0.05) and whole.ans_high < 0
    assert head.csr == pytest.approx(-3 / 10)  # days 0, 4, 8 infeasible for the method, never for PID


def test_the_command_prints_both_gaps_and_writes_the_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    path = tmp_path / "episodes.csv"
    episodes().to_csv(path, index=False)
    out = tmp_path / "plot" / "gap.png"
    assert main([str(out), "--row", "m", str(path), "shield:m", "--first", "10"]) == 0
    printed = capsys.readouterr().out
    assert "first 10 days: ANS +0.100" in printed and "all 40 days: ANS -0.050" in printed
    assert out.stat().st_size > 10_000


def test_a_method_that_did_not_play_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    path = tmp_path / "episodes.csv"
    episodes().to_csv(path, index=False)
    assert main([str(tmp_path / "x.png"), "--row", "m", str(path), "cbrl"]) == 2
    assert "no episodes of 'cbrl'" in capsys.readouterr().err


def test_first_must_name_at_least_one_day(tmp_path: Path):
    path = tmp_path / "episodes.csv"
    episodes().to_csv(path, index=False)
    with pytest.raises(SystemExit) as exit_:
        main([str(tmp_path / "x.png"), "--row", "m", str(path), "shield:m", "--first", "0"])
    assert exit_.value.code == 2
