"""`rcb export`: a training run's best actor (and CBRL's posterior encoder) as a model artifact (SPEC 5).

The policy graph is traced from the run's own module through a thin wrapper (:class:`PolicyGraph` around
``actor.act``), so whatever the policy network becomes, export follows. The posterior encoder's graph is
written node by node from its weights (:mod:`training.export.encoder_graph`): onnxruntime's fused causal attention
instead of the ~40 nodes per block that tracing gives, 1.3x faster at a 10,000-campaign slot boundary
(BENCHMARKS.md). Dims are read from the modules and ``model.features``, never restated here. The I/O
contract and the card are :mod:`model.artifact`'s.

Export mode (policy): torch's default (dynamo) exporter, ``torch.export`` then ONNX at opset :data:`OPSET`,
with a dynamic batch axis. The encoder graph: opset :data:`OPSET` plus onnxruntime's ``com.microsoft``
contrib operators, a dynamic batch axis and a trajectory length 1..48.

Safety, in order: the artifact is built in a temporary directory beside ``out``; it is loaded back
through :func:`model.artifact.load_artifact` (the service's own checks) and its outputs compared with
torch on random batches of sizes 1 to 300 and lengths 1 to 48 (:func:`check_parity`); only then does it
replace ``out`` with a rename. A crash at any point leaves either the previous artifact or none.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import logging
import pickle
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from pydantic import ValidationError
from torch import nn

from model.artifact import (
    BATCH,
    CARD_FILE,
    ENCODER_FILE,
    FORMAT_VERSION,
    LENGTH,
    MAX_STEPS,
    POLICY_FILE,
    SCENARIOS_FILE,
    ActionRange,
    Artifact,
    ArtifactError,
    EvaluationInfo,
    GraphSpec,
    ModelCard,
    PlannerInfo,
    ShieldInfo,
    TrainingInfo,
    code_features,
    file_sha256,
    load_artifact,
    policy_spec,
    read_card,
)
from model.contract import Setting
from model.controller import GAIN_FIELDS, ControllerGains
from model.features import feature_set
from model.features import obs_dim as features_width
from model.planner import VERSION as PLANNER_VERSION
from model.planner import calibrated_alerts, save_scenarios
from model.trajectory import prefix_mask, transitions
from training.bidders.onnx import OnnxBidder
from training.export.encoder_graph import encoder_graph
from training.files import atomic_write_text, built_beside
from training.rl.encoder import PosteriorEncoder
from training.rl.ensemble import EnsembleEncoder
from training.rl.networks import TanhGaussianPolicy
from training.rl.runs import (
    RUN_FILE,
    best_bidder,
    load_best,
    load_ensemble_bidder,
    pooled_fingerprint,
    reference_controller,
)
from training.rl.sac import reference_of, training_band

if TYPE_CHECKING:
    from training.market.dataset import Market

OPSET = 20
"""ONNX opset of both graphs (onnxruntime >= 1.17 runs them); recorded in model.json."""
POLICY_ATOL = 1e-5
ENCODER_ATOL = 1e-4
"""Largest |torch - onnxruntime| export accepts, on the ratio and on the posterior's mean and std."""
PARITY_BATCHES = (1, 7, 300)
PARITY_LENGTHS = (1, 2, 24, 47, 48)

Progress = Callable[[str], None]


class ExportError(ValueError):
    """A run that cannot be exported, or an export that does not reproduce torch."""


class PolicyGraph(nn.Module):
    """``(obs, z) -> actor.act([obs, z])`` (or ``obs -> actor.act(obs)`` without a latent): the deterministic ratio."""

    def __init__(self, actor: TanhGaussianPolicy):
        super().__init__()
        self.actor = actor

    def forward(self, obs: torch.Tensor, z: torch.Tensor | None = None) -> torch.Tensor:
        return self.actor.act(obs if z is None else torch.cat([obs, z], dim=-1))


