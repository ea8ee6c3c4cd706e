"""The model artifact contract (:mod:`model.artifact`): torch-free loading, card validation, refusal of bad artifacts.

Every refusal must be an :class:`ArtifactError` whose message names what is wrong, so an operator can
fix the artifact without reading code.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from artifact_fixtures import Exported, replace_file, rewrite_card
from pydantic import ValidationError

from model.artifact import (
    CARD_FILE,
    ENCODER_FILE,
    FORMAT_VERSION,
    MAX_STEPS,
    POLICY_FILE,
    ArtifactError,
    ModelCard,
    as_config,
    code_features,
    encoder_spec,
    load_artifact,
    policy_spec,
    read_card,
)
from model.artifact.card import SERVED_BAND_EXTRA
from model.features import N_FEATURES
from model.shield import ShieldConfig
from model.trajectory import episode_steps, prefix_mask, transitions

ROOT = Path(__file__).resolve().parents[1]


def test_loading_a_model_imports_no_torch():
    code = (
        "import sys, model.artifact, model.trajectory, training.bidders.onnx; "
        "print('torch' in sys.modules, 'onnxruntime' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "False"]  # onnxruntime itself only once a model is loaded


def test_the_contract_names_shapes_and_dtypes():
    policy = policy_spec(N_FEATURES, 8)
    assert policy.input_names == ["obs", "z"] and policy.output_names == ["ratio"]
    assert policy.inputs[0].shape == ("batch", N_FEATURES) and policy.outputs[0].shape == ("batch",)
    assert policy_spec(N_FEATURES, 0).input_names == ["obs"]
    encoder = encoder_spec(2 * N_FEATURES + 1, 8)
    assert [(s.name, s.dtype, s.shape) for s in encoder.inputs] == [
        ("steps", "float32", ("batch", "length", 2 * N_FEATURES + 1)),
        ("mask", "bool", ("batch", "length")),
    ]
    assert encoder.output_names == ["mean", "std"] and encoder.outputs[0].shape == ("batch", 8)


def test_a_loaded_model_has_its_card_and_configurable_threads(exported: Exported):
    artifact = load_artifact(exported.cbrl_model, intra_op_threads=2)
    card = artifact.card
    assert card.format_version == FORMAT_VERSION and card.features == code_features()
    assert card.obs_dim == N_FEATURES and card.latent_dim == 8 and card.max_steps == MAX_STEPS
    assert (card.action.low, card.action.high) == (0.0, 4.0)
    assert card.files[POLICY_FILE] == hashlib.sha256((exported.cbrl_model / POLICY_FILE).read_bytes()).hexdigest()
    assert artifact._policy.get_session_options().intra_op_num_threads == 2
    assert load_artifact(exported.cbrl_model)._encoder.get_session_options().intra_op_num_threads == 1


def test_padded_steps_change_nothing_and_empty_rows_are_finite(exported: Exported):
    artifact = load_artifact(exported.cbrl_model)
    rng = np.random.default_rng(0)
    n = 9
    obs = rng.random((n, MAX_STEPS + 1, N_FEATURES)).astype(np.float32)
    steps = transitions(obs, 4 * rng.random((n, MAX_STEPS)))
    mask = prefix_mask(np.array([0, 1, 2, 5, 24, 46, 47, 48, 0]))
    noisy = steps.copy()
    noisy[~mask] = rng.normal(0, 100, (int((~mask).sum()), steps.shape[2]))
    # The graph itself masks: padded values reach it unchanged here (no zeroing by Artifact.posterior).
    raw = artifact._encoder.run(None, {"steps": steps, "mask": mask})
    raw_noisy = artifact._encoder.run(None, {"steps": noisy, "mask": mask})
    for a, b in zip(raw, raw_noisy, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
        assert np.isfinite(a).all()
    np.testing.assert_array_equal(raw[0][0], raw[0][8])  # fully padded rows: the prior, whatever they hold
    # Through the entry point even NaN padding is harmless.
    noisy[~mask] = np.nan
    mean, std = artifact.posterior(noisy, mask)
    np.testing.assert_allclose(mean, raw[0], rtol=0, atol=1e-6)
    np.testing.assert_allclose(std, raw[1], rtol=0, atol=1e-6)


def test_entry_points_check_their_inputs(exported: Exported):
    cbrl, hard = load_artifact(exported.cbrl_model), load_artifact(exported.hard_model)
    steps = np.zeros((2, 3, 2 * N_FEATURES + 1), dtype=np.float32)
    with pytest.raises(ValueError, match="prefix"):
        cbrl.posterior(steps, np.array([[False, True, True], [True, False, False]]))
    with pytest.raises(ValueError, match="steps must be"):
        cbrl.posterior(np.zeros((2, MAX_STEPS + 1, 2 * N_FEATURES + 1)), np.ones((2, MAX_STEPS + 1), bool))
    with pytest.raises(ValueError, match=r"z .* is required"):
        cbrl.act(np.zeros((2, N_FEATURES)))
    with pytest.raises(ValueError, match="pass obs alone"):
        hard.act(np.zeros((2, N_FEATURES)), np.zeros((2, 8)))
    with pytest.raises(ArtifactError, match="no posterior encoder"):
        hard.posterior(steps, np.ones((2, 3), bool))
    assert cbrl.act(np.zeros((0, N_FEATURES)), np.zeros((0, 8))).shape == (0,)


def test_episode_steps_cut_the_trajectory_seen_so_far_and_encode_like_the_padded_one(exported: Exported):
    rng = np.random.default_rng(1)
    obs, ratios = rng.random((3, 6, N_FEATURES)), 4 * rng.random((3, 5))
    steps, mask = episode_steps(obs, ratios)
    assert steps.shape == (3, 5, 2 * N_FEATURES + 1) and steps.dtype == np.float32 and mask.all()
    np.testing.assert_array_equal(steps, transitions(obs, ratios))
    empty_steps, empty_mask = episode_steps(obs[:, :1], ratios[:, :0])
    assert empty_steps.shape == (3, 1, 2 * N_FEATURES + 1) and not empty_mask.any() and not empty_steps.any()
    # Causal attention: the cut trajectory has the posterior of the same one padded to 48 steps.
    cbrl = load_artifact(exported.cbrl_model)
    padded = np.zeros((3, MAX_STEPS, 2 * N_FEATURES + 1), np.float32)
    padded[:, :5] = steps
    for cut, full in zip(cbrl.posterior(steps, mask), cbrl.posterior(padded, prefix_mask(np.full(3, 5))), strict=True):
        np.testing.assert_allclose(cut, full, rtol=0, atol=1e-5)
    for cut, full in zip(
        cbrl.posterior(empty_steps, empty_mask), cbrl.posterior(padded, prefix_mask(np.zeros(3))), strict=True
    ):
        np.testing.assert_allclose(cut, full, rtol=0, atol=1e-6)


def test_the_card_validates_its_own_consistency(exported: Exported):
    raw = json.loads((exported.cbrl_model / CARD_FILE).read_text())
    ModelCard.model_validate(raw)
    for change, message in [
        ({"obs_dim": N_FEATURES + 1}, "obs_dim"),
        ({"transition_dim": 7}, "transition_dim must be 2 \\* obs_dim \\+ 1"),
        ({"latent_dim": 0}, "transition_dim must be null"),
        ({"latent_dim": -1}, "latent_dim"),
        ({"files": {POLICY_FILE: "x"}}, "files must list exactly"),
        ({"max_steps": 96}, "max_steps"),
        ({"opset": 0}, "opset"),
        ({"surprise": 1}, "surprise"),
    ]:
        with pytest.raises(ValidationError, match=message):
            ModelCard.model_validate({**raw, **change})


def test_the_card_carries_the_shield_band_the_model_is_served_with(exported: Exported, tmp_path: Path):
    """``shield``: the fields it sets, the code's defaults for the rest; absent, the defaults."""
    assert load_artifact(exported.cbrl_model).shield_config() == ShieldConfig()
    directory = tmp_path / "model"
    shutil.copytree(exported.cbrl_model, directory)
    rewrite_card(directory, lambda r: r.update(shield={"config": {"wide": 0.6, "warmup_slots": 2}, "chosen_by": "me"}))
    artifact = load_artifact(directory)
    assert artifact.shield_config() == ShieldConfig(wide=0.6, warmup_slots=2)
    assert isinstance(artifact.shield_config().warmup_slots, int) and artifact.card.shield is not None
    assert artifact.card.shield.chosen_by == "me"


