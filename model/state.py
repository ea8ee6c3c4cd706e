"""One campaign's belief state as the service stores it: registration, episode, raw slot stats, last decision.

Only raw stats are kept (the ratios bid and :data:`model.history.SLOT_STATS` per finished slot): the
observations, the encoder's trajectory and the posterior are rebuilt from them by
:mod:`model.policy`, exactly, in any process and under any model version. So a new model takes over
at the next slot, and a state written by one replica is decided on by another.

:meth:`CampaignState.to_bytes` is a compact, versioned msgpack blob (the stats as one little-endian
float64 array): at slot 47 about 2 KiB. :meth:`CampaignState.from_bytes` refuses a blob of another
format version or a malformed one with :class:`StateError`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import msgpack
import numpy as np

from model.contract import RATIO_MAX, RATIO_MIN, SLOTS_PER_DAY
from model.history import SLOT_STATS, History, Registration

STATE_FORMAT_VERSION = 1
"""Bump when the blob's layout changes; :meth:`CampaignState.from_bytes` refuses other versions."""

COLUMNS: tuple[str, ...] = ("ratios", *SLOT_STATS)
"""Rows of :attr:`CampaignState.stats`: the ratio bid in each finished slot, then what it got."""


DECIDER_CODES: dict[str, str] = {"model": "m", "fallback": "f", "shield": "s", "handover": "h"}
"""One letter per ``decided_by`` value, for :attr:`CampaignState.deciders`."""
_DECIDERS = {code: name for name, code in DECIDER_CODES.items()}


class StateError(ValueError):
    """A state blob that is not a campaign state of this format version."""


