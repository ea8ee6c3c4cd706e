"""The work directory of a fit (``MODEL_DIR.work/`` unless ``--work DIR``): what a rerun with the same arguments finds
finished and reuses.

Layout:

* ``tuning/METHOD-SETTING.json``: a baseline tuned on the train days less the held-out ones (the choice's), under a
  key of what decides it (the market cache's key, :func:`training.bidders.tuned.tuning_key`, and the held-out days);
  the baselines tuned on all the train days, for serving, stay in the market's own tuning cache;
* ``runs/cbrl-sK/``: CBRL's training runs (``rcb train``'s run directories: an interrupted run resumes, a finished
  one is kept);
* ``candidates/NAME/``: a trained candidate exported as a model (the CBRL run, or the ensemble of the runs), with
  ``candidates/NAME.key`` naming the runs' best models it was exported from;
* ``plays/NAME.json``: a candidate's episodes on the held-out days, under a key of the candidate, the days and this
  code's version (:func:`play_key`);
* ``export/NAME/``: the chosen controller or planner fitted for serving, before it is copied to ``MODEL_DIR``, with
  ``export/NAME.key`` naming the tunings it was exported from;
* ``report/``: ``fit.json``, ``fit.md`` and ``fit.png``, the table and the plot of the choice.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

from training.files import atomic_write_text
from training.market.dataset import DayEntry, Market

FIT_VERSION = "1"
"""Part of every cached play's key: bumped when what a play on the held-out days means changes."""


def code_version() -> str:
    """The code a cached play was computed with: the package's version and :data:`FIT_VERSION`."""
    return f"rcb {version('rcb')}, fit {FIT_VERSION}"


def key_of(fields: dict[str, Any]) -> str:
    """sha256 of ``fields`` as sorted JSON: a cache entry's key."""
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()


def days_fingerprint(market: Market, entries: list[DayEntry]) -> str:
    """sha256 over some days' files and MC constraints, as :meth:`Market.split_fingerprint` is over a split's."""
    days = [[e.day, market.fingerprint(e.day), e.mc.roi_target, e.mc.budget] for e in entries]
    return hashlib.sha256(json.dumps(days).encode()).hexdigest()


def read_json(path: Path) -> dict[str, Any] | None:
    """A cached record, or None where there is none or it cannot be read (then the work is done again)."""
    try:
        body = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return body if isinstance(body, dict) else None


def write_json(path: Path, body: dict[str, Any]) -> None:
    atomic_write_text(path, json.dumps(body, indent=1, default=str))


def slug(name: str) -> str:
    """A candidate's name as a file name: ``models/default`` is ``models_default``."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "candidate"


@dataclass(frozen=True)
class WorkDir:
    """Where a fit keeps its finished work (module docstring)."""

    root: Path

    @classmethod
    def beside(cls, out: Path) -> WorkDir:
        """The default work directory of ``MODEL_DIR``: ``MODEL_DIR.work`` beside it."""
        out = Path(out)
        return cls(out.with_name(out.name + ".work"))

    def tuning(self, method: str, setting: str) -> Path:
        return self.root / "tuning" / f"{method}-{setting}.json"

    def run(self, seed: int) -> Path:
        return self.root / "runs" / f"cbrl-s{seed}"

    def candidate(self, name: str) -> Path:
        return self.root / "candidates" / slug(name)

    def candidate_key(self, name: str) -> Path:
        return self.root / "candidates" / f"{slug(name)}.key"

    def play(self, name: str) -> Path:
        return self.root / "plays" / f"{slug(name)}.json"

    def export(self, name: str) -> Path:
        return self.root / "export" / slug(name)

    @property
    def report(self) -> Path:
        return self.root / "report"
