"""/healthz, /readyz, /metrics; the fallback controller when no model loads; hot reload and a refused reload."""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from artifact_fixtures import rewrite_card
from prometheus_client import generate_latest

from model.contract import RATIO_MAX
from service.metrics import OTHER_CAMPAIGNS, Metrics
from training.export.card import record_figures

from .app_fixtures import metric, register, serving, update

pytestmark = pytest.mark.usefixtures("models")


def test_ready_with_a_model_and_a_store(models):
    with serving(models.cbrl_model) as c:
        assert c.get("/healthz").json() == {"status": "ok"}
        ready = c.get("/readyz")
        assert (
            ready.status_code == 200
            and ready.json()["algorithm"] == "cbrl"
            and ready.json()["model_kind"] == "policy"
            and ready.json()["model_loaded"]
            and ready.json()["bid_scale"] == 1.0  # no rcb calibrate: the model's own ratios
        )
        register(c)
        c.post("/v1/slot-update", json=update())
        c.post("/v1/slot-update", json=update())  # replayed
        c.post("/v1/bid", json={"campaign_id": "c1", "utilities": [1.0, 2.0]})
        text = c.get("/metrics").text
        assert metric(text, 'rcb_slot_updates_total{result="applied"}') == 1
        assert metric(text, 'rcb_slot_updates_total{result="replayed"}') == 1
        assert metric(text, "rcb_impressions_scored_total") == 2
        assert metric(text, "rcb_model_loaded") == 1 and 'rcb_model_info{version="cbrl-sc-' in text
        assert 'rcb_request_seconds_count{method="POST",route="/v1/bid",status="200"}' in text


def test_not_ready_until_the_store_has_heard_its_update_notices(models, monkeypatch):
    """A process that has not subscribed yet would bid at ratios it cached while the other processes' writes
    passed it by: /readyz answers 503 and says so, and 200 once the subscription is confirmed."""
    from service.store import MemoryStore

    heard = [False]
    monkeypatch.setattr(MemoryStore, "heard_updates", property(lambda self: heard[0]))
    with serving(models.cbrl_model) as c:
        waiting = c.get("/readyz")
        assert waiting.status_code == 503 and waiting.json()["detail"]["store_listening"] is False, waiting.text
        assert waiting.json()["detail"]["store_reachable"] is True
        heard[0] = True
        ready = c.get("/readyz")
        assert ready.status_code == 200 and ready.json()["store_listening"] is True


def test_every_slot_update_is_counted_once_by_result_and_the_store_gauge_starts_true(models):
    """Unknown campaigns in a batch, unreadable states, duplicates and invalid updates went uncounted, so the results
    did not sum to the updates received; rcb_store_up read 0 until the first slot update (after registrations too)."""
    with serving(models.cbrl_model) as c:
        assert metric(c.get("/metrics").text, "rcb_store_up") == 1  # a ping at startup
        register(c)
        register(c, "c2")
        c.portal.call(c.app.state.store.register, "c3", "e1", b"not a state")  # type: ignore[attr-defined]
        assert c.post("/v1/slot-update", json=update(cost=-1.0)).status_code == 422
        assert c.post("/v1/slot-update", json=update("c3")).json()["error"] == "unreadable_state"
        batch = [update(), update(), update("c9"), {**update("c2"), "wins": "many"}, update("c3"), update("c2")]
        items = c.post("/v1/slot-update/batch", json={"updates": batch}).json()["results"]
        assert [i["status"] for i in items] == [200, 422, 404, 422, 409, 200]
        text = c.get("/metrics").text
        counted = {
            r: metric(text, f'rcb_slot_updates_total{{result="{r}"}}')
            for r in ("applied", "duplicate", "unknown", "invalid", "unreadable")
        }
        assert counted == {"applied": 2, "duplicate": 1, "unknown": 1, "invalid": 2, "unreadable": 2}
        assert metric(text, "rcb_slot_updates_total") == 2 + len(batch)  # one per update received
        assert c.request("PROPFIND", "/healthz").status_code == 405
        text = c.get("/metrics").text
        assert 'method="other"' in text and "PROPFIND" not in text  # the client does not name series


