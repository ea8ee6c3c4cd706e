"""`rcb replay` against a real `rcb serve` process: the service's episodes equal rcb evaluate onnx:MODEL_DIR's."""

from __future__ import annotations

import json
import shutil
import uuid

import httpx
import numpy as np
import pandas as pd
import pytest
from artifact_fixtures import SETTING, rewrite_card
from typer.testing import CliRunner

from loadtest.run_server import free_port
from rcb.cli import app
from training.evaluation.evaluate import evaluate
from training.market.dataset import Market
from training.replay.dayset import DaySet

from .app_fixtures import rcb_replay, rcb_serve

SEED = 4


@pytest.mark.parametrize(
    "store, shielded, model",
    [
        ("memory", False, "cbrl"),
        ("memory", True, "cbrl"),
        ("memory", True, "residual"),
        ("memory", True, "own-band"),
        ("memory", False, "plan"),
        ("memory", True, "plan"),
        pytest.param("redis", False, "cbrl", marks=pytest.mark.redis),
    ],
)
def test_replaying_through_the_service_gives_the_offline_episodes(models, store, shielded, model, request, tmp_path):
    """The service (shield off: the model's ratios; on: the shield's) plays the days rcb evaluate plays with
    ``onnx:MODEL`` or ``shield:onnx:MODEL``: the same episodes, slot by slot (a residual model too: its policy
    corrects the card's controller; the planner too: its law on the card's scenarios; a card with its own shield
    band too: both run the card's)."""
    url = "memory" if store == "memory" else request.getfixturevalue("redis_server").url
    model_dir = {"residual": models.residual_model, "plan": models.plan_model}.get(model, models.cbrl_model)
    if model == "own-band":
        model_dir = tmp_path / "own-band"
        shutil.copytree(models.cbrl_model, model_dir)
        band = {"config": {"wide": 0.85, "tight_above": 0.05}, "chosen_by": "a test"}
        rewrite_card(model_dir, lambda card: card.update(shield=band))
    days = DaySet.load(Market.open(models.market), "test", SETTING)
    method = f"{'shield:' if shielded else ''}onnx:{model_dir}"
    offline = evaluate(Market.open(models.market), SETTING, "test", [method], seeds=SEED + 1)
    # a deterministic model (the planner) is played once, seed 0: the noise seed changes nothing it bids
    played_seed = SEED if model != "plan" else 0
    assert set(offline.episodes["seed"]) == ({played_seed} if model == "plan" else set(range(SEED + 1)))
    offline_rows = offline.episodes[offline.episodes["seed"] == played_seed].reset_index(drop=True)
    prefix = f"replay{uuid.uuid4().hex[:8]}"
    flag = "--shield" if shielded else "--no-shield"
    with rcb_serve(model_dir, url, flag, RCB_NOISE_SEED=str(SEED), RCB_KEY_PREFIX=prefix) as server:
        out = tmp_path / "replay"
        result = rcb_replay(server.url, models.market, out, "--concurrency", "3", "--batch-size", "700")
        assert result.exit_code == 0, result.output + server.log_tail()
    episodes = pd.read_csv(out / "episodes.csv")
    assert list(episodes["day"]) == days.days and (episodes["seed"] == SEED).all()
    np.testing.assert_allclose(episodes["delivery"], offline_rows["delivery"], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(episodes["cost"], offline_rows["cost"], rtol=1e-9, atol=1e-9)
    assert (episodes["fallback_slots"] == 0).all() and (episodes["shield_slots"] > 0).any() == shielded
    if model == "own-band":  # the card's band, not the defaults': the plain model's shielded days differ
        plain = evaluate(
            Market.open(models.market), SETTING, "test", [f"shield:onnx:{models.cbrl_model}"], seeds=SEED + 1
        )
        plain_rows = plain.episodes[plain.episodes["seed"] == played_seed].reset_index(drop=True)
        assert not np.allclose(episodes["cost"], plain_rows["cost"])
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary) == {"service"} and summary["service"]["n_episodes"] == len(days)
    assert (out / "boxplots.png").exists()