def _strip_debug_metadata(path: Path) -> None:
    """Drop the per-node stack traces the exporter attaches: they name build-machine paths and triple the file."""
    import onnx

    model = onnx.load(str(path))
    for node in model.graph.node:
        del node.metadata_props[:]
    for value in [*model.graph.value_info, *model.graph.initializer]:
        del value.metadata_props[:]
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def _export_graph(module: nn.Module, example: tuple[torch.Tensor, ...], spec: GraphSpec, path: Path) -> None:
    """``torch.onnx.export`` with the contract's names and dynamic axes; the exporter's chatter is kept off stdout."""
    batch = torch.export.Dim(BATCH, min=1)
    length = torch.export.Dim(LENGTH, min=1, max=MAX_STEPS)
    dynamic = {
        s.name: {axis: batch if d == BATCH else length for axis, d in enumerate(s.shape) if isinstance(d, str)}
        for s in spec.inputs
    }
    chatter = io.StringIO()
    onnx_logger = logging.getLogger("torch.onnx")
    level = onnx_logger.level
    onnx_logger.setLevel(logging.ERROR)  # "torchvision is not installed" and similar
    try:
        with (
            warnings.catch_warnings(),
            contextlib.redirect_stdout(chatter),
            torch.no_grad(),
        ):
            warnings.simplefilter("ignore")
            torch.onnx.export(
                module,
                example,
                str(path),
                input_names=spec.input_names,
                output_names=spec.output_names,
                dynamic_shapes=dynamic,
                opset_version=OPSET,
                dynamo=True,
                external_data=False,
                verbose=False,
            )
    except Exception as exc:
        raise ExportError(f"torch.onnx.export failed for {path.name}: {exc}\n{chatter.getvalue()[-2000:]}") from exc
    finally:
        onnx_logger.setLevel(level)
    _strip_debug_metadata(path)


def _write_encoder_graph(encoder: PosteriorEncoder | EnsembleEncoder, path: Path) -> None:
    """:func:`training.export.encoder_graph.encoder_graph`, checked by onnx and written to ``path``."""
    import onnx

    try:
        model = encoder_graph(encoder)
        onnx.checker.check_model(model)
    except (ValueError, TypeError, onnx.checker.ValidationError) as exc:
        raise ExportError(f"cannot write {path.name}: {exc}") from exc
    onnx.save(model, str(path))


def random_observations(rng: np.random.Generator, shape: tuple[int, ...], residual: bool = False) -> np.ndarray:
    """Uniform draws over each feature's clip range (of the residual feature set with ``residual``), float32."""
    low, high = _clip_ranges(residual)
    return (low + (high - low) * rng.random((*shape, len(low)))).astype(np.float32)


def _clip_ranges(residual: bool) -> tuple[np.ndarray, np.ndarray]:
    """Each feature's clip range, low and high, float32 (of the residual feature set with ``residual``)."""
    features = feature_set(residual)
    return (
        np.array([f.low for f in features], dtype=np.float32),
        np.array([f.high for f in features], dtype=np.float32),
    )


def edge_observations(rng: np.random.Generator, residual: bool = False) -> np.ndarray:
    """Random rows with one feature each at the low and then the high end of its clip range, and one row with all
    at their lows: the branches uniform draws miss (``prev_ratio`` 0 is the first slot of every episode, where a
    relative policy bids its ``start_ratio``; a ``controller_ratio`` of 0 likewise), float32."""
    low, high = _clip_ranges(residual)
    rows = random_observations(rng, (2 * len(low) + 1,), residual)
    for j in range(len(low)):
        rows[2 * j, j], rows[2 * j + 1, j] = low[j], high[j]
    rows[-1] = low
    return rows


def _worse(so_far: float, gaps: np.ndarray) -> float:
    """The larger of ``so_far`` and ``gaps``' largest, NaN if either is (``max`` keeps its first argument against a
    NaN, so a graph answering NaN on some rows would pass)."""
    largest = float(np.max(gaps))
    if not (so_far <= largest or largest <= so_far):  # one of them is NaN
        return float("nan")
    return max(so_far, largest)


