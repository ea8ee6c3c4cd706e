"""research/significance.py: the paired bootstrap of a method's daily gap over PID."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from research.significance import main, paired_gap


def days(method: str, seed: int, scores: list[float], feasible: list[bool]) -> pd.DataFrame:
    return pd.DataFrame(
        {"method": method, "seed": seed, "day": range(len(scores)), "score": scores, "feasible": feasible}
    )


def test_the_gap_is_the_mean_daily_difference_and_its_interval_holds_it():
    rng = np.random.default_rng(3)
    pid = rng.uniform(0.3, 0.7, 30)
    ours = pid + rng.normal(0.05, 0.05, 30)
    feasible_pid = [True] * 25 + [False] * 5
    feasible_ours = [True] * 27 + [False] * 3
    episodes = pd.concat(
        [days("pid", 0, list(pid), feasible_pid), days("shield:x", 0, list(ours), feasible_ours)], ignore_index=True
    )
    gap = paired_gap(episodes, "shield:x")
    assert gap.days == 30
    assert gap.ans == pytest.approx(float(np.mean(ours - pid)))
    assert gap.ans_low < gap.ans < gap.ans_high
    # Paired: the days' common spread (0.3-0.7) cancels, so the interval is about the gaps' own spread.
    assert gap.ans_high - gap.ans_low < 0.06
    assert gap.csr == pytest.approx(2 / 30)
    assert gap.csr_low <= gap.csr <= gap.csr_high
    assert paired_gap(episodes, "shield:x", rng_seed=0) == gap  # seeded: the same interval every time


def test_seeds_average_per_day_and_one_seed_can_be_picked():
    episodes = pd.concat(
        [
            days("pid", 0, [0.5, 0.5], [True, True]),
            days("cbrl", 0, [0.7, 0.7], [True, True]),
            days("cbrl", 1, [0.3, 0.5], [True, False]),
        ],
        ignore_index=True,
    )
    assert paired_gap(episodes, "cbrl").ans == pytest.approx(((0.5 - 0.5) + (0.6 - 0.5)) / 2)
    assert paired_gap(episodes, "cbrl").csr == pytest.approx(-0.25)
    one = paired_gap(episodes, "cbrl", seed=1)
    assert one.ans == pytest.approx(-0.1) and one.csr == pytest.approx(-0.5)


def test_missing_methods_and_disjoint_days_are_clear_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    episodes = pd.concat([days("pid", 0, [0.5], [True]), days("x", 0, [0.5], [True])], ignore_index=True)
    with pytest.raises(ValueError, match="no episodes of 'y'"):
        paired_gap(episodes, "y")
    with pytest.raises(ValueError, match="with seed 4"):
        paired_gap(episodes, "x", seed=4)
    shifted = episodes.assign(day=[0, 1])
    with pytest.raises(ValueError, match="no day in common"):
        paired_gap(shifted, "x")
    path = tmp_path / "episodes.csv"
    episodes.to_csv(path, index=False)
    assert main([str(path), "x"]) == 0
    assert "x - pid over 1 days" in capsys.readouterr().out
    assert main([str(path), "y"]) == 2
    assert "no episodes of 'y'" in capsys.readouterr().err
    assert main([str(tmp_path / "none.csv"), "x"]) == 2