def test_a_shield_band_that_sets_trust_is_refused_and_a_trust_of_0_reads_as_absent(exported: Exported, tmp_path: Path):
    """``ShieldConfig`` has no ``trust``: a card whose band sets one above 0 is refused in one line, by the loader and
    by read_card; ``trust: 0`` is the band without it, the same band and the same model version."""
    directory = tmp_path / "model"
    shutil.copytree(exported.cbrl_model, directory)
    band = {"wide": 0.6, "warmup_slots": 2}
    rewrite_card(directory, lambda r: r.update(shield={"config": band, "chosen_by": "me"}))
    without = load_artifact(directory)
    rewrite_card(directory, lambda r: r["shield"]["config"].update(trust=0))
    with_zero = load_artifact(directory)
    assert with_zero.shield_config() == without.shield_config() == ShieldConfig(wide=0.6, warmup_slots=2)
    assert with_zero.card.shield is not None and "trust" not in with_zero.card.shield.config
    assert with_zero.card.served_sha256() == without.card.served_sha256()
    for trust in (0.35, 1e-9, -0.2, "0.1", True):
        rewrite_card(directory, lambda r, trust=trust: r["shield"]["config"].update(trust=trust))
        for read in (load_artifact, read_card):
            with pytest.raises(ArtifactError) as refused:
                read(directory)
            message = str(refused.value)
            assert message == (
                f"{directory / CARD_FILE}: model.json's shield section sets trust ({trust}), which this version does "
                "not support; re-export the model"
            )
            assert "\n" not in message
    raw = json.loads((directory / CARD_FILE).read_text())
    raw["shield"]["config"]["trust"] = 0.35
    with pytest.raises(ValidationError, match="sets trust"):  # a card built in code is refused too
        ModelCard.model_validate(raw)
    assert as_config({"trust": 0.0, "warmup_slots": 2.0}) == ShieldConfig(warmup_slots=2)
    with pytest.raises(ValueError, match=r"sets trust \(0.1\), which this version does not support"):
        as_config({"trust": 0.1})
    with pytest.raises(TypeError):
        ShieldConfig(trust=0.0)  # type: ignore[call-arg]


