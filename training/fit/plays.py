"""A candidate's episodes on the held-out days, cached in the work directory.

A deterministic candidate (a controller, the planner, a non-Bayesian policy) plays the days once; a stochastic one
(CBRL's posterior samples, CEM's exploration) once per seed ``0..K-1``, as ``rcb evaluate --seeds K`` plays it. The
episodes are kept under a key of the candidate (its parameters or its model's served digest, and the shield around
it), the held-out days' fingerprint, the seeds and this code's version (:func:`training.fit.workdir.code_version`):
a rerun with any of them changed plays again.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from training.evaluation.evaluate import episode_rows
from training.fit.candidates import Candidate, HeldOut
from training.fit.workdir import WorkDir, code_version, key_of, read_json, write_json


def seeds_of(candidate: Candidate, seeds: int) -> int:
    """How many seeds ``candidate`` plays: 1 where the seed changes no bid."""
    return 1 if candidate.bidder.deterministic else seeds


def play_key(candidate: Candidate, held: HeldOut, seeds: int) -> str:
    return key_of(
        {
            "name": candidate.name,
            "identity": candidate.identity,
            "days": held.held.days,
            "days_fingerprint": held.fingerprint(),
            "setting": str(held.setting),
            "seeds": seeds_of(candidate, seeds),
            "code": code_version(),
        }
    )


def play(candidate: Candidate, held: HeldOut, seeds: int, work: WorkDir) -> tuple[pd.DataFrame, bool]:
    """``candidate``'s episode rows on the held-out days (:func:`training.evaluation.evaluate.episode_rows`), and
    whether they were read from the work directory (played before, with the same key)."""
    days = held.held
    key = play_key(candidate, held, seeds)
    path = work.play(candidate.name)
    cached = read_json(path)
    played: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    reused = False
    if cached is not None and cached.get("key") == key:
        try:
            for seed, outcome in cached["seeds"].items():
                delivery = np.asarray(outcome["delivery"], dtype=np.float64)
                cost = np.asarray(outcome["cost"], dtype=np.float64)
                if delivery.shape != (len(days),) or cost.shape != (len(days),):
                    raise ValueError("a cached play of other days")
                played[int(seed)] = (delivery, cost)
            reused = sorted(played) == list(range(seeds_of(candidate, seeds)))
        except (KeyError, TypeError, ValueError, AttributeError):
            reused = False
    if not reused:
        played = {}
        for seed in range(seeds_of(candidate, seeds)):
            outcome = days.play(candidate.bidder, seed)
            played[seed] = (outcome.delivery, outcome.cost)
        body = {
            "key": key,
            "name": candidate.name,
            "days": days.days,
            "seeds": {str(s): {"delivery": d.tolist(), "cost": c.tolist()} for s, (d, c) in played.items()},
        }
        write_json(path, body)
    frames = [episode_rows(candidate.name, seed, days, d, c) for seed, (d, c) in sorted(played.items())]
    return pd.concat(frames, ignore_index=True), reused
