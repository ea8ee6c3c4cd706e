"""The live hand-over through the HTTP API: a model failing its campaign goes to its controller for the day.

The runaway model of test_health_and_model proposes the top ratio (4.0) whatever the day. Behind a band that lets a
model above its controller under threat (the card's ``shield`` with ``tight_above`` 0.2), reported at ROI 0.25 against
L = 1, it is handed over once 30% of the budget is spent, and its controller bids the rest of the episode. The fixture
models behind the default band are never handed over on the fixture market's days, so the service's replays equal the
``shield:onnx:`` evaluations (test_replay); the bare model (no shield) is never handed over, so they equal ``onnx:``'s.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import numpy as np
import pytest
from artifact_fixtures import SETTING, rewrite_card

from model.artifact import load_artifact
from model.contract import SLOTS_PER_DAY
from model.state import CampaignState
from training.bidders.handover import HandoverBidder
from training.bidders.onnx import OnnxBidder
from training.bidders.rm import ConstantRatio
from training.bidders.shielded import ShieldedBidder
from training.market.dataset import Market
from training.replay.dayset import DaySet

from .app_fixtures import metric, play_day, register, serving, update
from .test_health_and_model import runaway_model

BUDGET = 100.0
LOW = {"delivery": 1.0, "cost": 4.0}  # ROI 0.25 against L = 1: 4% of B a slot
GOOD = {"delivery": 20.0, "cost": 1.0}  # ROI 20


@pytest.fixture(scope="module")
def trusted(models, tmp_path_factory) -> Path:
    """The CBRL model with a band whose upper edge stays above the controller under threat (exp(0.2))."""
    directory = tmp_path_factory.mktemp("trusted") / "model"
    shutil.copytree(models.cbrl_model, directory)
    band = {"config": {"wide": 1.0, "tight_above": 0.2}, "chosen_by": "a test"}
    rewrite_card(directory, lambda card: card.update(shield=band))
    return directory


def test_a_runaway_model_at_low_roi_is_handed_over_for_the_rest_of_the_episode(trusted):
    with serving(trusted, shield=True) as c:
        register(c, budget=BUDGET)
        with runaway_model(c):
            answers = [c.post("/v1/slot-update", json=update(slot=s, **LOW)).json() for s in range(8)]
            # 28% of B after 7 slots: the model keeps it (shielded); 32% after the 8th, at ROI 0.25: handed over
            assert [a["decided_by"] for a in answers] == ["shield"] * 7 + ["handover"]
            assert answers[-1]["bid_ratio"] < answers[-2]["bid_ratio"]
            recovered = [c.post("/v1/slot-update", json=update(slot=s, **GOOD)).json() for s in range(8, 30)]
        assert all(a["decided_by"] == "handover" and a["bid_ratio"] < 4.0 for a in recovered)
        view = c.get("/v1/campaigns/c1").json()
        assert view["handed_over"] and view["decided_by"] == "handover" and view["roi"] > 1.0
        again = c.post("/v1/slot-update", json=update(slot=7, **LOW)).json()  # a re-sent report answers the same
        assert again["replayed"] and again["decided_by"] == "handover"
        text = c.get("/metrics").text
        assert metric(text, "rcb_handovers_total") == 1
        assert metric(text, 'rcb_handovers_total{campaign="c1"}') == 1
        assert metric(text, 'rcb_decisions_total{decided_by="handover"}') == 1 + len(recovered)
        page = c.get("/ui").text
        assert 'class="badge handover"' in page and "handed to its controller from slot 8" in page
        # a new episode starts with the model again
        assert register(c, episode="e2", budget=BUDGET).json()["decided_by"] != "handover"
        with runaway_model(c):
            fresh = c.post("/v1/slot-update", json=update(episode="e2", slot=0, **LOW)).json()
        assert fresh["decided_by"] == "shield"
        assert not c.get("/v1/campaigns/c1").json()["handed_over"]
        assert "handed to its controller" not in c.get("/ui").text
        assert metric(c.get("/metrics").text, "rcb_handovers_total") == 1


def test_the_batch_hands_over_as_the_single_form_does_and_the_flag_is_stored(trusted):
    """Two campaigns in each batch: the one at low ROI is handed over at the same slot as the single form's, the one
    holding its ROI never; the stored blob carries the flag (what another replica or a restart reads)."""
    with serving(trusted, shield=True) as c:
        for campaign in ("low", "good"):
            register(c, campaign=campaign, budget=BUDGET)
        by: dict[str, list[str]] = {"low": [], "good": []}
        with runaway_model(c):
            for s in range(12):
                body = {
                    "updates": [
                        update(campaign="low", slot=s, **(LOW if s < 8 else GOOD)),
                        update(campaign="good", slot=s, delivery=20.0, cost=4.0),
                    ]
                }
                for item in c.post("/v1/slot-update/batch", json=body).json()["results"]:
                    by[item["campaign_id"]].append(item["answer"]["decided_by"])
        assert by["low"] == ["shield"] * 7 + ["handover"] * 5
        assert "handover" not in by["good"]
        assert metric(c.get("/metrics").text, "rcb_handovers_total") == 1
        store = c.app.state.store
        low, good = (asyncio.run(_read(store, name)) for name in ("low", "good"))
        assert low.handover_slot == 8 and good.handover_slot is None


async def _read(store, campaign: str) -> CampaignState:
    stored = await store.get(campaign)
    return CampaignState.from_bytes(stored.blob)


def test_a_model_holding_its_roi_is_never_handed_over(trusted):
    with serving(trusted, shield=True) as c:
        register(c, budget=BUDGET)
        with runaway_model(c):
            answers = [
                c.post("/v1/slot-update", json=update(slot=s, delivery=20.0, cost=4.0)).json() for s in range(30)
            ]
        assert all(a["decided_by"] != "handover" for a in answers)
        assert metric(c.get("/metrics").text, "rcb_handovers_total") == 0
        assert not c.get("/v1/campaigns/c1").json()["handed_over"]


@pytest.mark.parametrize("shield", [False, True])
def test_the_bare_model_and_the_default_band_never_hand_over(models, shield):
    """Without the shield the service serves the bare model (``onnx:MODEL_DIR``'s ratios); behind the default band
    the shield already holds a failing model below its controller: neither hands over, even a runaway."""
    with serving(models.cbrl_model, shield=shield) as c:
        register(c, budget=BUDGET)
        with runaway_model(c):
            answers = [c.post("/v1/slot-update", json=update(slot=s, **LOW)).json() for s in range(20)]
        assert all(a["decided_by"] == ("shield" if shield else "model") for a in answers)
        assert metric(c.get("/metrics").text, "rcb_handovers_total") == 0


def test_the_service_plays_the_hand_overs_the_offline_wrapper_plays(models, trusted):
    """A runaway model served behind the trusted band on the fixture market's test days (no budget: the SC branch of
    the rule), slot by slot, bids what ``HandoverBidder(ShieldedBidder(ConstantRatio(4)))`` around the card's
    controller bids offline, and is handed over at the same slots."""
    artifact = load_artifact(trusted)
    days = DaySet.load(Market.open(models.market), "test", SETTING)
    shielded = ShieldedBidder(ConstantRatio(4.0), artifact.controller_gains(), artifact.shield_config())
    wrapper = HandoverBidder(shielded, artifact.fallback_controller())
    offline = days.play(wrapper, 0)
    assert (wrapper.handed >= 0).any()
    with serving(trusted, shield=True) as c, runaway_model(c):
        for k in range(len(days)):
            ratios, answers = play_day(c, days, k)
            deciders = [answer["decided_by"] for answer in answers]
            np.testing.assert_allclose(ratios[:SLOTS_PER_DAY], offline.history.ratios[k], atol=1e-6)
            handed = int(wrapper.handed[k])
            assert ("handover" in deciders) == (handed >= 0)
            if handed >= 0:  # decision ``handed`` answers the report of slot ``handed - 1``
                assert deciders.index("handover") == handed - 1
                assert set(deciders[handed - 1 :]) == {"handover"}


@pytest.mark.parametrize("model", ["cbrl", "residual", "plan"])
def test_the_fixture_models_behind_the_shield_are_never_handed_over_on_the_fixture_days(models, model):
    """On the fixture market's test days the rule never fires for the fixture models behind their cards' bands, for
    the seeds the replay tests play: the service's shielded replays are the offline ``shield:onnx:`` episodes."""
    model_dir = {"residual": models.residual_model, "plan": models.plan_model}.get(model, models.cbrl_model)
    artifact = load_artifact(model_dir)
    days = DaySet.load(Market.open(models.market), "test", SETTING)
    for seed in (4, 11):
        inner = ShieldedBidder(OnnxBidder.load(model_dir), artifact.controller_gains(), artifact.shield_config())
        wrapper = HandoverBidder(inner, artifact.fallback_controller())
        days.play(wrapper, seed)
        assert (wrapper.handed < 0).all(), (model, seed, wrapper.handed.tolist())
