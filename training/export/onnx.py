"""`rcb export`: a training run's best actor (and CBRL's posterior encoder) as a model artifact.

The policy graph is traced from the run's own module through a thin wrapper (:class:`PolicyGraph` around
``actor.act``), so whatever the policy network becomes, export follows. The posterior encoder's graph is
written node by node from its weights (:mod:`training.export.encoder_graph`): onnxruntime's fused causal attention
instead of the ~40 nodes per block that tracing gives, 1.3x faster at a 10,000-campaign slot boundary
(BENCHMARKS.md). Dims are read from the modules and ``model.features``, never restated here. The I/O
contract and the card's schema are :mod:`model.artifact`'s (docs/model-artifact.md); what the card says,
:mod:`training.export.card`'s.

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
import io
import logging
import pickle
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import torch
from pydantic import ValidationError
from torch import nn

from model.artifact import (
    BATCH,
    CARD_FILE,
    ENCODER_FILE,
    LENGTH,
    MAX_STEPS,
    POLICY_FILE,
    Artifact,
    ArtifactError,
    EvaluationInfo,
    GraphSpec,
    ModelCard,
    file_sha256,
    load_artifact,
    policy_spec,
)
from model.features import feature_set
from model.features import obs_dim as features_width
from model.trajectory import prefix_mask, transitions
from training.export.card import Provenance, policy_card, run_provenance
from training.export.destination import ExportError, check_destination
from training.export.encoder_graph import OPSET, encoder_graph
from training.files import atomic_write_text, built_beside
from training.rl.encoder import PosteriorEncoder
from training.rl.ensemble import EnsembleEncoder
from training.rl.networks import TanhGaussianPolicy
from training.rl.runs import best_bidder, load_best, load_ensemble_bidder

POLICY_ATOL = 1e-5
ENCODER_ATOL = 1e-4
"""Largest |torch - onnxruntime| export accepts, on the ratio and on the posterior's mean and std."""
PARITY_BATCHES = (1, 7, 300)
PARITY_LENGTHS = (1, 2, 24, 47, 48)

Progress = Callable[[str], None]
RUN_FILE = "run.json"


class PolicyGraph(nn.Module):
    """``(obs, z) -> actor.act([obs, z])`` (or ``obs -> actor.act(obs)`` without a latent): the deterministic ratio."""

    def __init__(self, actor: TanhGaussianPolicy):
        super().__init__()
        self.actor = actor

    def forward(self, obs: torch.Tensor, z: torch.Tensor | None = None) -> torch.Tensor:
        return self.actor.act(obs if z is None else torch.cat([obs, z], dim=-1))


def _strip_debug_metadata(path: Path) -> None:
    """Drop the per-node stack traces the exporter attaches: they name build-machine paths and triple the file."""
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


def export_run(
    run: Path, out: Path, force: bool = False, progress: Progress | None = None, intra_op_threads: int = 1
) -> ModelCard:
    """Export ``run``'s best actor (and encoder) into the model directory ``out``; return its card."""
    run, out = Path(run), Path(out)
    check_destination(out, force)
    try:  # RunError (a ValueError, passed on) when RUN is not a finished run at all
        saved, body = load_best(run)
        bidder = best_bidder(saved)
    except (OSError, RuntimeError, EOFError, KeyError, pickle.UnpicklingError) as exc:
        raise ExportError(f"{run}: cannot load its best actor from best.pt ({exc})") from None
    try:
        provenance = run_provenance(run, body, saved, bidder.controller)
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
        bidder, bodies = load_ensemble_bidder(runs, loaded)
    except (OSError, RuntimeError, EOFError, KeyError, pickle.UnpicklingError) as exc:
        raise ExportError(f"{', '.join(map(str, runs))}: cannot load the best actors ({exc})") from None
    saved, body = loaded[0]
    try:
        first = run_provenance(runs[0], body, saved, bidder.controller)
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
        producer = {"torch": torch.__version__, "onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__}
        card = policy_card(provenance, residual, latent, transition_dim, files, producer)
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
