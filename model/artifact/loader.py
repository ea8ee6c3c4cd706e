"""Loading a model directory, :func:`load_artifact`: every file read once, hashed, checked and smoke-tested.

The loader refuses anything it would not serve correctly, with an :class:`~model.artifact.errors.ArtifactError`
naming the problem: a card this code cannot read (:func:`model.artifact.card.read_card`), a missing or replaced
file, a graph whose inputs and outputs are not the contract's (:mod:`model.artifact.graphs`), a graph that fails on
inputs the contract allows, a planner's scenarios that do not match its card. A controller model (``kind:
controller``) has no file beside its card: its law is the card's ``controller`` section, checked with the card.
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path
from typing import Any

import numpy as np

from model.artifact.card import ModelCard, card_bytes, parse_card
from model.artifact.errors import ArtifactError
from model.artifact.graphs import CARD_FILE, ENCODER_FILE, MAX_STEPS, POLICY_FILE, SCENARIOS_FILE, GraphSpec
from model.artifact.runtime import Artifact
from model.planner import TunedPlanner, load_scenarios


def load_artifact(directory: Path | str, intra_op_threads: int = 1) -> Artifact:
    """Load and validate a model directory; every problem is an :class:`ArtifactError` naming it.

    ``intra_op_threads`` is onnxruntime's intra-op parallelism per session (1: predictable latency,
    the service scales out by processes).
    """
    directory = Path(directory)
    try:
        return _load(directory, intra_op_threads)
    except OSError as exc:  # a file that exists but cannot be read (permissions, I/O error): the model is not usable
        raise ArtifactError(f"{directory}: cannot read the model ({type(exc).__name__}: {exc})") from None


def _load(directory: Path, intra_op_threads: int) -> Artifact:
    # Every file is read once, and what is hashed is what is served: an export replacing the directory while this
    # runs (rcb export --force beside a reload) cannot pair one card with another export's graphs.
    card_data = card_bytes(directory)
    card = parse_card(directory / CARD_FILE, card_data)
    card_sha256 = hashlib.sha256(card_data).hexdigest()
    files: dict[str, bytes] = {}
    for name in card.expected_files:
        path = directory / name
        if not path.is_file():
            raise ArtifactError(f"{directory}: incomplete model artifact, {name} is missing")
        files[name] = path.read_bytes()
        if hashlib.sha256(files[name]).hexdigest() != card.files[name]:
            raise ArtifactError(f"{path}: corrupted or replaced (sha256 differs from {CARD_FILE})")
    if card.is_controller:
        assert card.controller is not None  # validated with the card, law and parameters alike
        law = card.controller.law_controller()
        return Artifact(directory, card, None, None, card_sha256=card_sha256, controller=law)
    if card.is_planner:
        planner = _planner(directory / SCENARIOS_FILE, files[SCENARIOS_FILE], card)
        return Artifact(directory, card, None, None, planner, card_sha256=card_sha256)
    sessions = {name: _session(directory / name, data, intra_op_threads) for name, data in files.items()}
    _check_io(sessions[POLICY_FILE], card.policy_spec(), directory / POLICY_FILE)
    if card.bayesian:
        _check_io(sessions[ENCODER_FILE], card.encoder_spec(), directory / ENCODER_FILE)
    artifact = Artifact(
        directory,
        card,
        sessions[POLICY_FILE],
        sessions.get(ENCODER_FILE),
        card_sha256=card_sha256,
        encoder_graph=files.get(ENCODER_FILE),
    )
    _smoke_test(artifact)
    return artifact


def _check_io(session: Any, spec: GraphSpec, path: Path) -> None:
    """The graph's inputs and outputs must be the contract's: names and order, element types, ranks, fixed dims."""

    def describe(args: list[Any]) -> str:
        return ", ".join(f"{a.name} {a.type} {list(a.shape)}" for a in args)

    for kind, actual, expected in (
        ("inputs", session.get_inputs(), spec.inputs),
        ("outputs", session.get_outputs(), spec.outputs),
    ):
        wanted = ", ".join(f"{s.name} {s.onnx_type} {list(s.shape)}" for s in expected)
        if [a.name for a in actual] != [s.name for s in expected]:
            raise ArtifactError(f"{path}: {kind} are [{describe(actual)}]; the contract is [{wanted}]")
        for a, s in zip(actual, expected, strict=True):
            fits = a.type == s.onnx_type and len(a.shape) == len(s.shape)
            # A dynamic axis must stay dynamic (any str or None); a fixed one must have the contract's size.
            dims = zip(a.shape, s.shape, strict=True)
            fits = fits and all((not isinstance(d, int)) if isinstance(e, str) else d == e for d, e in dims)
            if not fits:
                raise ArtifactError(
                    f"{path}: {kind[:-1]} {a.name!r} is {a.type} {list(a.shape)}; the contract is "
                    f"{s.onnx_type} {list(s.shape)}"
                )


def _first_line(exc: BaseException) -> str:
    """The first line of an error's message (onnxruntime's run to pages), its type where it has none."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _session(path: Path, graph: bytes, threads: int) -> Any:
    """An onnxruntime session of ``graph``, the bytes read (and hashed) from ``path``."""
    import onnxruntime as ort  # here, not at the top: reading a card or importing the package needs no onnxruntime

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # errors only: a refused file is reported by ArtifactError
    try:
        return ort.InferenceSession(graph, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own exception types for unreadable graphs
        raise ArtifactError(f"{path}: onnxruntime cannot load it ({_first_line(exc)})") from None


def _smoke_test(artifact: Artifact) -> None:
    """Run the graphs on the shapes the contract allows (batches of 1 and 2; trajectories of 1 and 48 steps, one
    row empty): a graph whose declared inputs match but whose body fails on some of them (a positional table cut
    short) is refused now, not found by every later decision falling back. A few milliseconds."""
    card = artifact.card
    try:
        for n in (1, 2):
            z = np.zeros((n, artifact.latent_dim), np.float32) if artifact.bayesian else None
            ratio = artifact.act(np.zeros((n, card.obs_dim), np.float32), z)
            if ratio.shape != (n,) or not np.all(np.isfinite(ratio)):
                raise ValueError(f"the policy answered {ratio!r} for {n} zero observation(s)")
            if not artifact.bayesian:
                continue
            assert card.transition_dim is not None
            for length in (1, MAX_STEPS):
                mask = np.ones((n, length), dtype=bool)
                mask[0, :] = False  # an episode before its first report
                mean, std = artifact.posterior(np.zeros((n, length, card.transition_dim), np.float32), mask)
                if mean.shape != (n, artifact.latent_dim) or not (np.all(np.isfinite(mean)) and np.all(std > 0)):
                    raise ValueError(f"the encoder answered a non-finite or non-positive posterior at length {length}")
    except Exception as exc:  # onnxruntime's own error types, or the checks above
        raise ArtifactError(
            f"{artifact.directory}: the model fails on inputs the contract allows ({_first_line(exc)})"
        ) from None


def _planner(path: Path, data: bytes, card: ModelCard) -> TunedPlanner:
    """A planner model's law on its scenarios (``data``, read from ``path``), checked against its card."""
    assert card.planner is not None
    try:
        scenarios = load_scenarios(io.BytesIO(data), name=str(path))
    except ValueError as exc:
        raise ArtifactError(f"{path}: {exc}") from None
    if scenarios.days != card.planner.train_days:
        raise ArtifactError(f"{path}: {scenarios.days} scenarios; the card says {card.planner.train_days} train days")
    info = card.planner
    return TunedPlanner(
        scenarios,
        info.margin,
        info.cost_sd,
        info.noise_aware,
        edge_alert=info.edge_alert,
        misfit_alert=info.misfit_alert,
    )
