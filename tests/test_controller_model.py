"""A controller is a model too (``kind: controller``, ``rcb export --controller``); a card's ``safety_controller`` is
the served market's PID its shield and fallback run around (``rcb calibrate``); ``rcb calibrate`` refuses, exit 1, a
model that cannot hold the market's PID's CSR."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from artifact_fixtures import SETTING, Exported, replace_file, rewrite_card
from typer.testing import CliRunner

from model.artifact import (
    CARD_FILE,
    OPEN_BAND,
    POLICY_FILE,
    ArtifactError,
    ControllerInfo,
    load_artifact,
    read_card,
)
from model.controller import GAIN_FIELDS, ConstantRatio, ControllerGains
from model.policy import Policy
from rcb.cli import app
from training.bidders.onnx import OnnxBidder
from training.bidders.shielded import ShieldedBidder
from training.bidders.tuned import tuned_baseline
from training.evaluation.evaluate import evaluate, split_days
from training.export.calibrate import LADDER
from training.market.dataset import Market


@pytest.fixture(scope="module")
def controller_models(exported: Exported, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``rcb export --controller pid|rm`` of the fixture market, through the CLI."""
    root = tmp_path_factory.mktemp("controllers")
    out = {}
    for law in ("pid", "rm"):
        out[law] = root / law
        args = ["export", "--controller", law, str(exported.market), "--setting", SETTING, "--out", str(out[law])]
        result = CliRunner().invoke(app, [*args, "--json"])
        assert result.exit_code == 0, result.output
        said = json.loads(result.stdout)
        assert said["kind"] == "controller" and said["algorithm"] == law and said["files"] == [CARD_FILE]
    return out


def pid_params(market: Path) -> dict[str, Any]:
    market_ = Market.open(market)
    _, train = split_days(market_, "train", SETTING)
    return tuned_baseline(market_, "pid", SETTING, train)[0].params()


def overbidding_model(exported: Exported, directory: Path) -> Path:
    """A model that cannot hold an ROI: its graph bids the ratio 4 whatever it reads, and its band is the whole range,
    so the shield lets it (the hard fixture's card, its policy graph replaced)."""
    from onnx import TensorProto, helper

    shutil.copytree(exported.hard_model, directory)
    card = read_card(directory)
    obs = helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", card.obs_dim])
    ratio = helper.make_tensor_value_info("ratio", TensorProto.FLOAT, ["batch"])
    constants = [
        helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0]),
        helper.make_tensor("four", TensorProto.FLOAT, [], [4.0]),
        helper.make_tensor("axes", TensorProto.INT64, [1], [1]),
    ]
    nodes = [
        helper.make_node("Mul", ["obs", "zero"], ["nothing"]),
        helper.make_node("ReduceSum", ["nothing", "axes"], ["none"], keepdims=0),
        helper.make_node("Add", ["none", "four"], ["ratio"]),
    ]
    graph = helper.make_graph(nodes, "bids-four", [obs], [ratio], initializer=constants)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", card.opset or 20)])
    model.ir_version = 9
    replace_file(directory, POLICY_FILE, model.SerializeToString())
    band = {"wide": OPEN_BAND.wide, "tight": OPEN_BAND.tight, "tight_above": OPEN_BAND.tight_above}
    rewrite_card(directory, lambda raw: raw.update(shield={"config": band, "chosen_by": "a test"}))
    return directory


# --- A controller model -----------------------------------------------------------------------------------------


