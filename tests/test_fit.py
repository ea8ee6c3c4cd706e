"""``rcb fit`` (:mod:`training.fit`): candidates fitted on the train days less their validation fold, played there as
served, chosen by a fixed rule, and the chosen one written as a model that ``onnx:`` and ``shield:onnx:`` play."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from cli_checks import assert_one_line_error
from typer.testing import CliRunner

from model.artifact import CARD_FILE, load_artifact, read_card
from model.contract import Setting
from rcb.cli import app
from training.evaluation.evaluate import episode_rows, evaluate, summarize
from training.export.planner import export_planner
from training.fit.candidates import FitError, HeldOut, check_existing
from training.fit.estimate import estimate
from training.fit.intervals import figures, score_matrix
from training.fit.rule import PID, Row, RuleError, choose, eligible, learned_holding_pid_csr
from training.fit.runs import CANDIDATE
from training.fit.serving import serve
from training.fit.workdir import WorkDir
from training.market.dataset import Market
from training.market.generator import config_with, generate_market
from training.replay.dayset import DaySet, split_validation

SETTING = "mc"
BUDGET = ["--epochs", "2", "--updates-per-epoch", "20", "--play-seeds", "2"]


# --- The rule ------------------------------------------------------------------------------------------------------


def test_the_rule_picks_the_best_eligible_candidate_never_an_ineligible_one():
    rows = [
        Row(PID, "controller", 0.60, 0.80),
        Row("rm", "controller", 0.55, 0.80),
        Row("plan", "planner", 0.90, 0.60),  # the best ANS, below the PID's CSR
        Row("cbrl", "policy", 0.70, 0.80),
        Row("other", "policy", 0.65, 1.00),
        Row("cem", "reference", 0.95, 1.00),  # a reference row: never chosen
    ]
    choice = choose(rows)
    assert choice.chosen == "cbrl"
    assert "plan" not in choice.eligible and "cem" not in choice.eligible
    assert choice.eligible == (PID, "rm", "cbrl", "other")


def test_the_controller_is_chosen_when_nothing_beats_it():
    rows = [Row(PID, "controller", 0.70, 0.9), Row("plan", "planner", 0.69, 1.0), Row("cbrl", "policy", 0.9, 0.8)]
    choice = choose(rows)
    assert choice.chosen == PID and choice.chose_pid
    assert [r.name for r in learned_holding_pid_csr(rows)] == ["plan"]
    nothing_safe = [Row(PID, "controller", 0.2, 1.0), Row("cbrl", "policy", 0.9, 0.99)]
    assert choose(nothing_safe).chosen == PID and learned_holding_pid_csr(nothing_safe) == []


def test_the_pid_is_eligible_whatever_its_csr_and_equal_csr_is_eligible():
    rows = [Row(PID, "controller", 0.1, 0.0), Row("cbrl", "policy", 0.3, 0.0)]
    assert [r.name for r in eligible(rows)] == [PID, "cbrl"]
    assert choose([Row(PID, "controller", 0.5, 0.7), Row("cbrl", "policy", 0.6, 0.7 - 1e-12)]).chosen == "cbrl"


def test_ties_go_to_the_simpler_kind_then_the_order_listed():
    rows = [
        Row(PID, "controller", 0.5, 0.8),
        Row("cbrl", "policy", 0.7, 0.8),
        Row("plan", "planner", 0.7, 0.8),
        Row("rm", "controller", 0.7, 0.8),
    ]
    assert choose(rows).chosen == "rm"
    assert choose(rows[:3]).chosen == "plan"
    assert choose([*rows[:2], Row("other", "policy", 0.7, 0.9)]).chosen == "cbrl"
    assert choose([Row(PID, "controller", 0.7, 0.8), Row("rm", "controller", 0.7, 0.8)]).chosen == PID


def test_the_rule_refuses_rows_it_cannot_read():
    with pytest.raises(RuleError):
        choose([Row("cbrl", "policy", 0.5, 1.0)])
    with pytest.raises(RuleError):
        choose([Row(PID, "controller", 0.5, 1.0), Row(PID, "controller", 0.6, 1.0)])
    with pytest.raises(RuleError):
        choose([Row(PID, "controller", 0.5, 1.0), Row("cbrl", "policy", float("nan"), 1.0)])


# --- Intervals and the estimate ------------------------------------------------------------------------------------


def test_figures_are_rcb_evaluates_and_their_intervals_hold_them():
    rng = np.random.default_rng(0)
    days, frames = list(range(10, 17)), []
    for seed in range(3):
        delivery, cost = rng.uniform(0.5, 2, 7), rng.uniform(0.5, 2, 7)
        frames.append(
            pd.DataFrame(
                {
                    "method": "m",
                    "seed": seed,
                    "day": days,
                    "delivery": delivery,
                    "cost": cost,
                    "roi": delivery / cost,
                    "feasible": delivery >= cost,
                    "oracle_delivery": 2.0,
                    "roi_target": 1.0,
                    "budget": np.inf,
                    "score": delivery / 2.0 * (delivery >= cost),
                }
            )
        )
    episodes = pd.concat(frames, ignore_index=True)
    found = figures(*score_matrix(episodes.sample(frac=1, random_state=1), days))  # any row order
    summary = summarize(episodes, ["m"])["m"]
    assert found.ans == pytest.approx(summary["ans_median"]) and found.csr == pytest.approx(summary["csr"])
    assert found.ans_low <= found.ans <= found.ans_high and found.csr_low <= found.csr <= found.csr_high
    assert found.seeds == 3 and found.days == 7
    assert figures(*score_matrix(episodes, days)) == found  # seeded
    with pytest.raises(ValueError, match="one on each"):
        score_matrix(episodes[episodes["day"] != 12], days)


def test_the_estimate_grows_with_the_market_and_the_budget():
    small, large = estimate(10**5, 1, 2, 20), estimate(6 * 10**6, 1, 24, 600)
    assert small.minutes() == 1 and "minute " in small.line()
    assert large.seconds > 10 * small.seconds and large.training_seconds > large.replay_seconds
    assert estimate(6 * 10**6, 1, 0, 600).training_seconds == 0  # finished runs are not counted


# --- The command on a tiny market -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def market(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Ten train days (two held out), ten test days, 3000 impressions a day."""
    root = tmp_path_factory.mktemp("fit") / "market"
    generate_market(root, config_with(days_id=20, days_ood=0, impressions_per_day=3000, seed=5), workers=1)
    return root