def test_the_shipped_default_model_keeps_its_model_version():
    """The service names a model by :meth:`ModelCard.served_sha256` and campaigns pin that name: the digest of
    ``models/default`` is the one deployed (the band hashed with ``trust: 0``, :data:`SERVED_BAND_EXTRA`)."""
    card = read_card(ROOT / "models" / "default")
    assert card.served_sha256() == "b480e20b018fd3b612ee056c28c5cddc68b49296bfe4d86d78fb68ac0b8b6f47"
    assert SERVED_BAND_EXTRA == {"trust": 0.0}


def test_a_residual_card_needs_its_reference_controller(exported: Exported):
    """A residual model reads the controller's ratio: a card without the controller's gains cannot be served."""
    raw = json.loads((exported.residual_model / CARD_FILE).read_text())
    card = ModelCard.model_validate(raw)
    assert card.residual and card.features[-1].name == "controller_ratio"
    for missing in ("controller", "traffic_profile"):
        training = {**raw["training"], missing: None}
        with pytest.raises(ValidationError, match="needs its reference controller"):
            ModelCard.model_validate({**raw, "training": training})


GAINS = {"initial_ratio": 1.0, "kp": 0.5, "ki": 0.05, "kd": 0.2, "kp_budget": 1.0, "ki_budget": 0.1}
"""A valid set of controller gains (model.controller.GAIN_FIELDS), for cards edited one gain at a time."""


def _features(edit: Callable[[list[dict[str, Any]]], None]) -> Callable[[dict[str, Any]], None]:
    def apply(raw: dict[str, Any]) -> None:
        edit(raw["features"])

    return apply


def _short_positions(path: Path) -> bytes:
    """The encoder with its positional table cut to 10 steps: it loads, and fails on trajectories past 10."""
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(path)
    cut = 0
    for init in graph.graph.initializer:
        if "position" in init.name:
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init)[:10], init.name))
            cut += 1
    assert cut, "no positional table in the fixture's encoder"
    return graph.SerializeToString()