def test_an_exported_controller_plays_the_tuned_baseline_offline_with_or_without_the_shield(
    exported: Exported, controller_models: dict[str, Path]
):
    """``onnx:DIR`` of a controller model is the ``pid`` (``rm``) row, episode by episode; ``shield:onnx:DIR`` too:
    the band around a controller model is the whole ratio range, so the shield never moves its ratio."""
    for law, directory in controller_models.items():
        card = read_card(directory)
        assert card.kind == "controller" and card.controller is not None and card.controller.law == law
        assert sorted(p.name for p in directory.iterdir()) == [CARD_FILE] and card.files == {}
        assert card.controller.market == str(exported.market) and card.controller.tuned_on == "train"
        assert card.controller.data_fingerprint == Market.open(exported.market).split_fingerprint("train")
        assert card.parity["ratio"] <= 1e-9 and card.shield_config() == OPEN_BAND
        methods = [law, f"onnx:{directory}", f"shield:onnx:{directory}"]
        played = evaluate(Market.open(exported.market), SETTING, "test", methods, seeds=2)
        rows = [played.episodes[played.episodes["method"] == m].reset_index(drop=True) for m in methods]
        assert (rows[1]["seed"] == 0).all()  # deterministic: played once
        for other in rows[1:]:
            np.testing.assert_array_equal(other["delivery"], rows[0]["delivery"])
            np.testing.assert_array_equal(other["cost"], rows[0]["cost"])
        assert played.meta["tuned"][f"shield:onnx:{directory}"]["shield_acted_share"] == 0
        artifact = load_artifact(directory)
        law_ = artifact.fallback_controller()  # its own fallback
        assert isinstance(law_, ConstantRatio if law == "rm" else ControllerGains)
        assert artifact.card.safety_source()["source"] == "model"
    pid = load_artifact(controller_models["pid"])
    params = pid_params(exported.market)
    assert pid.controller_gains() == ControllerGains.with_profile(params["traffic_profile"], params)


def test_a_controller_card_is_checked_where_it_is_read(controller_models: dict[str, Path], tmp_path: Path):
    """A law it cannot run, features or files it does not read, a band, a factor or a safety controller of its own
    (it is that controller), a controller section on another kind: each refused in one line naming the problem."""
    cases: list[tuple[str, Any, str]] = [
        ("pid", lambda r: r["controller"]["gains"].pop("kp"), "gains are"),
        ("pid", lambda r: r["controller"].update(traffic_profile=None), "needs the traffic_profile"),
        ("pid", lambda r: r["controller"]["gains"].update(initial_ratio=9.0), "initial_ratio"),
        ("pid", lambda r: r["controller"].update(law="lqr"), "law"),
        ("rm", lambda r: r["controller"]["gains"].update(ratio=0.0), "constant ratio"),
        ("rm", lambda r: r["controller"].update(traffic_profile=[1 / 48] * 48), "one parameter"),
        ("pid", lambda r: r.update(controller=None), "needs its law"),
        ("pid", lambda r: r.update(obs_dim=9), "reads no features"),
        ("pid", lambda r: r.update(shield={"config": {"wide": 0.5}}), "no shield"),
        ("pid", lambda r: r.update(bid_scale={"scale": 1.2}), "no bid_scale"),
        ("pid", lambda r: r.update(kind="policy"), "set kind: controller"),
        ("pid", lambda r: r["controller"].update(market=""), "market"),
    ]
    for law, edit, message in cases:
        directory = tmp_path / "card"
        shutil.rmtree(directory, ignore_errors=True)
        shutil.copytree(controller_models[law], directory)
        rewrite_card(directory, edit)
        with pytest.raises(ArtifactError, match=message) as refused:
            load_artifact(directory)
        assert "\n" not in str(refused.value)


def test_the_served_version_names_the_law_not_the_market_that_tuned_it(controller_models: dict[str, Path]):
    card = read_card(controller_models["pid"])
    assert card.controller is not None
    moved = card.controller.model_copy(update={"market": "elsewhere", "data_fingerprint": "f" * 64, "train_score": 0})
    retuned = card.controller.model_copy(update={"gains": {**card.controller.gains, "kp": 0.5}})
    assert card.model_copy(update={"controller": moved}).served_sha256() == card.served_sha256()
    assert card.model_copy(update={"controller": retuned}).served_sha256() != card.served_sha256()
    assert card.served_sha256() != read_card(controller_models["rm"]).served_sha256()


