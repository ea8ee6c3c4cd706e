"""Slot-batch decisions in a process of their own, at the lowest CPU priority (``RCB_DECISION_PROCESS``).

At a slot boundary every campaign's next ratio is decided at once: the encoder, the policy and the shield, about
1.3 ms a campaign for the shipped ensemble, 13 s for 10,000 campaigns. On the batch thread of
:mod:`service.runner` that work shares the bids' interpreter: onnxruntime lets the GIL go while a graph runs, but the
feature rebuild, the shield and the answers' Python hold it, and a bid waits for it (up to the switch interval) at
every turn. A child process holds its own GIL: the bids' process keeps the whole of its own, and the kernel, which
sees a nice-19 process beside a nice-0 one, runs the bids first on a shared core.

The child loads the model the service serves (the same directory and version, checked: a directory rewritten since
the service loaded it is refused, not served) and answers one batch at a time with :meth:`ModelRunner.decide`, the
same code as the thread, fallback controller and shield included. If the child cannot answer (it died, or its model
is not the service's), the batch is decided on the thread instead and the error is logged; a dead child is started
again at the next batch, at most once per :data:`RESTART_AFTER_S`.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from model.artifact import ArtifactError
from model.state import CampaignState

if TYPE_CHECKING:
    from service.runner import Decided, ModelRunner

log = logging.getLogger("rcb.service")

RESTART_AFTER_S = 10.0
"""Least time between two starts of the child after it failed (a child that dies at once must not spin)."""
WARM_TIMEOUT_S = 120.0
"""Longest the service's startup (or a reload) waits for the child to load the model before going on without it."""


class ModelMismatch(RuntimeError):
    """The child loaded another model than the one the service serves (the directory changed on disk)."""


class DecisionProcess:
    """One child process (spawned, nice 19) that decides slot batches for a :class:`~service.runner.ModelRunner`."""

    def __init__(self, onnx_threads: int, use_shield: bool):
        self.onnx_threads = onnx_threads
        self.use_shield = use_shield
        self._pool: ProcessPoolExecutor | None = None
        self._failed_at = -float("inf")
        self._refused: str | None = None
        """A model version the child could not load as served: not asked again until the service's version moves."""
        self.answered = 0
        """Batches the child decided."""
        self.failures = 0
        """Batches the child could not answer (each was decided on the thread instead)."""

    def start(self) -> None:
        """Have a child (spawned at the first call after a failure, or the first ever)."""
        if self._pool is None:
            # spawn, not fork: the service's process runs threads (the loop's, onnxruntime's, redis-py's) that a
            # forked child would inherit mid-lock
            self._pool = ProcessPoolExecutor(
                max_workers=1, mp_context=multiprocessing.get_context("spawn"), initializer=_child_started
            )

    def warm(self, model_dir: Path, version: str) -> None:
        """Start the child and load ``version`` in it now (blocking: imports and the model's load, a second or two),
        so the service is ready when it says so and the first slot boundary does not pay for it. A child that
        cannot is logged; the batches are then decided on the thread until one can."""
        self.start()
        assert self._pool is not None
        try:
            warming = self._pool.submit(_warm_in_child, model_dir, version, self.onnx_threads, self.use_shield)
            warming.result(WARM_TIMEOUT_S)
        except ModelMismatch as exc:
            self._refused = version
            log.error("the decision process cannot load the served model", extra={"error": str(exc)})
        except Exception as exc:
            self._failed_at = time.monotonic()
            self.close()
            log.error("the decision process did not start", extra={"error": repr(exc)})

    def usable(self, version: str) -> bool:
        """Whether a batch for ``version`` should go to the child now."""
        if self._refused == version:
            return False
        return self._pool is not None or time.monotonic() - self._failed_at >= RESTART_AFTER_S

    async def decide(self, model_dir: Path, version: str, states: Sequence[CampaignState]) -> Decided:
        """The child's :meth:`ModelRunner.decide` of ``states`` with the model at ``model_dir``, which must be
        ``version``; raises what the child raised, or :class:`concurrent.futures.process.BrokenProcessPool`."""
        self.start()
        assert self._pool is not None
        future = self._pool.submit(_decide_in_child, model_dir, version, self.onnx_threads, self.use_shield, states)
        try:
            decided = await asyncio.wrap_future(future)
        except ModelMismatch:
            self._refused = version
            self.failures += 1
            raise
        except Exception:
            self.failures += 1
            self._failed_at = time.monotonic()
            self.close()  # a broken pool stays broken: the next usable batch starts a new child
            raise
        self.answered += 1
        return decided

    def child_pid(self, timeout_s: float = 30.0) -> int | None:
        """The child's process id (asked of the child; blocking), None when none runs."""
        pool = self._pool
        return None if pool is None else pool.submit(os.getpid).result(timeout_s)

    def close(self, wait: bool = False) -> None:
        """Stop the child (``wait``: until it has exited, as the service's shutdown does)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=wait, cancel_futures=True)


_CHILD_RUNNER: ModelRunner | None = None
"""The child's model, loaded when the service starts (:meth:`DecisionProcess.warm`), after each reload, and by any batch
for another version."""


def _child_started() -> None:
    os.nice(19)  # the whole child, onnxruntime's threads included (they start after this)
    logging.basicConfig(level=logging.WARNING, format="rcb decision process %(process)d: %(levelname)s %(message)s")


def _decide_in_child(
    model_dir: Path, version: str, onnx_threads: int, use_shield: bool, states: Sequence[CampaignState]
) -> Decided:
    return _load_in_child(model_dir, version, onnx_threads, use_shield).decide(states)


def _warm_in_child(model_dir: Path, version: str, onnx_threads: int, use_shield: bool) -> str:
    return _load_in_child(model_dir, version, onnx_threads, use_shield).version


def _load_in_child(model_dir: Path, version: str, onnx_threads: int, use_shield: bool) -> ModelRunner:
    """The child's runner for ``version`` (loaded now if it holds another); :class:`ModelMismatch` if the directory
    no longer holds it."""
    from service.runner import ModelRunner  # the child imports the service's model code, not its web stack

    global _CHILD_RUNNER
    runner = _CHILD_RUNNER
    if runner is None or runner.version != version or runner.use_shield != use_shield:
        runner = ModelRunner(model_dir, onnx_threads=onnx_threads, use_shield=use_shield)
        try:
            runner.load()
        except ArtifactError as exc:  # gone or refused since the service loaded it: not this version, not again
            raise ModelMismatch(f"{model_dir} no longer loads ({exc}); the service serves {version}") from None
        _CHILD_RUNNER = runner
    if runner.version != version:
        raise ModelMismatch(f"{model_dir} now holds {runner.version}, the service serves {version}")
    return runner
