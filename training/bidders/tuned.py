"""The tuned baselines: each tuned once on a market's train days, its parameters cached beside the market.

``rm``, ``pid``, ``cem`` and ``plan`` (:data:`BASELINES`) are tuned with one seed (:data:`TUNING_SEED`) whatever
the evaluation's seeds, and the tuned parameters are written to ``MARKET/.rcb-cache/tuning/METHOD-SETTING.json``
under a key of everything that decides them: the method, the setting, the train days' fingerprint, the oracle
whose ``D*`` the tuning score divides by and the tuner's own version. A record whose key differs, or that cannot be
read, is tuned again; so ``rcb evaluate``, ``rcb export --plan``, ``rcb calibrate`` and a residual run's reference
PID (:mod:`training.rl.runs`) read the same baseline from one tuning.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from model.contract import Setting
from training.bidders import cem, pid, planner, rm
from training.bidders.base import Bidder
from training.files import atomic_write_text
from training.market.dataset import Market
from training.replay.dayset import DaySet
from training.replay.oracle import ORACLE_GRID
from training.replay.oracle.cache import SEMANTICS_VERSION as ORACLE_SEMANTICS

BASELINES: dict[str, ModuleType] = {"rm": rm, "pid": pid, "cem": cem, "plan": planner}
"""Tunable baselines: each module has ``tune(train, seed, progress)`` and ``from_params(params, train)`` (``train``
for a baseline that keeps more than its parameters: the planner's scenarios are the train days). Optional: a
``TUNER_VERSION`` (part of the tuning-cache key) and ``without_own_days(bidder, train_rows)`` (a baseline that
carries the train days themselves plays train and validation days leave-one-out: each without its own)."""
TUNING_SEED = 0
"""Baselines are tuned once, with this seed, whatever the evaluation seeds."""
TUNING_VERSION = "1"
"""Part of the cache key: bumped when every tuner changes, so cached tuned parameters are recomputed."""
TUNING_CACHE = Path(".rcb-cache/tuning")
"""The cache's directory, inside the market directory."""

Progress = Callable[[str], None]


def tuning_key(market: Market, method: str, setting: Setting) -> str:
    """The hash a cached tuning must carry to be reused: what decides the tuned parameters."""
    fields = {
        "method": method,
        "setting": str(setting),
        "version": TUNING_VERSION,
        "seed": TUNING_SEED,
        "train_days": market.split_fingerprint("train"),
        # a tuning's score is D / D* on the train days: an oracle whose answers change changes what was best
        "oracle": hashlib.sha256(f"{ORACLE_SEMANTICS} {ORACLE_GRID.tolist()}".encode()).hexdigest(),
    }
    # a baseline module may version its own tuner (the planner's, when its likelihood changes)
    if (tuner := getattr(BASELINES.get(method), "TUNER_VERSION", None)) is not None:
        fields["tuner"] = tuner
    payload = json.dumps(fields, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def read_tuning(path: Path) -> dict[str, Any] | None:
    """A cached tuning record, or None where there is none or it cannot be read (then the baseline is tuned again)."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def tuned_baseline(
    market: Market, method: str, setting: Setting, train: Callable[[], DaySet], progress: Progress | None = None
) -> tuple[Bidder, dict[str, Any]]:
    """The baseline tuned on the train days (from the cache when the train data are unchanged) and its record:
    ``key``, ``method``, ``setting``, ``train_score`` and ``params``. ``train`` loads the train days, called only
    when they are needed (a tuning, or a baseline rebuilt from them)."""
    module = BASELINES[method]
    key = tuning_key(market, method, setting)
    path = market.root / TUNING_CACHE / f"{method}-{setting}.json"
    cached = read_tuning(path)
    if cached is not None and cached.get("key") == key and isinstance(cached.get("params"), dict):
        try:
            # a market that fails to load here (the planner rebuilds its scenarios) is an error, not a retune
            return module.from_params(cached["params"], train), cached
        except (KeyError, TypeError):
            pass  # parameters missing or of the wrong type: tune again
    bidder, score = module.tune(train(), seed=TUNING_SEED, progress=progress)
    record = {"key": key, "method": method, "setting": str(setting), "train_score": score, "params": bidder.params()}
    with contextlib.suppress(OSError):  # read-only market: tuned again next time
        atomic_write_text(path, json.dumps(record, indent=1))
    return bidder, record
