"""research/selection.py: the rule that ships the ensemble or one run, on validation days only."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from research.selection import SELECTION_MARGIN, choose, choose_training_days, main, select
from research.suite_report import selected_gap, selected_rows, selection_of, split_episodes, table


def episodes(method: str, seed: int, scores: list[float], feasible: list[bool] | None = None) -> pd.DataFrame:
    """Episodes whose score per day is ``scores`` (oracle delivery 1, delivery = score), all feasible unless told."""
    feasible = feasible or [True] * len(scores)
    return pd.DataFrame(
        {
            "method": method,
            "seed": seed,
            "day": range(len(scores)),
            "delivery": scores,
            "cost": [d / 2 if ok else d * 2 for d, ok in zip(scores, feasible, strict=True)],
            "roi_target": 1.0,
            "budget": 10.0,
            "oracle_delivery": 1.0,
            "feasible": feasible,
            "score": [d * ok for d, ok in zip(scores, feasible, strict=True)],
        }
    )


def played(runs: list[float], ensemble: float) -> pd.DataFrame:
    """Run k scores runs[k] on each of 4 days; the ensemble scores ``ensemble`` with every seed."""
    frames = [episodes("cbrl", k, [score] * 4) for k, score in enumerate(runs)]
    frames += [episodes("ensemble:cbrl", k, [ensemble] * 4) for k in range(len(runs))]
    return pd.concat(frames, ignore_index=True)


def test_the_ensemble_ships_unless_a_run_beats_it_by_more_than_the_margin():
    assert choose(0.80, 0.79) == "ensemble"
    assert choose(0.79 + SELECTION_MARGIN, 0.79) == "ensemble"  # not more than the margin
    assert choose(0.80 + SELECTION_MARGIN, 0.79) == "single"
    assert choose(float("nan"), 0.5) == "ensemble" and choose(0.5, float("nan")) == "single"


def test_select_scores_each_run_on_its_own_seed_and_names_the_best():
    got = select(played([0.60, 0.85, 0.70], ensemble=0.84))
    assert (got.choice, got.best_seed) == ("ensemble", 1)
    assert got.single_validation == pytest.approx(0.85) and got.ensemble_validation == pytest.approx(0.84)
    got = select(played([0.60, 0.90, 0.70], ensemble=0.84))
    assert (got.choice, got.best_seed) == ("single", 1)
    # An infeasible run scores 0 on those days, whatever it delivered.
    frames = [episodes("cbrl", 0, [0.9] * 4, [False] * 4), episodes("cbrl", 1, [0.5] * 4)]
    assert select(pd.concat(frames, ignore_index=True)).best_seed == 1
    with pytest.raises(ValueError, match="no episodes of 'cbrl'"):
        select(episodes("pid", 0, [0.5]))


def test_cli_prints_the_choice(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    played([0.6, 0.9], ensemble=0.8).to_csv(tmp_path / "episodes.csv", index=False)
    assert main([str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["choice"] == "single"
    assert main([str(tmp_path)]) == 0
    assert "the single run of seed 1" in capsys.readouterr().out
    assert main([str(tmp_path / "missing")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_suite_report_plays_the_selection_on_test(tmp_path: Path):
    market = tmp_path / "bench"
    (market / "mc-validation").mkdir(parents=True)
    played([0.6, 0.9], ensemble=0.8).to_csv(market / "mc-validation" / "episodes.csv", index=False)
    (market / "mc-test").mkdir()
    test_days = pd.concat(
        [
            episodes("cbrl", 0, [0.7] * 4),
            episodes("cbrl", 1, [0.5] * 4),
            episodes("shield:cbrl", 0, [0.75] * 4),
            episodes("shield:cbrl", 1, [0.55] * 4),
            episodes("pid", 0, [0.6] * 4),
        ],
        ignore_index=True,
    )
    test_days.to_csv(market / "mc-test" / "episodes.csv", index=False)
    summary = {"pid": {"ans_median": 0.6, "csr": 1.0, "n_seeds": 1, "n_episodes": 4, "n_zero_oracle": 0}}
    (market / "mc-test" / "summary.json").write_text(json.dumps(summary))
    # Validation picked seed 1 (0.9 > 0.8 + margin): on test it is that run's own episodes, 0.5.
    selection = selection_of(tmp_path, "bench", "mc")
    played_test = split_episodes(tmp_path, "bench", "mc", "test")
    got, shielded = selected_rows(summary, selection, played_test)
    assert got == pytest.approx({"ans_median": 0.5, "csr": 1.0})
    assert shielded == pytest.approx({"ans_median": 0.55, "csr": 1.0})
    # Its gap over PID is seed 1's shielded days against PID's, the same every day: no spread to resample.
    gap = selected_gap(selection, played_test)
    assert gap is not None and gap.days == 4
    assert (gap.ans_low, gap.ans, gap.ans_high) == pytest.approx((-0.05, -0.05, -0.05))
    assert split_episodes(tmp_path, "bench", "mc", "ood") is None and selected_gap(selection, None) is None
    text = table(tmp_path)
    assert "0.500 (1.00) s1 | 0.550 (1.00) | -0.050 [-0.050, -0.050]; CSR +0.00 [+0.00, +0.00] |" in text
    assert "missed: ANS by 0.130" in text and "missed: ANS by 0.080" in text


def test_pooled_runs_are_served_only_when_their_ensemble_scores_higher_on_the_home_days(tmp_path: Path, capsys):
    assert choose_training_days(0.80, 0.81) == "pooled"
    assert choose_training_days(0.80, 0.80) == "one-market"  # a tie: the cheaper runs
    assert (
        choose_training_days(0.80, float("nan")) == "one-market" and choose_training_days(float("nan"), 0.5) == "pooled"
    )
    out = tmp_path / "validation"
    out.mkdir()
    frames = [episodes("shield:ensemble:sc", k, [0.70, 0.74]) for k in range(3)]
    frames += [episodes("shield:ensemble:pooled", k, [0.72, 0.70 + 0.01 * k]) for k in range(3)]  # median 0.715
    pd.concat(frames, ignore_index=True).to_csv(out / "episodes.csv", index=False)
    args = [str(out), "--ensemble", "shield:ensemble:sc", "--pooled", "shield:ensemble:pooled", "--json"]
    assert main(args) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["choice"] == "one-market"
    assert got["one_market_validation"] == pytest.approx(0.72) and got["pooled_validation"] == pytest.approx(0.715)
    assert main([str(out), "--ensemble", "shield:ensemble:sc", "--pooled", "ensemble:nothing"]) == 2
    assert "no episodes of 'ensemble:nothing'" in capsys.readouterr().err
