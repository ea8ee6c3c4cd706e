"""research/shield_sweep.py: one bidder behind several shield settings, its rows rcb evaluate's."""

from __future__ import annotations

from dataclasses import asdict

import pandas as pd
import pytest
import typer
from artifact_fixtures import SETTING, exported_runs
from typer.testing import CliRunner

from model.shield import ShieldConfig
from research.shield_sweep import main as shield_sweep_main
from research.shield_sweep import parse_config, sweep
from research.significance import paired_gap
from training.evaluation.evaluate import EvaluationError, evaluate
from training.evaluation.methods import parse_methods
from training.market.dataset import Market


def test_the_shield_sweep_plays_each_setting_beside_the_pid(tmp_path_factory: pytest.TempPathFactory):
    """``python -m research.shield_sweep``: the default config's row is ``shield:onnx:MODEL`` of rcb evaluate."""
    exported = exported_runs(tmp_path_factory)
    model = f"onnx:{exported.cbrl_model}"
    assert parse_config("wide")[1] == ShieldConfig()
    assert parse_config("asym:tight_above=0,warmup_slots=3")[1] == ShieldConfig(tight_above=0.0, warmup_slots=3)
    for bad in ("x:nosuch=1", "x:tight", "x:tight_above=2", "x:tight=wide", "pid", "unshielded:tight=0.2", ":wide=1"):
        with pytest.raises(typer.BadParameter):
            parse_config(bad)
    # The command line: clear errors, exit 2, for a repeated name, an unknown split or a directory that is no market.
    app = typer.Typer()
    app.command()(shield_sweep_main)
    base = [str(exported.market), "--method", model, "--setting", SETTING]
    for args, said in (
        (["--config", "a", "--config", "a"], "repeat"),
        (["--config", "a", "--split", "tomorrow"], "tomorrow"),
    ):
        result = CliRunner().invoke(app, base + args)
        assert result.exit_code == 2 and said in result.output
    result = CliRunner().invoke(app, [str(exported.cbrl_run), "--method", model, "--config", "a"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    configs = [parse_config("default"), parse_config("open:roi_slack=0,roi_alarm=1,tight=0.7,tight_above=0.7")]
    summary, episodes = sweep(exported.market, "test", SETTING, model, configs, seeds=2)
    assert list(summary) == ["pid", "unshielded", "default", "open"]
    # The episodes pair by day for research.significance: one PID play, two of each stochastic row.
    assert episodes.groupby("method")["seed"].nunique().to_dict() == {
        "pid": 1,
        "unshielded": 2,
        "default": 2,
        "open": 2,
    }
    assert paired_gap(episodes, "default", "pid").days == episodes["day"].nunique()
    written = tmp_path_factory.mktemp("sweep-episodes") / "episodes.csv"
    result = CliRunner().invoke(app, [*base, "--config", "default", "--seeds", "1", "--episodes", str(written)])
    assert result.exit_code == 0, result.output
    assert set(pd.read_csv(written)["method"]) == {"pid", "unshielded", "default"}
    played = evaluate(Market.open(exported.market), SETTING, "test", parse_methods(f"shield:{model}"), seeds=2)
    assert summary["default"]["ans_median"] == played.summary[f"shield:{model}"]["ans_median"]
    assert summary["default"]["csr"] == played.summary[f"shield:{model}"]["csr"]
    assert summary["default"]["config"] == asdict(ShieldConfig())
    # A band as wide as the default's widest in every state never acts more often than the default.
    assert summary["open"]["shield_acted_share"] <= summary["default"]["shield_acted_share"]
    for refused in (str(exported.cbrl_run), "pid"):  # a run directory is not one of the forms; pid is the reference
        with pytest.raises(EvaluationError, match="onnx:MODEL_DIR, ensemble:LABEL=GLOB or a baseline"):
            sweep(exported.market, "test", SETTING, refused, configs, seeds=1)
    # A tuned baseline may be the bidder behind the shield: its rows are rcb evaluate's, the planner's included, which
    # plays validation (and train) days each without its own scenario there as it does in rcb evaluate.
    for baseline_method, split in (("rm", "test"), ("plan", "validation")):
        baseline, _ = sweep(exported.market, split, SETTING, baseline_method, configs[:1], seeds=1)
        methods = parse_methods(f"{baseline_method},shield:{baseline_method}")
        played = evaluate(Market.open(exported.market), SETTING, split, methods, seeds=1)
        for row, method in (("unshielded", baseline_method), ("default", f"shield:{baseline_method}")):
            assert baseline[row]["ans_median"] == played.summary[method]["ans_median"], (split, method)
            assert baseline[row]["csr"] == played.summary[method]["csr"], (split, method)
    # On validation days, a model with a member that held out another fold is refused (those are its training days).
    import json
    import shutil

    folded = tmp_path_factory.mktemp("sweep-folded") / "model"
    shutil.copytree(exported.cbrl_model, folded)
    card = json.loads((folded / "model.json").read_text())
    card["training"]["config"]["member_validation_folds"] = [1]
    (folded / "model.json").write_text(json.dumps(card))
    with pytest.raises(EvaluationError, match="held out validation fold 1"):
        sweep(exported.market, "validation", SETTING, f"onnx:{folded}", configs, seeds=1)