def test_without_a_model_the_fallback_controller_bids_and_says_so(models, tmp_path):
    with serving(tmp_path / "no-model") as c:
        ready = c.get("/readyz")
        assert ready.status_code == 503 and ready.json()["detail"]["model_loaded"] is False
        assert "no such model directory" in ready.json()["detail"]["model_error"]
        assert ready.json()["detail"]["shield_config"] is None  # no model, no band: the fallback bids
        assert ready.json()["detail"]["bid_scale"] is None
        first = register(c).json()
        assert first["decided_by"] == "fallback" and first["model_version"] == "fallback-controller"
        assert first["bid_ratio"] == pytest.approx(0.9625)
        answer = c.post("/v1/slot-update", json=update(delivery=9.0, cost=3.0)).json()
        assert answer["decided_by"] == "fallback" and answer["bid_ratio"] > first["bid_ratio"]  # ROI above target
        text = c.get("/metrics").text
        assert metric(text, "rcb_fallbacks_total") == 2 and metric(text, "rcb_model_loaded") == 0


def test_an_inference_error_falls_back_for_that_slot(models):
    with serving(models.cbrl_model) as c:
        register(c)
        runner = c.app.state.runner
        original = runner.policy.decide
        runner.policy.decide = lambda histories, keys: (_ for _ in ()).throw(RuntimeError("onnxruntime exploded"))
        try:
            answer = c.post("/v1/slot-update", json=update()).json()
        finally:
            runner.policy.decide = original
        assert answer["decided_by"] == "fallback"
        assert c.post("/v1/slot-update", json=update(slot=1)).json()["decided_by"] == "model"


def test_hot_reload_swaps_the_model_and_a_corrupted_one_is_refused(models, tmp_path):
    live = tmp_path / "live"
    shutil.copytree(models.cbrl_model, live)
    with serving(live) as c:
        register(c)
        before = c.get("/readyz").json()["model_version"]
        # Another model in another directory: taken over at the campaign's next slot.
        moved = c.post("/v1/admin/reload-model", json={"model_dir": str(models.hard_model)})
        assert moved.status_code == 200 and moved.json()["previous_version"] == before
        assert moved.json()["model_version"].startswith("hard-")
        assert c.post("/v1/slot-update", json=update()).json()["model_version"].startswith("hard-")
        # Back to the live directory, then corrupt it: the reload is refused, the model in memory keeps serving.
        assert c.post("/v1/admin/reload-model", json={"model_dir": str(live)}).status_code == 200
        (live / "policy.onnx").write_bytes(b"garbage")
        refused = c.post("/v1/admin/reload-model", json={})
        assert refused.status_code == 422 and refused.json()["error"] == "model_refused"
        assert "corrupted" in refused.json()["detail"]
        answer = c.post("/v1/slot-update", json=update(slot=1))
        assert answer.status_code == 200 and answer.json()["model_version"] == before
        assert c.get("/readyz").json()["model_version"] == before


def test_a_card_whose_controller_cannot_run_is_refused_at_start_and_on_reload(models, tmp_path):
    """The shield's and the fallback's reference must run: a card with an impossible gain is an unloadable model
    (the fallback serves at start; a reload keeps the model in memory and answers 422), never a crash or a 500."""
    broken = tmp_path / "broken"
    shutil.copytree(models.cbrl_model, broken)
    card = json.loads((broken / "model.json").read_text())
    card["training"]["controller"] = {
        "initial_ratio": 10.0,
        "kp": 0.5,
        "ki": 0.05,
        "kd": 0.2,
        "kp_budget": 1.0,
        "ki_budget": 0.1,
    }
    (broken / "model.json").write_text(json.dumps(card))
    with serving(broken) as c:
        assert c.get("/readyz").status_code == 503
        register(c)
        assert c.post("/v1/slot-update", json=update()).json()["decided_by"] == "fallback"
    with serving(models.cbrl_model) as c:
        before = c.get("/readyz").json()["model_version"]
        refused = c.post("/v1/admin/reload-model", json={"model_dir": str(broken)})
        assert refused.status_code == 422 and refused.json()["error"] == "model_refused", refused.text
        assert "initial_ratio" in refused.json()["detail"]
        assert c.get("/readyz").json()["model_version"] == before