def test_replaying_some_days_plays_each_as_the_campaign_it_is_in_the_split(models, tmp_path):
    """``--days`` keeps each day's place in its split: the second test day alone is campaign ``episode-1``, the
    episode (and posterior noise) rcb evaluate plays for it; a day named twice is refused."""
    days = DaySet.load(Market.open(models.market), "test", SETTING)
    assert len(days) >= 2
    offline = evaluate(Market.open(models.market), SETTING, "test", [f"onnx:{models.cbrl_model}"], seeds=SEED + 1)
    wanted = offline.episodes[(offline.episodes["seed"] == SEED) & (offline.episodes["day"] == days.days[1])]
    prefix = f"replay{uuid.uuid4().hex[:8]}"
    with rcb_serve(
        models.cbrl_model, "memory", "--no-shield", RCB_NOISE_SEED=str(SEED), RCB_KEY_PREFIX=prefix
    ) as server:
        twice = rcb_replay(server.url, models.market, tmp_path / "twice", "--days", f"{days.days[1]},{days.days[1]}")
        assert twice.exit_code == 2 and "more than once" in twice.output
        result = rcb_replay(server.url, models.market, tmp_path / "one", "--days", str(days.days[1]))
        assert result.exit_code == 0, result.output + server.log_tail()
    episodes = pd.read_csv(tmp_path / "one" / "episodes.csv")
    assert list(episodes["day"]) == [days.days[1]]
    np.testing.assert_allclose(episodes["delivery"], wanted["delivery"], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(episodes["cost"], wanted["cost"], rtol=1e-9, atol=1e-9)


def test_replay_refuses_a_service_that_is_down_or_not_ready(models, tmp_path):
    result = CliRunner().invoke(
        app,
        [
            "replay",
            "--url",
            f"http://127.0.0.1:{free_port()}",
            "--data",
            str(models.market),
            "--setting",
            SETTING,
            "--out",
            str(tmp_path / "x"),
        ],
    )
    assert result.exit_code == 2 and "does not answer" in result.output


def test_replay_refuses_a_model_of_the_other_setting_and_a_url_that_does_not_parse(models, tmp_path):
    """A replay of MC days on an SC model exited 0 with a summary labelled mc (rcb evaluate refuses it); a
    malformed --url raised httpx.InvalidURL as a traceback. Both are refused before the days load or a campaign
    registers."""
    other = "mc" if SETTING == "sc" else "sc"
    base = ["replay", "--data", str(models.market), "--out", str(tmp_path / "x")]
    with rcb_serve(models.cbrl_model) as server:
        result = CliRunner().invoke(app, [*base, "--url", server.url, "--setting", other])
        assert result.exit_code == 2 and f"serves a {SETTING} model" in result.output, result.output
        assert f"--setting {SETTING}" in result.output and not (tmp_path / "x").exists()
        assert httpx.get(f"{server.url}/v1/campaigns/episode-0").status_code == 404  # nothing registered
    for url in ("http://127.0.0.1:abc", "http://[::1", "http://127.0.0.1:99999", "127.0.0.1:8000"):
        result = CliRunner().invoke(app, [*base, "--url", url, "--setting", SETTING])
        assert result.exit_code == 2 and "is not a URL" in result.output, result.output


def test_replay_refuses_the_train_days_before_any_work(models, tmp_path):
    """``--split`` is test or ood: the days a served model was not trained on; anything else is a usage error."""
    args = ["replay", "--data", str(models.market), "--setting", SETTING, "--out", str(tmp_path / "x")]
    result = CliRunner().invoke(app, [*args, "--split", "train"])
    said = " ".join(result.output.replace("│", " ").split())  # typer's error box wraps the message
    assert result.exit_code == 2 and "'train' is not one of 'test', 'ood'" in said
    assert not (tmp_path / "x").exists()


def test_replay_client_names_the_call_behind_an_answer_it_cannot_read():
    """A wrong URL (an HTML page), an answer without a field the replay needs: a ReplayError naming the call, not
    a decode error or a KeyError; a slot answer without rcb's own ``decided_by`` is read as ``unknown``."""
    import asyncio

    import httpx

    from training.evaluation.service_replay import ReplayError, ServiceClient

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/readyz":
            return httpx.Response(200, text="<html>a login page</html>")
        return httpx.Response(200, json={"campaign_id": "c", "slot": 1})  # no bids, no bid_ratio

    async def calls() -> list[str]:
        said = []
        async with httpx.AsyncClient(base_url="http://svc:1", transport=httpx.MockTransport(answer)) as client:
            service = ServiceClient(client)
            for call in (service.ready(), service.bids("c", np.ones(3), 10)):
                with pytest.raises(ReplayError) as refused:
                    await call
                said.append(str(refused.value))
        return said

    ready, bids = asyncio.run(calls())
    assert ready.startswith("GET http://svc:1/readyz: HTTP 200, not a JSON answer") and "rcb service" in ready
    assert bids.startswith("POST /v1/bid: the answer has no 'bids'")