BAD_ARTIFACTS: dict[str, tuple[Callable[[Path, Exported], None], str]] = {
    "no card": (lambda d, e: (d / CARD_FILE).unlink(), "model.json is missing"),
    "no encoder": (lambda d, e: (d / ENCODER_FILE).unlink(), "encoder.onnx is missing"),
    "card not JSON": (lambda d, e: (d / CARD_FILE).write_text("{not json"), "not valid JSON"),
    "card not an object": (lambda d, e: (d / CARD_FILE).write_text("[1, 2]"), "expected a JSON object"),
    "other format": (lambda d, e: rewrite_card(d, lambda r: r.update(format="onnx-zoo")), "not an rcb model"),
    "newer format version": (
        lambda d, e: rewrite_card(d, lambda r: r.update(format_version=FORMAT_VERSION + 1)),
        f"format version {FORMAT_VERSION + 1} is not supported; this code reads version {FORMAT_VERSION}",
    ),
    "format version not an integer": (  # a list raised TypeError (unhashable) past read_card
        lambda d, e: rewrite_card(d, lambda r: r.update(format_version=[FORMAT_VERSION])),
        "format_version must be an integer",
    ),
    "card nested too deep": (  # RecursionError past read_card
        lambda d, e: (d / CARD_FILE).write_text("[" * 100_000 + "]" * 100_000),
        "not valid JSON \\(RecursionError",
    ),
    "card field missing": (lambda d, e: rewrite_card(d, lambda r: r.pop("opset")), "invalid model card: .*opset"),
    "unknown feature": (
        lambda d, e: rewrite_card(d, _features(lambda f: f[2].update(name="hindsight_oracle"))),
        "features this code does not know: hindsight_oracle",
    ),
    "feature order": (
        lambda d, e: rewrite_card(d, _features(lambda f: f.insert(0, f.pop(1)))),
        "order differs from position 0: model has 'prev_ratio', code 'time'",
    ),
    "clip range": (
        lambda d, e: rewrite_card(d, _features(lambda f: f[5].update(high=20.0))),
        "clip ranges differ from model.features: slot_win_rate",
    ),
    "action range": (
        lambda d, e: rewrite_card(d, lambda r: r.update(action={"low": 0.0, "high": 8.0})),
        "action range",
    ),
    "unknown shield field": (
        lambda d, e: rewrite_card(d, lambda r: r.update(shield={"config": {"trsut": 0.1}})),
        "shield.config: unknown field 'trsut'; the fields are wide, tight",
    ),
    "shield slots not whole": (
        lambda d, e: rewrite_card(d, lambda r: r.update(shield={"config": {"warmup_slots": 2.5}})),
        "warmup_slots counts slots, not 2.5",
    ),
    "shield value not a number": (
        lambda d, e: rewrite_card(d, lambda r: r.update(shield={"config": {"wide": "0.7"}})),
        "shield.config.wide",
    ),
    "invalid shield band": (
        lambda d, e: rewrite_card(d, lambda r: r.update(shield={"config": {"tight": -0.2}})),
        "shield.config: need 0 < tight <= wide",
    ),
    "shield band with a trust": (
        lambda d, e: rewrite_card(d, lambda r: r.update(shield={"config": {"trust": 0.1}})),
        "model.json's shield section sets trust \\(0.1\\), which this version does not support; re-export the model",
    ),
    "controller gain out of range": (
        lambda d, e: rewrite_card(d, lambda r: r["training"].update(controller={**GAINS, "initial_ratio": 10.0})),
        "training.controller / traffic_profile: initial_ratio must be in",
    ),
    "controller gain missing": (
        lambda d, e: rewrite_card(d, lambda r: r["training"].update(controller={"initial_ratio": 1.0})),
        "the gains lack kp",
    ),
    "controller gain not finite": (
        lambda d, e: rewrite_card(d, lambda r: r["training"].update(controller={**GAINS, "kp": float("nan")})),
        "must be finite numbers",
    ),
    "shield value too large for a float": (  # JSON integers have no size limit; numpy's isfinite raised TypeError
        lambda d, e: rewrite_card(d, lambda r: r.update(shield={"config": {"wide": 10**400}})),
        "shield.config: wide must be a finite number",
    ),
    "shield warmup past the day": (  # a shield that never acts
        lambda d, e: rewrite_card(d, lambda r: r.update(shield={"config": {"warmup_slots": 10**25}})),
        "shield.config: need pace_alarm > 0 and 0 <= warmup_slots <= 48",
    ),
    "traffic profile of counts": (  # per-slot counts, not shares: every campaign would read as underspending
        lambda d, e: rewrite_card(d, lambda r: r["training"].update(traffic_profile=[1.0] * 48)),
        "summing to 1, not 48",
    ),
    "traffic profile length": (
        lambda d, e: rewrite_card(d, lambda r: r["training"].update(traffic_profile=[1 / 47] * 47)),
        "traffic_profile must hold 48 finite non-negative shares",
    ),
    "corrupted bytes": (
        lambda d, e: (d / POLICY_FILE).write_bytes((d / POLICY_FILE).read_bytes()[:-10]),
        "policy.onnx: corrupted or replaced",
    ),
    "not ONNX": (lambda d, e: replace_file(d, POLICY_FILE, b"\x00garbage"), "onnxruntime cannot load it"),
    "graph without z": (
        lambda d, e: replace_file(d, POLICY_FILE, (e.hard_model / POLICY_FILE).read_bytes()),
        "policy.onnx: inputs are \\[obs tensor\\(float\\) \\['batch', 8\\]\\]; the contract is",
    ),
    "encoder failing on long trajectories": (  # declared I/O right, body wrong: every decision fell back
        lambda d, e: replace_file(d, ENCODER_FILE, _short_positions(d / ENCODER_FILE)),
        "the model fails on inputs the contract allows",
    ),
    "latent size": (
        lambda d, e: rewrite_card(d, lambda r: r.update(latent_dim=4)),
        "input 'z' is tensor\\(float\\) \\['batch', 8\\]; the contract is tensor\\(float\\) \\['batch', 4\\]",
    ),
}


