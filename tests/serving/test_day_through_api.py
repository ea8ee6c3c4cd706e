"""A day played through HTTP decides, slot by slot, exactly what ``rcb evaluate onnx:MODEL_DIR`` plays.

The ad engine here is the simulator: each slot it bids the ratio the service answered, and reports
what that won. Noise-key convention: episode ``k`` of an offline batch played with seed ``s`` is
campaign ``episode-{k}``, episode ``offline``, served with ``RCB_NOISE_SEED=s``.
"""

from __future__ import annotations

import uuid

import numpy as np
import pytest
from artifact_fixtures import SETTING

from model.contract import SLOTS_PER_DAY
from training.bidders.base import play
from training.bidders.onnx import OnnxBidder
from training.dayset import DaySet
from training.market.dataset import Market
from training.simulator import BatchedReplay

from .app_fixtures import serving

SEED = 11


@pytest.mark.parametrize(
    "store",
    ["memory", pytest.param("cluster", marks=pytest.mark.cluster), pytest.param("redis", marks=pytest.mark.redis)],
)
def test_an_episode_through_the_api_equals_offline_evaluation(models, store, request):
    days = DaySet.load(Market.open(models.market), "test", SETTING)
    offline = play(OnnxBidder.load(models.cbrl_model), days.indexes(), days.episode_days(), days.registration(), SEED)
    url = (
        "memory"
        if store == "memory"
        else request.getfixturevalue(f"redis_{'server' if store == 'redis' else store}").url
    )
    prefix = f"day{uuid.uuid4().hex[:8]}"
    with serving(models.cbrl_model, store=url, noise_seed=SEED, key_prefix=prefix) as client:
        for k in range(len(days)):
            budget = float(days.budget[k])
            campaign = f"episode-{k}"
            answer = client.put(
                f"/v1/campaigns/{campaign}",
                json={
                    "episode": "offline",
                    "roi_target": float(days.roi_target[k]),
                    "budget": None if np.isinf(budget) else budget,
                },
            ).json()
            env = BatchedReplay([days.indexes()[k]], np.array([0]), np.array([budget]))
            ratio = answer["bid_ratio"]
            for slot in range(SLOTS_PER_DAY):
                assert ratio == pytest.approx(offline.history.ratios[k, slot], abs=1e-6), (k, slot)
                step = env.step(np.array([ratio]))
                r = client.post(
                    "/v1/slot-update",
                    json={
                        "campaign_id": campaign,
                        "episode": "offline",
                        "slot": slot,
                        "delivery": float(step.delivery[0]),
                        "cost": float(step.cost[0]),
                        "wins": int(step.wins[0]),
                        "auctions": int(step.auctions[0]),
                    },
                )
                assert r.status_code == 200, r.text
                ratio = r.json()["bid_ratio"]
            view = client.get(f"/v1/campaigns/{campaign}").json()
            assert view["done"] and view["delivery"] == pytest.approx(offline.delivery[k], rel=1e-9, abs=1e-9)
            assert view["cost"] == pytest.approx(offline.cost[k], rel=1e-9, abs=1e-9)