def check_parity(
    artifact: Artifact, actor: TanhGaussianPolicy, encoder: PosteriorEncoder | None, seed: int = 0
) -> dict[str, float]:
    """Largest |torch - onnxruntime| over random batches; raises :class:`ExportError` past the tolerances.

    Batches of 1, 7 and 300 rows (the 300 start with :func:`edge_observations`); trajectories of lengths 1 to 48
    whose rows hold 0 (empty), 1, L-1 and L valid steps among random ones.
    """
    rng = np.random.default_rng(seed)
    latent = artifact.latent_dim
    worst = {"ratio": 0.0, "mean": 0.0, "std": 0.0}
    with torch.no_grad():
        for n in PARITY_BATCHES:
            obs = random_observations(rng, (n,), artifact.residual)
            edges = edge_observations(rng, artifact.residual)
            if n >= len(edges):
                obs[: len(edges)] = edges
            z = rng.standard_normal((n, latent)).astype(np.float32) if latent else None
            torch_input = torch.as_tensor(obs if z is None else np.concatenate([obs, z], axis=1))
            expected = actor.act(torch_input).numpy()
            worst["ratio"] = _worse(worst["ratio"], np.abs(artifact.act(obs, z) - expected))
            if encoder is None:
                continue
            for length in PARITY_LENGTHS:
                steps = transitions(
                    random_observations(rng, (n, length + 1), artifact.residual), 4.0 * rng.random((n, length))
                )
                lengths = rng.integers(0, length + 1, n)
                lengths[: min(n, 4)] = [0, 1, length - 1, length][: min(n, 4)]
                mask = prefix_mask(lengths, length)
                padded = np.where(mask[..., None], steps, 0.0).astype(np.float32)
                mean, std = encoder(torch.as_tensor(padded), torch.as_tensor(mask))
                got_mean, got_std = artifact.posterior(steps, mask)
                if not (np.isfinite(got_mean).all() and np.isfinite(got_std).all()):
                    raise ExportError(f"{ENCODER_FILE}: non-finite posterior for batch {n}, length {length}")
                worst["mean"] = _worse(worst["mean"], np.abs(got_mean - mean.numpy()))
                worst["std"] = _worse(worst["std"], np.abs(got_std - std.numpy()))
    if not latent:
        del worst["mean"], worst["std"]
    limits = {"ratio": POLICY_ATOL, "mean": ENCODER_ATOL, "std": ENCODER_ATOL}
    broken = {k: v for k, v in worst.items() if not v <= limits[k]}
    if broken:
        detail = ", ".join(f"{k} off by {v:.2e} (tolerance {limits[k]:.0e})" for k, v in broken.items())
        raise ExportError(f"the ONNX graphs do not reproduce torch: {detail}")
    return worst


