"""`rcb train`: a run directory with config, checkpoints and curves; resume; a run is an evaluate method."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from rcb.cli import app
from training.market.generator import config_with, generate_market

runner = CliRunner()


def sc_cbrl(market: Path) -> list[str]:
    """``rcb train``'s options for a short SC CBRL run on ``market``."""
    return ["train", "--data", str(market), "--setting", "sc", "--algo", "cbrl", "--updates-per-epoch", "5"]


@pytest.fixture(scope="module")
def market(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("train") / "market"
    generate_market(out, config_with(days_id=8, days_ood=0, impressions_per_day=6000, seed=4), workers=1)
    return out


@pytest.fixture(scope="module")
def run(market: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "crl"
    args = ["train", "--data", str(market), "--setting", "sc", "--out", str(out), "--algo", "crl", "--epochs", "2"]
    args += ["--updates-per-epoch", "40"]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return out


def test_run_directory_holds_config_checkpoints_and_curves(run: Path):
    body = json.loads((run / "run.json").read_text())
    assert body["status"] == "done" and body["setting"] == "sc" and body["config"]["algo"] == "crl"
    assert [h["epoch"] for h in body["history"]] == [0, 1]
    assert {h["stage"] for h in body["history"]} == {"cold start"}
    for name in ("checkpoint.pt", "best.pt", "curves.csv", "curves.png"):
        assert (run / name).stat().st_size > 0
    assert len((run / "curves.csv").read_text().strip().splitlines()) == 3


def test_refuses_to_overwrite_and_resumes(run: Path, market: Path):
    args = ["train", "--data", str(market), "--setting", "sc", "--out", str(run), "--algo", "crl"]
    args += ["--updates-per-epoch", "40"]
    again = runner.invoke(app, [*args, "--epochs", "3"])
    assert again.exit_code == 2 and "--resume" in again.output
    before = json.loads((run / "run.json").read_text())["history"]
    resumed = runner.invoke(app, [*args, "--epochs", "3", "--resume", "--json"])
    assert resumed.exit_code == 0, resumed.output
    after = json.loads((run / "run.json").read_text())["history"]
    assert after[:2] == before and after[2]["epoch"] == 2
    wrong = runner.invoke(app, ["train", "--data", str(market), "--setting", "mc", "--out", str(run), "--resume"])
    assert wrong.exit_code == 2 and "cannot be resumed" in wrong.output
    residual = runner.invoke(app, [*args, "--epochs", "4", "--resume", "--residual"])
    assert residual.exit_code == 2 and "residual False, not True" in " ".join(residual.output.split())


def test_a_residual_run_keeps_the_pid_it_corrects(market: Path, tmp_path: Path):
    """``--residual``: the run tunes the PID on its train days first (or reads rcb evaluate's cache) and keeps
    the gains and the traffic profile in run.json; its policy is then an ordinary evaluate method."""
    from model.controller import GAIN_FIELDS

    out = tmp_path / "residual"
    args = ["train", "--data", str(market), "--setting", "sc", "--out", str(out), "--algo", "crl", "--epochs", "1"]
    result = runner.invoke(app, [*args, "--updates-per-epoch", "20", "--residual", "--action-step", "0.5", "--json"])
    assert result.exit_code == 0, result.output
    config = json.loads((out / "run.json").read_text())["config"]
    assert config["residual"] and config["action_step"] == 0.5
    assert set(config["controller"]) == {*GAIN_FIELDS, "traffic_profile"}
    assert len(config["controller"]["traffic_profile"]) == 48
    assert sum(config["controller"]["traffic_profile"]) == pytest.approx(1.0, abs=1e-6)
    evaluated = tmp_path / "eval"
    args = [
        "evaluate",
        str(market),
        "--split",
        "test",
        "--methods",
        f"{out},pid",
        "--seeds",
        "1",
        "--out",
        str(evaluated),
    ]
    result = runner.invoke(app, [*args, "--setting", "sc", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads((evaluated / "summary.json").read_text())[str(out)]["n_episodes"] == 4


def test_cbrl_is_residual_by_default_with_the_settings_defaults_and_a_resume_keeps_the_choice(
    market: Path, tmp_path: Path
):
    out = tmp_path / "default-cbrl"
    args = ["train", "--data", str(market), "--setting", "sc", "--out", str(out), "--algo", "cbrl"]
    args += ["--updates-per-epoch", "5"]
    result = runner.invoke(app, [*args, "--epochs", "1", "--json"])
    assert result.exit_code == 0, result.output
    config = json.loads((out / "run.json").read_text())["config"]
    assert config["residual"] is True and config["controller"] is not None
    assert config["roi_margin"] == 0.0 and config["start_at_controller"] is True  # SC's defaults
    assert config["selection_seeds"] == 5
    history = json.loads((out / "run.json").read_text())["history"]
    assert [len(h["validation_scores"]) for h in history] == [5]
    resumed = runner.invoke(app, [*args, "--epochs", "2", "--resume", "--json"])  # no --residual: kept
    assert resumed.exit_code == 0, resumed.output
    assert json.loads((out / "run.json").read_text())["config"]["residual"] is True
    plain = tmp_path / "plain-cbrl"
    result = runner.invoke(app, [*args[:6], str(plain), *args[7:], "--epochs", "1", "--no-residual", "--json"])
    assert result.exit_code == 0, result.output
    config = json.loads((plain / "run.json").read_text())["config"]
    assert config["residual"] is False and config["roi_margin"] == 0.0 and config["controller"] is None


def test_unknown_algo_is_a_clear_error(market: Path, tmp_path: Path):
    result = runner.invoke(
        app, ["train", "--data", str(market), "--setting", "sc", "--out", str(tmp_path / "x"), "--algo", "usc"]
    )
    text = " ".join(result.output.replace("│", " ").split())
    assert result.exit_code == 2 and "'usc' is not one of 'hard', 'crl', 'cbrl', 'uscb', 'rcpo'" in text
    assert not (tmp_path / "x").exists()


def test_the_clis_options_are_the_configs_fields():
    """``rcb train``'s options are SACConfig's fields (all but those marked ``option: False``): each one's help is
    its field's docstring, its choices the config module's, and the options that are no config field are the
    command's own."""
    from dataclasses import fields

    import typer

    from rcb.commands.train import CONFIG_OPTIONS, field_docs, help_text
    from training.rl.config import ALGOS, SACConfig

    command = typer.main.get_command(app).commands["train"]  # type: ignore[attr-defined]
    params = {p.name: p for p in command.params}
    assert set(CONFIG_OPTIONS) == {f.name for f in fields(SACConfig)} - {"controller", "curriculum"}
    assert set(params) == {*CONFIG_OPTIONS, "data", "setting", "out", "keep_epochs", "resume", "skip_done", "as_json"}
    docs = field_docs(SACConfig)
    for name in CONFIG_OPTIONS:
        assert params[name].opts[0] == "--" + name.replace("_", "-"), name
        assert params[name].help == help_text(docs[name]) and len(params[name].help) > 20, name
    assert params["algo"].default == "cbrl" and params["epochs"].default == SACConfig().epochs
    assert "--no-residual" in params["residual"].secondary_opts and params["residual"].default is None
    assert (params["n_step"].min, params["n_step"].max) == (1, 48)
    refused = runner.invoke(app, ["train", "--data", ".", "--setting", "sc", "--out", "x", "--algo", "nope"])
    said = " ".join(refused.output.replace("│", " ").split())
    assert f"'nope' is not one of {', '.join(map(repr, ALGOS))}" in said  # the config module's choices
    # the docstring's markup is plain text in the help, another option's field named by its option
    assert help_text("``n_step`` (:func:`training.rl.config.last_quarter`, :attr:`controller`)") == (
        "--n-step (last_quarter, controller)"
    )


def test_help_needs_no_torch():
    """``rcb train --help`` (and ``rcb --help``) run where torch cannot be imported: the options come from the
    torch-free config module."""
    repo = Path(__file__).resolve().parents[1]
    script = (
        "import sys; sys.modules['torch'] = None\n"  # any `import torch` now raises ImportError
        "from rcb.cli import app\n"
        "app(['train', '--help'])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 0, done.stderr
    assert "--n-step" in done.stdout and "--selection-seeds" in done.stdout and "Traceback" not in done.stderr


def test_a_run_is_an_evaluate_method(run: Path, market: Path, tmp_path: Path):
    out = tmp_path / "eval"
    args = ["evaluate", str(market), "--split", "test", "--methods", f"{run},rm", "--seeds", "1", "--out", str(out)]
    result = runner.invoke(app, [*args, "--setting", "sc", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary) == {str(run), "rm"} and summary[str(run)]["n_episodes"] == 4
    wrong = runner.invoke(app, [*args, "--setting", "mc"])
    assert wrong.exit_code == 2 and "trained for sc" in wrong.output


def test_cbrl_trains_and_acts_by_reproducible_posterior_sampling(market: Path, tmp_path: Path):
    out = tmp_path / "cbrl"
    args = ["train", "--data", str(market), "--setting", "sc", "--out", str(out), "--algo", "cbrl", "--epochs", "1"]
    result = runner.invoke(app, [*args, "--updates-per-epoch", "20", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads((out / "run.json").read_text())["config"]["latent_dim"] == 8
    episodes = []
    for name in ("a", "b"):
        evaluation = ["evaluate", str(market), "--setting", "sc", "--split", "test", "--methods", str(out)]
        done = runner.invoke(app, [*evaluation, "--seeds", "2", "--out", str(tmp_path / name), "--json"])
        assert done.exit_code == 0, done.output
        episodes.append((tmp_path / name / "episodes.csv").read_text())
    assert episodes[0] == episodes[1]  # the same seeds draw the same z (counter-based noise)


def test_a_group_of_runs_is_one_method_with_a_seed_per_run(run: Path, market: Path, tmp_path: Path):
    second = tmp_path / "runs" / "crl-s1"
    args = ["train", "--data", str(market), "--setting", "sc", "--out", str(second), "--algo", "crl", "--epochs", "1"]
    assert runner.invoke(app, [*args, "--updates-per-epoch", "20", "--seed", "1", "--json"]).exit_code == 0
    first = tmp_path / "runs" / "crl-s0"
    first.symlink_to(run)
    out = tmp_path / "eval"
    methods = f"crl={tmp_path}/runs/crl-s*,rm"
    args = ["evaluate", str(market), "--setting", "sc", "--split", "test", "--methods", methods, "--seeds", "3"]
    result = runner.invoke(app, [*args, "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary) == {"crl", "rm"}
    assert summary["crl"]["n_seeds"] == 2 and summary["crl"]["n_episodes"] == 8  # one seed per run
    assert summary["rm"]["n_seeds"] == 1  # deterministic: played once whatever --seeds
    meta = json.loads((out / "meta.json").read_text())
    assert meta["methods"] == ["crl", "rm"] and meta["tuned"]["crl"]["runs"] == [str(first), str(second)]
    missing = runner.invoke(app, [*args[:-2], "--methods", f"crl={tmp_path}/none-*", "--out", str(out)])
    assert missing.exit_code == 2 and "matches no training run" in missing.output


def test_automated_curriculum_learns_b_and_records_it(market: Path, tmp_path: Path):
    out = tmp_path / "auto"
    args = ["train", "--data", str(market), "--setting", "sc", "--out", str(out), "--algo", "crl", "--epochs", "4"]
    result = runner.invoke(app, [*args, "--updates-per-epoch", "20", "--auto-curriculum", "--json"])
    assert result.exit_code == 0, result.output
    body = json.loads((out / "run.json").read_text())
    assert body["config"]["auto_curriculum"] is True and body["train_seconds"] > 0
    history = body["history"]
    assert [h["stage"] for h in history] == ["cold start"] * 3 + ["warm-up"]
    learned = [h["b"] for h in history[:3]]
    assert all(0.0 <= b <= 1.0 for b in learned) and learned != [0.1, 0.1, 0.1]  # b moved from the paper's 0.1
    # The first epoch of a new stage refits the critic before the actor moves: more updates that epoch.
    steps = np.diff([0] + [h["updates"] for h in history])
    assert list(steps) == [20, 20, 20, 20 + body["config"]["stage_refit_updates"]]
    # Resumed into the original problem (no b to learn), the learned b_k stay in the checkpoint.
    learned_b = torch.load(out / "checkpoint.pt", weights_only=False)["curriculum_b"]
    assert learned_b["cold start"] == history[2]["b"] and learned_b["warm-up"] == history[3]["b"]
    resumed = runner.invoke(
        app, [*args[:-2], "--epochs", "8", "--updates-per-epoch", "20", "--auto-curriculum", "--resume"]
    )
    assert resumed.exit_code == 0, resumed.output
    assert (
        torch.load(out / "checkpoint.pt", weights_only=False)["curriculum_b"]["cold start"] == learned_b["cold start"]
    )


def test_no_relaxed_stages_trains_the_original_problem_from_the_first_epoch(market: Path, tmp_path: Path):
    out = tmp_path / "plain"
    args = ["train", "--data", str(market), "--setting", "sc", "--out", str(out), "--algo", "crl"]
    result = runner.invoke(app, [*args, "--epochs", "2", "--updates-per-epoch", "10", "--no-relaxed-stages"])
    assert result.exit_code == 0, result.output
    body = json.loads((out / "run.json").read_text())
    assert body["config"]["relaxed_stages"] is False
    assert [h["stage"] for h in body["history"]] == ["original problem"] * 2
    # Resumed without the flag, the run keeps the choice it started with.
    resumed = runner.invoke(app, [*args, "--epochs", "3", "--updates-per-epoch", "10", "--resume"])
    assert resumed.exit_code == 0, resumed.output
    assert [h["stage"] for h in json.loads((out / "run.json").read_text())["history"]] == ["original problem"] * 3


def test_n_step_is_recorded_and_a_resume_keeps_it(market: Path, tmp_path: Path):
    out = tmp_path / "whole-day"
    args = ["train", "--data", str(market), "--setting", "sc", "--out", str(out), "--algo", "crl"]
    result = runner.invoke(app, [*args, "--epochs", "1", "--updates-per-epoch", "10", "--n-step", "48"])
    assert result.exit_code == 0, result.output
    assert json.loads((out / "run.json").read_text())["config"]["n_step"] == 48
    resumed = runner.invoke(app, [*args, "--epochs", "2", "--updates-per-epoch", "10", "--resume"])
    assert resumed.exit_code == 0, resumed.output
    assert json.loads((out / "run.json").read_text())["config"]["n_step"] == 48
    refused = runner.invoke(app, [*args[:6], str(tmp_path / "x"), *args[7:], "--n-step", "49"])
    assert refused.exit_code != 0 and "less than or equal to 48" in " ".join(refused.output.split())


def test_lr_milestones_are_recorded_kept_on_resume_and_checked(market: Path, tmp_path: Path):
    out = tmp_path / "schedule"
    args = ["train", "--data", str(market), "--setting", "sc", "--out", str(out), "--algo", "crl"]
    result = runner.invoke(app, [*args, "--epochs", "1", "--updates-per-epoch", "10", "--lr-milestones", "5, 15"])
    assert result.exit_code == 0, result.output
    assert json.loads((out / "run.json").read_text())["config"]["lr_milestones"] == [5, 15]
    resumed = runner.invoke(app, [*args, "--epochs", "2", "--updates-per-epoch", "10", "--resume"])
    assert resumed.exit_code == 0, resumed.output
    assert json.loads((out / "run.json").read_text())["config"]["lr_milestones"] == [5, 15]
    bad_lists = (("4000,x", "not a comma-separated list"), ("8000,4000", "strictly increasing"), ("0", "positive"))
    for bad, says in bad_lists:
        refused = runner.invoke(app, [*args[:6], str(tmp_path / "x"), *args[7:], "--lr-milestones", bad])
        assert refused.exit_code == 2 and says in " ".join(refused.output.split()), refused.output
    assert not (tmp_path / "x").exists()


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step")
def test_lr_milestones_halve_every_learning_rate():
    from training.rl.sac import SACAgent, SACConfig

    agent = SACAgent(SACConfig(algo="crl", lr_milestones=(1, 2)))
    rates = [group["lr"] for optimizer in agent.optimizers.values() for group in optimizer.param_groups]
    assert rates and all(rate == pytest.approx(3e-4) for rate in rates)
    for _ in range(2):
        for schedule in agent.schedulers.values():
            schedule.step()
    rates = [group["lr"] for optimizer in agent.optimizers.values() for group in optimizer.param_groups]
    assert all(rate == pytest.approx(3e-4 / 4) for rate in rates)


def test_skip_done_keeps_a_finished_run_of_this_config_and_refuses_another(market: Path, tmp_path: Path):
    """``--skip-done``: a finished run of the same config and train days is reported, not retrained; one of another
    config (a changed option or default) or other days is refused, naming what differs."""
    out = tmp_path / "done"
    args = ["train", "--data", str(market), "--setting", "sc", "--out", str(out), "--algo", "crl", "--epochs", "1"]
    result = runner.invoke(app, [*args, "--updates-per-epoch", "5", "--skip-done", "--json"])  # no run yet: trains
    assert result.exit_code == 0, result.output
    assert json.loads(result.output.splitlines()[-1])["already_done"] is False
    recorded = (out / "run.json").read_bytes()
    again = runner.invoke(app, [*args, "--updates-per-epoch", "5", "--skip-done", "--json"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.output.splitlines()[-1]) == {
        "out": str(out),
        "best_validation_score": json.loads(recorded)["best_validation_score"],
        "kept_epoch": json.loads(recorded)["kept_epoch"],
        "epochs": 1,
        "already_done": True,
    }
    assert (out / "run.json").read_bytes() == recorded
    other = tmp_path / "other-market"
    generate_market(other, config_with(days_id=8, days_ood=0, impressions_per_day=6000, seed=5), workers=1)
    for extra, says in (
        (["--updates-per-epoch", "6"], "updates_per_epoch 5, not 6); remove it"),
        (["--updates-per-epoch", "5", "--epochs", "2"], "epochs 1, not 2); resume it with --resume"),
        (["--updates-per-epoch", "5", "--n-step", "4"], "n_step 8, not 4"),
        (["--updates-per-epoch", "5", "--data", str(other)], "other train days"),
    ):
        command = [*args, *extra, "--skip-done"]
        if "--data" in extra:  # the other market instead of the run's
            command = [*command[:1], *command[3:]]
        refused = runner.invoke(app, command)
        text = " ".join(refused.output.split())
        assert refused.exit_code == 2 and "finished run of another config" in text and says in text, refused.output
    assert (out / "run.json").read_bytes() == recorded
    # A resume that trains nothing must not record a config it did not run with.
    resumed = runner.invoke(app, [*args, "--updates-per-epoch", "5", "--n-step", "4", "--resume"])
    assert resumed.exit_code == 2 and "resuming it trains nothing" in " ".join(resumed.output.split())
    assert (out / "run.json").read_bytes() == recorded
    # A run recorded before the schema was numbered, with the options this version dropped at the values whose
    # behaviour it keeps (as every such run of the default config recorded them), is this very config.
    body = json.loads(recorded)
    del body["schema"]
    body["format"] = "rcb-run/1"
    body["config"].update(REMOVED_AT_THEIR_DEFAULTS)
    for epoch in body["history"]:
        epoch["shield_acted_share"] = None
    (out / "run.json").write_text(json.dumps(body))
    kept = runner.invoke(app, [*args, "--updates-per-epoch", "5", "--skip-done", "--json"])
    assert kept.exit_code == 0 and json.loads(kept.output.splitlines()[-1])["already_done"] is True, kept.output


REMOVED_AT_THEIR_DEFAULTS = {
    "regime_spread": 0.0,
    "reference_spread": 0.0,
    "bootstrap_belief": "shared",
    "train_shielded": False,
    "selection_days": "all",
    "selection_epoch": "best",
    "reference": "pid",
    "correction_penalty": 0.0,
}
"""What a run of the default config recorded for the options this version no longer has."""
REMOVED_IN_USE = {
    "regime_spread": (0.2, "--regime-spread 0.2"),
    "reference_spread": (0.4, "--reference-spread 0.4"),
    "bootstrap_belief": ("ahead", "--bootstrap-belief ahead"),
    "train_shielded": (True, "--train-shielded"),
    "selection_days": ("home", "--selection-days home"),
    "selection_epoch": ("last", "--selection-epoch last"),
    "reference": ("plan", "--reference plan"),
    "correction_penalty": (0.5, "--correction-penalty 0.5"),
}
"""Each removed option at a value whose behaviour this version does not have, and how a refusal names it."""


def test_a_record_from_before_a_field_existed_reads_as_runs_did_then(market: Path, tmp_path: Path):
    """A run.json without the schema number and without fields added later (one-step targets, one selection stream,
    the actor on the critics' minimum) reads with the values runs had then, not with today's defaults: a resume
    continues with them, records them and the schema, and ``--skip-done`` with today's defaults names the
    difference."""
    from training.rl.run_schema import SCHEMA, migrate, read_record

    out = tmp_path / "old"
    args = ["train", "--data", str(market), "--setting", "sc", "--algo", "crl", "--updates-per-epoch", "5"]
    assert runner.invoke(app, [*args, "--epochs", "1", "--out", str(out)]).exit_code == 0
    body = json.loads((out / "run.json").read_text())
    assert body["schema"] == SCHEMA and body["format"] == "rcb-run"
    for key in ("n_step", "selection_seeds", "actor_mean_q"):
        del body["config"][key]
    del body["schema"]
    (out / "run.json").write_text(json.dumps(body))
    config = read_record(out)["config"]
    assert (config["n_step"], config["selection_seeds"], config["actor_mean_q"]) == (1, 1, False)
    assert migrate(migrate(body, out), out) == migrate(body, out)  # idempotent
    resumed = runner.invoke(app, [*args, "--epochs", "2", "--resume", "--out", str(out)])
    assert resumed.exit_code == 0, resumed.output
    grown = json.loads((out / "run.json").read_text())
    assert grown["schema"] == SCHEMA and len(grown["history"]) == 2
    assert (grown["config"]["n_step"], grown["config"]["selection_seeds"], grown["config"]["actor_mean_q"]) == (
        1,
        1,
        False,
    )
    today = runner.invoke(app, [*args, "--epochs", "2", "--skip-done", "--out", str(out)])
    said = " ".join(today.output.split())
    assert today.exit_code == 2 and "n_step 1, not 8" in said and "actor_mean_q False, not True" in said


def test_a_run_that_used_a_removed_option_is_refused_naming_it(market: Path, tmp_path: Path):
    """A run trained with an option this version no longer has, at a value whose behaviour it does not keep, is
    refused on one line naming the option wherever it is read (resume, --skip-done, evaluation, export's loading,
    fine-tuning, rcb reselect); at the kept value the option is dropped; a newer schema or an unknown field is
    refused too."""
    from training.rl.run_schema import RunError, migrate
    from training.rl.runs import load_best, load_run_bidder, run_body

    source = tmp_path / "source"
    args = ["train", "--data", str(market), "--setting", "sc", "--algo", "crl", "--updates-per-epoch", "5"]
    assert runner.invoke(app, [*args, "--epochs", "1", "--keep-epochs", "--out", str(source)]).exit_code == 0
    body = json.loads((source / "run.json").read_text())
    for key, (value, option) in REMOVED_IN_USE.items():
        said = f"x was trained with {option}, which this version of rcb does not support; retrain it"
        with pytest.raises(RunError) as refused:
            migrate({**body, "config": {**body["config"], key: value}}, "x")
        assert str(refused.value) == said
        kept = migrate({**body, "config": {**body["config"], key: REMOVED_AT_THEIR_DEFAULTS[key]}}, "x")
        assert key not in kept["config"] and kept["config"] == migrate(body, "x")["config"]
    used = tmp_path / "shielded"
    shutil.copytree(source, used)
    (used / "run.json").write_text(json.dumps({**body, "config": {**body["config"], "train_shielded": True}}))
    said = f"{used} was trained with --train-shielded, which this version of rcb does not support; retrain it"
    for read in (run_body, load_best, load_run_bidder):
        with pytest.raises(RunError, match=re.escape(said)):
            read(used)
    for command in (
        [*args, "--epochs", "2", "--resume", "--out", str(used)],
        [*args, "--epochs", "1", "--skip-done", "--out", str(used)],
        [*args, "--epochs", "1", "--init-from", str(used), "--out", str(tmp_path / "tuned")],
        ["reselect", str(used), "--out", str(tmp_path / "reselected")],
        ["evaluate", str(market), "--setting", "sc", "--methods", str(used), "--out", str(tmp_path / "ev")],
    ):
        result = runner.invoke(app, command)
        assert result.exit_code == 2 and said in " ".join(result.output.split()), (command, result.output)
        assert "Traceback" not in result.output
    assert not any((tmp_path / name).exists() for name in ("tuned", "reselected"))
    with pytest.raises(RunError, match="another version of rcb"):
        migrate({**body, "schema": 99}, "x")
    with pytest.raises(RunError, match="does not know"):
        migrate({**body, "config": {**body["config"], "warp_factor": 9}}, "x")


def test_skip_done_matches_a_residual_run_whose_controller_was_tuned_at_run_time(market: Path, tmp_path: Path):
    out = tmp_path / "residual"
    args = ["train", "--data", str(market), "--setting", "sc", "--out", str(out), "--epochs", "1"]
    args += ["--updates-per-epoch", "5", "--skip-done", "--json"]
    assert runner.invoke(app, args).exit_code == 0
    assert json.loads((out / "run.json").read_text())["config"]["controller"]  # the tuned PID, recorded
    again = runner.invoke(app, args)
    assert again.exit_code == 0 and json.loads(again.output.splitlines()[-1])["already_done"] is True, again.output


def test_scripts_train_run_skips_a_finished_run_and_refuses_a_changed_one(market: Path, tmp_path: Path):
    """``research/scripts/train_one.sh``'s ``train_run`` (what results.sh and suite.sh queue): a rerun of a finished run
    trains nothing; a rerun with other options fails loudly instead of keeping the stale run."""
    repo = Path(__file__).resolve().parents[1]
    out = tmp_path / "runs" / "sc" / "crl-s0"

    def train_run(*extra: str) -> subprocess.CompletedProcess[str]:
        line = f"{market} sc crl 0 {out} --epochs 1 --updates-per-epoch 5 {' '.join(extra)}"
        script = f"source research/scripts/train_one.sh; echo '{line}' | JOBS=1 run_jobs"
        return subprocess.run(["bash", "-c", script], cwd=repo, capture_output=True, text=True, timeout=300)

    first = train_run()
    assert first.returncode == 0 and first.stdout.strip() == f"trained {out}", first.stderr
    recorded = (out / "run.json").read_bytes()
    second = train_run()
    assert second.returncode == 0 and second.stdout.strip() == f"already trained {out}", second.stderr
    changed = train_run("--n-step", "4")
    assert changed.returncode != 0 and f"training {out} failed" in changed.stderr
    log = (tmp_path / "runs" / "logs" / f"{str(out).replace('/', '_')}.log").read_text()
    assert "epoch   0" in log and "n_step 8, not 4" in " ".join(log.split())  # appended: the training log is kept
    assert (out / "run.json").read_bytes() == recorded


def test_scripts_snapshot_members_builds_once_and_rebuilds_a_changed_run(market: Path, tmp_path: Path):
    """``research/scripts/train_one.sh``'s ``snapshot_members`` (what suite.sh runs for SC's snapshot ensemble):
    every late
    epoch of a finished ``--keep-epochs`` run as a member directory; a rerun keeps them; a run that changed since
    (resumed, retrained) gets them rebuilt whole; a run without snapshots fails loudly and leaves nothing."""
    repo = Path(__file__).resolve().parents[1]
    run_dir, members = tmp_path / "runs" / "cbrl-s0", tmp_path / "runs" / "snapshots" / "cbrl-s0"
    train = [*sc_cbrl(market), "--epochs", "3", "--select-from", "1", "--keep-epochs", "--out", str(run_dir)]
    assert runner.invoke(app, train).exit_code == 0

    def build(run: Path = run_dir) -> subprocess.CompletedProcess[str]:
        script = f"source research/scripts/train_one.sh; snapshot_members {run} {members}"
        return subprocess.run(["bash", "-c", script], cwd=repo, capture_output=True, text=True, timeout=300)

    first = build()
    assert first.returncode == 0 and first.stdout.strip() == f"built {members}", first.stderr
    assert sorted(p.name for p in members.iterdir()) == ["epoch-001", "epoch-002"]  # from select_from to the last
    assert sorted(p.name for p in members.parent.iterdir()) == ["cbrl-s0", "cbrl-s0.log"]  # no partial left
    again = build()
    assert again.returncode == 0 and again.stdout.strip() == f"already built {members}", again.stderr
    stale = members / "epoch-001" / "stale"
    stale.touch()
    os.utime(run_dir / "run.json", (time.time() + 5, time.time() + 5))  # the run changed after its members
    rebuilt = build()
    assert rebuilt.returncode == 0 and rebuilt.stdout.strip() == f"built {members}", rebuilt.stderr
    assert not stale.exists() and sorted(p.name for p in members.iterdir()) == ["epoch-001", "epoch-002"]
    plain = tmp_path / "plain"
    assert runner.invoke(app, [*sc_cbrl(market), "--epochs", "1", "--out", str(plain)]).exit_code == 0
    shutil.rmtree(members)
    refused = build(plain)
    assert refused.returncode != 0 and "snapshot members of" in refused.stderr
    assert "without --keep-epochs" in members.with_name("cbrl-s0.log").read_text()
    assert not members.exists() and not (members.parent / ".partial-cbrl-s0").exists()


def test_a_short_training_run_beats_a_random_policy(tmp_path: Path):
    from training.market.dataset import Market
    from training.replay.dayset import DaySet
    from training.rl.config import SACConfig
    from training.rl.loop import random_policy_score, train

    # Four train days of 40k impressions: a 6k-impression day has too few conversions to learn from.
    root = tmp_path / "market"
    generate_market(root, config_with(days_id=8, days_ood=0, impressions_per_day=40_000, seed=4), workers=1)
    days = DaySet.load(Market.open(root), "train", "sc")
    config = SACConfig(algo="crl", epochs=10, updates_per_epoch=200, hidden=64, seed=0, validation_fraction=0.0)
    _, logs = train(config, days)
    floor = random_policy_score(days, seed=0)
    scores = [log.train_score for log in logs]
    assert max(scores) > floor + 0.2 and scores[-1] > floor + 0.2, (scores, floor)


def test_help_shows_sacconfig_defaults():
    """The options default to SACConfig's own values, and --help shows them (not a swallowed placeholder)."""
    from training.rl.config import SACConfig

    config = SACConfig()
    result = runner.invoke(app, ["train", "--help"], terminal_width=200)
    assert result.exit_code == 0
    text = " ".join(result.stdout.replace("│", " ").split())
    assert re.search(rf"Training epochs;.{{0,80}}\[default: {config.epochs}\]", text)  # rich may wrap the cell
    # The residual choice and its margin depend on the algo: the help says so instead of a fixed default.
    assert "Default: residual for cbrl" in text and "[default: None]" not in text
    assert f"[default: {config.updates_per_epoch}]" in text and f"[default: {config.uscb_gamma}]" in text
    assert "[default: cbrl]" in text and "[default: 4000,8000,12000]" in text


def test_start_at_controller_makes_the_controller_the_first_candidate_of_model_selection(market: Path, tmp_path: Path):
    """``--start-at-controller``: the untrained policy, which bids the PID exactly, is scored on the validation days
    before epoch 0; best.pt holds a trained epoch only where one beat it, and a resume keeps the choice."""
    from training.market.dataset import Market
    from training.replay.dayset import DaySet, split_validation
    from training.rl.loop import play_days, score
    from training.rl.runs import load_best

    out = tmp_path / "from-pid"
    args = ["train", "--data", str(market), "--setting", "sc", "--out", str(out), "--algo", "cbrl"]
    args += ["--updates-per-epoch", "5"]
    result = runner.invoke(app, [*args, "--epochs", "1", "--start-at-controller", "--json"])
    assert result.exit_code == 0, result.output
    body = json.loads((out / "run.json").read_text())
    assert body["config"]["start_at_controller"] is True
    # The controller's score is the run's PID (the PID baseline with the run's gains) played on the validation days.
    from model.controller import GAIN_FIELDS
    from training.bidders.pid import PID

    controller = body["config"]["controller"]
    pid = PID(np.asarray(controller["traffic_profile"]), **{k: controller[k] for k in GAIN_FIELDS})
    days = DaySet.load(Market.open(market), "train", "sc")
    _, validation_days = split_validation(days, body["config"]["validation_fraction"])
    assert len(validation_days) > 0
    outcome, _ = play_days(pid, days, validation_days, 1, seed=0)
    assert body["controller_validation_score"] == pytest.approx(score(outcome, days, validation_days), abs=1e-9)
    scores = [body["controller_validation_score"], *(h["validation_score"] for h in body["history"])]
    assert body["best_validation_score"] == max(scores)
    saved, _ = load_best(out)
    assert saved["epoch"] == int(np.argmax(scores)) - 1  # -1: the untrained policy, i.e. the controller
    resumed = runner.invoke(app, [*args, "--epochs", "2", "--resume", "--json"])
    assert resumed.exit_code == 0, resumed.output
    body = json.loads((out / "run.json").read_text())
    assert body["config"]["start_at_controller"] is True and len(body["history"]) == 2
    refused = runner.invoke(app, [*args[:6], str(tmp_path / "x"), *args[7:], "--no-residual", "--start-at-controller"])
    assert refused.exit_code != 0 and "start_at_controller needs a residual" in refused.output


def test_validation_fold_holds_out_other_days(market: Path, tmp_path: Path):
    """``--validation-fold K``: model selection reads every fifth train day from day K (the controller's
    validation score is the PID's on exactly those days); a fold out of range is a clear CLI error."""
    from model.controller import GAIN_FIELDS
    from training.bidders.pid import PID
    from training.market.dataset import Market
    from training.replay.dayset import DaySet, split_validation
    from training.rl.loop import play_days, score

    out = tmp_path / "fold-1"
    args = sc_cbrl(market)
    result = runner.invoke(app, [*args, "--out", str(out), "--epochs", "1", "--validation-fold", "1", "--json"])
    assert result.exit_code == 0, result.output
    body = json.loads((out / "run.json").read_text())
    assert body["config"]["validation_fold"] == 1
    controller = body["config"]["controller"]
    pid = PID(np.asarray(controller["traffic_profile"]), **{k: controller[k] for k in GAIN_FIELDS})
    days = DaySet.load(Market.open(market), "train", "sc")
    _, fold_0 = split_validation(days, body["config"]["validation_fraction"])
    _, fold_1 = split_validation(days, body["config"]["validation_fraction"], 1)
    assert len(fold_1) > 0 and not set(fold_0) & set(fold_1)
    outcome, _ = play_days(pid, days, fold_1, 1, seed=0)
    assert body["controller_validation_score"] == pytest.approx(score(outcome, days, fold_1), abs=1e-9)
    # A resume keeps the fold it started with; another one is refused (its epochs were selected on fold 1's days).
    other = runner.invoke(app, [*args, "--out", str(out), "--epochs", "2", "--resume", "--validation-fold", "2"])
    assert other.exit_code == 2 and "validation_fold 1, not 2" in " ".join(other.output.split())
    assert len(json.loads((out / "run.json").read_text())["history"]) == 1
    bad = runner.invoke(app, [*args, "--out", str(tmp_path / "fold-9"), "--validation-fold", "9"])
    assert bad.exit_code == 2 and "validation_fold must be in 0..4" in bad.output
    assert not (tmp_path / "fold-9" / "run.json").exists()


def test_pooled_markets_train_one_run_around_the_home_markets_pid(market: Path, tmp_path: Path):
    """``--data A --data B``: one run learns from both markets' train days, corrects A's tuned PID (the same
    controller a run on A alone corrects), and its model selection holds out each market's own fold-0 days."""
    from model.controller import GAIN_FIELDS
    from training.bidders.pid import PID
    from training.market.dataset import Market
    from training.replay.dayset import DaySet, split_validation
    from training.rl.loop import play_days, score

    other = tmp_path / "other-market"
    generate_market(other, config_with(days_id=6, days_ood=0, impressions_per_day=5000, seed=9), workers=1)
    args = ["train", "--setting", "sc", "--algo", "cbrl", "--updates-per-epoch", "5", "--epochs", "1", "--json"]
    alone, pooled = tmp_path / "alone", tmp_path / "pooled"
    result = runner.invoke(app, [*args, "--data", str(market), "--out", str(alone)])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, [*args, "--data", str(market), "--data", str(other), "--out", str(pooled)])
    assert result.exit_code == 0, result.output
    body = json.loads((pooled / "run.json").read_text())
    single = json.loads((alone / "run.json").read_text())
    assert body["market"] == str(market) and body["pooled_markets"] == [str(market), str(other)]
    assert "pooled_markets" not in single
    assert body["config"]["controller"] == single["config"]["controller"]
    assert body["data_fingerprint"].startswith("pooled:") and body["data_fingerprint"] != single["data_fingerprint"]
    home = DaySet.load(Market.open(market), "train", "sc")
    away = DaySet.load(Market.open(other), "train", "sc")
    days = DaySet.pool([home, away])
    assert days.parts == (len(home), len(away)) and len(days) == len(home) + len(away)
    learn, held = split_validation(days)
    assert list(held) == [*split_validation(home)[1], *(split_validation(away)[1] + len(home))]
    assert not set(learn) & set(held) and len(learn) + len(held) == len(days)
    # A subset of the pooled days keeps its markets, the home market first (held out: each market's own fold).
    assert days.subset(held).parts == (len(split_validation(home)[1]), len(split_validation(away)[1]))
    assert days.subset(np.arange(len(home))).parts == (len(home), 0)
    with pytest.raises(ValueError, match="keep the markets in order"):
        days.subset(held[::-1])
    controller = body["config"]["controller"]
    pid = PID(np.asarray(controller["traffic_profile"]), **{k: controller[k] for k in GAIN_FIELDS})
    outcome, _ = play_days(pid, days, held, 1, seed=0)
    assert body["controller_validation_score"] == pytest.approx(score(outcome, days, held), abs=1e-9)
    # A pooled run is an evaluate method on either market; naming a market twice is a clear error.
    evaluated = runner.invoke(
        app,
        [
            "evaluate",
            str(other),
            "--split",
            "test",
            "--methods",
            f"{pooled},pid",
            "--seeds",
            "1",
            "--setting",
            "sc",
            "--out",
            str(tmp_path / "eval"),
            "--json",
        ],
    )
    assert evaluated.exit_code == 0, evaluated.output
    exported = runner.invoke(app, ["export", "--run", str(pooled), "--out", str(tmp_path / "model"), "--json"])
    assert exported.exit_code == 0, exported.output
    from model.artifact import read_card

    card = read_card(tmp_path / "model")
    assert card.training.market == str(market) and card.training.pooled_markets == [str(market), str(other)]
    assert card.training.data_fingerprint == body["data_fingerprint"]
    twice = runner.invoke(app, [*args, "--data", str(market), "--data", str(market), "--out", str(tmp_path / "x")])
    assert twice.exit_code == 2 and "same market twice" in twice.output
    again = runner.invoke(app, [*args, "--data", str(market), "--data", f"{market}/.", "--out", str(tmp_path / "x")])
    assert again.exit_code == 2 and "same market twice" in again.output
    shutil.copytree(market, tmp_path / "copy")
    copied = runner.invoke(
        app, [*args, "--data", str(market), "--data", str(tmp_path / "copy"), "--out", str(tmp_path / "x")]
    )
    assert copied.exit_code == 2 and "hold the same train days" in copied.output


def test_selection_seeds_score_each_epoch_on_several_noise_streams(market: Path, tmp_path: Path):
    """``--selection-seeds K``: each epoch's validation score is the mean of the policy played with seeds 0..K-1;
    seed 0's is the score a one-stream run records (selection plays no part in training), the choice is
    recorded, and a resume must keep it."""
    args = sc_cbrl(market)
    args += ["--epochs", "2", "--json"]
    one, three = tmp_path / "one", tmp_path / "three"
    assert runner.invoke(app, [*args, "--selection-seeds", "1", "--out", str(one)]).exit_code == 0
    result = runner.invoke(app, [*args, "--selection-seeds", "3", "--out", str(three)])
    assert result.exit_code == 0, result.output
    by_one, by_three = (json.loads((d / "run.json").read_text()) for d in (one, three))
    assert by_one["config"]["selection_seeds"] == 1 and by_three["config"]["selection_seeds"] == 3
    for single, several in zip(by_one["history"], by_three["history"], strict=True):
        assert len(single["validation_scores"]) == 1 and len(several["validation_scores"]) == 3
        assert several["validation_score"] == pytest.approx(np.mean(several["validation_scores"]), abs=1e-12)
        assert several["validation_scores"][0] == pytest.approx(single["validation_score"], abs=1e-12)
        assert several["train_score"] == pytest.approx(single["train_score"], abs=1e-12)
    best = max([h["validation_score"] for h in by_three["history"]] + [by_three["controller_validation_score"]])
    assert by_three["best_validation_score"] == best
    resumed = runner.invoke(app, [*args, "--resume", "--out", str(three)])
    assert resumed.exit_code == 0, resumed.output  # the recorded choice is kept when not given
    refused = runner.invoke(app, [*args, "--resume", "--selection-seeds", "2", "--out", str(three)])
    assert refused.exit_code == 2 and "selection_seeds 3, not 2" in " ".join(refused.output.split())
    zero = runner.invoke(app, [*args, "--selection-seeds", "0", "--out", str(tmp_path / "zero")])
    assert zero.exit_code == 2 and not (tmp_path / "zero").exists()
    # A rival has no posterior to sample: its streams play the same episodes (why its default is one).
    rival = tmp_path / "crl"
    crl = [*args[:6], "crl", *args[7:], "--selection-seeds", "2", "--out", str(rival)]
    assert runner.invoke(app, crl).exit_code == 0
    for h in json.loads((rival / "run.json").read_text())["history"]:
        assert h["validation_scores"][0] == h["validation_scores"][1]


def test_keep_epochs_saves_every_epochs_model_and_a_resume_keeps_doing_so(market: Path, tmp_path: Path):
    """``--keep-epochs``: epochs/epoch-NNN.pt for every epoch and controller.pt for the untrained controller, in
    best.pt's format; the last one is the checkpoint's actor, the kept epoch's is best.pt's; a resume without the
    flag goes on saving them; off by default."""
    import torch

    from training.rl.runs import load_best

    args = sc_cbrl(market)
    out = tmp_path / "kept"
    result = runner.invoke(app, [*args, "--epochs", "3", "--json", "--keep-epochs", "--out", str(out)])
    assert result.exit_code == 0, result.output
    names = ["controller.pt", "epoch-000.pt", "epoch-001.pt", "epoch-002.pt"]  # the controller: candidate -1
    assert sorted(p.name for p in (out / "epochs").iterdir()) == names
    snapshots = [torch.load(out / "epochs" / f"epoch-{k:03d}.pt", weights_only=False) for k in range(3)]
    assert [s["epoch"] for s in snapshots] == [0, 1, 2]
    checkpoint = torch.load(out / "checkpoint.pt", weights_only=False)
    for name, tensor in checkpoint["actor"].items():
        assert torch.equal(snapshots[2]["actor"][name], tensor), name
    assert not all(torch.equal(snapshots[0]["actor"][n], t) for n, t in checkpoint["actor"].items())
    best, body = load_best(out)
    assert body["keep_epochs"] is True
    kept = torch.load(out / "epochs" / names[best["epoch"] + 1], weights_only=False)  # best.pt's model
    for name, tensor in best["actor"].items():
        assert torch.equal(kept["actor"][name], tensor), name
    resumed = runner.invoke(app, [*args, "--epochs", "4", "--json", "--resume", "--out", str(out)])
    assert resumed.exit_code == 0, resumed.output
    assert (out / "epochs" / "epoch-003.pt").exists()
    plain = tmp_path / "plain"
    assert runner.invoke(app, [*args, "--epochs", "1", "--json", "--out", str(plain)]).exit_code == 0
    assert not (plain / "epochs").exists() and "keep_epochs" not in json.loads((plain / "run.json").read_text())


def test_curves_of_a_run_resumed_across_a_new_history_field(tmp_path: Path):
    """A run started before ``validation_scores`` existed and resumed after it: curves.csv holds every column
    (blank where an epoch lacks it) and curves.png draws the seeds' range where there is one."""
    from training.rl.runs import write_curves

    old = {"epoch": 0, "stage": "s", "train_score": 0.5, "validation_score": 0.4}
    new = {"epoch": 1, "stage": "s", "train_score": 0.6, "validation_score": 0.5, "validation_scores": [0.4, 0.6]}
    write_curves([old, new], tmp_path, controller_score=0.45)
    lines = (tmp_path / "curves.csv").read_text().splitlines()
    assert lines[0].split(",")[-1] == "validation_scores" and lines[1].endswith(",") and "0.6]" in lines[2]
    assert (tmp_path / "curves.png").stat().st_size > 0


def test_select_from_keeps_the_best_epoch_from_there_on_and_the_argmax_beside(market: Path, tmp_path: Path):
    """``--select-from N``: best.pt holds the validation argmax among epochs >= N (not the controller, not an
    earlier epoch), the run records that epoch's score, validation-best.pt holds the plain argmax; the same
    training as without it; kept on resume; refused past the last epoch."""
    from training.rl.epoch_selection import kept_epoch, run_scores
    from training.rl.runs import VALIDATION_BEST_FILE, load_best

    args = sc_cbrl(market)
    plain, late = tmp_path / "plain", tmp_path / "late"
    plain_args = [*args, "--epochs", "4", "--json", "--select-from", "0", "--out", str(plain)]
    assert runner.invoke(app, plain_args).exit_code == 0
    result = runner.invoke(app, [*args, "--epochs", "4", "--select-from", "2", "--out", str(late)])
    assert result.exit_code == 0 and "best validation score from epoch 2 on" in result.output, result.output
    plain_body, late_body = (json.loads((d / "run.json").read_text()) for d in (plain, late))
    assert [h["validation_scores"] for h in plain_body["history"]] == [
        h["validation_scores"] for h in late_body["history"]
    ]
    assert late_body["config"]["select_from"] == 2
    late_scores = [h["validation_score"] for h in late_body["history"]]
    kept = 2 + int(np.argmax(late_scores[2:]))
    assert load_best(late)[0]["epoch"] == kept == late_body["kept_epoch"]
    assert late_body["best_validation_score"] == late_scores[kept]
    assert load_best(plain)[0]["epoch"] == plain_body["kept_epoch"]
    scores = run_scores(late_body)
    assert torch.load(late / VALIDATION_BEST_FILE, weights_only=False)["epoch"] == kept_epoch(scores)
    assert load_best(plain)[0]["epoch"] == kept_epoch(scores)
    resumed = runner.invoke(app, [*args, "--epochs", "5", "--json", "--resume", "--out", str(late)])
    assert resumed.exit_code == 0, resumed.output
    grown = json.loads((late / "run.json").read_text())
    assert load_best(late)[0]["epoch"] == kept_epoch(run_scores(grown), 2) >= 2
    refused = runner.invoke(app, [*args, "--epochs", "6", "--resume", "--select-from", "0", "--out", str(late)])
    assert refused.exit_code == 2 and "select_from 2, not 0" in " ".join(refused.output.split())
    past = runner.invoke(app, [*args, "--epochs", "3", "--select-from", "3", "--out", str(tmp_path / "past")])
    assert past.exit_code == 2 and "select_from must be in 0..2" in past.output
    assert not (plain / VALIDATION_BEST_FILE).exists()  # nothing beside a run that keeps the plain argmax


def test_reselect_keeps_another_epoch_of_a_keep_epochs_run(market: Path, tmp_path: Path):
    """``rcb reselect``: OUT's best.pt is the snapshot the rule picks, its run.json the run's record with the rule,
    the kept score and where it came from; it plays in ``rcb evaluate``; a run reselected with its own rule keeps
    the same epoch as training did; refusals (no snapshots, unfinished, OUT not empty, the run itself, a
    resume of the reselection) leave nothing behind."""
    from training.rl.epoch_selection import kept_epoch, run_scores
    from training.rl.runs import load_best

    args = [*sc_cbrl(market), "--select-from", "0"]  # the plain argmax (SC CBRL defaults to the last quarter)
    run_dir = tmp_path / "kept"
    result = runner.invoke(app, [*args, "--epochs", "4", "--json", "--keep-epochs", "--out", str(run_dir)])
    assert result.exit_code == 0, result.output
    body = json.loads((run_dir / "run.json").read_text())
    assert (run_dir / "epochs" / "controller.pt").is_file()  # start_at_controller: candidate -1 is kept too
    scores = run_scores(body)
    rules = (
        ("best", []),
        ("from2", ["--select-from", "2"]),
        ("e3", ["--epoch", "3"]),  # by hand: a snapshot ensemble's member
        ("e1", ["--epoch", "1"]),
        ("e-1", ["--epoch", "-1"]),  # the untrained controller
    )
    for rule, options in rules:
        out = tmp_path / rule
        said = runner.invoke(app, ["reselect", str(run_dir), "--out", str(out), "--json", *options])
        assert said.exit_code == 0, said.output
        summary = json.loads(said.output)
        wanted = {"best": kept_epoch(scores), "from2": kept_epoch(scores, 2), "e3": 3, "e1": 1, "e-1": -1}
        wanted = wanted[rule]
        assert summary["epoch"] == wanted and summary["validation_score"] == scores[wanted]
        saved, new = load_best(out)
        assert saved["epoch"] == wanted
        snapshot = torch.load(run_dir / "epochs" / ("controller.pt" if wanted < 0 else f"epoch-{wanted:03d}.pt"))
        for name, tensor in snapshot["actor"].items():
            assert torch.equal(saved["actor"][name], tensor), name
        assert new["reselected_from"] == str(run_dir) and new["kept_epoch"] == wanted
        assert new["best_validation_score"] == scores[wanted] and "keep_epochs" not in new
        assert new["history"] == body["history"] and new["data_fingerprint"] == body["data_fingerprint"]
    assert load_best(tmp_path / "best")[0]["epoch"] == load_best(run_dir)[0]["epoch"]  # training's own choice
    assert json.loads((tmp_path / "from2").joinpath("run.json").read_text())["config"]["select_from"] == 2
    by_hand = json.loads((tmp_path / "e1").joinpath("run.json").read_text())
    assert by_hand["reselected_epoch"] == 1 and by_hand["config"] == body["config"]  # the run's own rule, unchanged
    assert "reselected_epoch" not in json.loads((tmp_path / "from2").joinpath("run.json").read_text())
    methods = f"{tmp_path / 'from2'},ensemble:pair={tmp_path}/[be][e3]*"  # from2 alone; best and e3 as one
    evaluation = ["evaluate", str(market), "--setting", "sc", "--methods", methods, "--out", str(tmp_path / "ev")]
    evaluated = runner.invoke(app, [*evaluation, "--json"])
    assert evaluated.exit_code == 0, evaluated.output
    tuned = json.loads((tmp_path / "ev" / "meta.json").read_text())["tuned"]
    assert tuned[str(tmp_path / "from2")]["kept_epoch"] == kept_epoch(scores, 2)  # which epoch played
    assert tuned["ensemble:pair"]["kept_epoch"] == [kept_epoch(scores), 3]
    # Refusals.
    plain = tmp_path / "plain"
    assert runner.invoke(app, [*args, "--epochs", "1", "--json", "--out", str(plain)]).exit_code == 0
    no_snapshots = runner.invoke(app, ["reselect", str(plain), "--out", str(tmp_path / "n1")])
    assert no_snapshots.exit_code == 2 and "without --keep-epochs" in no_snapshots.output
    not_empty = runner.invoke(app, ["reselect", str(run_dir), "--out", str(tmp_path / "best")])
    assert not_empty.exit_code == 2 and "not an empty directory" in not_empty.output
    itself = runner.invoke(app, ["reselect", str(run_dir), "--out", str(run_dir)])
    assert itself.exit_code == 2
    past = runner.invoke(app, ["reselect", str(run_dir), "--out", str(tmp_path / "n2"), "--select-from", "4"])
    assert past.exit_code == 2 and "epochs 0-3" in past.output
    beyond = runner.invoke(app, ["reselect", str(run_dir), "--out", str(tmp_path / "n4"), "--epoch", "4"])
    assert beyond.exit_code == 2 and "epochs 0-3" in beyond.output
    both = ["reselect", str(run_dir), "--out", str(tmp_path / "n5"), "--epoch", "1", "--select-from", "2"]
    mixed = runner.invoke(app, both)
    assert mixed.exit_code == 2 and "give one or the other" in mixed.output
    unfinished = tmp_path / "unfinished"
    shutil.copytree(run_dir, unfinished)
    (unfinished / "run.json").write_text(json.dumps({**body, "status": "training"}))
    said = runner.invoke(app, ["reselect", str(unfinished), "--out", str(tmp_path / "n3")])
    assert said.exit_code == 2 and "not finished" in said.output
    assert not any((tmp_path / n).exists() for n in ("n1", "n2", "n3", "n4", "n5"))
    again = runner.invoke(app, [*args, "--epochs", "5", "--resume", "--out", str(tmp_path / "from2")])
    assert again.exit_code == 2 and "is a reselection of" in again.output
    # --snapshots: a snapshot ensemble's members, every epoch from --select-from (else the run's own) to the last.
    said = runner.invoke(app, ["reselect", str(run_dir), "--out", str(tmp_path / "snaps"), "--snapshots", "--json"])
    assert said.exit_code == 0, said.output
    assert json.loads(said.output)["epochs"] == [0, 1, 2, 3]  # the run's own select_from: 0
    late = ["reselect", str(run_dir), "--out", str(tmp_path / "late"), "--snapshots", "--select-from", "2"]
    assert runner.invoke(app, late).exit_code == 0
    assert sorted(p.name for p in (tmp_path / "late").iterdir()) == ["epoch-002", "epoch-003"]
    for member in (tmp_path / "late").iterdir():
        saved, member_body = load_best(member)
        assert saved["epoch"] == member_body["reselected_epoch"] == int(member.name[-3:])
    mixed = ["reselect", str(run_dir), "--out", str(tmp_path / "n6"), "--snapshots", "--epoch", "1"]
    refused = runner.invoke(app, mixed)
    assert refused.exit_code == 2 and "--snapshots" in refused.output and not (tmp_path / "n6").exists()
    again = runner.invoke(app, late)
    assert again.exit_code == 2 and "not an empty directory" in again.output


class _Crash(Exception):
    """Stands for a process killed between two writes of an epoch."""


def test_a_crash_between_an_epochs_writes_resumes_to_the_files_an_uninterrupted_run_holds(
    market: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """checkpoint.pt (with the record), then run.json, then the model files: killed before best.pt, a resume
    writes the last epoch's model from the checkpoint; killed before run.json, a resume takes the epoch's record
    from the checkpoint instead of training that epoch again on networks that already learned it."""
    import training.rl.runs as train_module
    from training.rl.runs import load_best

    args = sc_cbrl(market)
    save, write = train_module._atomic_save, train_module._write_json

    def crash_at_best_pt(obj, path):
        if path.name == "best.pt" and obj.get("epoch") == 1:
            raise _Crash
        save(obj, path)

    killed = tmp_path / "killed-before-best"
    monkeypatch.setattr(train_module, "_atomic_save", crash_at_best_pt)
    options = ["--epochs", "2", "--select-from", "1", "--no-start-at-controller", "--keep-epochs", "--json"]
    options += ["--out", str(killed)]  # epoch 1 is the first candidate: its best.pt is written, whatever its score
    with pytest.raises(_Crash):
        runner.invoke(app, [*args, *options], catch_exceptions=False)
    monkeypatch.setattr(train_module, "_atomic_save", save)
    assert load_best(killed, finished=False)[0]["epoch"] == 0 and not (killed / "epochs" / "epoch-001.pt").exists()
    resumed = runner.invoke(app, [*args, *options, "--resume"])  # nothing left to train: the files are healed
    assert resumed.exit_code == 0, resumed.output
    saved, body = load_best(killed, finished=False)
    assert saved["epoch"] == 1 and body["status"] == "done" and len(body["history"]) == 2
    checkpoint = torch.load(killed / "checkpoint.pt", weights_only=False)
    snapshot = torch.load(killed / "epochs" / "epoch-001.pt", weights_only=False)
    for name, tensor in checkpoint["actor"].items():
        assert torch.equal(saved["actor"][name], tensor) and torch.equal(snapshot["actor"][name], tensor), name

    def crash_at_run_json(body, path):
        if body["status"] == "training" and len(body["history"]) == 2:
            raise _Crash
        write(body, path)

    cut = tmp_path / "killed-before-run-json"
    monkeypatch.setattr(train_module, "_write_json", crash_at_run_json)
    with pytest.raises(_Crash):
        runner.invoke(app, [*args, "--epochs", "2", "--json", "--out", str(cut)], catch_exceptions=False)
    monkeypatch.setattr(train_module, "_write_json", write)
    assert len(json.loads((cut / "run.json").read_text())["history"]) == 1
    recorded = torch.load(cut / "checkpoint.pt", weights_only=False)["history"]
    resumed = runner.invoke(app, [*args, "--epochs", "3", "--json", "--resume", "--out", str(cut)])
    assert resumed.exit_code == 0, resumed.output
    history = json.loads((cut / "run.json").read_text())["history"]
    assert [h["epoch"] for h in history] == [0, 1, 2]
    assert history[:2] == recorded  # epoch 1 as it was trained, not trained twice


def test_a_resume_heals_only_what_the_checkpoint_vouches_for(market: Path, tmp_path: Path):
    """The heal on resume leaves a kept earlier epoch's best.pt alone, and does nothing with a checkpoint from before
    the record was written into it (it may be an epoch ahead of run.json: its networks are not the last recorded
    epoch's); a reselection is refused by ``--skip-done`` too."""
    from training.rl.runs import load_best

    args = [*sc_cbrl(market), "--select-from", "0"]  # the plain argmax (SC CBRL defaults to the last quarter)
    run_dir = tmp_path / "run"
    options = ["--epochs", "3", "--keep-epochs", "--json", "--out", str(run_dir)]
    assert runner.invoke(app, [*args, *options]).exit_code == 0
    kept = load_best(run_dir)[0]
    assert kept["epoch"] != 2  # on this market the validation argmax is not the last epoch (as above)
    assert runner.invoke(app, [*args, *options, "--resume"]).exit_code == 0  # nothing to train; the heal runs
    after = load_best(run_dir)[0]
    assert after["epoch"] == kept["epoch"]
    for name, tensor in kept["actor"].items():
        assert torch.equal(after["actor"][name], tensor), name
    older = tmp_path / "older"
    shutil.copytree(run_dir, older)
    state = torch.load(older / "checkpoint.pt", weights_only=False)
    del state["history"], state["controller_validation_score"]
    torch.save(state, older / "checkpoint.pt")  # as written before the record was: after epoch 2 ...
    body = json.loads((older / "run.json").read_text())
    (older / "run.json").write_text(json.dumps({**body, "status": "training", "history": body["history"][:2]}))
    before = torch.load(older / "epochs" / "epoch-001.pt", weights_only=False)  # ... with run.json at epoch 1
    resumed = runner.invoke(app, [*args, "--epochs", "3", "--json", "--resume", "--out", str(older)])
    assert resumed.exit_code == 0, resumed.output
    untouched = torch.load(older / "epochs" / "epoch-001.pt", weights_only=False)
    for name, tensor in before["actor"].items():
        assert torch.equal(untouched["actor"][name], tensor), name
    assert len(json.loads((older / "run.json").read_text())["history"]) == 3
    reselected = tmp_path / "reselected"
    assert runner.invoke(app, ["reselect", str(run_dir), "--out", str(reselected)]).exit_code == 0
    refused = runner.invoke(app, [*args, "--epochs", "3", "--skip-done", "--out", str(reselected)])
    assert refused.exit_code == 2 and "is a reselection of" in refused.output


def test_sc_cbrl_defaults_hold_across_resume_and_skip_done(market: Path, tmp_path: Path):
    """SC CBRL's defaults (bootstrap days, the last quarter of the epochs) are recorded; a run grown by --resume keeps
    the select_from it started with, and --skip-done then finds it done (not "select_from 1, not 2"); a resume that
    would switch bootstrap days mid-run is refused."""
    run_dir = tmp_path / "grown"
    base = [*sc_cbrl(market), "--out", str(run_dir), "--json"]
    assert runner.invoke(app, [*base, "--epochs", "2"]).exit_code == 0
    config = json.loads((run_dir / "run.json").read_text())["config"]
    assert (config["bootstrap_days"], config["select_from"]) == (True, 1)  # last_quarter(2)
    grown = runner.invoke(app, [*base, "--epochs", "3", "--resume"])
    assert grown.exit_code == 0, grown.output
    assert json.loads((run_dir / "run.json").read_text())["config"]["select_from"] == 1
    for _ in range(2):  # research/scripts/train_one.sh reruns with --skip-done: done, every time
        again = runner.invoke(app, [*base, "--epochs", "3", "--skip-done"])
        assert again.exit_code == 0 and json.loads(again.output.splitlines()[-1])["already_done"] is True, again.output
    other = runner.invoke(app, [*base, "--epochs", "3", "--skip-done", "--select-from", "2"])
    assert other.exit_code == 2 and "select_from" in other.output
    switched = runner.invoke(app, [*base, "--epochs", "4", "--resume", "--no-bootstrap-days"])
    said = " ".join(switched.output.split())
    assert switched.exit_code == 2 and "bootstrap_days True, not False" in said, switched.output


def test_a_resume_keeps_every_option_not_given_and_refuses_one_that_conflicts(market: Path, tmp_path: Path):
    out = tmp_path / "kept"
    args = ["train", "--data", str(market), "--setting", "mc", "--algo", "crl", "--out", str(out)]
    started = runner.invoke(app, [*args, "--epochs", "1", "--updates-per-epoch", "5", "--seed", "3", "--json"])
    assert started.exit_code == 0, started.output
    resumed = runner.invoke(app, [*args, "--epochs", "2", "--resume", "--json"])  # nothing repeated
    assert resumed.exit_code == 0, resumed.output
    body = json.loads((out / "run.json").read_text())
    assert (body["config"]["updates_per_epoch"], body["config"]["seed"]) == (5, 3)
    assert [h["updates"] for h in body["history"]] == [5, 10]
    conflict = runner.invoke(app, [*args, "--epochs", "3", "--resume", "--updates-per-epoch", "7"])
    assert conflict.exit_code == 2 and "updates_per_epoch 5, not 7" in " ".join(conflict.output.split())
    flag = runner.invoke(app, [*args, "--epochs", "3", "--resume", "--auto-curriculum"])
    assert flag.exit_code == 2 and "auto_curriculum False, not True" in " ".join(flag.output.split())
    fewer = runner.invoke(app, [*args, "--epochs", "1", "--resume"])
    assert fewer.exit_code == 2 and "--epochs 2 or more, not 1" in " ".join(fewer.output.split())
    for refused in (conflict, flag, fewer):  # refused by run_training before it lets the bar be drawn
        assert "training crl" not in refused.output and refused.output.startswith("error:"), refused.output
    again = runner.invoke(app, [*args, "--resume", "--json"])  # no --epochs: the run's own 2, nothing to train
    assert again.exit_code == 0, again.output
    after = json.loads((out / "run.json").read_text())
    assert after["config"] == body["config"] and after["history"] == body["history"]  # nothing rewritten


def test_an_unfinished_run_is_not_exported_nor_evaluated(run: Path, market: Path, tmp_path: Path):
    unfinished = tmp_path / "unfinished"
    shutil.copytree(run, unfinished)
    body = json.loads((unfinished / "run.json").read_text())
    (unfinished / "run.json").write_text(json.dumps({**body, "status": "training"}))
    for runs in (["--run", str(unfinished)], ["--run", str(run), "--run", str(unfinished)]):
        result = runner.invoke(app, ["export", *runs, "--out", str(tmp_path / "model")])
        assert result.exit_code == 2 and "not a finished training run" in " ".join(result.output.split())
        assert not (tmp_path / "model").exists()
    evaluated = runner.invoke(
        app, ["evaluate", str(market), "--setting", "sc", "--methods", str(unfinished), "--out", str(tmp_path / "ev")]
    )
    assert evaluated.exit_code == 2 and "status 'training'" in " ".join(evaluated.output.split())
    from training.rl.runs import RunError, load_best

    with pytest.raises(RunError, match="status 'training'"):
        load_best(unfinished)


def test_square_brackets_in_an_argument_are_text_in_the_error(market: Path, tmp_path: Path):
    for pattern in ("runs/[/b]*", "runs/[b]*"):
        result = runner.invoke(
            app,
            ["evaluate", str(market), "--setting", "sc", "--methods", f"x={pattern}", "--out", str(tmp_path / "ev")],
        )
        assert result.exit_code == 2, result.output
        assert f"{pattern} matches no training run" in " ".join(result.output.split())


def test_a_group_of_runs_of_different_algorithms_is_refused(run: Path, market: Path, tmp_path: Path):
    other = tmp_path / "runs" / "hard"
    trained = runner.invoke(
        app,
        [
            "train",
            "--data",
            str(market),
            "--setting",
            "sc",
            "--algo",
            "hard",
            "--epochs",
            "1",
            "--updates-per-epoch",
            "5",
            "--out",
            str(other),
            "--json",
        ],
    )
    assert trained.exit_code == 0, trained.output
    shutil.copytree(run, tmp_path / "runs" / "crl")
    result = runner.invoke(
        app,
        [
            "evaluate",
            str(market),
            "--setting",
            "sc",
            "--methods",
            f"mixed={tmp_path / 'runs'}/*",
            "--out",
            str(tmp_path / "ev"),
        ],
    )
    assert result.exit_code == 2 and "different algorithms" in " ".join(result.output.split()), result.output


def test_curriculum_options_are_refused_for_an_algorithm_without_one(market: Path, tmp_path: Path):
    for algo, option in (("uscb", "--no-relaxed-stages"), ("hard", "--auto-curriculum"), ("rcpo", "--relaxed-stages")):
        result = runner.invoke(
            app,
            ["train", "--data", str(market), "--setting", "sc", "--algo", algo, option, "--out", str(tmp_path / algo)],
        )
        assert result.exit_code == 2 and "is for crl and cbrl" in result.output, result.output
        assert not (tmp_path / algo).exists()


def test_buffer_episodes_is_an_option_kept_on_resume(tmp_path: Path):
    market = tmp_path / "market"
    generate_market(market, config_with(days_id=8, days_ood=0, impressions_per_day=6000, seed=5), workers=1)
    out = tmp_path / "run"
    args = ["train", "--data", str(market), "--setting", "sc", "--algo", "crl", "--updates-per-epoch", "5"]
    first = runner.invoke(app, [*args, "--epochs", "1", "--buffer-episodes", "7", "--out", str(out)])
    assert first.exit_code == 0, first.output
    assert json.loads((out / "run.json").read_text())["config"]["buffer_episodes"] == 7
    grown = runner.invoke(app, [*args, "--epochs", "2", "--resume", "--out", str(out)])
    assert grown.exit_code == 0, grown.output
    body = json.loads((out / "run.json").read_text())
    assert body["config"]["buffer_episodes"] == 7 and len(body["history"]) == 2
    other = runner.invoke(app, [*args, "--epochs", "3", "--resume", "--buffer-episodes", "9", "--out", str(out)])
    assert other.exit_code == 2 and "buffer_episodes" in other.output
