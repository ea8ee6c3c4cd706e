"""``rcb calibrate`` (:mod:`training.export.calibrate`): a model's bid scale chosen on the served market's train days,
carried on its card (``bid_scale``) and applied by :class:`model.policy.Policy`, so by ``onnx:`` and the service."""

from __future__ import annotations

import copy
import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from artifact_fixtures import SETTING, Exported
from pydantic import ValidationError
from typer.testing import CliRunner

from model.artifact import CARD_FILE, BidScaleInfo, ModelCard, load_artifact, read_card
from model.contract import RATIO_MAX, SLOTS_PER_DAY
from model.policy import decision_inputs, offline_keys
from model.sampling import sample_posterior
from rcb.cli import app
from training.bidders.onnx import OnnxBidder
from training.evaluation.evaluate import evaluate
from training.evaluation.leakage import calibration_warnings
from training.evaluation.methods import parse_methods
from training.export import calibrate as bid_calibration
from training.export.calibrate import (
    LADDER,
    BidCalibration,
    CalibrationError,
    calibrate,
    check_destination,
    choose_scale,
    nearest_scale,
    row_name,
    write_calibrated,
)
from training.market.dataset import Market
from training.replay.dayset import DaySet


def rows_of(pid_csr: float, cells: dict[float, tuple[float, float]]) -> dict[str, dict[str, float]]:
    rows = {"pid": {"ans": 0.5, "csr": pid_csr}}
    rows.update({row_name(m): {"ans": ans, "csr": csr} for m, (ans, csr) in cells.items()})
    return rows


def test_the_rule_keeps_the_best_factor_whose_csr_is_the_pids_ties_to_the_nearest_one():
    ladder = (0.8, 1.0, 1.2, 1.4)
    # 1.4 scores best but loses days the PID keeps: not eligible; 1.2 is.
    assert (
        choose_scale(rows_of(0.9, {0.8: (0.4, 1.0), 1.0: (0.5, 0.9), 1.2: (0.6, 0.9), 1.4: (0.7, 0.8)}), ladder) == 1.2
    )
    # Equal CSR shares may differ in the last bit: the mean of five seeds' 5/11 is 1 ulp below 5/11. Equal is eligible.
    five_seeds = float(pd.Series([5 / 11] * 5).mean())
    assert five_seeds < 5 / 11
    assert (
        choose_scale(rows_of(5 / 11, {0.8: (0.4, 1), 1.0: (0.5, 1), 1.2: (0.6, five_seeds), 1.4: (0.9, 0)}), ladder)
        == 1.2
    )
    # A tie goes to the factor nearest 1 (the model as it is, where it ties).
    assert choose_scale(rows_of(0.9, {0.8: (0.6, 1), 1.0: (0.6, 1), 1.2: (0.6, 1), 1.4: (0.2, 1)}), ladder) == 1.0
    assert choose_scale(rows_of(0.9, {0.8: (0.6, 1), 1.0: (0.5, 1), 1.2: (0.6, 1), 1.4: (0.2, 1)}), ladder) == 0.8
    # Nothing keeps the PID's CSR: no choice (the model is refused); --force-unsafe takes the nearest CSR, then ANS.
    unfit = rows_of(1.0, {0.8: (0.6, 0.8), 1.0: (0.5, 0.9), 1.2: (0.6, 0.9), 1.4: (0.2, 0.9)})
    assert choose_scale(unfit, ladder) is None and nearest_scale(unfit, ladder) == 1.2


def test_the_card_carries_a_scale_in_range_and_the_served_version_follows_it(exported: Exported):
    card = read_card(exported.cbrl_model)
    assert card.bid_scale is None and card.bid_scale_factor() == 1.0
    for bad in (0.0, -1.0, 5.0, float("nan")):
        with pytest.raises(ValidationError, match=r"bid_scale|finite|scale"):
            BidScaleInfo(scale=bad)
    one = card.model_copy(update={"bid_scale": BidScaleInfo(scale=1.0, chosen_by="x", calibration={"rows": {}})})
    scaled = card.model_copy(update={"bid_scale": BidScaleInfo(scale=1.2)})
    # The factor decides, so it names the served model; a factor of 1 and the records do not.
    assert one.served_sha256() == card.served_sha256()
    assert scaled.served_sha256() != card.served_sha256()
    relabelled = scaled.model_copy(update={"bid_scale": BidScaleInfo(scale=1.2, chosen_by="someone else")})
    assert relabelled.served_sha256() == scaled.served_sha256()
    assert ModelCard.model_validate_json(scaled.to_json()).bid_scale_factor() == 1.2


