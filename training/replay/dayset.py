"""The days of one split, loaded and indexed, with their constraints under a setting and their D*.

What the evaluation harness and the tuners need in one place: replay indexes (built once per
traffic-bucket count), each day's ``(L, B)`` for SC or MC, the slot-wise oracle delivery ``D*`` that
metrics normalize by, and the registration a bidder receives.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from model.contract import Setting
from model.history import Registration
from training.bidders.base import Bidder, Outcome, play
from training.market.dataset import DayEntry, Market, MarketError
from training.market.schema import DayLog
from training.replay.oracle import market_oracle, setting_constraints
from training.replay.simulator import DayIndex

VALIDATION_FRACTION = 0.2
"""Default share of the train days that training holds out for model selection."""
VALIDATION = "validation"
"""The name ``rcb evaluate`` gives those held-out train days (``--split validation``)."""


def validation_folds(fraction: float = VALIDATION_FRACTION) -> int:
    """How many disjoint validation folds the train days hold: every ``1 / fraction``-th day makes one (1 when
    nothing is held out, ``fraction`` 0: model selection then reads the train days themselves)."""
    return max(2, round(1 / fraction)) if fraction > 0 else 1


def split_validation(
    train: DaySet | int, fraction: float = VALIDATION_FRACTION, fold: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the training and validation days: every k-th train day is held out (at least one each),
    starting at day ``fold`` (``0 <= fold < validation_folds(fraction)``; the folds are disjoint and cover the
    train days, except with fewer train days than folds, where a fold past the last day holds out the last day).

    Fold 0 is the same days whatever the run's seed, so training's model selection and ``rcb evaluate --split
    validation`` (choosing between runs, or between a run and an ensemble) read the same days. Runs trained on
    different folds (``rcb train --validation-fold``) each hold out other days: together they learn from all
    train days and their model selection reads all of them, at the price of no shared held-out days.
    """
    if isinstance(train, DaySet) and len(train.parts) > 1:  # pooled markets: each market's own folds
        pieces, start = [], 0
        for size in train.parts:
            fit, held = split_validation(size, fraction, fold)
            pieces.append((fit + start, held + start))
            start += size
        return np.concatenate([p[0] for p in pieces]), np.concatenate([p[1] for p in pieces])
    n = train if isinstance(train, int) else len(train)
    if n < 2 or fraction <= 0:
        return np.arange(n), np.arange(n)
    every = validation_folds(fraction)
    if not 0 <= fold < every:
        raise ValueError(f"validation fold {fold} is out of range: there are {every} folds (0..{every - 1})")
    validation = np.arange(n)[fold::every] if fold < n else np.arange(n)[-1:]
    return np.setdiff1d(np.arange(n), validation), validation


def home_market_days(days: DaySet, indices: np.ndarray) -> np.ndarray:
    """The ``indices`` that fall on the home market's days (the first of :meth:`DaySet.pool`'s markets); all of
    them for one market."""
    if len(days.parts) > 1:
        return indices[indices < days.parts[0]]
    return indices


def traffic_profile(logs: list[DayLog]) -> np.ndarray:
    """Mean share of a day's impressions (auctions) in each of the 48 slots over ``logs``."""
    shares = [np.diff(log.slot_offsets) / max(log.n_impressions, 1) for log in logs]
    return np.mean(shares, axis=0)


