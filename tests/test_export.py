"""`rcb export` and :mod:`training.export.onnx`: torch vs onnxruntime parity, evaluation parity, atomic writes, the CLI.

The runs are tiny (see ``artifact_fixtures``); parity is a property of the graphs, not of training.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from artifact_fixtures import SETTING, Exported
from typer.testing import CliRunner

from model.artifact import ENCODER_FILE, load_artifact
from model.features import FEATURES, N_FEATURES
from model.trajectory import prefix_mask, transitions
from rcb.cli import app
from training.evaluation.evaluate import EvaluationError, evaluate
from training.evaluation.methods import parse_methods
from training.export import onnx as exporter
from training.export.destination import ExportError
from training.export.encoder_graph import OPSET
from training.export.onnx import ENCODER_ATOL, POLICY_ATOL, check_parity, export_run
from training.market.dataset import Market
from training.rl.runs import load_run_bidder

runner = CliRunner()


def random_obs(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    low = np.array([f.low for f in FEATURES], dtype=np.float32)
    high = np.array([f.high for f in FEATURES], dtype=np.float32)
    return (low + (high - low) * rng.random((*shape, N_FEATURES))).astype(np.float32)


@pytest.mark.parametrize("n", [1, 7, 300])
def test_policy_parity_over_batch_sizes(exported: Exported, n: int):
    rng = np.random.default_rng(n)
    for run, model in ((exported.cbrl_run, exported.cbrl_model), (exported.hard_run, exported.hard_model)):
        bidder, _ = load_run_bidder(run)
        artifact = load_artifact(model)
        obs = random_obs(rng, (n,))
        z = rng.standard_normal((n, artifact.latent_dim)).astype(np.float32) if artifact.bayesian else None
        with torch.no_grad():
            expected = bidder.policy.act(torch.as_tensor(obs if z is None else np.concatenate([obs, z], 1))).numpy()
        got = artifact.act(obs, z)
        assert got.shape == (n,) and got.dtype == np.float32
        np.testing.assert_allclose(got, expected, rtol=0, atol=POLICY_ATOL)
        assert np.all((got >= 0) & (got <= 4))


@pytest.mark.parametrize("n", [1, 7, 300])
@pytest.mark.parametrize("length", [1, 2, 47, 48])
def test_encoder_parity_over_batch_sizes_and_lengths(exported: Exported, n: int, length: int):
    """Rows hold 0 (fully padded), 1 (all but one padded for L = 48), L-1, L and random numbers of valid steps."""
    rng = np.random.default_rng([n, length])
    bidder, _ = load_run_bidder(exported.cbrl_run)
    artifact = load_artifact(exported.cbrl_model)
    steps = transitions(random_obs(rng, (n, length + 1)), 4 * rng.random((n, length)))
    lengths = rng.integers(0, length + 1, n)
    lengths[: min(n, 4)] = [1, 0, length - 1, length][: min(n, 4)]
    mask = prefix_mask(lengths, length)
    steps = np.where(mask[..., None], steps, 0).astype(np.float32)
    with torch.no_grad():
        mean, std = bidder.encoder(torch.as_tensor(steps), torch.as_tensor(mask))
    got_mean, got_std = artifact.posterior(steps, mask)
    assert got_mean.shape == got_std.shape == (n, artifact.latent_dim)
    assert np.isfinite(got_mean).all() and np.isfinite(got_std).all() and (got_std > 0).all()
    np.testing.assert_allclose(got_mean, mean.numpy(), rtol=0, atol=ENCODER_ATOL)
    np.testing.assert_allclose(got_std, std.numpy(), rtol=0, atol=ENCODER_ATOL)


def test_the_model_card_describes_the_run(exported: Exported):
    body = json.loads((exported.cbrl_run / "run.json").read_text())
    card = load_artifact(exported.cbrl_model).card
    assert card.algorithm == "cbrl" and str(card.setting) == SETTING and card.opset == OPSET
    assert card.latent_dim == body["config"]["latent_dim"] and card.transition_dim == 2 * N_FEATURES + 1
    assert card.training.data_fingerprint == body["data_fingerprint"]
    assert card.evaluation.best_validation_score == body["best_validation_score"]
    assert card.evaluation.history == body["history"] and card.training.epochs == len(body["history"])
    assert card.source_run == str(exported.cbrl_run) and card.training.config == body["config"]
    assert set(card.parity) == {"ratio", "mean", "std"} and max(card.parity.values()) < ENCODER_ATOL
    assert sorted(p.name for p in exported.cbrl_model.iterdir()) == ["encoder.onnx", "model.json", "policy.onnx"]


def test_the_card_carries_the_pid_tuned_on_the_train_days(exported: Exported):
    """The shield's reference controller fits the market the model was trained on: the card holds the PID
    baseline tuned on the run's train days (rcb evaluate's tuning, shared through its cache)."""
    from model.controller import GAIN_FIELDS
    from service.runner import ModelRunner
    from training.bidders.tuned import tuned_baseline
    from training.market.dataset import Market
    from training.replay.dayset import DaySet

    card = load_artifact(exported.cbrl_model).card
    market = Market.open(exported.market)
    pid, _ = tuned_baseline(market, "pid", SETTING, lambda: DaySet.load(market, "train", SETTING))
    assert card.training.controller == {k: pid.params()[k] for k in GAIN_FIELDS}
    runner = ModelRunner(exported.cbrl_model, use_shield=True)
    runner.load()
    gains = runner.gains  # what the service runs
    assert gains.tuned() == card.training.controller
    assert list(gains.traffic_profile) == list(card.training.traffic_profile)


def test_a_non_bayesian_run_exports_the_policy_alone(exported: Exported):
    artifact = load_artifact(exported.hard_model)
    assert artifact.card.latent_dim == 0 and artifact.card.transition_dim is None and not artifact.bayesian
    assert not (exported.hard_model / ENCODER_FILE).exists()
    assert [i.name for i in artifact._policy.get_inputs()] == ["obs"]
    assert set(artifact.card.parity) == {"ratio"}


@pytest.mark.parametrize("algo", ["cbrl", "hard", "residual"])
def test_evaluating_the_model_equals_evaluating_its_run(exported: Exported, algo: str):
    run, model = {
        "cbrl": (exported.cbrl_run, exported.cbrl_model),
        "hard": (exported.hard_run, exported.hard_model),
        "residual": (exported.residual_run, exported.residual_model),
    }[algo]
    methods = parse_methods(f"{run},onnx:{model}")
    result = evaluate(Market.open(exported.market), SETTING, "test", methods, seeds=2)
    episodes = result.episodes
    torch_rows = episodes[episodes["method"] == str(run)].reset_index(drop=True)
    onnx_rows = episodes[episodes["method"] == f"onnx:{model}"].reset_index(drop=True)
    assert len(onnx_rows) == len(torch_rows) > 0 and (torch_rows["delivery"] > 0).any()
    assert (onnx_rows[["seed", "day"]] == torch_rows[["seed", "day"]]).all().all()
    np.testing.assert_allclose(onnx_rows["delivery"], torch_rows["delivery"], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(onnx_rows["cost"], torch_rows["cost"], rtol=1e-9, atol=1e-9)
    assert (onnx_rows["feasible"] == torch_rows["feasible"]).all()
    assert result.meta["tuned"][f"onnx:{model}"]["algo"] == ("cbrl" if algo == "residual" else algo)


def test_a_residual_model_carries_the_controller_it_was_trained_around(exported: Exported):
    """``--residual``: the run fixes the PID tuned on its train days before training; the card carries exactly
    those gains and that traffic profile, its policy reads ``controller_ratio`` last, and the service (shield
    reference, fallback and the policy's base) runs that controller."""
    from model.controller import GAIN_FIELDS
    from service.runner import ModelRunner
    from training.bidders.tuned import tuned_baseline
    from training.replay.dayset import DaySet

    config = json.loads((exported.residual_run / "run.json").read_text())["config"]
    market = Market.open(exported.market)
    pid, _ = tuned_baseline(market, "pid", SETTING, lambda: DaySet.load(market, "train", SETTING))
    assert config["residual"] and {k: config["controller"][k] for k in GAIN_FIELDS} == {
        k: pid.params()[k] for k in GAIN_FIELDS
    }
    card = load_artifact(exported.residual_model).card
    assert card.residual and card.features[-1].name == "controller_ratio" and card.obs_dim == N_FEATURES + 1
    assert card.transition_dim == 2 * (N_FEATURES + 1) + 1
    assert card.training.controller == {k: config["controller"][k] for k in GAIN_FIELDS}
    assert list(card.training.traffic_profile) == config["controller"]["traffic_profile"]
    assert not load_artifact(exported.cbrl_model).card.residual
    runner = ModelRunner(exported.residual_model, use_shield=True)
    runner.load()
    assert runner.gains.tuned() == card.training.controller
    assert runner.policy is not None and runner.policy.controller == runner.gains


def test_evaluate_refuses_a_model_of_another_setting_or_a_missing_one(exported: Exported, tmp_path: Path):
    with pytest.raises(EvaluationError, match="trained for sc, not mc"):
        evaluate(Market.open(exported.market), "mc", "test", [f"onnx:{exported.hard_model}"], seeds=1)
    with pytest.raises(EvaluationError, match=r"no model\.json there"):
        parse_methods(f"onnx:{tmp_path / 'nothing'}")


def test_a_diverging_graph_fails_the_parity_check(exported: Exported):
    bidder, _ = load_run_bidder(exported.cbrl_run)
    with torch.no_grad():
        bidder.policy.body[-1].bias.add_(0.01)
    with pytest.raises(ExportError, match="do not reproduce torch: ratio off by"):
        check_parity(load_artifact(exported.cbrl_model), bidder.policy, bidder.encoder)


@pytest.mark.parametrize("residual", [False, True])
def test_the_parity_check_plays_the_first_slot_where_relative_policies_bid_their_start(residual: bool):
    """Uniform draws never put prev_ratio (or controller_ratio) at 0, the first slot of every episode, so a graph
    bidding another start ratio there passed the check (helper's repro: 0.97 against 3.88, parity 0.0)."""
    from model.features import CONTROLLER_INDEX, obs_dim
    from training.rl.networks import PREV_RATIO, TanhGaussianPolicy

    torch.manual_seed(0)
    actor = TanhGaussianPolicy(obs_dim(residual), 32, step=0.3, start_ratio=1.0, residual=residual)
    served = TanhGaussianPolicy(obs_dim(residual), 32, step=0.3, start_ratio=4.0, residual=residual)
    served.load_state_dict(actor.state_dict())

    class Graph:  # stands in for the ONNX graph: what check_parity calls
        latent_dim = 0

        def __init__(self, policy: TanhGaussianPolicy):
            self.policy, self.residual = policy, residual

        def act(self, obs: np.ndarray, z: np.ndarray | None = None) -> np.ndarray:
            with torch.no_grad():
                return self.policy.act(torch.as_tensor(obs)).numpy()

    assert check_parity(Graph(actor), actor, None)["ratio"] == 0.0  # type: ignore[arg-type]
    with pytest.raises(ExportError, match="ratio off by"):
        check_parity(Graph(served), actor, None)  # type: ignore[arg-type]

    class NaNAtTheStart(Graph):  # right everywhere but the first slot, where it answers NaN
        def act(self, obs: np.ndarray, z: np.ndarray | None = None) -> np.ndarray:
            ratio = super().act(obs, z)
            base = obs[:, CONTROLLER_INDEX] if residual else obs[:, PREV_RATIO]
            return np.where(base == 0, np.float32("nan"), ratio)

    with pytest.raises(ExportError, match="ratio off by nan"):  # max() kept the earlier figure against a NaN
        check_parity(NaNAtTheStart(actor), actor, None)  # type: ignore[arg-type]


def test_a_failed_export_leaves_the_previous_artifact_or_none(
    exported: Exported, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    def broken(*args, **kwargs):
        raise ExportError("the ONNX graphs do not reproduce torch: simulated")

    monkeypatch.setattr(exporter, "check_parity", broken)
    with pytest.raises(ExportError, match="simulated"):
        export_run(exported.hard_run, tmp_path / "fresh")
    assert list(tmp_path.iterdir()) == []  # neither the model directory nor a temporary one

    kept = tmp_path / "kept"
    monkeypatch.undo()
    export_run(exported.hard_run, kept)
    (kept / "marker").write_text("the artifact in place before the failed export")
    monkeypatch.setattr(exporter, "check_parity", broken)
    with pytest.raises(ExportError, match="simulated"):
        export_run(exported.hard_run, kept, force=True)
    assert (kept / "marker").exists() and load_artifact(kept).card.algorithm == "hard"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept"]


def test_cli_exports_and_refuses_to_overwrite(exported: Exported, tmp_path: Path):
    out = tmp_path / "model"
    result = runner.invoke(app, ["export", "--run", str(exported.hard_run), "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["algorithm"] == "hard" and summary["files"] == ["model.json", "policy.onnx"]
    assert summary["parity"]["ratio"] <= POLICY_ATOL and load_artifact(out).card.latent_dim == 0
    again = runner.invoke(app, ["export", "--run", str(exported.hard_run), "--out", str(out)])
    assert again.exit_code == 2 and "--force" in again.output
    forced = runner.invoke(app, ["export", "--run", str(exported.hard_run), "--out", str(out), "--force", "--json"])
    assert forced.exit_code == 0, forced.output


def test_cli_refuses_an_out_whose_directory_cannot_be_written_before_any_work(
    exported: Exported, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """An existing --out (with --force) is writable itself, but the new artifact is built beside it and renamed
    into place: a directory that refuses new files is said up front and the artifact in place is left alone. (The
    tests run as root, whom permissions do not stop: the write probe is refused there instead.)"""
    from rcb.commands import common

    out = tmp_path / "models" / "model"
    assert runner.invoke(app, ["export", "--run", str(exported.hard_run), "--out", str(out)]).exit_code == 0
    before = (out / "model.json").read_text()
    real = common.tempfile.mkstemp

    def refused_in_models(*args, **kwargs):
        if Path(kwargs["dir"]) == out.parent:
            raise PermissionError(13, "Permission denied")
        return real(*args, **kwargs)

    monkeypatch.setattr(common.tempfile, "mkstemp", refused_in_models)
    result = runner.invoke(app, ["export", "--run", str(exported.hard_run), "--out", str(out), "--force"])
    assert result.exit_code == 2 and "--out's directory" in result.output and "not writable" in result.output
    assert "exporting" not in result.output and "Traceback" not in result.output
    assert (out / "model.json").read_text() == before and sorted(p.name for p in out.parent.iterdir()) == ["model"]


def test_cli_errors_cleanly_on_a_missing_run_or_a_foreign_directory(exported: Exported, tmp_path: Path):
    result = runner.invoke(app, ["export", "--run", str(tmp_path / "nope"), "--out", str(tmp_path / "model")])
    assert result.exit_code == 2 and "not a finished training run" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "model").exists()
    foreign = tmp_path / "notes"
    foreign.mkdir()
    (foreign / "todo.txt").write_text("keep me")
    result = runner.invoke(app, ["export", "--run", str(exported.hard_run), "--out", str(foreign), "--force"])
    assert result.exit_code == 2 and "holds no model artifact" in result.output
    assert (foreign / "todo.txt").read_text() == "keep me"


def test_cli_errors_cleanly_on_an_unreadable_checkpoint(exported: Exported, tmp_path: Path):
    run = tmp_path / "run"
    shutil.copytree(exported.hard_run, run)
    (run / "best.pt").write_bytes(b"not a checkpoint")
    result = runner.invoke(app, ["export", "--run", str(run), "--out", str(tmp_path / "model")])
    assert result.exit_code == 2 and "cannot load its best actor from best.pt" in result.output
    assert not (tmp_path / "model").exists()


def test_measured_figures_go_on_the_card_and_leave_the_graphs_alone(exported: Exported, tmp_path: Path):
    from training.export.card import record_figures

    model = tmp_path / "model"
    shutil.copytree(exported.cbrl_model, model)
    before = load_artifact(model).card
    figures = {"market": "m", "test": {"model": {"ans": 0.7, "csr": 0.9}, "pid": {"ans": 0.6, "csr": 0.8}}}
    record_figures(model, figures)
    after = load_artifact(model).card  # still a loadable, hash-checked artifact
    assert after.evaluation.measured == figures
    assert after.files == before.files and after.training == before.training
    assert load_artifact(exported.cbrl_model).card.evaluation.measured == {}


def test_the_service_warns_when_the_card_was_measured_behind_another_shield(
    exported: Exported, tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    """A card's shielded figures name the shield setting they were played with; a service running another one
    says so when it loads the model (its figures would not describe what it bids)."""
    from dataclasses import asdict, replace

    from model.shield import ShieldConfig
    from service.runner import ModelRunner
    from training.export.card import record_figures

    model = tmp_path / "model"
    shutil.copytree(exported.cbrl_model, model)
    for measured_with, warned in ((ShieldConfig(), False), (replace(ShieldConfig(), roi_alarm=0.3), True)):
        record_figures(model, {"market": "m", "shield": asdict(measured_with)})
        caplog.clear()
        with caplog.at_level("WARNING", logger="rcb.service"):
            ModelRunner(model, use_shield=True).load()
        assert ("another shield setting" in caplog.text) is warned
    with caplog.at_level("WARNING", logger="rcb.service"):  # no shield served: nothing to compare
        caplog.clear()
        ModelRunner(model, use_shield=False).load()
    assert "another shield setting" not in caplog.text


def test_a_run_whose_market_is_not_here_exports_without_a_reference(exported: Exported, tmp_path: Path):
    """A non-residual run's card takes its controller from the run's market; elsewhere it gets neither half."""
    from model.controller import GAIN_FIELDS
    from training.export.card import train_days_reference
    from training.market.dataset import Market

    trained_on = Market.open(exported.market).split_fingerprint("train")
    body = {"market": str(exported.market), "setting": "sc", "data_fingerprint": trained_on}
    assert train_days_reference({**body, "market": str(tmp_path / "gone")}) == (None, None)
    # a market regenerated at the run's path: its PID is another market's, so none rather than a wrong one
    assert train_days_reference({**body, "data_fingerprint": "0" * 64}) == (None, None)
    profile, controller = train_days_reference(body)
    assert profile is not None and len(profile) == 48 and abs(sum(profile) - 1) < 1e-6
    assert controller is not None and set(controller) == set(GAIN_FIELDS)


def test_rcb_export_warns_when_the_card_gets_no_reference_controller(exported: Exported, tmp_path: Path):
    """The card then holds default gains for the shield and the fallback: said on the CLI, not only in the card."""
    run = tmp_path / "run"
    shutil.copytree(exported.hard_run, run)
    body = json.loads((run / "run.json").read_text())
    body["market"] = str(tmp_path / "elsewhere")
    (run / "run.json").write_text(json.dumps(body))
    result = runner.invoke(app, ["export", "--run", str(run), "--out", str(tmp_path / "model"), "--json"])
    assert result.exit_code == 0, result.output
    assert "warning: no reference controller on the card" in result.stderr
    assert json.loads(result.stdout)["reference_controller"] is False
    result = runner.invoke(app, ["export", "--run", str(exported.hard_run), "--out", str(tmp_path / "m2"), "--json"])
    assert result.exit_code == 0 and "warning" not in result.stderr
    assert json.loads(result.stdout)["reference_controller"] is True


def test_exporting_into_the_current_directory_is_a_clear_error(
    exported: Exported, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """--out . raised "PosixPath('.') has an empty name" after loading the run; the swap would move the directory the
    shell stands in."""
    monkeypatch.chdir(tmp_path)
    for out in (".", str(tmp_path.parent)):
        result = runner.invoke(app, ["export", "--run", str(exported.hard_run), "--out", out])
        assert result.exit_code != 0 and "is the current directory or holds it" in result.output, result.output


def test_exporting_over_a_symlink_replaces_its_target_and_keeps_the_link(exported: Exported, tmp_path: Path):
    """`models/current -> models/v12`: the swap replaced the link with a directory, leaving v12 as it was."""
    target, link = tmp_path / "v12", tmp_path / "current"
    first = runner.invoke(app, ["export", "--run", str(exported.hard_run), "--out", str(target)])
    assert first.exit_code == 0, first.output
    link.symlink_to(target, target_is_directory=True)
    forced = runner.invoke(app, ["export", "--run", str(exported.cbrl_run), "--out", str(link), "--force"])
    assert forced.exit_code == 0, forced.output
    assert link.is_symlink() and link.resolve() == target.resolve()
    assert load_artifact(target).card.algorithm == "cbrl" and load_artifact(link).card.algorithm == "cbrl"


def test_swaps_into_one_directory_run_one_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Two exports swapping into one --out at once: one could move the other's new artifact aside between its two
    renames and fail on a non-empty directory. The swap holds a lock on --out's parent directory."""
    import threading
    import time

    from training import files as files_module

    out = tmp_path / "model"
    real_replace, inside, overlapped = os.replace, [0], []

    def slow_replace(src, dst):  # widen the window between a swap's two renames
        inside[0] += 1
        overlapped.append(inside[0] > 1)
        time.sleep(0.02)
        try:
            real_replace(src, dst)
        finally:
            inside[0] -= 1

    monkeypatch.setattr(files_module.os, "replace", slow_replace)
    errors: list[BaseException] = []

    def export(name: str) -> None:
        try:
            for k in range(5):
                with files_module.built_beside(out) as building:
                    (building / "model.json").write_text(f"{name}-{k}")
        except BaseException as exc:  # the test reports any failure
            errors.append(exc)

    threads = [threading.Thread(target=export, args=(name,)) for name in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and not any(overlapped)
    assert (out / "model.json").read_text() in ("a-4", "b-4")
    assert [p.name for p in tmp_path.iterdir()] == ["model"]  # nothing half-done, no lock file left