def test_a_reload_from_a_directory_without_a_model_is_not_found(models, tmp_path):
    """No model card there: 404, as an unknown campaign is; the model in memory keeps serving."""
    with serving(models.cbrl_model) as c:
        before = c.get("/readyz").json()["model_version"]
        for directory in (tmp_path / "missing", tmp_path, "x" * 5000):
            missing = c.post("/v1/admin/reload-model", json={"model_dir": str(directory)})
            assert missing.status_code == 404 and missing.json()["error"] == "unknown_model_dir", missing.text
        assert c.post("/v1/admin/reload-model", json={"model_dir": "a\u0000b"}).status_code == 422
        assert c.get("/readyz").json()["model_version"] == before


def test_openapi_documents_bodies_and_errors(models):
    with serving(models.cbrl_model) as c:
        schema = c.get("/openapi.json").json()
    bid = schema["paths"]["/v1/bid"]["post"]
    assert set(bid["requestBody"]["content"]) == {"application/json", "application/octet-stream"}
    assert {"BidRequest", "ColumnarBidRequest", "SlotUpdate", "CampaignRegistration"} <= set(
        schema["components"]["schemas"]
    )
    update_responses = schema["paths"]["/v1/slot-update"]["post"]["responses"]
    assert {"200", "409", "422", "503"} <= set(update_responses)
    assert json.dumps(schema)  # serializable


def test_openapi_states_the_constraints_the_service_holds(models):
    """Each route documents the statuses it answers, and each field its constraint in JSON Schema's own words
    (pydantic leaves constraints after a validator out as unknown "ge"/"le" keys, which no client reads)."""
    with serving(models.cbrl_model) as c:
        schema = c.get("/openapi.json").json()
    components = schema["components"]["schemas"]
    text = json.dumps(schema)
    assert not any(f'"{key}":' in text for key in ("ge", "le", "gt", "lt", "min_length", "allow_inf_nan"))
    for model, field in (("CampaignRegistration", "episode"), ("SlotUpdate", "episode"), ("SlotUpdate", "campaign_id")):
        assert components[model]["properties"][field]["pattern"] == "^[A-Za-z0-9._:\\-]{1,128}$", (model, field)
    assert components["SlotUpdate"]["properties"]["delivery"]["minimum"] == 0
    assert components["CampaignRegistration"]["properties"]["slots"]["const"] == 48
    for name in ("BidRequest", "ColumnarBidRequest", "SlotUpdate", "SlotUpdateBatch", "CampaignRegistration"):
        assert components[name]["additionalProperties"] is False, name
    paths = schema["paths"]
    assert set(paths["/v1/bid"]["post"]["responses"]) == {"200", "400", "404", "413", "415", "422", "503"}
    assert "400" not in paths["/v1/slot-update"]["post"]["responses"]
    assert set(paths["/v1/campaigns/{campaign_id}"]["get"]["responses"]) == {"200", "404", "422", "503"}
    assert paths["/v1/bid"]["post"]["parameters"][0]["schema"]["pattern"] == "^[A-Za-z0-9._:\\-]{1,128}$"


@contextmanager
def runaway_model(client) -> Iterator[None]:
    """Within the block the served model proposes the top ratio (4.0) for every campaign: the shield must act."""
    runner = client.app.state.runner
    original = runner.policy.decide

    def runaway(histories, keys):
        decision = original(histories, keys)
        return type(decision)(ratio=decision.ratio * 0 + 4.0, mean=decision.mean, std=decision.std)

    runner.policy.decide = runaway
    try:
        yield
    finally:
        runner.policy.decide = original


