"""`rcb train --init-from RUN`: a run fine-tuned from another run's last networks (training.rl.runs.initial_networks,
SACAgent.load_networks)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from model.artifact import TrainingInfo, load_artifact
from rcb.cli import app
from training.market.generator import config_with, generate_market
from training.rl.sac import NETWORKS, SACAgent, SACConfig, check_networks_fit

runner = CliRunner()


def sc_cbrl(market: Path, out: Path, *extra: str, setting: str = "sc", epochs: int = 2) -> list[str]:
    """``rcb train``'s options for a short CBRL run (SC unless said) on ``market`` into ``out``."""
    return ["train", "--data", str(market), "--setting", setting, "--algo", "cbrl", "--updates-per-epoch", "20",
            "--epochs", str(epochs), "--out", str(out), "--json", *extra]  # fmt: skip


@pytest.fixture(scope="module")
def market(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fine-tune") / "market"
    generate_market(out, config_with(days_id=8, days_ood=0, impressions_per_day=6000, seed=5), workers=1)
    return out


@pytest.fixture(scope="module")
def source(market: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "source"
    result = runner.invoke(app, sc_cbrl(market, out))
    assert result.exit_code == 0, result.output
    return out


def test_a_fine_tuned_run_starts_from_the_sources_last_networks(source: Path, market: Path, tmp_path: Path):
    """Scored before its first update (model selection's epoch -1, with start_at_controller as SC's default), the
    fine-tuned run plays the source's last epoch exactly: same networks, same validation days and noise streams. A
    fresh run's epoch -1 is the controller instead; both count their updates from 0 (fresh optimizers)."""
    tuned = tmp_path / "tuned"
    result = runner.invoke(app, sc_cbrl(market, tuned, "--init-from", str(source)))
    assert result.exit_code == 0, result.output
    body = json.loads((tuned / "run.json").read_text())
    kept = json.loads((source / "run.json").read_text())
    assert body["controller_validation_score"] == kept["history"][-1]["validation_score"]
    assert kept["controller_validation_score"] != kept["history"][-1]["validation_score"]
    assert body["config"]["init_from"] == str(source)
    assert body["initialized_from"] == {
        "run": str(source),
        "market": kept["market"],
        "data_fingerprint": kept["data_fingerprint"],
        "epochs": 2,
        "validation_fold": 0,
    }
    assert [h["updates"] for h in body["history"]] == [h["updates"] for h in kept["history"]]
    # and it trains on from there: its networks moved
    start = torch.load(source / "checkpoint.pt", weights_only=False)["actor"]
    end = torch.load(tuned / "checkpoint.pt", weights_only=False)["actor"]
    assert any(not torch.equal(start[name], end[name]) for name in start)


def test_a_resumed_fine_tuned_run_keeps_its_source_and_its_own_networks(source: Path, market: Path, tmp_path: Path):
    tuned = tmp_path / "tuned"
    assert runner.invoke(app, sc_cbrl(market, tuned, "--init-from", str(source))).exit_code == 0
    grown = sc_cbrl(market, tuned, "--resume", epochs=3)
    result = runner.invoke(app, grown)
    assert result.exit_code == 0, result.output
    body = json.loads((tuned / "run.json").read_text())
    assert len(body["history"]) == 3 and body["config"]["init_from"] == str(source)
    assert body["initialized_from"]["run"] == str(source)
    assert body["history"][2]["updates"] == 3 * body["history"][0]["updates"]  # its own optimizer state, resumed
    other = runner.invoke(app, [*grown, "--init-from", str(tmp_path)])
    assert other.exit_code == 2 and "init_from" in other.output
    # the same source spelled another way (relative, through a link) is the same source
    link = tmp_path / "link"
    link.symlink_to(source)
    for spelling in (os.path.relpath(source), str(link)):
        again = runner.invoke(app, [*sc_cbrl(market, tuned, "--resume", epochs=4), "--init-from", spelling])
        assert again.exit_code == 0, again.output
    assert len(json.loads((tuned / "run.json").read_text())["history"]) == 4


def test_a_source_that_cannot_be_carried_is_refused_before_anything_is_written(
    source: Path, market: Path, tmp_path: Path
):
    crl = tmp_path / "crl"
    args = ["train", "--data", str(market), "--setting", "sc", "--algo", "crl", "--epochs", "1"]
    assert runner.invoke(app, [*args, "--updates-per-epoch", "5", "--out", str(crl)]).exit_code == 0
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    body = json.loads((source / "run.json").read_text())
    (unfinished / "run.json").write_text(json.dumps({**body, "status": "training"}))
    cases = {
        tmp_path / "nothing": "not a run directory",
        unfinished: "not finished",
        crl: "trains crl, not cbrl",
    }
    for bad, said in cases.items():
        out = tmp_path / f"from-{bad.name}"
        result = runner.invoke(app, sc_cbrl(market, out, "--init-from", str(bad)))
        assert result.exit_code == 2 and said in result.output, result.output
        assert not out.exists()
    mc = runner.invoke(app, sc_cbrl(market, tmp_path / "mc", "--init-from", str(source), setting="mc"))
    assert mc.exit_code == 2 and "trained for sc, not mc" in mc.output
    plain = runner.invoke(app, sc_cbrl(market, tmp_path / "plain", "--no-residual", "--init-from", str(source)))
    assert plain.exit_code == 2 and "correction of its pid, this run's is not a residual policy" in plain.output
    # the same weights move the ratio by another amount: what the actor learned would mean something else
    stepped = runner.invoke(
        app, sc_cbrl(market, tmp_path / "stepped", "--action-step", "0.2", "--init-from", str(source))
    )
    assert stepped.exit_code == 2 and "action_step 0.3, this run's is 0.2" in stepped.output
    broken = tmp_path / "broken"
    for name, content in (("garbage", b"not a checkpoint"), ("partial", None)):
        shutil.copytree(source, broken / name)
        if content is None:  # a checkpoint without its critics
            state = torch.load(source / "checkpoint.pt", weights_only=False)
            torch.save({k: v for k, v in state.items() if k != "critic"}, broken / name / "checkpoint.pt")
        else:
            (broken / name / "checkpoint.pt").write_bytes(content)
    garbage = runner.invoke(app, sc_cbrl(market, tmp_path / "g", "--init-from", str(broken / "garbage")))
    assert garbage.exit_code == 2 and "unreadable checkpoint.pt" in garbage.output
    partial = runner.invoke(app, sc_cbrl(market, tmp_path / "p", "--init-from", str(broken / "partial")))
    assert partial.exit_code == 2 and "the checkpoint lacks critic" in partial.output
    for said in (mc, plain, stepped, garbage, partial):
        assert "Traceback" not in said.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken", "crl", "unfinished"]  # no run directory made


def test_a_rerun_with_the_same_source_is_done_and_the_card_and_reselect_name_the_source(
    source: Path, market: Path, tmp_path: Path
):
    """research/scripts/train_one.sh reruns with --skip-done; the exported card records where the weights started; rcb
    reselect keeping epoch -1 says it keeps the carried policy, not the controller."""
    tuned = tmp_path / "tuned"
    args = sc_cbrl(market, tuned, "--init-from", str(source), "--keep-epochs")
    assert runner.invoke(app, args).exit_code == 0
    again = runner.invoke(app, [*args, "--skip-done"])
    assert again.exit_code == 0 and json.loads(again.stdout)["already_done"] is True
    model = tmp_path / "model"
    exported = runner.invoke(app, ["export", "--run", str(tuned), "--out", str(model), "--json"])
    assert exported.exit_code == 0, exported.output
    card = load_artifact(model).card
    assert card.training.initialized_from == json.loads((tuned / "run.json").read_text())["initialized_from"]
    assert card.training.initialized_from is not None and card.training.initialized_from["run"] == str(source)
    # an ensemble's card holds each member's source (None for a member trained afresh)
    both = tmp_path / "both"
    exported = runner.invoke(app, ["export", "--run", str(tuned), "--run", str(source), "--out", str(both), "--json"])
    assert exported.exit_code == 0, exported.output
    members = load_artifact(both).card.training.initialized_from
    assert members == {"members": [card.training.initialized_from, None]}
    kept = runner.invoke(app, ["reselect", str(tuned), "--out", str(tmp_path / "start"), "--epoch", "-1"])
    assert kept.exit_code == 0, kept.output
    assert f"keeping the policy carried from {source}" in kept.output.replace("\n", "")


def test_networks_of_another_shape_are_a_clear_error(source: Path):
    state = torch.load(source / "checkpoint.pt", weights_only=False)
    controller = json.loads((source / "run.json").read_text())["config"]["controller"]
    networks = {key: state[key] for key in NETWORKS}
    narrower = SACConfig(algo="cbrl", hidden=64, controller=controller)
    with pytest.raises(ValueError, match=r"do not fit this run.s: Error.*size mismatch"):
        check_networks_fit(narrower, networks)
    with pytest.raises(ValueError, match="do not fit"):
        SACAgent(narrower).load_networks(networks)
    with pytest.raises(ValueError, match="posterior encoder"):
        check_networks_fit(SACConfig(algo="crl", residual=True, controller=controller), networks)
    check_networks_fit(SACConfig(algo="cbrl", controller=controller), networks)  # the control case: it fits


def test_a_source_fine_tuned_itself_is_recorded_down_the_chain(source: Path, market: Path, tmp_path: Path):
    first, second = tmp_path / "first", tmp_path / "second"
    assert runner.invoke(app, sc_cbrl(market, first, "--init-from", str(source))).exit_code == 0
    assert runner.invoke(app, sc_cbrl(market, second, "--init-from", str(first), "--epochs", "1")).exit_code == 0
    body = json.loads((second / "run.json").read_text())
    assert body["initialized_from"]["run"] == str(first)
    assert body["initialized_from"]["initialized_from"]["run"] == str(source)


def test_learned_fingerprints_walk_every_source():
    info = TrainingInfo(
        run="r",
        market="m",
        data_fingerprint="own",
        epochs=1,
        config={},
        initialized_from={
            "members": [
                None,
                {"run": "a", "data_fingerprint": "a", "initialized_from": {"run": "b", "data_fingerprint": "b"}},
                {"run": "c", "data_fingerprint": "c"},
            ]
        },
    )
    assert info.learned_fingerprints() == {"own", "a", "b", "c"}
    assert info.model_copy(update={"initialized_from": None}).learned_fingerprints() == {"own"}


def test_validation_days_a_source_trained_on_are_refused(source: Path, market: Path, tmp_path: Path):
    folded = tmp_path / "folded"
    assert runner.invoke(app, sc_cbrl(market, folded, "--validation-fold", "1", epochs=1)).exit_code == 0
    tuned = tmp_path / "tuned"
    assert runner.invoke(app, sc_cbrl(market, tuned, "--init-from", str(folded), epochs=1)).exit_code == 0
    assert json.loads((tuned / "run.json").read_text())["initialized_from"]["validation_fold"] == 1
    exported = tmp_path / "model"
    assert runner.invoke(app, ["export", "--run", str(tuned), "--out", str(exported)]).exit_code == 0
    evaluate = ["evaluate", str(market), "--setting", "sc", "--split", "validation", "--seeds", "1"]
    for method in (str(tuned), f"shield:onnx:{exported}"):
        refused = runner.invoke(app, [*evaluate, "--methods", method, "--out", str(tmp_path / "read")])
        assert refused.exit_code == 2, refused.output
        assert f"fine-tuned from {folded}, which held out validation fold 1" in refused.output.replace("\n", "")
    # the control: a source that held out fold 0 read those days as a validation run does, never learned them
    plain = tmp_path / "plain"
    assert runner.invoke(app, sc_cbrl(market, plain, "--init-from", str(source), epochs=1)).exit_code == 0
    read = runner.invoke(app, [*evaluate, "--methods", str(plain), "--out", str(tmp_path / "read")])
    assert read.exit_code == 0, read.output
