"""`rcb export --plan`: the planner as a model artifact (``kind: planner``) that evaluation and the service load.

It plays exactly what ``rcb evaluate``'s ``plan`` baseline plays (same tuning cache, same scenarios, float64), and
it is refused, with a message naming the problem, when its scenarios or its card are damaged or of another law.
The service side (HTTP replay equal to these episodes) is ``tests/serving/test_replay.py``.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from artifact_fixtures import SETTING, Exported, replace_file, rewrite_card
from pydantic import ValidationError
from typer.testing import CliRunner

from model import planner as law
from model.artifact import CARD_FILE, SCENARIOS_FILE, ArtifactError, ModelCard, load_artifact
from model.controller import GAIN_FIELDS
from model.history import History, Registration
from model.policy import Policy
from model.state import CampaignState
from rcb.cli import app
from training.bidders import planner as planner_bidder
from training.bidders.tuned import tuned_baseline
from training.evaluation.evaluate import EvaluationError, evaluate, split_days
from training.market.dataset import Market

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def test_the_card_holds_the_tuning_rcb_evaluate_uses_and_the_markets_pid(exported: Exported):
    market = Market.open(exported.market)
    _, train = split_days(market, "train", SETTING)
    plan, record = tuned_baseline(market, "plan", SETTING, train)
    pid, _ = tuned_baseline(market, "pid", SETTING, train)
    artifact = load_artifact(exported.plan_model)
    card = artifact.card
    assert card.kind == "planner" and card.is_planner and card.algorithm == "plan" and card.setting == SETTING
    assert card.features == () and card.obs_dim == 0 and not card.bayesian and not card.residual
    assert card.planner is not None and card.planner.version == law.VERSION
    assert (card.planner.margin, card.planner.cost_sd) == (plan.params()["margin"], plan.params()["cost_sd"])
    assert card.planner.train_score == record["train_score"] and card.planner.train_days == len(train())
    assert card.training.data_fingerprint == market.split_fingerprint("train")
    gains = pid.params()
    assert card.training.controller == {k: gains[k] for k in GAIN_FIELDS}
    assert card.training.traffic_profile == tuple(gains["traffic_profile"])
    assert card.parity == {"ratio": 0.0} and sorted(card.files) == [SCENARIOS_FILE]
    # the scenarios are the tuned planner's, bit for bit
    assert artifact.planner is not None
    for name in ("delivery", "cost", "auctions"):
        assert np.array_equal(getattr(artifact.planner.scenarios, name), getattr(plan.scenarios, name))  # type: ignore[attr-defined]
    with pytest.raises(ArtifactError, match="no policy graph"):
        artifact.act(np.zeros((1, 0)))


def test_evaluating_the_exported_planner_plays_the_plan_rows(exported: Exported):
    """``onnx:MODEL`` equals ``plan``, and ``shield:onnx:MODEL`` equals ``shield:plan`` (the card's PID is the
    market's): the same episodes, to the last bit."""
    model = f"onnx:{exported.plan_model}"
    run = evaluate(
        Market.open(exported.market), SETTING, "test", ["plan", model, "shield:plan", f"shield:{model}"], seeds=3
    )
    rows = run.episodes.set_index(["method", "day"])[["delivery", "cost"]]
    assert np.array_equal(rows.loc["plan"].to_numpy(), rows.loc[model].to_numpy())
    assert np.array_equal(rows.loc["shield:plan"].to_numpy(), rows.loc[f"shield:{model}"].to_numpy())
    assert run.summary[model]["n_seeds"] == 1  # deterministic: played once


def test_campaigns_at_mixed_slots_decide_as_they_would_alone(exported: Exported):
    policy = Policy(load_artifact(exported.plan_model))
    states = []
    for k, slot in enumerate((0, 5, 5, 17, 47)):
        state = CampaignState.new(f"c{k}", "e", 1.0 + 0.1 * k, None if k % 2 else 50.0, seed=0)
        rng = np.random.default_rng(k)
        for _ in range(slot):
            delivery, cost, wins = rng.uniform(0, 2, size=3)
            state = state.decided(float(rng.uniform(0.5, 2)), "v").reported(delivery, cost, wins, 100.0 + wins)
        states.append(state)
    together = policy.decide_states(states).ratio
    alone = [policy.decide_states([s]).ratio[0] for s in states]
    assert np.array_equal(together, alone) and np.all((together > 0) & (together <= 4))
    decision = policy.decide_states(states)
    assert decision.mean is None  # no posterior over a latent
    planner, depth = policy.artifact.planner, decision.depth
    assert planner is not None and depth is not None
    assert (depth.edge_alert, depth.misfit_alert) == (planner.edge_alert, planner.misfit_alert)  # the model's own


def test_loading_a_planner_imports_no_torch_or_onnxruntime(exported: Exported):
    code = (
        "import sys; from model.artifact import load_artifact; "
        f"a = load_artifact({str(exported.plan_model)!r}); "
        "print('torch' in sys.modules, 'onnxruntime' in sys.modules, a.planner.scenarios.days)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.split()[:2] == ["False", "False"]


def replace_scenarios(directory: Path, arrays: dict[str, Any]) -> None:
    """Swap in another scenarios file (checksum updated, as a careless hand edit would)."""
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    replace_file(directory, SCENARIOS_FILE, buffer.getvalue())


def _arrays(directory: Path, **change: Any) -> dict[str, Any]:
    with np.load(directory / SCENARIOS_FILE) as f:
        arrays = {name: f[name] for name in f.files}
    return {k: v for k, v in {**arrays, **change}.items() if v is not None}


BAD_PLANNERS: dict[str, tuple[Callable[[Path], None], str]] = {
    "no scenarios": (lambda d: (d / SCENARIOS_FILE).unlink(), "scenarios.npz is missing"),
    "corrupted scenarios": (
        lambda d: (d / SCENARIOS_FILE).write_bytes((d / SCENARIOS_FILE).read_bytes()[:-10]),
        "scenarios.npz: corrupted or replaced",
    ),
    "not a scenarios file": (
        lambda d: replace_scenarios(d, {"x": np.zeros(3)}),
        "scenarios file lacks delivery, cost, auctions, value_dispersion, cost_floor",
    ),
    "another grid": (
        lambda d: replace_scenarios(d, _arrays(d, delivery=_arrays(d)["delivery"][:, :, :-1])),
        "scenario curves must be",
    ),
    "negative costs": (lambda d: replace_scenarios(d, _arrays(d, cost=-_arrays(d)["cost"])), "negative"),
    "NaN": (lambda d: replace_scenarios(d, _arrays(d, cost_floor=np.float64("nan"))), "non-finite"),
    "fewer days than the card says": (
        lambda d: rewrite_card(d, lambda r: r["planner"].update(train_days=r["planner"]["train_days"] + 1)),
        "the card says",
    ),
    "another law": (
        lambda d: rewrite_card(d, lambda r: r["planner"].update(version=law.VERSION + 1)),
        f"planner version {law.VERSION + 1} is not this code's",
    ),
    "no parameters": (lambda d: rewrite_card(d, lambda r: r.update(planner=None)), "needs its law's parameters"),
    "an infinite margin": (lambda d: rewrite_card(d, lambda r: r["planner"].update(margin=float("inf"))), "margin"),
    "a cost sd of 50": (lambda d: rewrite_card(d, lambda r: r["planner"].update(cost_sd=50.0)), "cost_sd"),
    "an edge alert over 1": (lambda d: rewrite_card(d, lambda r: r["planner"].update(edge_alert=1.5)), "edge_alert"),
    "an infinite misfit alert": (
        lambda d: rewrite_card(d, lambda r: r["planner"].update(misfit_alert=float("inf"))),
        "misfit_alert",
    ),
    "features": (
        lambda d: rewrite_card(d, lambda r: r.update(features=[{"name": "time", "low": 0, "high": 1}], obs_dim=1)),
        "reads no features",
    ),
    "graph listed": (
        lambda d: rewrite_card(d, lambda r: r["files"].update({"policy.onnx": "x"})),
        "files must list exactly scenarios.npz",
    ),
}


@pytest.mark.parametrize("case", list(BAD_PLANNERS))
def test_a_bad_planner_is_refused_with_a_message_naming_the_problem(exported: Exported, tmp_path: Path, case: str):
    directory = tmp_path / "model"
    shutil.copytree(exported.plan_model, directory)
    load_artifact(directory)  # the copy is good
    damage, message = BAD_PLANNERS[case]
    damage(directory)
    with pytest.raises(ArtifactError, match=message):
        load_artifact(directory)


def test_a_policy_card_does_not_carry_planner_parameters(exported: Exported):
    raw = json.loads((exported.cbrl_model / CARD_FILE).read_text())
    planner = json.loads((exported.plan_model / CARD_FILE).read_text())["planner"]
    with pytest.raises(ValidationError, match="planner parameters on a policy model"):
        ModelCard.model_validate({**raw, "planner": planner})
    with pytest.raises(ValidationError, match="needs its features"):
        ModelCard.model_validate({**raw, "opset": None})


def test_cli_exports_the_planner_and_refuses_what_it_cannot_do(exported: Exported, tmp_path: Path):
    out = tmp_path / "plan"
    result = runner.invoke(
        app, ["export", "--plan", str(exported.market), "--setting", SETTING, "--out", str(out), "--json"]
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["kind"] == "planner" and summary["files"] == ["model.json", "scenarios.npz"]
    assert summary["parity"] == {"ratio": 0.0} and summary["planner"]["version"] == law.VERSION
    again = runner.invoke(app, ["export", "--plan", str(exported.market), "--setting", SETTING, "--out", str(out)])
    assert again.exit_code == 2 and "--force" in again.output
    for args, message in [
        (["--out", str(tmp_path / "a")], "give --run RUN (repeatable), --plan MARKET or --controller pid|rm MARKET"),
        (["--plan", str(exported.market), "--run", str(exported.hard_run), "--out", str(tmp_path / "b")], "one of"),
        (["--plan", str(exported.market), "--out", str(tmp_path / "c")], "--plan needs --setting"),
        (["--run", str(exported.hard_run), "--setting", "sc", "--out", str(tmp_path / "d")], "a run's setting"),
        (["--plan", str(tmp_path / "nowhere"), "--setting", "sc", "--out", str(tmp_path / "e")], "nowhere"),
    ]:
        refused = runner.invoke(app, ["export", *args])
        assert refused.exit_code == 2 and message in refused.output, refused.output
        assert "Traceback" not in refused.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan"]


def test_an_exported_planner_is_not_scored_on_its_own_train_days(exported: Exported):
    market = Market.open(exported.market)
    for split in ("validation", "train"):
        with pytest.raises(EvaluationError, match="holds each of them as a scenario"):
            evaluate(market, SETTING, split, [f"shield:onnx:{exported.plan_model}"], seeds=1)


def test_the_depth_alerts_are_calibrated_on_the_train_days_left_out(exported: Exported):
    """The card's alerts are :func:`law.calibrated_alerts` of the train days played leave-one-out with the tuned
    parameters, and the loaded model reports its depth against them."""
    market = Market.open(exported.market)
    _, train = split_days(market, "train", SETTING)
    plan, _ = tuned_baseline(market, "plan", SETTING, train)
    edge, misfit = planner_bidder.train_depth(plan, train())  # type: ignore[arg-type]
    assert edge.shape == misfit.shape == (47, len(train()))
    artifact = load_artifact(exported.plan_model)
    info = artifact.card.planner
    assert info is not None and (info.edge_alert, info.misfit_alert) == law.calibrated_alerts(edge, misfit)
    assert artifact.planner is not None
    _, depth = artifact.planner.decide(History(Registration.of(1.0, None)))
    assert (depth.edge_alert, depth.misfit_alert) == (info.edge_alert, info.misfit_alert)


def test_alerts_never_fall_below_the_defaults_and_clear_what_the_train_days_showed():
    assert law.calibrated_alerts(np.array([0.01]), np.array([1.0])) == (law.EDGE_ALERT, law.MISFIT_ALERT)
    assert law.calibrated_alerts(np.array([0.6]), np.array([17.0])) == (0.85, 34.0)
    assert law.calibrated_alerts(np.array([0.97]), np.array([3.0]))[0] == 1.0  # capped: a mass cannot pass 1
    depth = law.Depth(np.array([0.6, 0.9]), np.array([20.0, 40.0]), edge_alert=0.85, misfit_alert=34.0)
    assert depth.out.tolist() == [False, True] and law.Depth(depth.edge, depth.misfit).out.tolist() == [True, True]
