"""training/rl/ensemble.py: K runs as one model (median log-ratio), in ``rcb evaluate`` and ``rcb export``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from artifact_fixtures import SETTING, exported_runs
from typer.testing import CliRunner

from model.artifact import load_artifact
from model.features import N_FEATURES
from rcb.cli import app
from training.bidders.base import play
from training.evaluation.evaluate import EvaluationError, evaluate
from training.evaluation.methods import method_warnings, parse_methods
from training.market.dataset import Market
from training.replay.dayset import DaySet, split_validation
from training.rl.encoder import PosteriorEncoder
from training.rl.ensemble import EnsembleActor, ensemble_of, median_last
from training.rl.networks import TanhGaussianPolicy
from training.rl.runs import RunError, load_ensemble_bidder


def test_median_of_the_members_log_ratios():
    torch.manual_seed(0)
    d = 3
    actors = [TanhGaussianPolicy(N_FEATURES + d, hidden=16, step=0.3) for _ in range(3)]
    ensemble = EnsembleActor(actors, member_latent_dim=d)
    obs = torch.rand(5, N_FEATURES)
    z = torch.randn(5, 3 * d)
    with torch.no_grad():
        got = ensemble.act(torch.cat([obs, z], dim=1)).numpy()
        members = np.stack(
            [a.act(torch.cat([obs, z[:, k * d : (k + 1) * d]], dim=1)).numpy() for k, a in enumerate(actors)]
        )
    np.testing.assert_allclose(got, np.exp(np.median(np.log(np.maximum(members, 0.01)), axis=0)), rtol=1e-6)
    np.testing.assert_allclose(median_last(torch.tensor([[1.0, 4.0], [3.0, 1.0]])).numpy(), [2.5, 2.0])
    with pytest.raises(ValueError, match="with and without"):
        ensemble_of(actors[:2], [PosteriorEncoder(2 * N_FEATURES + 1, d), None])
    residual = TanhGaussianPolicy(N_FEATURES + 1 + d, hidden=16, step=0.3, residual=True)
    with pytest.raises(ValueError, match="mixes residual and non-residual"):
        EnsembleActor([actors[0], residual], member_latent_dim=d)


def test_an_ensemble_of_residual_members_reads_the_controller_feature_once():
    """Residual members share the observation (``controller_ratio`` last) and take their own z after it."""
    torch.manual_seed(1)
    d, width = 2, N_FEATURES + 1
    actors = [TanhGaussianPolicy(width + d, hidden=16, step=0.5, residual=True) for _ in range(3)]
    obs, z = torch.rand(4, width), torch.randn(4, 3 * d)
    with torch.no_grad():
        got = EnsembleActor(actors, member_latent_dim=d).act(torch.cat([obs, z], dim=1)).numpy()
        members = np.stack(
            [a.act(torch.cat([obs, z[:, k * d : (k + 1) * d]], dim=1)).numpy() for k, a in enumerate(actors)]
        )
    np.testing.assert_allclose(got, np.exp(np.median(np.log(members), axis=0)), rtol=1e-6)


def test_an_ensemble_of_one_run_plays_as_that_run(tmp_path_factory: pytest.TempPathFactory):
    exported = exported_runs(tmp_path_factory)
    run = exported.cbrl_run
    methods = parse_methods(f"{run},ensemble:one={run},shield:ensemble:one={run}")
    result = evaluate(Market.open(exported.market), SETTING, "test", methods, seeds=1)
    assert set(result.summary) == {str(run), "ensemble:one", "shield:ensemble:one"}
    episodes = result.episodes
    alone = episodes[episodes["method"] == str(run)]
    one = episodes[episodes["method"] == "ensemble:one"]
    np.testing.assert_allclose(one["delivery"].to_numpy(), alone["delivery"].to_numpy(), rtol=1e-12)
    np.testing.assert_allclose(one["cost"].to_numpy(), alone["cost"].to_numpy(), rtol=1e-12)
    assert result.meta["tuned"]["ensemble:one"]["runs"] == [str(run)]
    assert 0.0 <= result.meta["tuned"]["shield:ensemble:one"]["shield_acted_share"] <= 1.0


def test_shielding_the_runs_of_an_ensembles_label_is_warned_about(tmp_path_factory: pytest.TempPathFactory):
    """``shield:ens=G`` beside ``ensemble:ens=G`` shields the runs, not the ensemble: valid, but warned about."""
    run = exported_runs(tmp_path_factory).cbrl_run
    slip = parse_methods(f"ensemble:ens={run},shield:ens={run}")
    (warning,) = method_warnings(slip)
    assert "'shield:ens=" in warning and f"shield:ensemble:ens={run}" in warning
    assert method_warnings(parse_methods(f"ensemble:ens={run},shield:ensemble:ens={run},shield:runs={run}")) == []
    assert method_warnings(parse_methods(f"ens={run},shield:ens={run}")) == []
    result = CliRunner().invoke(
        app,
        [
            "evaluate",
            str(exported_runs(tmp_path_factory).market),
            "--setting",
            SETTING,
            "--methods",
            f"ensemble:ens={run},shield:ens={run}",
            "--seeds",
            "1",
            "--out",
            str(tmp_path_factory.mktemp("warned")),
        ],
    )
    assert result.exit_code == 0, result.output
    stderr = " ".join(result.stderr.split())  # rich may wrap a long path
    assert "warning:" in stderr and "shield:ensemble:ens=" in stderr


def test_an_exported_ensemble_is_one_ordinary_model_that_plays_as_the_torch_ensemble(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
):
    exported = exported_runs(tmp_path_factory)
    runs = [exported.cbrl_run, exported.cbrl_run, exported.cbrl_run]  # three members, three noise draws
    out = tmp_path / "ensemble"
    result = CliRunner().invoke(app, ["export", *[f"--run={r}" for r in runs], "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    artifact = load_artifact(out)
    single = load_artifact(exported.cbrl_model)
    assert artifact.card.latent_dim == 3 * single.card.latent_dim
    assert artifact.card.training.members == [str(r) for r in runs]
    assert artifact.card.training.controller == single.card.training.controller
    assert len(artifact.card.evaluation.member_validation_scores) == 3
    assert artifact.card.training.config["member_validation_folds"] == [0, 0, 0]  # every member's, not member 0's
    # The ONNX model plays as the torch ensemble rcb evaluate builds (float rounding aside).
    market = Market.open(exported.market)
    bidder, _ = load_ensemble_bidder(runs)
    played = evaluate(market, SETTING, "test", parse_methods(f"onnx:{out}"), seeds=2)
    days = DaySet.load(market, "test", SETTING)
    for seed in (0, 1):
        torch_outcome = play(bidder, days.indexes(1), days.episode_days(), days.registration(), seed)
        rows = played.episodes[played.episodes["seed"] == seed]
        np.testing.assert_allclose(rows["delivery"].to_numpy(), torch_outcome.delivery, rtol=2e-2)


def test_export_reads_a_quoted_glob_as_every_run_it_matches(tmp_path_factory: pytest.TempPathFactory, tmp_path: Path):
    """``rcb export --run 'DIR/cbrl-s*/epoch-*'``: a snapshot ensemble's members in one option, sorted as ``rcb
    evaluate``'s ``ensemble:LABEL=GLOB`` reads them; a glob matching no run is refused and writes nothing."""
    import shutil

    exported = exported_runs(tmp_path_factory)
    members = [tmp_path / "snapshots" / f"cbrl-s{k}" / f"epoch-00{e}" for k in (1, 0) for e in (3, 2)]
    for member in members:
        shutil.copytree(exported.cbrl_run, member)
    (tmp_path / "snapshots" / "cbrl-s0" / "epoch-009").mkdir()  # no run.json: not a member
    out = tmp_path / "model"
    pattern = f"{tmp_path}/snapshots/cbrl-s*/epoch-*"
    result = CliRunner().invoke(app, ["export", "--run", pattern, "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    assert load_artifact(out).card.training.members == [str(m) for m in sorted(members)]
    nothing = CliRunner().invoke(app, ["export", "--run", f"{tmp_path}/nope-*", "--out", str(tmp_path / "m2")])
    assert nothing.exit_code == 2 and "matches no training run directory" in nothing.output
    assert not (tmp_path / "m2").exists()


def test_an_ensemble_refuses_runs_that_do_not_belong_together(tmp_path_factory: pytest.TempPathFactory):
    exported = exported_runs(tmp_path_factory)
    with pytest.raises(RunError, match="with and without"):
        load_ensemble_bidder([exported.cbrl_run, exported.hard_run])
    with pytest.raises(RunError, match="different reference controllers"):
        load_ensemble_bidder([exported.cbrl_run, exported.residual_run])
    with pytest.raises(EvaluationError, match="with and without"):
        evaluate(
            Market.open(exported.market),
            SETTING,
            "test",
            parse_methods(f"ensemble:mixed={exported.market.parent}/[ch]*"),
            seeds=1,
        )


def test_the_validation_split_is_the_days_training_held_out(tmp_path_factory: pytest.TempPathFactory):
    """``--split validation`` plays the train days the runs' model selection read (how a run and an ensemble
    are compared without test days)."""
    exported = exported_runs(tmp_path_factory)
    market = Market.open(exported.market)
    result = evaluate(market, SETTING, "validation", parse_methods("pid"), seeds=1)
    train = DaySet.load(market, "train", SETTING)
    held_out = [train.days[i] for i in split_validation(train)[1]]
    assert sorted(result.episodes["day"]) == sorted(held_out) and 0 < len(held_out) < len(train)


def test_the_validation_split_refuses_runs_that_held_out_another_fold(tmp_path_factory: pytest.TempPathFactory):
    """A run trained with ``--validation-fold K`` (K > 0) learned from fold 0's days: scoring it there with
    ``--split validation`` would be in-sample, so it is refused with a clear message (alone, in a group, shielded)."""
    import json
    import shutil

    exported = exported_runs(tmp_path_factory)
    market = Market.open(exported.market)
    run = exported.cbrl_run
    folded = tmp_path_factory.mktemp("folded") / "cbrl-s0"
    shutil.copytree(run, folded)
    body = json.loads((folded / "run.json").read_text())
    body["config"]["validation_fold"] = 2
    (folded / "run.json").write_text(json.dumps(body))
    for methods in (str(folded), f"shield:folded={folded.parent}/cbrl-s*", f"ensemble:folded={folded.parent}/*"):
        with pytest.raises(EvaluationError, match="held out validation fold 2"):
            evaluate(market, SETTING, "validation", parse_methods(methods), seeds=1)
    evaluate(market, SETTING, "validation", parse_methods(str(run)), seeds=1)  # fold 0: allowed
    # An exported model whose card names a member of another fold is refused too.
    model = tmp_path_factory.mktemp("folded-model") / "model"
    shutil.copytree(exported.cbrl_model, model)
    card = json.loads((model / "model.json").read_text())
    card["training"]["config"]["member_validation_folds"] = [0, 3]
    (model / "model.json").write_text(json.dumps(card))
    with pytest.raises(EvaluationError, match="held out validation fold 3"):
        evaluate(market, SETTING, "validation", parse_methods(f"shield:onnx:{model}"), seeds=1)
    evaluate(market, SETTING, "validation", parse_methods(f"onnx:{exported.cbrl_model}"), seeds=1)
