"""CBRL's runs for a fit, and the candidate they make: the default config, seeds ``0..K-1``, in the work directory.

Each run is ``rcb train``'s (:func:`training.rl.runs.run_training`): it trains on the train days less the held-out
fold (its ``validation_fold`` 0) and keeps the epoch its model selection scores best there. Its reference, the PID it
learns to correct, is the PID tuned on the same days it trains on (:func:`reference_of_pid`), not on all the train
days, so nothing of it is fitted on the held-out days. A finished run of the same config on the same days is kept,
an interrupted one resumed, and a run of another config refused (:class:`~training.fit.candidates.FitError`). The
runs are exported as one candidate model (:func:`export_candidate`): the run, or the ensemble of the runs (the
median of their log-ratios), exported again only when a run's kept model changed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from model.artifact import ArtifactError, file_sha256, load_artifact
from model.contract import Setting
from model.controller import ControllerGains
from training.fit.candidates import FitError, HeldOut
from training.fit.workdir import WorkDir, key_of
from training.rl.config import SACConfig
from training.rl.run_schema import RUN_FILE, RunError, finished_run_differences, read_record

CANDIDATE = "cbrl"
"""The name of CBRL's candidate: one run, or the ensemble of the runs."""


def reference_of_pid(gains: ControllerGains, held: HeldOut) -> dict[str, Any]:
    """The PID tuned on the days the run trains on, as :attr:`SACConfig.controller` holds a reference (the gains and
    those days' traffic profile, as :func:`training.rl.runs.reference_controller` writes them)."""
    profile = held.fit.traffic_profile()
    return {**gains.tuned(), "traffic_profile": [round(float(x), 8) for x in profile]}


def run_config(seed: int, epochs: int, updates_per_epoch: int, reference: dict[str, Any]) -> SACConfig:
    """``rcb train``'s default CBRL config with ``--seed``, ``--epochs`` and ``--updates-per-epoch`` given, and the
    reference controller."""
    return SACConfig(algo="cbrl", epochs=epochs, updates_per_epoch=updates_per_epoch, seed=seed, controller=reference)


def finished(run: Path, market_dir: Path, setting: Setting, config: SACConfig) -> bool:
    """Whether ``run`` holds a finished run of ``config`` on ``market_dir``'s train days, with the same reference;
    False where it holds none or an interrupted one (then it is trained or resumed). Raises :class:`FitError` for a
    finished run of something else."""
    if not (run / RUN_FILE).exists():
        return False
    try:
        body = read_record(run)
    except (OSError, ValueError) as exc:
        raise FitError(f"{run}: unreadable run record ({exc}); remove it or choose another --work") from None
    if body.get("status") != "done":
        return False
    differences = finished_run_differences(body, [market_dir], setting, config)
    recorded = json.loads(json.dumps(body.get("config", {}).get("controller")))
    if recorded != json.loads(json.dumps(config.controller)):
        differences.append("another reference controller")
    if differences:
        raise FitError(
            f"{run} holds a finished run of another config ({'; '.join(differences)}); remove it or choose another"
            " --work"
        )
    return (run / "best.pt").exists()


def train_runs(
    market_dir: Path,
    setting: Setting,
    configs: list[SACConfig],
    work: WorkDir,
    on_start: Callable[[int, int], None] | None = None,
    on_epoch: Callable[[int, Any], None] | None = None,
) -> tuple[list[Path], list[int]]:
    """Train (or resume, or keep) each config's run in the work directory; the run directories and the seeds
    trained (a finished run is kept as it is). ``on_start(seed, epochs_done)`` before a run trains;
    ``on_epoch(seed, log)`` after each epoch."""
    from training.rl.runs import run_training  # torch: only once a run is to be trained

    runs, trained = [], []
    for config in configs:
        run = work.run(config.seed)
        runs.append(run)
        if finished(run, market_dir, setting, config):
            continue
        trained.append(config.seed)
        try:
            run_training(
                market_dir,
                setting,
                config,
                run,
                resume=(run / RUN_FILE).exists(),
                on_epoch=_bound(on_epoch, config.seed),
                on_start=_bound(on_start, config.seed),
            )
        except RunError as exc:
            raise FitError(f"{exc} (the fit's work directory: {work.root})") from None
    return runs, trained


def _bound(callback: Callable[[int, Any], None] | None, seed: int) -> Callable[[Any], None] | None:
    """``callback`` with the run's seed bound first (None stays None)."""
    if callback is None:
        return None
    return lambda value: callback(seed, value)


def export_candidate(runs: list[Path], work: WorkDir) -> tuple[Path, bool]:
    """The runs exported as one model in the work directory (the run, or their ensemble), and whether it was
    exported now (False: the export of the same kept models is reused)."""
    from training.export.onnx import export_ensemble, export_run  # torch

    out = work.candidate(CANDIDATE)
    key = key_of({"runs": [[str(r), file_sha256(r / "best.pt")] for r in runs]})
    key_file = work.candidate_key(CANDIDATE)
    if key_file.exists() and key_file.read_text().strip() == key:
        try:
            load_artifact(out)
            return out, False
        except ArtifactError:
            pass  # a damaged export: write it again
    out.parent.mkdir(parents=True, exist_ok=True)
    key_file.unlink(missing_ok=True)
    if len(runs) == 1:
        export_run(runs[0], out, force=True)
    else:
        export_ensemble(runs, out, force=True)
    key_file.write_text(key + "\n")
    return out, True
