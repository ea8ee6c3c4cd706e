"""A day played through HTTP decides, slot by slot, exactly what ``rcb evaluate onnx:MODEL_DIR`` plays.

The ad engine here is the simulator: each slot it bids the ratio the service answered, and reports
what that won. Noise-key convention: episode ``k`` of an offline batch played with seed ``s`` is
campaign ``episode-{k}``, episode ``offline``, served with ``RCB_NOISE_SEED=s``.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import numpy as np
import pytest
from artifact_fixtures import SETTING

from model.artifact import CARD_FILE, BidScaleInfo, read_card
from model.contract import SLOTS_PER_DAY
from training.bidders.base import Outcome, play
from training.bidders.onnx import OnnxBidder
from training.market.dataset import Market
from training.replay.dayset import DaySet

from .app_fixtures import play_day, serving

SEED = 11


@pytest.mark.parametrize(
    "store",
    ["memory", pytest.param("cluster", marks=pytest.mark.cluster), pytest.param("redis", marks=pytest.mark.redis)],
)
def test_an_episode_through_the_api_equals_offline_evaluation(models, store, request):
    url = (
        "memory"
        if store == "memory"
        else request.getfixturevalue(f"redis_{'server' if store == 'redis' else store}").url
    )
    days = DaySet.load(Market.open(models.market), "test", SETTING)
    served = day_through_api(models.cbrl_model, days, url)
    offline = play(OnnxBidder.load(models.cbrl_model), days.indexes(), days.episode_days(), days.registration(), SEED)
    assert_same_day(served, offline)


def test_a_calibrated_model_serves_its_bid_scale_as_offline_evaluation_plays_it(models, tmp_path):
    """A card's ``bid_scale`` (``rcb calibrate``) is applied by the service exactly as by ``onnx:MODEL_DIR``."""
    calibrated = tmp_path / "calibrated"
    shutil.copytree(models.cbrl_model, calibrated)
    card = read_card(calibrated)
    scaled = card.model_copy(update={"bid_scale": BidScaleInfo(scale=0.7, chosen_by="a test")})
    (calibrated / CARD_FILE).write_text(scaled.to_json())
    days = DaySet.load(Market.open(models.market), "test", SETTING)
    with serving(calibrated) as client:
        assert client.get("/readyz").json()["bid_scale"] == 0.7
    served = day_through_api(calibrated, days, "memory")
    offline = days.play(OnnxBidder.load(calibrated), SEED)
    assert_same_day(served, offline)
    plain = days.play(OnnxBidder.load(models.cbrl_model), SEED)
    assert not np.array_equal(offline.history.ratios, plain.history.ratios)


def day_through_api(model: Path, days: DaySet, store: str) -> list[dict]:
    """Every day of ``days`` played through the API, the simulator as the ad engine: per day, the ratios the
    service answered and its final campaign view."""
    prefix = f"day{uuid.uuid4().hex[:8]}"
    played = []
    with serving(model, store=store, noise_seed=SEED, key_prefix=prefix) as client:
        for k in range(len(days)):
            ratios, _ = play_day(client, days, k)
            played.append({"ratios": ratios[:SLOTS_PER_DAY], "view": client.get(f"/v1/campaigns/episode-{k}").json()})
    return played


def assert_same_day(served: list[dict], offline: Outcome) -> None:
    for k, day in enumerate(served):
        for slot, ratio in enumerate(day["ratios"]):
            assert ratio == pytest.approx(offline.history.ratios[k, slot], abs=1e-6), (k, slot)
        view = day["view"]
        assert view["done"] and view["delivery"] == pytest.approx(offline.delivery[k], rel=1e-9, abs=1e-9)
        assert view["cost"] == pytest.approx(offline.cost[k], rel=1e-9, abs=1e-9)