# --- A safety controller ------------------------------------------------------------------------------------------


def safety_section(market: Path, **gains: float) -> dict[str, Any]:
    params = pid_params(market)
    return ControllerInfo(
        law="pid",
        gains={**{k: float(params[k]) for k in GAIN_FIELDS}, **gains},
        traffic_profile=tuple(params["traffic_profile"]),
        market=str(market),
        data_fingerprint=Market.open(market).split_fingerprint("train"),
    ).model_dump(mode="json")


def test_a_safety_controller_moves_the_shield_and_the_fallback_not_what_a_residual_policy_corrects(
    exported: Exported, served_market: Path, tmp_path: Path
):
    """The card's ``safety_controller`` is what the shield is centred on and what the fallback bids; the residual
    policy still reads its training market's PID, the one it learned to correct. Absent: both are the training
    market's (a card without the section, the shipped model's included, keeps its behaviour)."""
    plain = load_artifact(exported.residual_model)
    assert plain.controller_gains() == plain.reference_gains() == plain.card.reference_gains()
    assert plain.card.safety_source()["source"] == "training"
    directory = tmp_path / "residual-served"
    shutil.copytree(exported.residual_model, directory)
    section = safety_section(served_market)
    rewrite_card(directory, lambda raw: raw.update(safety_controller=section))
    served = load_artifact(directory)
    safety = ControllerGains.with_profile(section["traffic_profile"], section["gains"])
    assert served.controller_gains() == safety == served.fallback_controller()
    assert served.reference_gains() == plain.reference_gains() != safety
    assert Policy(served).controller == plain.reference_gains()  # its features read the training market's PID
    assert served.card.safety_source() == {"source": "safety_controller", **served.card.safety_controller.where()}  # type: ignore[union-attr]
    assert served.card.served_sha256() != plain.card.served_sha256()
    # shield:onnx: centres the band on it: the same episodes as the shield built by hand around the served PID
    days = split_days(Market.open(exported.market), "test", SETTING)[0]
    played = evaluate(Market.open(exported.market), SETTING, "test", [f"shield:onnx:{directory}"], seeds=1)
    by_hand = days.play(ShieldedBidder(OnnxBidder(served), safety, served.shield_config()), 0)
    np.testing.assert_array_equal(played.episodes["cost"], by_hand.cost)
    around_training = days.play(ShieldedBidder(OnnxBidder(served), plain.reference_gains()), 0)
    assert not np.array_equal(by_hand.cost, around_training.cost)
    # an rm is no PID: the band reads a PID's ratio and budget plan
    rm_section = {**section, "law": "rm", "gains": {"ratio": 1.0}, "traffic_profile": None}
    rewrite_card(directory, lambda raw: raw.update(safety_controller=rm_section))
    with pytest.raises(ArtifactError, match="safety_controller must be a pid"):
        read_card(directory)


def test_the_shipped_model_reads_as_it_did():
    card = read_card(Path(__file__).resolve().parents[1] / "models" / "default")
    assert card.safety_controller is None and card.controller is None and card.kind == "policy"
    assert (
        card.safety_gains()
        == card.reference_gains()
        == ControllerGains.with_profile(card.training.traffic_profile, card.training.controller)
    )
    assert card.safety_source()["market"] == card.training.market


# --- rcb calibrate and rcb export through the CLI -------------------------------------------------------------------


