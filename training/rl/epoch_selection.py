"""Which epoch a training run keeps as its model (``best.pt``), read off its validation scores.

One rule for two places: :func:`training.rl.runs.run_training` applies it epoch by epoch as the run trains, and
:func:`reselect` (``rcb reselect``) applies it afterwards to a run trained with ``--keep-epochs``, whose every
epoch's model is on disk, so the first candidate epoch can be changed, or an epoch kept by hand, without training
again.

The rule: the validation argmax among the epochs from ``select_from`` on
(:attr:`~training.rl.config.SACConfig.select_from`). With ``select_from`` 0 the untrained controller (epoch -1,
:attr:`~training.rl.config.SACConfig.start_at_controller`) is a candidate too. A later ``select_from`` leaves out
the early epochs, the curriculum's relaxed stages under the default curriculum (epochs 0-5), which a few validation
days can prefer over epochs that hold out better. Until a run reaches ``select_from`` its ``best.pt`` holds the
argmax so far, so a run stopped early still holds a model. Ties go to the earlier epoch (the one kept first).
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from training.files import atomic_write_text
from training.rl.run_schema import RUN_FILE, read_record

CONTROLLER_EPOCH = -1
"""The untrained policy, which bids its controller (``start_at_controller``): candidate -1 of model selection."""
EPOCHS_DIR = "epochs"
"""Under ``--keep-epochs``: every epoch's model, ``epoch-NNN.pt`` in ``best.pt``'s format."""
CONTROLLER_SNAPSHOT = "controller.pt"
"""Under ``--keep-epochs``: the untrained controller's model (epoch -1), beside the epochs' snapshots."""
RESELECTION_FILES = ("curves.csv", "curves.png")
"""What :func:`reselect` copies besides run.json and the kept model (a reselection is not resumable)."""


class SelectionError(ValueError):
    """A selection that cannot be made (no snapshots, an epoch that was not kept, a bad choice)."""


def kept_epoch(scores: Mapping[int, float], select_from: int = 0) -> int | None:
    """The epoch whose model ``best.pt`` holds after ``scores`` (validation score by epoch, -1 the controller's);
    None before any. See the module docstring for the rule."""
    if not scores:
        return None
    eligible = [e for e in scores if e >= select_from] if select_from else list(scores)
    candidates = eligible or list(scores)  # not yet at select_from: the best so far
    # ties: the earlier epoch; a non-finite score (a failed evaluation) is never preferred
    return max(candidates, key=lambda e: (scores[e] if math.isfinite(scores[e]) else -math.inf, -e))


def run_scores(body: Mapping[str, Any]) -> dict[int, float]:
    """A run.json body's validation scores by epoch, the untrained controller's (-1) included where recorded."""
    scores = {int(h["epoch"]): float(h["validation_score"]) for h in body.get("history", [])}
    if body.get("controller_validation_score") is not None:
        scores[CONTROLLER_EPOCH] = float(body["controller_validation_score"])
    return scores


def snapshot_name(epoch: int) -> str:
    """The file under :data:`EPOCHS_DIR` that holds ``epoch``'s model."""
    return CONTROLLER_SNAPSHOT if epoch == CONTROLLER_EPOCH else f"epoch-{epoch:03d}.pt"


def reselect(run: Path, out: Path, select_from: int = 0, epoch: int | None = None) -> dict[str, Any]:
    """Write ``out`` as ``run`` with another epoch kept: ``best.pt`` the snapshot the rule picks from ``select_from``
    on, run.json the run's record with that ``select_from`` in its config, the kept epoch's score as
    ``best_validation_score`` and ``kept_epoch`` and ``reselected_from``. ``run`` must be a finished
    ``--keep-epochs`` run; ``out`` a new or empty directory. ``out`` is a run directory for ``rcb evaluate`` and
    ``rcb export``, not for ``--resume`` (train ``run`` further, then reselect again). Returns ``out``'s run.json
    body.

    ``epoch``: keep that epoch (-1 the controller), whatever the validation days say, in place of the rule: how a
    snapshot ensemble takes several epochs of one run as members. The config keeps the run's own ``select_from``,
    and ``reselected_epoch`` records the hand-picked epoch."""
    body = _finished_run(run)
    if epoch is not None and select_from:
        raise SelectionError("an explicit epoch replaces the selection rule: give one or the other")
    epochs = len(body["history"])
    if epoch is not None and not CONTROLLER_EPOCH <= epoch < epochs:
        raise SelectionError(f"epoch {epoch}: the run has epochs 0-{epochs - 1} (and -1, its controller)")
    if select_from < 0 or select_from >= epochs:
        raise SelectionError(f"--select-from {select_from}: the run has epochs 0-{epochs - 1}")
    if out.resolve() == run.resolve():
        raise SelectionError(f"--out {out} is the run itself; reselect into a new directory")
    _check_empty(out)
    scores = run_scores(body)
    chosen_by_hand = epoch is not None
    if epoch is None:
        epoch = kept_epoch(scores, select_from)
    assert epoch is not None  # a finished run has epochs
    if epoch not in scores:
        raise SelectionError(f"{run}: epoch {epoch} has no validation score on record")
    source = run / EPOCHS_DIR / snapshot_name(epoch)
    if not source.is_file():
        raise SelectionError(
            f"{run}: the rule keeps epoch {epoch}, whose model {source} is not there"
            + (" (runs before rcb reselect existed kept no controller snapshot)" if epoch == CONTROLLER_EPOCH else "")
        )
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, out / "best.pt")
    for name in RESELECTION_FILES:
        if (run / name).is_file():
            shutil.copyfile(run / name, out / name)
    config = body["config"] if chosen_by_hand else {**body["config"], "select_from": select_from}
    new = {k: v for k, v in body.items() if k != "keep_epochs"}
    new.update(
        config=config,
        best_validation_score=scores[epoch],
        kept_epoch=epoch,
        reselected_from=str(run),
    )
    if chosen_by_hand:
        new["reselected_epoch"] = epoch
    atomic_write_text(out / RUN_FILE, json.dumps(new, indent=1, default=str))
    return new