def test_the_card_sets_the_band_the_shield_serves(models, tmp_path):
    """A card's ``shield`` section is the band served: /readyz shows it, and with both upper edges 0.3 higher (the
    safe edge ``wide`` and the threatened one ``tight_above``) a runaway model is capped ``exp(0.3)`` higher than
    behind the defaults, whatever the threat."""
    widened = tmp_path / "widened"
    shutil.copytree(models.cbrl_model, widened)
    band = {"wide": 1.0, "tight_above": 0.2}
    rewrite_card(widened, lambda card: card.update(shield={"config": band, "chosen_by": "a test"}))
    capped = {}
    for name, directory in (("plain", models.cbrl_model), ("widened", widened)):
        with serving(directory, shield=True) as c:
            served = c.get("/readyz").json()["shield_config"]
            assert (served["wide"], served["tight_above"]) == ((1.0, 0.2) if name == "widened" else (0.7, -0.1))
            register(c)
            with runaway_model(c):
                answers = [
                    c.post("/v1/slot-update", json=update(slot=s, delivery=1.0, cost=4.0)).json() for s in range(4)
                ]
            assert all(a["decided_by"] == "shield" for a in answers)
            capped[name] = [a["bid_ratio"] for a in answers]
    assert capped["widened"] == pytest.approx([min(RATIO_MAX, r * math.exp(0.3)) for r in capped["plain"]])
    assert capped["widened"] != pytest.approx(capped["plain"])


def test_the_shield_caps_a_runaway_model_and_counts_it(models):
    with serving(models.cbrl_model, shield=True) as c:
        assert c.get("/readyz").json()["shield"] is True
        register(c)
        with runaway_model(c):
            answers = [c.post("/v1/slot-update", json=update(slot=s, delivery=1.0, cost=4.0)).json() for s in range(4)]
        assert all(a["decided_by"] == "shield" and a["bid_ratio"] < 4.0 for a in answers)
        text = c.get("/metrics").text
        assert metric(text, 'rcb_shield_actions_total{campaign="c1"}') == 4


def test_per_campaign_series_are_bounded(models):
    """Past ``metrics_campaign_limit`` campaigns, shield actions are counted under campaign="_other", none lost."""
    with serving(models.cbrl_model, shield=True, metrics_campaign_limit=2) as c:
        campaigns = ["c1", "c2", "c3", "c4"]
        for campaign in campaigns:
            assert register(c, campaign=campaign).status_code == 201
        with runaway_model(c):
            for campaign in campaigns:
                for s in range(2):
                    answer = c.post("/v1/slot-update", json=update(campaign=campaign, slot=s, delivery=1.0, cost=4.0))
                    assert answer.json()["decided_by"] == "shield"
        text = c.get("/metrics").text
        assert metric(text, 'rcb_shield_actions_total{campaign="c1"}') == 2
        assert metric(text, 'rcb_shield_actions_total{campaign="c2"}') == 2
        assert 'campaign="c3"' not in text and 'campaign="c4"' not in text
        assert metric(text, 'rcb_shield_actions_total{campaign="_other"}') == 4
        assert metric(text, "rcb_shield_actions_total") == 8


def test_a_zero_campaign_limit_counts_every_campaign_under_other():
    metrics = Metrics(campaign_limit=0)
    assert metrics.campaign_label("c1") == OTHER_CAMPAIGNS
    assert Metrics(campaign_limit=1).campaign_label("c1") == "c1"


def test_a_planner_out_of_its_depth_is_counted_out_of_range(models):
    """A planner model whose campaign reports costs no scenario explains (5,000 a slot on a market whose slots cost a
    few units; it then bids low and every scenario is equally wrong: the misfit, not the edge) counts those slots in
    ``rcb_out_of_range_slots_total``."""
    with serving(models.plan_model) as c:
        assert c.get("/readyz").json()["model_kind"] == "planner"
        register(c, campaign="wild")
        for s in range(4):
            answer = c.post("/v1/slot-update", json=update(campaign="wild", slot=s, delivery=1.0, cost=5000.0))
            assert answer.status_code == 200 and answer.json()["decided_by"] == "model"
        text = c.get("/metrics").text
        assert metric(text, 'rcb_out_of_range_slots_total{campaign="wild"}') == 4