def test_rcb_calibrate_refuses_a_model_that_cannot_hold_the_markets_roi(
    exported: Exported, served_market: Path, tmp_path: Path
):
    """No factor holds the PID's CSR: exit 1, one line naming the PID's and the best CSR and the command that exports
    the PID instead, and nothing written; --json prints the rows with the refusal; --force-unsafe writes it anyway,
    its card saying the PID's CSR is not held."""
    model = overbidding_model(exported, tmp_path / "bids-four")
    out = tmp_path / "calibrated"
    args = ["calibrate", str(model), str(served_market), "--out", str(out), "--seeds", "1", "--quiet"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1, result.output
    said = result.stderr.strip()
    assert "\n" not in said and "Traceback" not in result.output and not out.exists()
    assert said.startswith(f"error: {model} cannot hold {served_market}'s ROI: best CSR ")
    assert f"serve the PID instead: rcb export --controller pid {served_market} --setting {SETTING} --out DIR" in said
    pid_csr = said.split("against the PID's ")[1].split(" ")[0]
    assert float(pid_csr) > 0
    refused = CliRunner().invoke(app, [*args, "--json"])
    assert refused.exit_code == 1 and not out.exists()
    body = json.loads(refused.stdout)
    assert body["out"] is None and body["holds_pid_csr"] is False and "cannot hold" in body["refused"]
    assert all(body["rows"][f"m={m:g}"]["csr"] < body["rows"]["pid"]["csr"] for m in LADDER)
    forced = CliRunner().invoke(app, [*args, "--force-unsafe"])
    assert forced.exit_code == 0, forced.output
    assert "written anyway: --force-unsafe" in forced.stderr
    card = read_card(out)
    assert card.bid_scale is not None and card.bid_scale.calibration["holds_pid_csr"] is False
    assert card.safety_controller is not None and card.safety_controller.market == str(served_market)


def test_rcb_calibrate_writes_a_model_that_holds_with_its_bid_scale_and_the_markets_pid(
    exported: Exported, served_market: Path, tmp_path: Path
):
    out = tmp_path / "calibrated"
    args = ["calibrate", str(exported.cbrl_model), str(served_market), "--out", str(out), "--seeds", "1", "--quiet"]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    said = json.loads(result.stdout)
    assert said["holds_pid_csr"] is True and said["scale"] in LADDER
    assert said["safety_controller"]["market"] == str(served_market)
    card = read_card(out)
    assert card.bid_scale is not None and card.bid_scale.scale == said["scale"]
    assert card.safety_controller is not None and card.safety_controller.law == "pid"
    assert card.safety_controller.data_fingerprint == Market.open(served_market).split_fingerprint("train")
    params = pid_params(served_market)
    assert load_artifact(out).controller_gains() == ControllerGains.with_profile(params["traffic_profile"], params)
    assert card.training == read_card(exported.cbrl_model).training  # the reference is the training market's still
    # --keep-controller: the ladder is played around the model's own controller, and the copy keeps it
    kept = tmp_path / "kept"
    result = CliRunner().invoke(app, [*args[:4], str(kept), *args[5:], "--keep-controller", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["shield_centred_on"] == "the model's controller"
    assert read_card(kept).safety_controller is None and read_card(kept).bid_scale is not None
    assert load_artifact(kept).controller_gains() == load_artifact(exported.cbrl_model).controller_gains()
    # a controller model is tuned on a market, not calibrated to one
    pid_model = tmp_path / "pid"
    exported_pid = CliRunner().invoke(
        app, ["export", "--controller", "pid", str(exported.market), "--setting", SETTING, "--out", str(pid_model)]
    )
    assert exported_pid.exit_code == 0, exported_pid.output
    refused = CliRunner().invoke(app, ["calibrate", str(pid_model), str(served_market), "--out", str(tmp_path / "x")])
    assert refused.exit_code == 2 and "is a controller model" in refused.output and not (tmp_path / "x").exists()


def test_rcb_export_controller_says_what_it_needs(exported: Exported, tmp_path: Path):
    out = tmp_path / "x"
    for args, message in (
        (["--controller", "pid", str(exported.market)], "--controller needs --setting"),
        (["--controller", "pid", str(exported.market), "--plan", str(exported.market)], "one of the three"),
        (["--controller", "lqr", str(exported.market), "--setting", SETTING], "lqr"),
        (["--controller", "pid", str(tmp_path / "none"), "--setting", SETTING], "none"),
    ):
        result = CliRunner().invoke(app, ["export", *args, "--out", str(out)])
        assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output, result.output
        assert not out.exists()