def snapshot_members(run: Path, out: Path, first: int | None = None) -> list[dict[str, Any]]:
    """A snapshot ensemble's members of ``run``: every epoch from ``first`` to the last, each reselected
    (:func:`reselect` with ``epoch``) into ``out/epoch-NNN``; ``first`` defaults to the run's own ``select_from``
    (the SC default's 18 of 24: the last quarter). ``out`` must be new or empty. Play the members of several runs as
    one bidder with ``ensemble:LABEL=OUT*/epoch-*`` or export them with ``rcb export --run`` (docs/cli.md).
    Returns the members' run.json bodies, in epoch order."""
    body = _finished_run(run)  # refused before any member is written
    epochs = len(body["history"])
    start = int(body["config"]["select_from"] or 0) if first is None else first
    if not 0 <= start < epochs:
        raise SelectionError(f"--select-from {start}: the run has epochs 0-{epochs - 1}")
    _check_empty(out)
    return [reselect(run, out / f"epoch-{epoch:03d}", epoch=epoch) for epoch in range(start, epochs)]


def _finished_run(run: Path) -> dict[str, Any]:
    """``run``'s migrated run.json body, refused unless the run finished with ``--keep-epochs`` (its snapshots on
    disk)."""
    try:
        body = read_record(run)
    except (OSError, json.JSONDecodeError) as exc:  # a record it cannot migrate says so itself (RunError)
        raise SelectionError(f"{run}: not a training run directory ({run / RUN_FILE}: {exc})") from None
    if body.get("status") != "done":
        raise SelectionError(f"{run}: the run is not finished (status {body.get('status')!r}); resume it first")
    if not body.get("keep_epochs"):
        raise SelectionError(
            f"{run} was trained without --keep-epochs: only its own choice (best.pt) is on disk; train with"
            " --keep-epochs to choose another epoch afterwards"
        )
    return body


def _check_empty(out: Path) -> None:
    """A reselection writes into a new or empty directory only."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise SelectionError(f"--out {out} exists and is not an empty directory")


def start_of(body: Mapping[str, Any]) -> str:
    """What a run's untrained policy (epoch -1 of model selection) bids: its controller, or the policy a fine-tuned
    run carried from ``initialized_from``."""
    source = body.get("initialized_from")
    return f"the policy carried from {source['run']}" if source else "the untrained controller"
