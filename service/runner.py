"""The model behind the service: one :class:`model.policy.Policy`, a fallback controller, hot reload.

Triton's shape: the entry point takes a batch of campaigns (any slots) and answers each one. The
model runs off the event loop (onnxruntime blocks), so bids keep flowing during a slot-boundary burst.
If the model cannot run (missing or refused at startup, or an inference error), the numpy controller
of :mod:`model.controller` decides instead and the answer says ``decided_by: fallback``: the card's
``safety_controller`` (the PID tuned on the market served, ``rcb calibrate``), else its training market's PID; a
controller model (``kind: controller``) is its own fallback. A controller model decides like any other model
(``decided_by: model``, the model being that controller) and its shield band is the whole ratio range, so the shield
never moves its ratio. A reload
builds the new model completely before it swaps in; a refused one leaves the old one serving. The
state holds raw stats only, so a new model takes over at each campaign's next slot.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from anyio import to_thread

from model.artifact import Artifact, ArtifactError, as_config, load_artifact
from model.controller import RATIO_FLOOR, Controller, ControllerGains
from model.features import out_of_range
from model.history import History
from model.incremental import single_threaded_blas
from model.planner import Depth
from model.policy import Decision, NoiseKey, Policy, slot_groups
from model.shield import ShieldConfig, shield
from model.state import CampaignState, stack_histories

log = logging.getLogger("rcb.service")

FALLBACK_VERSION = "fallback-controller"
T = TypeVar("T")


@dataclass(frozen=True)
class Decided:
    """The decision for a batch of states: ratios, posteriors (or None), who decided each, which model."""

    ratio: np.ndarray
    mean: np.ndarray | None
    std: np.ndarray | None
    decided_by: list[str]
    """Per row: ``model`` (the served model, a controller model included), ``shield`` (the model's ratio moved into
    the shield's band) or ``fallback``."""
    model_version: str
    out_of_range: np.ndarray
    """Per row: how many signs say the campaign is outside what the model was built for: the observation features
    outside their range (clipped); for a planner model, which reads no features, 1 when it is out of its depth (no
    scenario explains the day: :attr:`model.planner.Depth.out`), else 0."""
    error: str | None = None
    """Why the fallback decided, when it did."""

    def state(self, k: int, state: CampaignState) -> CampaignState:
        """``state`` with row ``k``'s decision applied."""
        return state.decided(
            float(self.ratio[k]),
            self.model_version,
            self.decided_by[k],
            None if self.mean is None else self.mean[k],
            None if self.std is None else self.std[k],
        )


def measured_with(measured: dict[str, Any], served: ShieldConfig) -> bool:
    """Whether a card's ``evaluation.measured.shield`` is the band ``served`` (a field it predates reads as its
    default; an unreadable record is not)."""
    try:
        return as_config(measured) == served
    except (TypeError, ValueError):
        return False


def model_version(artifact: Artifact) -> str:
    """``{algorithm}-{setting}-{digest[:12]}``, the digest :meth:`model.artifact.ModelCard.served_sha256`: names
    what decides, not the card's bytes (recording figures on a served model keeps its version)."""
    digest = artifact.card.served_sha256()[:12]  # of the card loaded, not read again: the directory may have changed
    return f"{artifact.card.algorithm}-{artifact.card.setting}-{digest}"


BELIEF_CACHE_ENV = "RCB_BELIEF_CACHE"
"""How many campaigns' encoder beliefs each process keeps (:class:`model.incremental.BeliefCache`; 0: none, every
slot update encodes its campaign's whole day). Default :data:`BELIEF_CACHE_ENTRIES`."""
BELIEF_CACHE_ENTRIES = 10_000
"""A belief of the shipped 5-member ensemble is 184 KiB (188,608 bytes, at any slot): 10,000 campaigns, 1.8 GiB."""


def belief_cache_entries() -> int:
    """:data:`BELIEF_CACHE_ENV`'s value, :data:`BELIEF_CACHE_ENTRIES` when unset or unreadable."""
    try:
        return max(0, int(os.environ.get(BELIEF_CACHE_ENV, BELIEF_CACHE_ENTRIES)))
    except ValueError:
        log.warning("unreadable %s; keeping %d campaigns' beliefs", BELIEF_CACHE_ENV, BELIEF_CACHE_ENTRIES)
        return BELIEF_CACHE_ENTRIES


class ModelRunner:
    """Holds the served model; thread-safe swap on reload."""

    def __init__(
        self,
        model_dir: Path,
        onnx_threads: int = 1,
        use_shield: bool = False,
        on_load: Callable[[str, bool], None] | None = None,
    ):
        self.model_dir = Path(model_dir)
        self.onnx_threads = onnx_threads
        self.use_shield = use_shield
        self.shield_config = ShieldConfig()
        """The band around the model's ratio: the card's ``shield`` section (defaults where the card has none)."""
        self.gains = ControllerGains()
        """The PID the shield runs around: the card's safety controller, else its training market's gains and
        traffic profile (defaults where the card has none; :meth:`model.artifact.Artifact.controller_gains`)."""
        self.fallback: Controller = self.gains
        """What bids when the model cannot: the shield's PID, or a controller model's own law
        (:meth:`model.artifact.Artifact.fallback_controller`); the defaults before any model loads."""
        self._lock = threading.Lock()
        """Guards the served fields' swap (held for microseconds: decisions read them under it)."""
        self._load_lock = threading.Lock()
        """Serializes loads (startup, admin reloads, SIGHUP): each swaps in whole after the one before, and
        ``on_load`` reports them in the order they swapped in."""
        self._reload_gate: asyncio.Lock | None = None
        self.on_load = on_load
        """Called with (version, loaded) after each model swaps in, under the load lock (the service's metrics)."""
        self.policy: Policy | None = None
        self.version: str = FALLBACK_VERSION
        self.load_error: str | None = None

    @property
    def loaded(self) -> bool:
        return self.policy is not None

    @property
    def artifact(self) -> Artifact | None:
        return None if self.policy is None else self.policy.artifact

    def controller_source(self) -> dict[str, Any]:
        """Which controller the shield and the fallback run around and the market whose train days tuned it
        (:meth:`model.artifact.ModelCard.safety_source`); the benchmark's default gains while no model is loaded."""
        artifact = self.artifact
        if artifact is None:
            return {"source": "defaults", "law": "pid", "market": None, "data_fingerprint": None, "tuned_on": None}
        return artifact.card.safety_source()

    def load(self, model_dir: Path | None = None) -> str:
        """Load (or reload) the model; on failure keep the current one and raise :class:`ArtifactError`."""
        return self.reload(model_dir)[1]

    def reload(self, model_dir: Path | None = None) -> tuple[str, str]:
        """Load the model like :meth:`load`, one load at a time; returns (the version it replaced, the new one)."""
        with self._load_lock:
            previous = self.version
            return previous, self._load(model_dir)

    def _load(self, model_dir: Path | None) -> str:
        directory = Path(model_dir) if model_dir is not None else self.model_dir
        try:
            artifact = load_artifact(directory, intra_op_threads=self.onnx_threads)
            try:  # the card is validated on reading; this keeps a refusal a refusal whatever slips past it
                gains, shield_config = artifact.controller_gains(), artifact.shield_config()
                fallback = artifact.fallback_controller()
            except (TypeError, ValueError) as exc:
                raise ArtifactError(f"{directory}: the card's controller or shield cannot run: {exc}") from None
        except ArtifactError as exc:
            with self._lock:
                if self.policy is None:
                    self.load_error = str(exc)
            raise
        policy, version = Policy(artifact), model_version(artifact)
        if policy.use_incremental(belief_cache_entries()):  # a new model starts with an empty belief cache
            single_threaded_blas()
        with self._lock:
            self.policy, self.version, self.model_dir, self.load_error = policy, version, directory, None
            self.gains, self.shield_config, self.fallback = gains, shield_config, fallback
        # Everything built so far (the app, the model, the libraries' objects) lives as long as the process: move it
        # out of the collector's reach. Without this, every full collection walks it, 50-90 ms each, several a
        # minute under load: the bid p99 (see BENCHMARKS.md, Service).
        gc.collect()
        gc.freeze()
        if self.on_load is not None:
            try:  # the new model serves now: a failing report must not read as a refused load
                self.on_load(version, True)
            except Exception:
                log.exception("reporting the model load failed", extra={"model_version": version})
        log.info("model loaded", extra={"model_version": version, "model_dir": str(directory)})
        if not self.use_shield and artifact.card.training.config.get("train_shielded"):
            # Its critics valued only what the shield lets through: alone it bids proposals nobody valued.
            log.warning(
                "the model was trained behind the shield and is served without it; serve it with the shield on",
                extra={"model_version": version},
            )
        measured = artifact.card.evaluation.measured.get("shield")
        if self.use_shield and measured is not None and not measured_with(measured, shield_config):
            # The card's shielded figures are not what this service bids.
            log.warning(
                "the card's shielded figures were measured with another shield setting; re-measure with "
                "research/scripts/measure_model.sh",
                extra={"card_shield": measured, "served_shield": asdict(shield_config)},
            )
        return version

    def decide(self, states: Sequence[CampaignState]) -> Decided:
        """Next ratios for ``states`` (blocking; call :meth:`decide_async` from the event loop).

        Each slot's campaigns become one History, built once and read by the feature-range check, the policy
        and the shield alike.
        """
        with self._lock:
            policy, version, gains, shield_config = self.policy, self.version, self.gains, self.shield_config
            fallback_law = self.fallback
        groups = slot_groups(states)
        histories = [stack_histories([states[i] for i in rows]) for rows in groups]
        clipped = np.zeros(len(states), dtype=np.int64)
        for rows, history in zip(groups, histories, strict=True):
            clipped[rows] = out_of_range(history)
        if policy is not None:
            try:
                ratio, mean, std, depth = self._model_decision(policy, states, groups, histories)
                if depth is not None:  # a planner reads no features: its own sign is the one that counts
                    clipped = depth.out.astype(np.int64)
                if not np.all(np.isfinite(ratio)):
                    raise FloatingPointError("the model produced a non-finite ratio")
                decided_by = ["model"] * len(states)
                if self.use_shield:
                    ratio, decided_by = self._shielded(groups, histories, ratio, gains, shield_config)
                    if not np.all(np.isfinite(ratio)):
                        raise FloatingPointError("the shield produced a non-finite ratio")
                return Decided(ratio, mean, std, decided_by, version, clipped)
            except Exception as exc:  # any inference failure must fall back, never fail the slot
                log.error("model inference failed, fallback controller decides", extra={"error": repr(exc)})
                error = f"inference failed: {exc!r}"
        else:
            error = self.load_error or "no model loaded"
        fallback = ["fallback"] * len(states)
        ratio = np.empty(len(states))
        for rows, history in zip(groups, histories, strict=True):
            ratio[rows] = fallback_law.ratios(history)
        if not np.all(np.isfinite(ratio)):  # stats the law cannot read (it never happens within the API's bounds)
            log.error("the fallback controller produced a non-finite ratio; bidding its floor")
            ratio = np.where(np.isfinite(ratio), ratio, RATIO_FLOOR)
        return Decided(ratio, None, None, fallback, FALLBACK_VERSION, clipped, error)

    @staticmethod
    def _model_decision(
        policy: Policy, states: Sequence[CampaignState], groups: list[list[int]], histories: list[History]
    ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None, Depth | None]:
        """The policy's decision for the slot groups' histories, answered in the order of ``states``."""
        order = [i for rows in groups for i in rows]
        keys = [NoiseKey(states[i].seed, states[i].campaign, states[i].episode) for i in order]
        decision: Decision = policy.decide(histories, keys)
        inverse = np.empty(len(order), dtype=np.int64)
        inverse[np.asarray(order)] = np.arange(len(order))
        mean = None if decision.mean is None else decision.mean[inverse]
        std = None if decision.std is None else decision.std[inverse]
        depth = None if decision.depth is None else decision.depth.take(inverse)
        return decision.ratio[inverse], mean, std, depth

    @staticmethod
    def _shielded(
        groups: list[list[int]],
        histories: list[History],
        ratio: np.ndarray,
        gains: ControllerGains,
        shield_config: ShieldConfig,
    ) -> tuple[np.ndarray, list[str]]:
        out, decided_by = ratio.copy(), ["model"] * len(ratio)
        for rows, history in zip(groups, histories, strict=True):
            guarded = shield(history, ratio[rows], gains, shield_config)
            out[rows] = guarded.ratio
            for i, acted in zip(rows, guarded.acted, strict=True):
                if acted:
                    decided_by[i] = "shield"
        return out, decided_by

    async def reload_async(self, model_dir: Path | None = None) -> tuple[str, str]:
        """:meth:`reload` from the event loop. Reloads queue on the loop (an asyncio lock), not in worker threads:
        a burst of reloads waiting on the load lock would hold the threads the decisions run on."""
        if self._reload_gate is None:  # made on the loop that uses it
            self._reload_gate = asyncio.Lock()
        async with self._reload_gate:
            return await to_thread.run_sync(self.reload, model_dir)

    async def decide_async(self, states: Sequence[CampaignState]) -> Decided:
        return await to_thread.run_sync(self.decide, list(states))


async def in_background(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on the batch thread, of the lowest CPU priority (nice 19): a slot batch's CPU work (its
    decisions and new states), off the event loop the bids run on. On a busy core the kernel runs the bids' thread
    first, and onnxruntime releases the GIL while the encoder runs."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_background_pool(), fn, *args)


_BACKGROUND: ThreadPoolExecutor | None = None


def _lower_priority() -> None:
    # Process-wide: a thread holding the GIL is asked to hand it over after 1 ms (Python's default: 5 ms), so a bid
    # waits less for it while this thread runs the batch's numpy and Python parts.
    sys.setswitchinterval(0.001)
    # On Linux a nice value applies to the calling thread alone (setpriority on its thread id).
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError, PermissionError):
        log.warning("could not lower the batch decision thread's priority; bids may queue behind slot batches")


def _background_pool() -> ThreadPoolExecutor:
    """One low-priority thread per process for batch decisions (created on first use)."""
    global _BACKGROUND
    if _BACKGROUND is None:
        _BACKGROUND = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rcb-batch", initializer=_lower_priority)
    return _BACKGROUND
