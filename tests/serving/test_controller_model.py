"""A controller model served (``kind: controller``): `rcb replay` through a real `rcb serve` gives the offline
episodes; /readyz and /ui name the market whose train days tuned the controller the shield and the fallback run
around; a card's ``safety_controller`` is that controller (the fallback bids it)."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from artifact_fixtures import SETTING, Exported, rewrite_card
from typer.testing import CliRunner

from model.controller import ControllerGains
from rcb.cli import app
from training.evaluation.evaluate import evaluate
from training.market.dataset import Market
from training.replay.dayset import DaySet

from .app_fixtures import rcb_replay, rcb_serve, register, serving, update

SEED = 4


@pytest.fixture(scope="module")
def controller_models(models: Exported, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("served-controllers")
    out = {}
    for law in ("pid", "rm"):
        out[law] = root / law
        args = ["export", "--controller", law, str(models.market), "--setting", SETTING, "--out", str(out[law])]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
    return out


@pytest.mark.parametrize("law, shielded", [("pid", False), ("pid", True), ("rm", True)])
def test_replaying_a_controller_model_through_the_service_gives_the_offline_episodes(
    models, controller_models, law, shielded, tmp_path
):
    """The service, shield on or off, bids what ``onnx:DIR`` (and the ``pid`` / ``rm`` baseline) plays offline, slot
    by slot; the model decides every slot (no fallback) and the shield never moves its ratio."""
    model_dir = controller_models[law]
    days = DaySet.load(Market.open(models.market), "test", SETTING)
    method = f"{'shield:' if shielded else ''}onnx:{model_dir}"
    offline = evaluate(Market.open(models.market), SETTING, "test", [method, law], seeds=SEED + 1)
    rows = {m: offline.episodes[offline.episodes["method"] == m].reset_index(drop=True) for m in (method, law)}
    assert (rows[method]["seed"] == 0).all()  # deterministic: the noise seed changes nothing it bids
    np.testing.assert_array_equal(rows[method]["cost"], rows[law]["cost"])
    prefix = f"replay{uuid.uuid4().hex[:8]}"
    flag = "--shield" if shielded else "--no-shield"
    with rcb_serve(model_dir, "memory", flag, RCB_NOISE_SEED=str(SEED), RCB_KEY_PREFIX=prefix) as server:
        out = tmp_path / "replay"
        result = rcb_replay(server.url, models.market, out, "--concurrency", "3", "--batch-size", "700")
        assert result.exit_code == 0, result.output + server.log_tail()
    episodes = pd.read_csv(out / "episodes.csv")
    assert list(episodes["day"]) == days.days
    np.testing.assert_allclose(episodes["delivery"], rows[method]["delivery"], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(episodes["cost"], rows[method]["cost"], rtol=1e-9, atol=1e-9)
    assert (episodes["fallback_slots"] == 0).all() and (episodes["shield_slots"] == 0).all()


def test_the_service_shows_the_controller_and_the_market_that_tuned_it(models, controller_models):
    """/readyz: ``model_kind: controller`` and, for the shield and the fallback, the model itself and its market; the
    first ratio is the PID's initial ratio, decided by the model; an inference error falls back to the same law."""
    with serving(controller_models["pid"], shield=True) as c:
        ready = c.get("/readyz").json()
        assert ready["model_kind"] == "controller" and ready["algorithm"] == "pid"
        assert ready["model_version"].startswith(f"pid-{SETTING}-")
        safety = ready["safety_controller"]
        assert safety["source"] == "model" and safety["market"] == str(models.market) and safety["tuned_on"] == "train"
        assert safety["data_fingerprint"] == Market.open(models.market).split_fingerprint("train")
        runner = c.app.state.runner  # type: ignore[attr-defined]
        gains = runner.artifact.card.controller.pid_gains()
        first = register(c).json()
        assert first["decided_by"] == "model" and first["bid_ratio"] == pytest.approx(gains.initial_ratio)
        answer = c.post("/v1/slot-update", json=update(delivery=9.0, cost=3.0)).json()
        assert answer["decided_by"] == "model" and answer["bid_ratio"] > first["bid_ratio"]  # ROI above L: it rises
        original = runner.policy.decide
        runner.policy.decide = lambda histories, keys: (_ for _ in ()).throw(RuntimeError("no law"))
        try:
            fallback = register(c, campaign="c2").json()
        finally:
            runner.policy.decide = original
        assert fallback["decided_by"] == "fallback" and fallback["bid_ratio"] == pytest.approx(gains.initial_ratio)
        page = c.get("/ui").text
        assert f"its own pid tuned on <b>{models.market}</b>" in page
    with serving(models.cbrl_model) as c:  # a card without a safety controller: its training market's PID
        safety = c.get("/readyz").json()["safety_controller"]
        assert safety["source"] == "training" and safety["market"] == str(models.market)


def test_a_safety_controller_is_what_the_fallback_bids_and_what_the_service_shows(models, tmp_path):
    directory = tmp_path / "served-elsewhere"
    shutil.copytree(models.cbrl_model, directory)
    profile = [1 / 48] * 48
    gains = {"initial_ratio": 1.7, "kp": 0.3, "ki": 0.01, "kd": 0.2, "kp_budget": 0.5, "ki_budget": 0.02}
    section = {
        "law": "pid",
        "gains": gains,
        "traffic_profile": profile,
        "market": "markets/served",
        "data_fingerprint": "f" * 64,
        "tuned_on": "train",
        "chosen_by": "a test",
    }
    rewrite_card(directory, lambda raw: raw.update(safety_controller=section))
    with serving(directory, shield=True) as c:
        ready = c.get("/readyz").json()
        assert ready["safety_controller"] == {
            "source": "safety_controller",
            "law": "pid",
            "market": "markets/served",
            "data_fingerprint": "f" * 64,
            "tuned_on": "train",
        }
        runner = c.app.state.runner  # type: ignore[attr-defined]
        assert runner.gains == ControllerGains.with_profile(profile, gains) == runner.fallback
        original = runner.policy.decide
        runner.policy.decide = lambda histories, keys: (_ for _ in ()).throw(RuntimeError("onnxruntime exploded"))
        try:
            answer = register(c).json()
        finally:
            runner.policy.decide = original
        assert answer["decided_by"] == "fallback" and answer["bid_ratio"] == pytest.approx(1.7)
        assert "the pid tuned on <b>markets/served</b>" in c.get("/ui").text