@dataclass(frozen=True)
class CampaignState:
    """A campaign's current episode. ``stats[:, s]`` holds slot ``s`` for ``s < slot``."""

    campaign: str
    episode: str
    roi_target: float
    budget: float | None
    """``None``: no budget (the SC setting)."""
    seed: int
    """The posterior-sampling noise seed: noise is keyed by ``(seed, campaign, episode)``, slot in the counter."""
    slot: int = 0
    """Slots reported so far; :attr:`next_ratio` is the ratio for slot ``slot``."""
    stats: np.ndarray = field(default_factory=lambda: np.zeros((len(COLUMNS), 0)))
    """``(len(COLUMNS), slot)`` float64: ratios, delivery, cost, wins, auctions of each finished slot."""
    next_ratio: float = 1.0
    posterior_mean: tuple[float, ...] | None = None
    """The posterior mean of z behind :attr:`next_ratio` (Bayesian models), for inspection."""
    posterior_std: tuple[float, ...] | None = None
    model_version: str = ""
    decided_by: str = "model"
    """``model``, ``fallback`` (the model could not run), ``shield`` (a guard moved the model's ratio) or ``handover``
    (the campaign is with its controller for the rest of the episode: :mod:`model.handover`)."""
    deciders: str = ""
    """Who decided each ratio of the episode, one letter a decision (:data:`DECIDER_CODES`): decision ``k`` is the
    ratio for slot ``k``, the answer to the report of slot ``k - 1``. A replayed report answers from it."""
    versions: tuple[tuple[int, str], ...] = ()
    """``(first decision, model version)`` each time the version changed: which model decided each ratio."""
    updated: float = 0.0
    """Unix time of the last write."""
    handover_slot: int | None = None
    """The decision (the ratio for that slot) from which the controller bids the rest of the episode
    (:mod:`model.handover`), ``None`` while the model keeps the campaign. Set by the first ``handover`` decision and
    kept by every later one, so every replica and a restart read the campaign as handed over."""

    def __post_init__(self) -> None:
        if not 0 <= self.slot <= SLOTS_PER_DAY:
            raise StateError(f"slot must be in 0..{SLOTS_PER_DAY}, not {self.slot}")
        if self.stats.shape != (len(COLUMNS), self.slot):
            raise StateError(f"stats must be ({len(COLUMNS)}, {self.slot}); got {self.stats.shape}")
        # Scalar checks (this runs on every update): a foreign or corrupt blob must not serve a ratio of 99 or
        # register L = 0, which the API refuses on the way in.
        if not (math.isfinite(self.roi_target) and self.roi_target > 0):
            raise StateError(f"roi_target must be finite and > 0, not {self.roi_target!r}")
        if self.budget is not None and not (math.isfinite(self.budget) and self.budget > 0):
            raise StateError(f"budget must be None or finite and > 0, not {self.budget!r}")
        if not (math.isfinite(self.next_ratio) and RATIO_MIN <= self.next_ratio <= RATIO_MAX):
            raise StateError(f"next_ratio must be in [{RATIO_MIN}, {RATIO_MAX}], not {self.next_ratio!r}")
        if not 0 <= self.seed < 2**64:  # msgpack's integers
            raise StateError(f"seed must be in 0..2**64-1, not {self.seed}")
        if self.handover_slot is not None and not 0 <= self.handover_slot <= self.slot:
            raise StateError(f"handover_slot must be None or in 0..{self.slot}, not {self.handover_slot}")

    # --- Building -----------------------------------------------------------------------------------------

    @classmethod
    def new(cls, campaign: str, episode: str, roi_target: float, budget: float | None, seed: int) -> CampaignState:
        """A fresh episode at slot 0 (its first decision is set with :meth:`decided`)."""
        Registration.of(roi_target, budget)  # validates L and B with the one rule
        return cls(campaign, episode, float(roi_target), None if budget is None else float(budget), int(seed))

    def reported(self, delivery: float, cost: float, wins: float, auctions: float) -> CampaignState:
        """The state after slot :attr:`slot` was reported: its ratio (:attr:`next_ratio`) and stats appended."""
        if self.done:
            raise StateError(f"all {SLOTS_PER_DAY} slots of episode {self.episode!r} are already reported")
        column = np.array([[self.next_ratio], [delivery], [cost], [wins], [auctions]], dtype=np.float64)
        return replace(self, slot=self.slot + 1, stats=np.concatenate([self.stats, column], axis=1))

    def decided(
        self,
        ratio: float,
        model_version: str,
        decided_by: str = "model",
        mean: np.ndarray | None = None,
        std: np.ndarray | None = None,
    ) -> CampaignState:
        """The state with the ratio for slot :attr:`slot` decided (clipped to [0, 4]); who decided it is kept
        beside the episode's earlier decisions. The first ``handover`` decision sets :attr:`handover_slot`."""
        deciders = self.deciders[: self.slot].ljust(self.slot, "?") + DECIDER_CODES.get(decided_by, "?")
        versions = tuple(v for v in self.versions if v[0] < self.slot)
        if not versions or versions[-1][1] != model_version:
            versions += ((self.slot, model_version),)
        return replace(
            self,
            next_ratio=min(max(float(ratio), RATIO_MIN), RATIO_MAX),  # NaN stays NaN (refused): as np.clip
            posterior_mean=_floats(mean),
            posterior_std=_floats(std),
            model_version=model_version,
            decided_by=decided_by,
            deciders=deciders,
            versions=versions,
            updated=time.time(),
            handover_slot=self.slot if decided_by == "handover" and self.handover_slot is None else self.handover_slot,
        )

    # --- Reading ------------------------------------------------------------------------------------------

    @property
    def done(self) -> bool:
        return self.slot >= SLOTS_PER_DAY

    @property
    def handed_over(self) -> bool:
        """The controller bids the rest of this episode (:mod:`model.handover`)."""
        return self.handover_slot is not None

    def column(self, name: str) -> np.ndarray:
        """One row of :attr:`stats` by name (``ratios``, ``delivery``, ``cost``, ``wins``, ``auctions``)."""
        return self.stats[COLUMNS.index(name)]

    def slot_stats(self, slot: int) -> dict[str, float]:
        """What was reported for a finished slot (a retried report is compared against this)."""
        if not 0 <= slot < self.slot:
            raise IndexError(f"slot {slot} is not reported yet (next is {self.slot})")
        return {name: float(self.stats[COLUMNS.index(name), slot]) for name in SLOT_STATS}

    def ratio_after(self, slot: int) -> float:
        """The ratio decided once slot ``slot`` was reported (the answer to that report)."""
        if not 0 <= slot < self.slot:
            raise IndexError(f"slot {slot} is not reported yet (next is {self.slot})")
        return self.next_ratio if slot + 1 == self.slot else float(self.column("ratios")[slot + 1])

    def decided_by_at(self, decision: int) -> str:
        """Who decided the ratio for slot ``decision`` (the current decider where the state does not say: a blob
        without the per-decision record)."""
        code = self.deciders[decision] if 0 <= decision < len(self.deciders) else "?"
        return _DECIDERS.get(code, self.decided_by)

    def model_version_at(self, decision: int) -> str:
        """The model version that decided the ratio for slot ``decision`` (likewise)."""
        version = next((v for first, v in reversed(self.versions) if first <= decision), None)
        return self.model_version if version is None else version

    def budget_exhausted_after(self, slot: int) -> bool:
        """Whether the cost reported up to and including slot ``slot`` had reached the budget."""
        return self.budget is not None and float(self.column("cost")[: slot + 1].sum()) >= self.budget

    @property
    def total_delivery(self) -> float:
        return float(self.column("delivery").sum())

    @property
    def total_cost(self) -> float:
        return float(self.column("cost").sum())

    @property
    def roi(self) -> float | None:
        """Cumulative delivery / cost (``None`` before any spend)."""
        cost = self.total_cost
        return self.total_delivery / cost if cost > 0 else None

    @property
    def budget_exhausted(self) -> bool:
        """Whether the cost reported so far has reached the budget."""
        return self.budget_exhausted_after(self.slot - 1)

    def registration(self) -> Registration:
        return Registration.of(self.roi_target, self.budget)

    def history(self) -> History:
        """The one-episode :class:`History` these stats describe."""
        return stack_histories([self])

    # --- Bytes --------------------------------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        body: dict[str, Any] = {
            "v": STATE_FORMAT_VERSION,
            "c": self.campaign,
            "e": self.episode,
            "L": self.roi_target,
            "B": self.budget,
            "seed": self.seed,
            "t": self.slot,
            "x": np.ascontiguousarray(self.stats, dtype="<f8").tobytes(),
            "r": self.next_ratio,
            "pm": self.posterior_mean,
            "ps": self.posterior_std,
            "mv": self.model_version,
            "by": self.decided_by,
            "u": self.updated,
            # Optional within format version 1: a reader that does not know them ignores them, and a blob without
            # them reads as deciders and versions unknown.
            "dby": self.deciders,
            "mvs": [list(v) for v in self.versions],
            # Optional too: a blob without it reads as not handed over.
            "ho": self.handover_slot,
        }
        return msgpack.packb(body, use_bin_type=True)

    @classmethod
    def from_bytes(cls, blob: bytes) -> CampaignState:
        try:
            body = msgpack.unpackb(blob, raw=False)
        except Exception as exc:  # msgpack raises several unrelated types for garbage
            raise StateError(f"not a campaign state blob ({type(exc).__name__})") from None
        if not isinstance(body, dict) or "v" not in body:
            raise StateError("not a campaign state blob (no format version)")
        if body["v"] != STATE_FORMAT_VERSION:
            raise StateError(
                f"state format version {body['v']!r} is not supported (this code reads {STATE_FORMAT_VERSION})"
            )
        try:
            slot = int(body["t"])
            stats = np.frombuffer(body["x"], dtype="<f8").astype(np.float64).reshape(len(COLUMNS), slot)
            mean, std = body["pm"], body["ps"]
            if not all(isinstance(body[k], str) for k in ("c", "e", "mv", "by")):
                raise TypeError("the ids, model version and decider must be strings")
            return cls(
                campaign=body["c"],
                episode=body["e"],
                roi_target=float(body["L"]),
                budget=None if body["B"] is None else float(body["B"]),
                seed=int(body["seed"]),
                slot=slot,
                stats=stats,
                next_ratio=float(body["r"]),
                posterior_mean=None if mean is None else tuple(map(float, mean)),
                posterior_std=None if std is None else tuple(map(float, std)),
                model_version=body["mv"],
                decided_by=body["by"],
                deciders=str(body.get("dby", "")),
                versions=tuple((int(first), str(v)) for first, v in body.get("mvs", ())),
                updated=float(body["u"]),
                handover_slot=None if body.get("ho") is None else int(body["ho"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise StateError(f"malformed campaign state blob ({exc})") from None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CampaignState):
            return NotImplemented
        mine = {k: v for k, v in self.__dict__.items() if k != "stats"}
        theirs = {k: v for k, v in other.__dict__.items() if k != "stats"}
        return mine == theirs and np.array_equal(self.stats, other.stats)

    __hash__ = None  # type: ignore[assignment]


def _floats(values: np.ndarray | None) -> tuple[float, ...] | None:
    """A posterior's values as Python floats, converted in C by ``tolist`` (:meth:`CampaignState.decided` runs
    this for every campaign of a slot batch, on the event loop)."""
    return None if values is None else tuple(np.asarray(values, dtype=np.float64).tolist())


def stack_histories(states: Sequence[CampaignState]) -> History:
    """One :class:`History` of several campaigns that sit at the same slot (rows in the order given)."""
    if not states:
        raise ValueError("no states to stack")
    slot = states[0].slot
    if any(s.slot != slot for s in states):
        raise ValueError("states of one History must sit at the same slot")
    registration = Registration(
        roi_target=np.array([s.roi_target for s in states], dtype=np.float64),
        budget=np.array([np.inf if s.budget is None else s.budget for s in states], dtype=np.float64),
    )
    stats = np.stack([s.stats for s in states], axis=1)  # (columns, n, slot)
    return History.of_stats(registration, slot, **{name: stats[i] for i, name in enumerate(COLUMNS)})