@pytest.fixture(scope="module")
def fitted(market: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One ``rcb fit`` with a tiny training budget, and what it printed."""
    out = tmp_path_factory.mktemp("fitted") / "model"
    args = ["fit", str(market), "--setting", SETTING, "--out", str(out), *BUDGET, "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return {"out": out, "args": args, "summary": json.loads(result.stdout), "stderr": result.stderr}


def held_out_days(market: Path) -> list[int]:
    train = Market.open(market).split("train")
    return [train[i].day for i in split_validation(len(train))[1]]


def test_the_card_records_the_choice_the_candidates_and_the_days(fitted: dict[str, Any], market: Path):
    card = load_artifact(fitted["out"]).card
    fit = card.fit
    assert fit is not None
    names = [c["name"] for c in fit["candidates"]]
    assert names == [PID, "rm", "plan", CANDIDATE, "cem"]
    assert fit["chosen"] == fitted["summary"]["chosen"] and fit["chosen"] != "cem"
    assert fit["held_out_days"] == held_out_days(market)
    assert not set(fit["held_out_days"]) & set(fit["fitted_on_days"])
    assert fit["train_fingerprint"] == Market.open(market).split_fingerprint("train")
    assert fit["rule_code"] == "training/fit/rule.py" and "at least the PID's" in fit["rule"]
    for row in fit["candidates"]:
        assert row["ans_low"] <= row["ans"] <= row["ans_high"] and row["csr_low"] <= row["csr"] <= row["csr_high"]
    chosen = next(c for c in fit["candidates"] if c["chosen"])
    assert chosen["eligible"] and chosen["ans"] == max(c["ans"] for c in fit["candidates"] if c["eligible"])
    assert card.kind == chosen["kind"]
    pid = next(c for c in fit["candidates"] if c["name"] == PID)
    assert all(c["csr"] >= pid["csr"] for c in fit["candidates"] if c["eligible"])
    if chosen["kind"] == "controller":  # said on stderr in one line
        assert sum("is served" in line for line in fitted["stderr"].splitlines()) == 1
    else:
        assert card.safety_controller is not None
        assert card.safety_controller.data_fingerprint == fit["train_fingerprint"]
    report = Path(fitted["summary"]["report"]["plot"])
    assert report.read_bytes()[:4] == b"\x89PNG" and Path(fitted["summary"]["report"]["table"]).is_file()


def test_the_written_model_plays_as_onnx_and_behind_the_shield(fitted: dict[str, Any], market: Path):
    out = fitted["out"]
    methods = [f"onnx:{out}", f"shield:onnx:{out}"]
    if read_card(out).is_controller:
        methods.append(read_card(out).algorithm)  # a controller model plays its baseline's rows
    evaluation = evaluate(Market.open(market), SETTING, "test", methods, seeds=1)
    assert set(evaluation.summary) == set(methods)
    if read_card(out).is_controller:
        rows = evaluation.summary
        assert rows[methods[0]]["ans_median"] == pytest.approx(rows[methods[2]]["ans_median"])


def test_a_rerun_reuses_the_finished_work(fitted: dict[str, Any]):
    run = Path(fitted["summary"]["report"]["json"]).parents[1] / "runs" / "cbrl-s0"
    before = (run / "run.json").stat().st_mtime_ns, (run / "best.pt").stat().st_mtime_ns
    result = CliRunner().invoke(app, fitted["args"])
    assert result.exit_code == 0, result.output
    again = json.loads(result.stdout)
    assert again["trained"] == [] and again["reused"]["cbrl_export"]
    assert again["reused"]["plays"] == [c["name"] for c in fitted["summary"]["candidates"]]
    assert ((run / "run.json").stat().st_mtime_ns, (run / "best.pt").stat().st_mtime_ns) == before
    assert again["chosen"] == fitted["summary"]["chosen"]
    assert [c["ans"] for c in again["candidates"]] == [c["ans"] for c in fitted["summary"]["candidates"]]


def test_a_learned_candidate_is_written_with_the_markets_pid_around_it(
    fitted: dict[str, Any], market: Path, tmp_path: Path
):
    """Whatever the rule chose, the CBRL and planner candidates' serving path writes a model that loads and plays,
    its shield and fallback around the PID tuned on all the train days."""
    from training.fit.candidates import baseline_candidates, model_candidate

    work = WorkDir(Path(fitted["summary"]["report"]["json"]).parents[1])
    held = HeldOut.of(DaySet.load(Market.open(market), "train", SETTING))
    baselines, gains = baseline_candidates(held, work)
    cbrl = model_candidate(CANDIDATE, work.candidate(CANDIDATE), gains)
    plan = next(c for c in baselines if c.name == "plan")
    for candidate in (cbrl, plan):
        out = tmp_path / candidate.name
        card = serve(candidate, market, Setting(SETTING), out, {"chosen": candidate.name}, work)
        assert card.safety_controller is not None and card.fit == {"chosen": candidate.name}
        assert card.safety_controller.data_fingerprint == Market.open(market).split_fingerprint("train")
        loaded = load_artifact(out).card
        assert loaded.kind == candidate.kind and loaded.fit == {"chosen": candidate.name}
        assert not loaded.is_controller
        evaluation = evaluate(Market.open(market), SETTING, "test", [f"shield:onnx:{out}"], seeds=1)
        assert evaluation.summary[f"shield:onnx:{out}"]["n_episodes"] > 0


def test_require_learned_exits_1_when_a_controller_wins(fitted: dict[str, Any]):
    result = CliRunner().invoke(app, [*fitted["args"][:-1], "--require-learned", "--force"])
    if fitted["summary"]["kind"] == "controller":
        assert result.exit_code == 1, result.output
        assert len([line for line in result.stderr.splitlines() if line.startswith("error:")]) == 1
    else:
        assert result.exit_code == 0, result.output


def test_bad_input_exits_2_with_one_line(market: Path, tmp_path: Path):
    invoke = lambda *args: CliRunner().invoke(app, ["fit", *args, *BUDGET])  # noqa: E731
    assert_one_line_error(invoke(str(tmp_path / "nowhere"), "--setting", SETTING, "--out", str(tmp_path / "m")))
    (tmp_path / "file").write_text("x")
    assert_one_line_error(invoke(str(market), "--setting", SETTING, "--out", str(tmp_path / "file")), "is a file")
    assert_one_line_error(
        invoke(str(market), "--setting", SETTING, "--out", str(tmp_path / "file" / "m")), "not a directory"
    )
    assert_one_line_error(
        invoke(str(market), "--setting", SETTING, "--out", str(tmp_path / "m"), "--candidate", str(tmp_path)),
        "--candidate",
    )
    small = tmp_path / "small"
    generate_market(small, config_with(days_id=4, days_ood=0, impressions_per_day=500, seed=1), workers=1)
    assert_one_line_error(invoke(str(small), "--setting", SETTING, "--out", str(tmp_path / "m")), "train days")
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    assert_one_line_error(invoke(str(market), "--setting", SETTING, "--out", str(taken)), "holds no model")


def test_a_candidate_fitted_on_the_held_out_days_is_refused(fitted: dict[str, Any], market: Path, tmp_path: Path):
    planner = tmp_path / "plan"
    export_planner(market, Setting(SETTING), planner)  # holds every train day as a scenario
    with pytest.raises(FitError, match="scenario"):
        check_existing(planner, Market.open(market), Setting(SETTING))
    with pytest.raises(FitError, match="not sc"):
        check_existing(fitted["out"], Market.open(market), Setting("sc"))
    result = CliRunner().invoke(
        app, ["fit", str(market), "--setting", SETTING, "--out", str(tmp_path / "m"), "--candidate", str(planner)]
    )
    assert_one_line_error(result, "scenario")
    cbrl = Path(fitted["summary"]["report"]["json"]).parents[1] / "candidates" / CANDIDATE
    check_existing(cbrl, Market.open(market), Setting(SETTING))  # held out fold 0: the days the fit reads


def test_an_existing_candidate_is_played_and_may_be_copied(fitted: dict[str, Any], market: Path, tmp_path: Path):
    cbrl = Path(fitted["summary"]["report"]["json"]).parents[1] / "candidates" / CANDIDATE
    other = tmp_path / "given"
    other.mkdir()
    for name in (p.name for p in cbrl.iterdir()):
        (other / name).write_bytes((cbrl / name).read_bytes())
    out, work = tmp_path / "model", tmp_path / "work"
    args = ["fit", str(market), "--setting", SETTING, "--out", str(out), "--work", str(work), "--seeds", "0"]
    result = CliRunner().invoke(app, [*args, "--candidate", str(other), *BUDGET, "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    rows = {c["name"]: c for c in summary["candidates"]}
    assert str(other) in rows and CANDIDATE not in rows and not (work / "runs").exists()
    given = rows[str(other)]
    first = {c["name"]: c for c in fitted["summary"]["candidates"]}[CANDIDATE]
    assert (given["ans"], given["csr"]) == (first["ans"], first["csr"])  # the same model, the same shield
    if summary["chosen"] == str(other):
        card = read_card(out)
        assert card.fit is not None and card.safety_controller is not None
        assert (out / CARD_FILE).is_file() and card.training.run == read_card(cbrl).training.run


def test_episode_rows_feed_the_figures(market: Path):
    """The plays' rows are the harness's: one per day and seed, scored as rcb evaluate scores them."""
    days = DaySet.load(Market.open(market), "train", SETTING)
    held = HeldOut.of(days).held
    rows = episode_rows("x", 0, held, held.oracle_delivery, np.zeros(len(held)))
    score, feasible = score_matrix(rows, held.days)
    assert score.shape == (1, len(held)) and feasible.all()