@pytest.mark.parametrize("case", list(BAD_ARTIFACTS))
def test_a_bad_artifact_is_refused_with_a_message_naming_the_problem(exported: Exported, tmp_path: Path, case: str):
    directory = tmp_path / "model"
    shutil.copytree(exported.cbrl_model, directory)
    load_artifact(directory)  # the copy is good
    damage, message = BAD_ARTIFACTS[case]
    damage(directory, exported)
    with pytest.raises(ArtifactError, match=message):
        load_artifact(directory)


def test_an_onnxruntime_error_without_a_message_is_still_an_artifact_error(
    exported: Exported, monkeypatch: pytest.MonkeyPatch
):
    import onnxruntime

    def fail(*args: object, **kwargs: object) -> None:
        raise MemoryError()  # no message: the error's first line was an IndexError

    monkeypatch.setattr(onnxruntime, "InferenceSession", fail)
    with pytest.raises(ArtifactError, match="onnxruntime cannot load it \\(MemoryError\\)"):
        load_artifact(exported.cbrl_model)


def test_what_is_hashed_is_what_is_served_while_an_export_replaces_the_directory(
    exported: Exported, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """rcb export --force swaps the directory while a reload reads it: before, each file was hashed from one read
    and opened by onnxruntime from a second, and the version read the card a third time, so a reload could serve
    the old card with the new graphs under the new card's version."""
    import model.artifact.loader as loader_module

    directory = tmp_path / "model"
    shutil.copytree(exported.cbrl_model, directory)
    old = load_artifact(directory)
    card_sha = hashlib.sha256((directory / CARD_FILE).read_bytes()).hexdigest()
    obs = np.random.default_rng(0).random((3, old.card.obs_dim), dtype=np.float32)
    z = np.zeros((3, old.card.latent_dim), np.float32)
    expected = old.act(obs, z)
    other = tmp_path / "other"
    shutil.copytree(exported.cbrl_model, other)
    rng = np.random.default_rng(1)
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(other / POLICY_FILE)
    for init in graph.graph.initializer:  # another model of the same shapes: a retrained one
        values = numpy_helper.to_array(init)
        if values.dtype == np.float32 and values.size > 1:
            init.CopyFrom(numpy_helper.from_array(rng.normal(size=values.shape).astype(np.float32), init.name))
    onnx.save(graph, other / POLICY_FILE)
    session = loader_module._session
    swapped: list[bool] = []

    def swap_then_open(path: Path, graph_bytes: bytes, threads: int) -> object:
        if not swapped:  # the export lands between the hashing and the opening
            for name in (POLICY_FILE, CARD_FILE):
                shutil.copyfile(other / name, directory / name)
            swapped.append(True)
        return session(path, graph_bytes, threads)

    monkeypatch.setattr(loader_module, "_session", swap_then_open)
    loaded = load_artifact(directory)
    assert swapped and loaded.card_sha256 == card_sha
    np.testing.assert_array_equal(loaded.act(obs, z), expected)


@pytest.mark.skipif(not Path("/proc/self/mem").exists(), reason="needs /proc/self/mem, a file whose read fails")
def test_a_model_file_that_cannot_be_read_is_an_artifact_error(exported: Exported, tmp_path: Path):
    """An I/O or permission error on a model file is a model that cannot load (the service falls back and a reload
    answers 422), not an OSError that stops the service starting."""
    directory = tmp_path / "model"
    shutil.copytree(exported.cbrl_model, directory)
    (directory / ENCODER_FILE).unlink()
    (directory / ENCODER_FILE).symlink_to("/proc/self/mem")  # exists, is a file, and reading it fails (EIO)
    with pytest.raises(ArtifactError, match="cannot read the model"):
        load_artifact(directory)


@pytest.mark.skipif(not Path("/proc/self/mem").exists(), reason="needs /proc/self/mem, a file whose read fails")
def test_a_card_that_cannot_be_read_is_an_artifact_error_for_read_card_too(exported: Exported, tmp_path: Path):
    """rcb serve reads the card alone to warn and start in fallback mode: an OSError there was a traceback."""
    directory = tmp_path / "model"
    shutil.copytree(exported.cbrl_model, directory)
    (directory / CARD_FILE).unlink()
    (directory / CARD_FILE).symlink_to("/proc/self/mem")
    with pytest.raises(ArtifactError, match="cannot read it"):
        read_card(directory)


def test_a_missing_directory_is_refused(tmp_path: Path):
    with pytest.raises(ArtifactError, match="no such model directory"):
        load_artifact(tmp_path / "absent")
    with pytest.raises(ArtifactError, match=r"model\.json is missing"):
        read_card(tmp_path)


def test_the_shipped_default_model_loads_and_bids():
    """``models/default`` must match this code (features, format); after changing either, rebuild it."""
    hint = "rebuild it with: bash research/scripts/build_default_model.sh"
    try:
        artifact = load_artifact(ROOT / "models" / "default")
    except ArtifactError as exc:
        pytest.fail(f"{exc}; {hint}")
    assert artifact.bayesian, hint
    width = artifact.card.obs_dim  # 9 for a residual model (the controller's ratio last), else 8
    assert width == (N_FEATURES + 1 if artifact.residual else N_FEATURES), hint
    steps, mask = episode_steps(np.zeros((3, 6, width)), np.ones((3, 5)))
    ratios = artifact.decide(np.zeros((3, width)), steps, mask, np.zeros((3, artifact.latent_dim)))
    assert ratios.shape == (3,) and np.all((ratios >= 0) & (ratios <= 4))


def test_a_field_a_later_version_adds_with_a_default_keeps_every_model_version(exported: Exported):
    """The served digest dumped every field, defaults included: a code change adding an optional card field would
    have renamed every deployed model (and sent campaigns pinned to it to 409) though no decision changed."""
    from pydantic import Field

    class LaterCard(ModelCard):  # the same card read by a later version of the code, one optional field more
        notes: str = Field(default="")

    text = (exported.cbrl_model / CARD_FILE).read_text()
    card, later = ModelCard.model_validate_json(text), LaterCard.model_validate_json(text)
    assert later.served_sha256() == card.served_sha256()
    assert later.model_copy(update={"notes": "x"}).served_sha256() != card.served_sha256()  # set: part of it