def test_the_policy_bids_the_models_ratio_times_the_scale(exported: Exported):
    days = DaySet.load(Market.open(exported.market), "test", SETTING)
    artifact = load_artifact(exported.residual_model)  # its base is its controller's ratio, not what it bid
    assert artifact.card.residual and not artifact.card.builds_on_last_ratio
    plain, scaled = OnnxBidder(artifact), OnnxBidder(artifact, bid_scale=4.0)
    history = days.play(plain, 3).history  # a whole day: every slot's decision from the same played history
    for bidder in (plain, scaled):
        bidder.start(days.registration(), 3)
    for slot in (0, 7, SLOTS_PER_DAY - 1):
        before = history.until(slot)
        inputs = decision_inputs([before], offline_keys(3, before.n), artifact.latent_dim, plain.policy.controller)
        assert inputs.steps is not None and inputs.mask is not None and inputs.eps is not None
        mean, std = artifact.posterior(inputs.steps, inputs.mask)
        raw = artifact.act(inputs.obs, sample_posterior(mean, std, inputs.eps)).astype(np.float64)
        # The graph's ratio times the scale, then clipped to [0, 4].
        np.testing.assert_array_equal(scaled.bid(before), np.clip(raw * 4.0, 0.0, RATIO_MAX))
        np.testing.assert_array_equal(plain.bid(before), raw)
    # The clip comes after the product (this fixture's ratios stay below 1, so the order is checked on its own).
    np.testing.assert_array_equal(scaled.policy._scaled(np.array([0.5, 1.5, 0.0])), [2.0, RATIO_MAX, 0.0])
    assert OnnxBidder(artifact).policy.bid_scale == 1.0  # the card's: none
    for bad in (0.0, 0.1, 5.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="bid scale must be in"):
            OnnxBidder(artifact, bid_scale=bad)


def test_a_model_that_builds_on_its_last_ratio_bids_one_factor_not_a_compounding_one(exported: Exported):
    """A relative, non-residual model moves its last ratio: read back as bid (times the scale), the factor compounded,
    m^(t+1) by slot t (a review served 1.1, 1.21, ... 3.14 by slot 11 at m = 1.1). Read back as its own ratios, the
    scaled model bids m times what the model alone bids on the same market answers, at every slot."""
    days = DaySet.load(Market.open(exported.market), "test", SETTING)
    artifact = load_artifact(exported.cbrl_model)
    assert artifact.card.builds_on_last_ratio
    m = 1.3
    plain, scaled = OnnxBidder(artifact), OnnxBidder(artifact, bid_scale=m)
    history = days.play(plain, 3).history
    for bidder in (plain, scaled):
        bidder.start(days.registration(), 3)
    for slot in range(0, SLOTS_PER_DAY, 6):
        alone = history.until(slot)
        as_bid = copy.copy(alone)  # the same market answers, the ratios as the scaled model bid them
        as_bid.ratios = np.clip(alone.ratios * m, 0.0, RATIO_MAX)
        np.testing.assert_allclose(scaled.bid(as_bid), np.clip(plain.bid(alone) * m, 0.0, RATIO_MAX), rtol=1e-6)
    assert OnnxBidder(load_artifact(exported.hard_model)).policy.own_ratio_scale == 1.0  # scale 1: nothing to undo
    assert scaled.policy.own_ratio_scale == m


def test_calibrate_plays_the_ladder_and_writes_a_copy_that_onnx_plays_as_chosen(
    exported: Exported, served_market: Path, tmp_path: Path
):
    chosen, episodes = calibrate(exported.cbrl_model, served_market, seeds=1)
    assert set(episodes["method"]) == {"pid", *(row_name(m) for m in LADDER)}
    assert chosen.scale in LADDER and chosen.days == len(DaySet.load(Market.open(served_market), "train", SETTING))
    assert chosen.scale == choose_scale(chosen.rows)
    out = tmp_path / "calibrated"
    card = write_calibrated(exported.cbrl_model, out, chosen)
    assert card.bid_scale is not None and card.bid_scale.scale == chosen.scale
    assert card.bid_scale.data_fingerprint == Market.open(served_market).split_fingerprint("train")
    assert card.bid_scale.calibration["rows"][row_name(chosen.scale)]["ans"] == round(
        chosen.rows[row_name(chosen.scale)]["ans"], 4
    )
    assert card.evaluation.measured == {}  # the original's figures were of the model without the factor
    # The graphs are the model's, byte for byte; only the card differs.
    for name in read_card(exported.cbrl_model).files:
        assert (out / name).read_bytes() == (Path(exported.cbrl_model) / name).read_bytes()
    # rcb evaluate's shield:onnx:OUT on the same train days plays the chosen row's episodes exactly.
    played = evaluate(Market.open(served_market), SETTING, "train", parse_methods(f"shield:onnx:{out}"), seeds=1)
    ours = played.episodes.sort_values("day")
    rule = episodes[episodes["method"] == row_name(chosen.scale)].sort_values("day")
    np.testing.assert_array_equal(ours["delivery"].to_numpy(), rule["delivery"].to_numpy())
    np.testing.assert_array_equal(ours["cost"].to_numpy(), rule["cost"].to_numpy())