@dataclass
class DaySet:
    """One split of a market under one setting."""

    market: Market
    split: str
    setting: Setting
    entries: list[DayEntry]
    logs: list[DayLog]
    oracle_delivery: np.ndarray
    roi_target: np.ndarray
    budget: np.ndarray
    parts: tuple[int, ...] = ()
    """Pooled sets (:meth:`pool`): how many days each market contributes, in order (empty: one market)."""
    _indexes: dict[int, list[DayIndex]] = field(default_factory=dict, repr=False)

    @classmethod
    def load(
        cls,
        market: Market,
        split: str,
        setting: Setting | str,
        progress: Callable[[str], None] | None = None,
    ) -> DaySet:
        """Load every day of ``split``; solve (or read cached) oracles. ``progress(stage)`` per unit of work."""
        setting = Setting(setting)
        entries = market.split(split)
        if not entries:
            raise MarketError(f"{market.root}: split {split!r} has no days")
        tick = (lambda _r: progress("oracle")) if progress else None
        oracle = market_oracle(market, setting, days=[e.day for e in entries], progress=tick)
        logs = []
        for entry in entries:
            logs.append(market.load(entry.day))
            if progress:
                progress("load")
        constraints = np.array([setting_constraints(e, setting) for e in entries])
        return cls(
            market=market,
            split=split,
            setting=setting,
            entries=entries,
            logs=logs,
            oracle_delivery=np.array([r.delivery for r in oracle]),
            roi_target=constraints[:, 0],
            budget=constraints[:, 1],
        )

    @classmethod
    def pool(cls, sets: list[DaySet]) -> DaySet:
        """The days of several markets' sets (one split and setting) as one, in order; :attr:`market` is the first
        set's. :func:`split_validation` holds out each market's own fold, so a pooled run's model selection reads
        the days ``rcb evaluate --split validation`` reads on each market, and trains on none of them."""
        if not sets:
            raise ValueError("pooling needs at least one day set")
        if len({(s.split, s.setting) for s in sets}) != 1:
            raise ValueError("pooled day sets must share the split and the setting")
        if len(sets) == 1:
            return sets[0]
        return cls(
            market=sets[0].market,
            split=sets[0].split,
            setting=sets[0].setting,
            entries=[e for s in sets for e in s.entries],
            logs=[log for s in sets for log in s.logs],
            oracle_delivery=np.concatenate([s.oracle_delivery for s in sets]),
            roi_target=np.concatenate([s.roi_target for s in sets]),
            budget=np.concatenate([s.budget for s in sets]),
            parts=tuple(len(s) for s in sets),
        )

    @property
    def days(self) -> list[int]:
        return [e.day for e in self.entries]

    def __len__(self) -> int:
        return len(self.entries)

    def indexes(self, buckets: int = 1) -> list[DayIndex]:
        """Replay indexes of every day, built on first use per traffic-bucket count."""
        if buckets not in self._indexes:
            self._indexes[buckets] = [DayIndex(log, buckets=buckets) for log in self.logs]
        return self._indexes[buckets]

    def registration(self, repeats: int = 1) -> Registration:
        """Every day's registration, the whole list repeated ``repeats`` times (episode ``k`` plays day ``k % len``)."""
        return Registration(
            roi_target=np.tile(self.roi_target, repeats),
            budget=np.tile(self.budget, repeats),
        )

    def subset(self, chosen: np.ndarray) -> DaySet:
        """The days at positions ``chosen``, sharing this set's loaded logs (indexes are rebuilt on use).

        A pooled set's subset keeps its markets (:attr:`parts`, a market left with no day counting 0), so the home
        market is still the first; the chosen days must then keep the markets in order.
        """
        chosen = np.asarray(chosen, dtype=np.int64)
        parts: tuple[int, ...] = ()
        if self.parts:
            market_of = np.repeat(np.arange(len(self.parts)), self.parts)[chosen]
            if np.any(np.diff(market_of) < 0):
                raise ValueError("a subset of pooled markets' days must keep the markets in order (home market first)")
            parts = tuple(int(k) for k in np.bincount(market_of, minlength=len(self.parts)))
        return DaySet(
            market=self.market,
            split=self.split,
            setting=self.setting,
            entries=[self.entries[i] for i in chosen],
            logs=[self.logs[i] for i in chosen],
            oracle_delivery=self.oracle_delivery[chosen],
            roi_target=self.roi_target[chosen],
            budget=self.budget[chosen],
            parts=parts,
        )

    def traffic_profile(self) -> np.ndarray:
        """Mean share of a day's impressions in each slot over these days (their logs only: no hindsight)."""
        return traffic_profile(self.logs)

    def episode_days(self, repeats: int = 1) -> np.ndarray:
        return np.tile(np.arange(len(self)), repeats)

    def play(self, bidder: Bidder, seed: int = 0) -> Outcome:
        """Every day once with ``bidder`` (at its traffic-bucket count) under its registration, play seed ``seed``:
        the episodes of one evaluation row (:func:`training.bidders.base.play`)."""
        return play(bidder, self.indexes(bidder.traffic_buckets), self.episode_days(), self.registration(), seed)