def test_a_batch_counts_out_of_depth_slots_on_the_campaigns_they_belong_to(models):
    """Campaigns at different slots in one batch (the runner groups them by slot and answers in request order): only
    the one reporting absurd costs is counted."""
    with serving(models.plan_model) as c:
        for campaign in ("calm", "wild", "wild2"):
            register(c, campaign=campaign)
        for s in range(3):  # calm ahead: slots 0-2 reported, at costs like its market's
            assert (
                c.post("/v1/slot-update", json=update(campaign="calm", slot=s, delivery=0.2, cost=0.2)).status_code
                == 200
            )
        batch = [  # grouped by slot as [wild, wild2], [calm]: answered back in request order
            update(campaign="wild", slot=0, cost=5000.0),
            update(campaign="calm", slot=3, delivery=0.2, cost=0.2),
            update(campaign="wild2", slot=0, cost=5000.0),
        ]
        answer = c.post("/v1/slot-update/batch", json={"updates": batch})
        assert answer.status_code == 200, answer.text
        text = c.get("/metrics").text
        assert metric(text, 'rcb_out_of_range_slots_total{campaign="wild"}') == 1
        assert metric(text, 'rcb_out_of_range_slots_total{campaign="wild2"}') == 1
        assert metric(text, 'rcb_out_of_range_slots_total{campaign="calm"}') == 0


def test_a_reload_body_with_an_unknown_field_is_refused_not_read_as_the_default(models):
    """{"model_dirr": ...} reloaded the current model and answered 200."""
    with serving(models.cbrl_model) as c:
        r = c.post("/v1/admin/reload-model", json={"model_dirr": str(models.hard_model)})
        assert r.status_code == 422 and r.json()["error"] == "invalid_request"
        assert c.get("/readyz").json()["algorithm"] == "cbrl"


def test_figures_recorded_on_a_served_model_keep_its_version_and_the_campaigns_pinned_to_it(models, tmp_path):
    """The version hashed the whole card: `record_figures` (or a calibration's records) after export changed it, so a
    reload moved every campaign registered with `model:` to 409 model_mismatch though nothing that decides changed.
    Another shield band is another version: it changes the ratios served."""
    live = tmp_path / "live"
    shutil.copytree(models.cbrl_model, live)
    with serving(live, shield=True) as c:
        version = c.get("/readyz").json()["model_version"]
        record_figures(live, {"test": {"shielded": {"ans": 0.5, "csr": 1.0}}})
        rewrite_card(live, lambda raw: raw.__setitem__("created", "2030-01-01T00:00:00Z"))
        reloaded = c.post("/v1/admin/reload-model", json={})
        assert reloaded.status_code == 200 and reloaded.json()["model_version"] == version
        pinned = c.put("/v1/campaigns/c1", json={"episode": "e1", "roi_target": 1.0, "model": version})
        assert pinned.status_code == 201
        rewrite_card(live, lambda raw: raw.__setitem__("shield", {"config": {"wide": 0.8}, "chosen_by": "a person"}))
        widened = c.post("/v1/admin/reload-model", json={}).json()["model_version"]
        assert widened != version and widened.startswith("cbrl-sc-")
        # The band as it runs, not as it is spelled: the default written out is the default.
        rewrite_card(live, lambda raw: raw.__setitem__("shield", {"config": {"wide": 0.7}, "chosen_by": "x"}))
        assert c.post("/v1/admin/reload-model", json={}).json()["model_version"] == version


