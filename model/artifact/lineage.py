"""Where a model's weights come from and how its run scored them: the card's ``training`` and ``evaluation``.

Enough to retrain a model, to tell two models apart and to know which days its weights learned from (a fine-tuned
run's sources included), so evaluation can refuse to score a model on days it learned.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class TrainingInfo(BaseModel):
    """Where the weights come from: enough to retrain or to tell two models apart."""

    model_config = ConfigDict(frozen=True)
    run: str
    """The training run directory exported."""
    market: str
    """The market trained on; with :attr:`pooled_markets`, the home market (whose tuned PID a residual policy
    corrects)."""
    pooled_markets: list[str] = Field(default_factory=list)
    """``rcb train --data A --data B ...``: every market whose train days the run learned from, home first; empty:
    :attr:`market` alone."""
    data_fingerprint: str = Field(min_length=1)
    """sha256 over the train split's day files and constraints (``Market.split_fingerprint("train")``; pooled
    markets: over their fingerprints in order, ``pooled:`` first)."""
    epoch: int | None = None
    """The epoch whose actor was exported (the best on validation days; -1: the untrained policy of a
    ``--start-at-controller`` run, which bids its controller)."""
    traffic_profile: tuple[float, ...] | None = None
    """Mean share of a day's auctions in each of the 48 slots over the train days: :attr:`controller`'s budget
    pacing plan (uniform where absent)."""
    members: list[str] = Field(default_factory=list)
    """An ensemble's runs (``rcb export --run A --run B ...``: the median of their log-ratios); empty: one run."""
    controller: dict[str, float] | None = None
    """The PID law's gains tuned on the train days (``model.controller.GAIN_FIELDS``): the reference a residual
    policy corrects, and the controller the safety shield and the fallback run around unless the card names a
    ``safety_controller`` (the served market's PID); the benchmark's defaults where absent."""
    epochs: int = Field(ge=0)
    config: dict[str, Any]
    initialized_from: dict[str, Any] | None = None
    """A fine-tuned run's source (``rcb train --init-from``): its run directory, market, train days' fingerprint
    and epochs, as they were when the run started (and the source's own source, if it was fine-tuned too); an
    ensemble's: ``{"members": [...]}``, each member's (None for one trained afresh). The weights learned those
    days too (:meth:`learned_fingerprints`). None: fresh networks."""

    def learned_fingerprints(self) -> set[str]:
        """The train-split fingerprints whose days the weights learned from: the run's own and every fine-tuning
        source's, down the chain (a pooled market's individual ones are folded into its fingerprint)."""
        return {self.data_fingerprint} | {source["data_fingerprint"] for source in fine_tuning_sources(self)}


def fine_tuning_sources(recorded: TrainingInfo | dict[str, Any] | None) -> list[dict[str, Any]]:
    """Every fine-tuning source behind a card's training (or a run.json's ``initialized_from``), down the chain and
    across an ensemble's members: each a record with the source's ``data_fingerprint`` (and, where recorded, its
    ``validation_fold``)."""
    found = []
    pending: list[Any] = [recorded.initialized_from if isinstance(recorded, TrainingInfo) else recorded]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            if isinstance(item.get("data_fingerprint"), str):
                found.append(item)
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return found


class EvaluationInfo(BaseModel):
    """The run's own model-selection figures, copied from ``run.json`` (nothing recomputed)."""

    model_config = ConfigDict(frozen=True)
    metric: str = "score = mean over validation days of D / D* x 1[feasible] (held-out train days)"
    best_validation_score: float | None = None
    train_score_at_best: float | None = None
    history: list[dict[str, Any]] = Field(default_factory=list)
    """Per epoch: stage, train and validation score, losses (``run.json``'s history)."""
    member_validation_scores: list[float | None] = Field(default_factory=list)
    """An ensemble's members' own best validation scores, in ``training.members`` order."""
    measured: dict[str, Any] = Field(default_factory=dict)
    """Figures measured on the exported model after export (``training.export.card.record_figures``): per split of
    the training market, median ANS and mean CSR of the model alone, behind the shield, and of PID."""


def file_sha256(path: Path) -> str:
    """The file's sha256, read in 1 MiB chunks (market day files are large)."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as f:
        for chunk in iter(lambda: f.read(2**20), b""):
            digest.update(chunk)
    return digest.hexdigest()