def test_calibration_refuses_the_models_own_days_and_a_destination_it_would_spoil(
    exported: Exported, served_market: Path, tmp_path: Path
):
    with pytest.raises(CalibrationError, match="trained and selected on"):
        calibrate(exported.cbrl_model, exported.market, seeds=1)
    # A model pooled over several markets carries their fold: each listed market's own train days are refused too.
    pooled = tmp_path / "pooled"
    shutil.copytree(exported.cbrl_model, pooled)
    card = read_card(pooled)
    training = card.training.model_copy(
        update={"data_fingerprint": "pooled:0123", "pooled_markets": [str(exported.market), str(served_market)]}
    )
    (pooled / CARD_FILE).write_text(card.model_copy(update={"training": training}).to_json())
    with pytest.raises(CalibrationError, match="trained and selected on"):
        calibrate(pooled, served_market, seeds=1)
    # A fine-tuned model learned its source's train days too (rcb train --init-from), an ensemble's member's or a
    # source's source alike.
    served = Market.open(served_market).split_fingerprint("train")
    for carried in (
        {"run": "runs/src", "data_fingerprint": served},
        {
            "members": [
                None,
                {"run": "runs/a", "data_fingerprint": "x", "initialized_from": {"data_fingerprint": served}},
            ]
        },
    ):
        tuned = card.training.model_copy(update={"initialized_from": carried})
        (pooled / CARD_FILE).write_text(card.model_copy(update={"training": tuned}).to_json())
        with pytest.raises(CalibrationError, match="trained and selected on"):
            calibrate(pooled, served_market, seeds=1)
    # A pooled market that cannot be opened from here cannot be checked: said, not skipped in silence.
    moved = card.training.model_copy(
        update={"data_fingerprint": "pooled:0123", "pooled_markets": [str(tmp_path / "moved"), str(exported.market)]}
    )
    (pooled / CARD_FILE).write_text(card.model_copy(update={"training": moved}).to_json())
    told: list[str] = []
    calibrate(pooled, served_market, seeds=1, warn=told.append)
    assert len(told) == 1 and str(tmp_path / "moved") in told[0]
    with pytest.raises(CalibrationError, match="inside the model"):
        check_destination(exported.cbrl_model, Path(exported.cbrl_model) / "calibrated")
    with pytest.raises(CalibrationError, match="the model itself"):
        check_destination(exported.cbrl_model, exported.cbrl_model)
    taken = tmp_path / "taken"
    shutil.copytree(exported.cbrl_model, taken)
    with pytest.raises(CalibrationError, match="--force"):
        check_destination(exported.cbrl_model, taken)
    check_destination(exported.cbrl_model, taken, force=True)
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("mine")
    with pytest.raises(CalibrationError, match="holds no model"):
        check_destination(exported.cbrl_model, tmp_path / "notes")