def test_reloads_run_one_at_a_time_and_the_metrics_name_the_model_that_serves(models, monkeypatch):
    """Two reloads at once both loaded and swapped in whichever order they finished: a slow reload started first
    could replace a later one, and the route set `rcb_model_info` from its own answer, so the metrics could name a
    model that no longer served. Loads are serialized now; the last one in is the one serving and named."""
    import threading
    import time

    from service import runner as runner_module

    metrics = Metrics()
    runner = runner_module.ModelRunner(models.cbrl_model, on_load=metrics.set_model)
    runner.load()
    real_load = runner_module.load_artifact
    inside, overlapped, slow_holds_the_load = [0], [], threading.Event()

    def slow_load(directory, **kwargs):
        inside[0] += 1
        overlapped.append(inside[0] > 1)
        if "hard" not in str(directory):
            slow_holds_the_load.set()
            time.sleep(0.3)
        try:
            return real_load(directory, **kwargs)
        finally:
            inside[0] -= 1

    monkeypatch.setattr(runner_module, "load_artifact", slow_load)
    answers: dict[str, tuple[str, str]] = {}
    first = threading.Thread(target=lambda: answers.__setitem__("slow", runner.reload(models.cbrl_model)))
    first.start()
    assert slow_holds_the_load.wait(10)  # the quick reload arrives while the slow one holds the load
    answers["quick"] = runner.reload(models.hard_model)
    first.join()
    assert not any(overlapped)
    assert runner.version.startswith("hard-") and answers["quick"][0] == answers["slow"][1]
    text = generate_latest(metrics.registry).decode()
    assert metric(text, f'rcb_model_info{{version="{runner.version}"}}') == 1 and metric(text, "rcb_model_info") == 1


def test_the_probes_answer_head(client):
    """A load balancer's probe with HEAD is answered; another method gets 405 naming both, and OPTIONS too."""
    assert client.head("/healthz").status_code == 200
    assert client.head("/readyz").status_code == 200 and client.head("/readyz").content == b""
    refused = client.post("/healthz")
    assert refused.status_code == 405 and refused.headers["allow"] == "GET, HEAD"
    assert client.options("/readyz").headers["allow"] == "GET, HEAD"


def test_reloads_queue_on_the_event_loop_not_in_worker_threads(models, monkeypatch):
    """Each waiting reload held a worker thread (blocked on the load lock), the threads the decisions run on."""
    import asyncio
    import threading
    import time

    from service import runner as runner_module

    runner = runner_module.ModelRunner(models.cbrl_model)
    real_reload = runner_module.ModelRunner.reload
    in_threads, most = [0], [0]
    guard = threading.Lock()

    def counted_reload(self, model_dir=None):
        with guard:
            in_threads[0] += 1
            most[0] = max(most[0], in_threads[0])
        try:
            time.sleep(0.05)
            return real_reload(self, model_dir)
        finally:
            with guard:
                in_threads[0] -= 1

    monkeypatch.setattr(runner_module.ModelRunner, "reload", counted_reload)

    async def burst() -> list[tuple[str, str]]:
        return await asyncio.gather(*(runner.reload_async() for _ in range(4)))

    answers = asyncio.run(burst())
    assert most[0] == 1 and all(version == runner.version for _, version in answers)


def test_a_model_trained_behind_the_shield_served_without_it_is_warned_of(models, tmp_path, caplog):
    """``rcb train --train-shielded``: the critics valued only what the shield lets through, so the service warns
    when it serves such a model with the shield off (and not when it is on)."""
    import json
    import logging
    import shutil

    from service.runner import ModelRunner

    model = tmp_path / "shielded"
    shutil.copytree(models.cbrl_model, model)
    card = json.loads((model / "model.json").read_text())
    card["training"]["config"]["train_shielded"] = True
    (model / "model.json").write_text(json.dumps(card))
    warning = "trained behind the shield and is served without it"
    with caplog.at_level(logging.WARNING, logger="rcb.service"):
        ModelRunner(model, use_shield=True).load()
        assert warning not in caplog.text
        ModelRunner(models.cbrl_model, use_shield=False).load()
        assert warning not in caplog.text
        ModelRunner(model, use_shield=False).load()
    assert warning in caplog.text
