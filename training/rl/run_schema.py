"""What a run's record (``run.json``, and the config inside its model files) holds, and how an older one is read.

Every record this code writes carries ``"schema": SCHEMA``. A record without one is schema 1: any run written
before the schema was numbered, whatever fields its config recorded. :func:`migrate` brings a record of any schema
to this one, and every reader of a run goes through it (resume, ``--skip-done``, evaluation, export, fine-tuning,
``rcb reselect``):

* a config field the run recorded no value for, because it predates the field, gets the value runs had before the
  field existed (:data:`BEFORE_THE_FIELD`, else the field's default, which is then that value);
* an option this version no longer has (:data:`REMOVED`) is dropped where the run used it at the value whose
  behaviour this version keeps, and refused otherwise, naming the option: such a run cannot be resumed, evaluated
  or exported as it was trained, and is retrained;
* a field neither known nor removed, or a newer schema, is refused.

Torch-free, so that ``rcb train`` fills a resumed run's options from its record without loading torch.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import MISSING, fields, replace
from pathlib import Path
from typing import Any

from model.contract import Setting
from training.market.dataset import Market
from training.rl.config import SACConfig

SCHEMA = 2
"""The schema of the records this code writes."""
FORMAT = "rcb-run"
"""run.json's ``format``: what kind of record it is (its version is :data:`SCHEMA`)."""
RUN_FILE = "run.json"

BEFORE_THE_FIELD: dict[str, Any] = {
    "n_step": 1,
    "action_step": 0.0,
    "target_entropy": -1.0,
    "stage_refit_updates": 0,
    "actor_mean_q": False,
    "residual": False,
    "roi_margin": 0.0,
    "start_at_controller": False,
    "bootstrap_days": False,
    "selection_seeds": 1,
    "select_from": 0,
}
"""What a run did before the config field existed, by field, where that is not the field's default: one-step
targets, absolute actions, the entropy target ``-dim(action)``, no critic refit, the actor on the twin critics'
minimum, a run that is not residual, no margin, no start at the controller, the logged days, one selection stream
and every epoch a candidate. Every other field behaved then as its default does now."""

REMOVED: dict[str, tuple[Any, str]] = {
    "regime_spread": (0.0, "--regime-spread"),
    "reference_spread": (0.0, "--reference-spread"),
    "bootstrap_belief": ("shared", "--bootstrap-belief"),
    "train_shielded": (False, "--train-shielded"),
    "train_shield": (None, "--train-shielded"),
    "selection_days": ("all", "--selection-days"),
    "selection_epoch": ("best", "--selection-epoch"),
    "reference": ("pid", "--reference"),
    "correction_penalty": (0.0, "--correction-penalty"),
}
"""Config fields of options this version does not have, by field: the value whose behaviour it keeps (a run recorded
with it reads as if it had none) and the ``rcb train`` option that set another one."""
REMOVED_EPOCH_FIELDS = ("shield_acted_share",)
"""Fields of a run's per-epoch history that this version no longer records."""


class RunError(ValueError):
    """A run directory that cannot be created, resumed or loaded."""


def _defaults() -> dict[str, Any]:
    """What a config field a record lacks reads as, as JSON holds it (tuples read back as lists)."""
    defaults = {f.name: f.default for f in fields(SACConfig) if f.default is not MISSING}
    return json.loads(json.dumps({**defaults, **BEFORE_THE_FIELD}, default=list))


_BEFORE = _defaults()
_KNOWN = {f.name for f in fields(SACConfig)}


def migrate(record: Mapping[str, Any], where: object) -> dict[str, Any]:
    """``record`` (a run.json body, or a model file: anything whose ``config`` is a :meth:`SACConfig.to_dict`) at
    :data:`SCHEMA`, a new dict; ``where`` names the run in a refusal (:class:`RunError`). Idempotent."""
    schema = record.get("schema", 1)
    if not isinstance(schema, int) or schema > SCHEMA:
        raise RunError(f"{where} was written by another version of rcb (run schema {schema!r}); update rcb to read it")
    out = dict(record)
    if isinstance(out.get("config"), Mapping):
        config = dict(out["config"])
        for key, (kept, option) in REMOVED.items():
            if key not in config:
                continue
            value = config.pop(key)
            if value != kept:
                used = option if isinstance(value, bool | dict) else f"{option} {value}"
                raise RunError(
                    f"{where} was trained with {used}, which this version of rcb does not support; retrain it"
                )
        unknown = sorted(set(config) - _KNOWN)
        if unknown:
            raise RunError(f"{where} records config fields this version of rcb does not know ({', '.join(unknown)})")
        out["config"] = {**{k: v for k, v in _BEFORE.items() if k not in config}, **config}
    if isinstance(out.get("history"), list):
        out["history"] = [{k: v for k, v in h.items() if k not in REMOVED_EPOCH_FIELDS} for h in out["history"]]
    out["schema"] = SCHEMA
    return out


def read_record(run: Path) -> dict[str, Any]:
    """``run``'s run.json, migrated (:func:`migrate`); ``OSError`` or ``ValueError`` where it cannot be read."""
    body = json.loads((run / RUN_FILE).read_text())
    if not isinstance(body, dict):
        raise RunError(f"{run / RUN_FILE}: not a run record")
    return migrate(body, run)


def config_differences(
    recorded: Mapping[str, Any], config: SACConfig, setting: Setting, ignore: tuple[str, ...] = ("controller",)
) -> list[str]:
    """Where a run's migrated config (run.json's ``config``, :func:`migrate`) differs from ``config`` resolved for
    ``setting``, as ``"n_step 8, not 4"`` lines; ``ignore`` names fields left out (by default the reference
    controller, tuned from the train days)."""
    # through JSON, as run.json holds it (tuples read back as lists)
    wanted = json.loads(json.dumps(replace(config, controller=None).resolve(setting).to_dict()))
    differences = []
    for key, value in wanted.items():
        kept = recorded.get(key)
        if key not in ignore and kept != value and not (key == "init_from" and same_run_dir(kept, value)):
            differences.append(f"{key} {kept!r}, not {value!r}")
    return differences


def same_run_dir(kept: Any, given: Any) -> bool:
    """Whether two spellings of a run directory (``--init-from``: relative or absolute, through a link) name the
    same directory as it stands now; one that no longer exists is only the same as its own spelling."""
    if not isinstance(kept, str) or not isinstance(given, str):
        return False
    try:
        return Path(kept).resolve(strict=True) == Path(given).resolve(strict=True)
    except OSError:
        return False


def finished_run_differences(
    previous: Mapping[str, Any], data: list[Path], setting: Setting, config: SACConfig
) -> list[str]:
    """What a finished run (its migrated run.json body) was trained with that a new run of ``config`` on ``data``
    would not be; empty when it is this very run (same train days, setting and resolved config but the reference
    controller: :func:`config_differences`)."""
    differences = []
    fingerprint = pooled_fingerprint([Market.open(path).split_fingerprint("train") for path in data])
    if previous.get("data_fingerprint") != fingerprint:
        differences.append("other train days")
    if previous.get("setting") != str(setting):
        differences.append(f"setting {previous.get('setting')}")
    return differences + config_differences(previous.get("config", {}), config, setting)


def pooled_fingerprint(fingerprints: list[str]) -> str:
    """One market's train-split fingerprint as it is; several pooled markets' folded into one, in order."""
    if len(fingerprints) == 1:
        return fingerprints[0]
    return "pooled:" + hashlib.sha256("\n".join(fingerprints).encode()).hexdigest()