def test_rcb_calibrate_writes_the_copy_and_says_why_it_refuses(exported: Exported, served_market: Path, tmp_path: Path):
    out = tmp_path / "cli-calibrated"
    args = ["calibrate", str(exported.cbrl_model), str(served_market), "--out", str(out), "--seeds", "1", "--quiet"]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    said = json.loads(result.stdout)
    assert said["out"] == str(out) and said["scale"] in LADDER and said["split"] == "train"
    written = json.loads((out / CARD_FILE).read_text())["bid_scale"]
    assert written["scale"] == said["scale"] and written["calibration"]["seeds"] == 1  # the seeds played, not 5
    # Scored on the days that chose its scale, rcb evaluate says the figures are in-sample; on test it does not.
    served = Market.open(served_market)
    assert calibration_warnings([f"shield:onnx:{out}", "pid"], served, "train") == [
        f"'shield:onnx:{out}': its bid scale {said['scale']:g} was chosen on this market's train days, so its figures"
        " on --split train are in-sample; score it on test or OOD days"
    ]
    assert calibration_warnings([f"shield:onnx:{out}"], served, "test") == []
    assert calibration_warnings([f"onnx:{exported.cbrl_model}"], served, "train") == []  # no scale on its card
    for bad_args, message in (
        (args, "--force"),  # the copy is there now
        (
            ["calibrate", str(exported.cbrl_model), str(exported.market), "--out", str(tmp_path / "x"), "--quiet"],
            "selected on",
        ),
        (
            ["calibrate", str(tmp_path / "nothing"), str(served_market), "--out", str(tmp_path / "y"), "--quiet"],
            "nothing",
        ),
    ):
        result = CliRunner().invoke(app, bad_args)
        assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output
    # checks first: a refusal comes before any progress bar is drawn
    own_days = ["calibrate", str(exported.cbrl_model), str(exported.market), "--out", str(tmp_path / "z")]
    result = CliRunner().invoke(app, own_days)
    assert result.exit_code == 2 and "selected on" in result.output and "factors" not in result.output


def test_the_copy_replaces_a_linked_destination_and_a_copy_that_does_not_load_leaves_it_as_it_was(
    exported: Exported, served_market: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """``--out models/current -> models/v12``: the target takes the copy and the link stays (the copy was written
    to a fixed ``.building`` name and the link removed as if it were a directory)."""
    rows = {"pid": {"ans": 0.5, "csr": 1.0}, **{row_name(m): {"ans": 0.5, "csr": 1.0} for m in LADDER}}
    chosen = BidCalibration(1.2, rows, 6, str(served_market), "f" * 64, 1)
    target, link = tmp_path / "v12", tmp_path / "current"
    shutil.copytree(exported.cbrl_model, target)
    link.symlink_to(target)
    write_calibrated(exported.cbrl_model, link, chosen, force=True)
    assert link.is_symlink() and read_card(link).bid_scale_factor() == 1.2 == read_card(target).bid_scale_factor()
    # A copy that fails to load takes nothing: the destination keeps what it held, nothing is left beside it.
    before = sorted(p.name for p in tmp_path.iterdir())

    def broken(directory: Path, **_: object) -> None:
        raise ValueError("no model here")

    monkeypatch.setattr(bid_calibration, "load_artifact", broken)
    with pytest.raises(ValueError, match="no model here"):
        write_calibrated(exported.cbrl_model, link, replace(chosen, scale=0.9), force=True)
    assert read_card(target).bid_scale_factor() == 1.2 and sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_deterministic_model_records_the_one_seed_it_played(exported: Exported, served_market: Path):
    chosen, episodes = calibrate(exported.hard_model, served_market, seeds=5)
    assert chosen.seeds == 1 and chosen.record()["seeds"] == 1 and set(episodes["seed"]) == {0}


def test_the_copy_is_writable_and_a_destination_taken_meanwhile_is_not_overwritten(
    exported: Exported, served_market: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    rows = {"pid": {"ans": 0.5, "csr": 1.0}, **{row_name(m): {"ans": 0.5, "csr": 1.0} for m in LADDER}}
    chosen = BidCalibration(1.2, rows, 6, str(served_market), "f" * 64, 1)
    # A read-only model (0555) is copied by content: the copy's directory is the user's to write.
    readonly = tmp_path / "readonly"
    shutil.copytree(exported.cbrl_model, readonly)
    readonly.chmod(0o555)
    try:
        write_calibrated(readonly, tmp_path / "from-readonly", chosen)
    finally:
        readonly.chmod(0o755)
    assert (tmp_path / "from-readonly").stat().st_mode & 0o777 == 0o755
    # Another calibration that takes the new --out while this one builds its copy: refused at the swap, not lost.
    out = tmp_path / "contested"
    real_load = bid_calibration.load_artifact

    def load_and_race(directory: Path, **kwargs: object):
        shutil.copytree(exported.cbrl_model, out)  # the other writer's copy lands first
        return real_load(directory, **kwargs)

    monkeypatch.setattr(bid_calibration, "load_artifact", load_and_race)
    with pytest.raises(CalibrationError, match="--force"):
        write_calibrated(exported.cbrl_model, out, chosen)
    assert read_card(out).bid_scale is None  # the other writer's model stands
    assert sorted(p.name for p in tmp_path.iterdir()) == ["contested", "from-readonly", "readonly"]