def check_destination(out: Path, force: bool) -> None:
    here = Path.cwd().resolve()
    if out.resolve() == here or out.resolve() in here.parents:  # the swap would move the shell's directory away
        raise ExportError(f"--out {out} is the current directory or holds it; name a model directory, e.g. ./model")
    if out.exists() and not out.is_dir():
        raise ExportError(f"{out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()):
        if not (out / CARD_FILE).exists():
            raise ExportError(f"{out} is a non-empty directory that holds no model artifact; choose another --out")
        if not force:
            raise ExportError(f"{out} already holds a model artifact; pass --force to overwrite it")


@dataclass(frozen=True)
class Provenance:
    """What the card says about where the weights come from (everything but dims, files and parity)."""

    algorithm: str
    setting: str
    source_run: str
    training: TrainingInfo
    evaluation: EvaluationInfo


def refuse_plan_reference(run: Path, saved: dict[str, Any]) -> None:
    """A run that corrects the planner (``rcb train --reference plan``) is not exported: a model card cannot carry a
    planner reference yet (checked before its actor is loaded, which would rebuild the planner's scenarios)."""
    if ((saved.get("config") or {}).get("controller") or {}).get("kind") == "plan":
        raise ExportError(
            f"{run} corrects the planner (rcb train --reference plan): the model card cannot carry a planner"
            " reference yet; export a run that corrects the PID"
        )


def export_run(
    run: Path, out: Path, force: bool = False, progress: Progress | None = None, intra_op_threads: int = 1
) -> ModelCard:
    """Export ``run``'s best actor (and encoder) into the model directory ``out``; return its card."""
    run, out = Path(run), Path(out)
    check_destination(out, force)
    try:  # RunError (a ValueError, passed on) when RUN is not a finished run at all
        saved, body = load_best(run)
        refuse_plan_reference(run, saved)
        bidder = best_bidder(saved)
    except (OSError, RuntimeError, EOFError, KeyError, pickle.UnpicklingError) as exc:
        raise ExportError(f"{run}: cannot load its best actor from best.pt ({exc})") from None
    try:
        provenance = run_provenance(run, body, saved)
    except (KeyError, ValidationError) as exc:
        raise ExportError(f"{run / RUN_FILE}: cannot describe the run in a model card ({exc})") from None
    return export_modules(bidder.policy, bidder.encoder, out, provenance, force, progress, intra_op_threads)


def export_ensemble(
    runs: list[Path], out: Path, force: bool = False, progress: Progress | None = None, intra_op_threads: int = 1
) -> ModelCard:
    """Export ``runs``' best actors (and encoders) as one model (:mod:`training.rl.ensemble`): the median
    of their log-ratios, ``K x`` the latent width; one ordinary artifact the service serves unchanged."""
    runs = [Path(r) for r in runs]
    check_destination(Path(out), force)
    try:  # RunError (a ValueError, passed on) when a run is not finished or the runs do not match
        loaded = [load_best(run) for run in runs]
        for run, (saved, _) in zip(runs, loaded, strict=True):
            refuse_plan_reference(run, saved)
        bidder, bodies = load_ensemble_bidder(runs, loaded)
    except (OSError, RuntimeError, EOFError, KeyError, pickle.UnpicklingError) as exc:
        raise ExportError(f"{', '.join(map(str, runs))}: cannot load the best actors ({exc})") from None
    saved, body = loaded[0]
    try:
        first = run_provenance(runs[0], body, saved)
    except (KeyError, ValidationError) as exc:
        raise ExportError(f"{runs[0] / RUN_FILE}: cannot describe the run in a model card ({exc})") from None
    scores = [b.get("best_validation_score") for b in bodies]
    folds = [int(b["config"].get("validation_fold", 0)) for b in bodies]  # member 0's config alone would hide them
    sources = [b.get("initialized_from") for b in bodies]  # each member's own, where fine-tuned
    training = first.training.model_copy(
        update={
            "members": [str(r) for r in runs],
            "initialized_from": {"members": sources} if any(sources) else None,
            "config": {**first.training.config, "ensemble": len(runs), "member_validation_folds": folds},
        }
    )
    provenance = Provenance(
        algorithm=first.algorithm,
        setting=first.setting,
        source_run=",".join(str(r) for r in runs),
        training=training,
        evaluation=EvaluationInfo(
            metric="members' own best validation scores (held-out train days); the ensemble's: evaluation.measured",
            best_validation_score=None,
            member_validation_scores=scores,
        ),
    )
    actor, encoder = bidder.policy, bidder.encoder
    return export_modules(actor, encoder, out, provenance, force, progress, intra_op_threads)  # type: ignore[arg-type]


def export_modules(
    actor: TanhGaussianPolicy,
    encoder: PosteriorEncoder | None,
    out: Path,
    provenance: Provenance,
    force: bool = False,
    progress: Progress | None = None,
    intra_op_threads: int = 1,
) -> ModelCard:
    """Write, reload and parity-check the artifact of ``actor`` (+ ``encoder``), then move it to ``out``."""
    out = Path(out)
    check_destination(out, force)
    actor.eval()
    if encoder is not None:
        encoder.eval()
    residual = bool(actor.residual)
    obs_dim = features_width(residual)
    latent = int(encoder.latent_dim) if encoder is not None else 0
    try:
        with torch.no_grad():
            actor.act(torch.zeros(1, obs_dim + latent))
    except RuntimeError as exc:
        raise ExportError(f"the actor does not take {obs_dim} features + {latent} latent inputs ({exc})") from None
    transition_dim = encoder.embed.in_features if encoder is not None else None

    with built_beside(out) as building:
        if progress:
            progress(POLICY_FILE)
        example_obs = torch.zeros(3, obs_dim)
        policy_example = (example_obs,) if latent == 0 else (example_obs, torch.zeros(3, latent))
        _export_graph(PolicyGraph(actor), policy_example, policy_spec(obs_dim, latent), building / POLICY_FILE)
        files = {POLICY_FILE: file_sha256(building / POLICY_FILE)}
        if encoder is not None:
            assert transition_dim is not None
            if progress:
                progress(ENCODER_FILE)
            _write_encoder_graph(encoder, building / ENCODER_FILE)
            files[ENCODER_FILE] = file_sha256(building / ENCODER_FILE)
        card = _card(provenance, residual, latent, transition_dim, files)
        atomic_write_text(building / CARD_FILE, card.to_json())
        if progress:
            progress("parity")
        try:
            artifact = load_artifact(building, intra_op_threads=intra_op_threads)
        except ArtifactError as exc:
            raise ExportError(f"the exported artifact does not load: {exc}") from None
        parity = check_parity(artifact, actor, encoder)
        card = card.model_copy(update={"parity": parity})
        atomic_write_text(building / CARD_FILE, card.to_json())
    return card


def run_provenance(run: Path, body: dict[str, Any], saved: dict[str, Any]) -> Provenance:
    """From ``run.json`` and ``best.pt``: only figures the run recorded, nothing recomputed."""
    history = body.get("history", [])
    epoch = saved.get("epoch")
    at_best: dict[str, Any] = next((h for h in history if h.get("epoch") == epoch), {})
    best_score = body.get("best_validation_score")
    if best_score is None and at_best:
        best_score = at_best.get("validation_score")
    config = body.get("config", saved.get("config", {}))
    reference = reference_of(bool(config.get("residual")), config.get("controller"))
    assert reference is None or isinstance(reference, ControllerGains)  # refuse_plan_reference ran before
    if reference is not None:  # the reference the policy was trained around, exactly (it reads its ratio)
        profile: tuple[float, ...] | None = reference.traffic_profile
        controller: dict[str, float] | None = reference.tuned()
    else:
        profile, controller = _train_days_reference(body)
    jsonable = lambda x: json.loads(json.dumps(x, default=str))  # noqa: E731 - tuples, paths -> JSON types
    return Provenance(
        algorithm=str(config.get("algo", "unknown")),
        setting=body["setting"],
        source_run=str(run),
        training=TrainingInfo(
            run=str(run),
            market=str(body.get("market", "")),
            pooled_markets=[str(m) for m in body.get("pooled_markets", [])],
            data_fingerprint=body["data_fingerprint"],
            epoch=None if epoch is None else int(epoch),
            epochs=len(history),
            config=jsonable(config),
            traffic_profile=profile,
            controller=controller,
            initialized_from=body.get("initialized_from"),
        ),
        evaluation=EvaluationInfo(
            best_validation_score=best_score,
            train_score_at_best=at_best.get("train_score"),
            history=jsonable(history),
        ),
    )


def _card(
    provenance: Provenance, residual: bool, latent: int, transition_dim: int | None, files: dict[str, str]
) -> ModelCard:
    import onnx
    import onnxruntime

    return ModelCard(
        format_version=FORMAT_VERSION,
        algorithm=provenance.algorithm,
        setting=Setting(provenance.setting),
        features=code_features(residual),
        obs_dim=features_width(residual),
        latent_dim=latent,
        transition_dim=transition_dim,
        action=ActionRange(),
        opset=OPSET,
        created=dt.datetime.now(dt.UTC).replace(microsecond=0),
        source_run=provenance.source_run,
        files=files,
        training=provenance.training,
        evaluation=provenance.evaluation,
        shield=trained_shield(provenance.training.config),
        producer={"torch": torch.__version__, "onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__},
    )


TRAINED_BEHIND = "training: the band the run trained behind (train_shielded)"
"""The card's ``shield.chosen_by`` for a model trained behind the shield."""


def trained_shield(config: dict[str, Any]) -> ShieldInfo | None:
    """The card's ``shield`` section for a run trained behind the shield: every field of the band it trained behind
    (:func:`training.rl.sac.training_band`), so the service and ``shield:onnx:`` run that band whatever the code's
    defaults become; None for a run trained alone (the defaults)."""
    band = training_band(config)
    return None if band is None else ShieldInfo(config=asdict(band), chosen_by=TRAINED_BEHIND)


def record_figures(model_dir: Path, measured: dict[str, Any]) -> ModelCard:
    """Write figures measured on an exported model into its card (``evaluation.measured``); the ONNX files and
    their hashes are untouched. Returns the new card."""
    card = read_card(Path(model_dir))
    evaluation = card.evaluation.model_copy(update={"measured": measured})
    updated = card.model_copy(update={"evaluation": evaluation})
    ModelCard.model_validate_json(updated.to_json())  # what is written must read back
    atomic_write_text(Path(model_dir) / CARD_FILE, updated.to_json())
    return updated


def _train_days_reference(body: dict[str, Any]) -> tuple[tuple[float, ...] | None, dict[str, float] | None]:
    """The shield's and the fallback controller's reference for a non-residual run: the one a residual run trains
    around (:func:`training.rl.runs.reference_controller`, its market's train days). ``(None, None)`` when it cannot
    be had here (the run's market is not on this machine, has no train days, or its train days are not the ones the
    run trained on: a market regenerated at the same path would give another market's PID)."""
    from training.market.dataset import Market, MarketError

    try:
        paths = [Path(str(p)) for p in body.get("pooled_markets") or [body.get("market", "")]]
        markets = [Market.open(path) for path in paths]
        if not markets[0].split("train"):
            return None, None
        if pooled_fingerprint([m.split_fingerprint("train") for m in markets]) != body.get("data_fingerprint"):
            return None, None
        reference = reference_controller(markets[0], Setting(body["setting"]))
    except (MarketError, OSError, ValueError, KeyError):
        return None, None
    profile = tuple(float(x) for x in reference.pop("traffic_profile"))
    return profile, reference


def check_planner_export(market_dir: Path, out: Path, force: bool = False) -> Market:
    """The refusals :func:`export_planner` makes before any work, for a caller to make before its progress bar:
    ``out`` taken (without ``force``), ``market_dir`` not a market or without train days. Returns the market."""
    from training.market.dataset import Market

    check_destination(Path(out), force)
    market = Market.open(Path(market_dir))
    if not market.split("train"):
        raise ExportError(f"{market_dir} has no train days: the planner's scenarios are the train days")
    return market


def export_planner(
    market_dir: Path, setting: Setting, out: Path, force: bool = False, progress: Progress | None = None
) -> ModelCard:
    """The planner (:mod:`model.planner`) on ``market_dir``'s train days as a model directory ``out``: its scenarios
    (``scenarios.npz``), the parameters ``rcb evaluate`` tunes for ``plan`` (the same cache, so ``onnx:OUT`` plays
    the ``plan`` rows) and the market's PID as the shield's and the fallback's reference (the gains
    ``shield:plan`` plays). Checked before it replaces ``out``: loaded back, and its ratios equal to the tuned
    planner's over the first train days played (``parity.ratio``)."""
    from training.bidders import planner as planner_bidder
    from training.bidders.base import play
    from training.evaluation.evaluate import split_days, tuned_baseline

    market = check_planner_export(market_dir, out, force)
    if progress:
        progress("tuning")
    _, train = split_days(market, "train", setting)
    tuned, record = tuned_baseline(market, "plan", setting, train)
    pid, _ = tuned_baseline(market, "pid", setting, train)
    assert isinstance(tuned, planner_bidder.Planner)
    params, gains = tuned.params(), pid.params()
    profile = tuple(float(x) for x in gains.pop("traffic_profile"))
    days = train()
    if progress:
        progress("alerts")
    train_edge, train_misfit = planner_bidder.train_depth(tuned, days)
    edge_alert, misfit_alert = calibrated_alerts(train_edge, train_misfit)
    with built_beside(out) as building:
        if progress:
            progress(SCENARIOS_FILE)
        save_scenarios(tuned.scenarios, building / SCENARIOS_FILE)
        card = ModelCard(
            format_version=FORMAT_VERSION,
            kind="planner",
            algorithm="plan",
            setting=Setting(setting),
            features=(),
            obs_dim=0,
            latent_dim=0,
            created=dt.datetime.now(dt.UTC).replace(microsecond=0),
            source_run=f"plan:{market.root}",
            files={SCENARIOS_FILE: file_sha256(building / SCENARIOS_FILE)},
            training=TrainingInfo(
                run=f"plan:{market.root}",
                market=str(market.root),
                data_fingerprint=market.split_fingerprint("train"),
                epochs=0,
                config={
                    "tuner_version": planner_bidder.TUNER_VERSION,
                    **params,
                    "train_edge_max": float(train_edge.max(initial=0.0)),
                    "train_misfit_max": float(train_misfit.max(initial=0.0)),
                },
                traffic_profile=profile,
                controller={k: float(gains[k]) for k in GAIN_FIELDS},
            ),
            evaluation=EvaluationInfo(
                metric="planner: train_score = mean over train days, each played without its own scenario, of "
                "D / D* x 1[feasible]; test and OOD figures: evaluation.measured"
            ),
            planner=PlannerInfo(
                version=PLANNER_VERSION,
                margin=float(params["margin"]),
                cost_sd=float(params["cost_sd"]),
                noise_aware=bool(params.get("noise_aware", False)),
                train_days=tuned.scenarios.days,
                train_score=float(record["train_score"]),
                edge_alert=edge_alert,
                misfit_alert=misfit_alert,
            ),
            producer={"numpy": np.__version__},
        )
        atomic_write_text(building / CARD_FILE, card.to_json())
        if progress:
            progress("parity")
        try:
            artifact = load_artifact(building)
        except ArtifactError as exc:
            raise ExportError(f"the exported planner does not load: {exc}") from None
        assert artifact.planner is not None
        shown = days.subset(np.arange(min(PLANNER_PARITY_DAYS, len(days))))
        ratios = []
        for bidder in (tuned, OnnxBidder(artifact)):
            played = play(bidder, shown.indexes(), shown.episode_days(1), shown.registration(1), 0)
            ratios.append(played.history.ratios)
        worst = float(np.max(np.abs(ratios[0] - ratios[1])))
        if not worst == 0:  # NaN included
            raise ExportError(f"the exported planner does not reproduce the tuned one: ratios off by {worst:.2e}")
        card = card.model_copy(update={"parity": {"ratio": worst}})
        atomic_write_text(building / CARD_FILE, card.to_json())
    return card


PLANNER_PARITY_DAYS = 3
"""Train days the exported planner replays against the tuned one before it replaces the destination."""
