"""The oracles over a market directory: one answer per (day, setting, kind), cached under ``DIR/.rcb-cache/oracle/``.

An answer is reused only when its fingerprint matches: a hash of the day file, the setting and kind, the
constraints, the grid and :data:`SEMANTICS_VERSION`.
"""

from __future__ import annotations

import hashlib
import json
import math
import warnings
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np

from model.contract import SLOTS_PER_DAY, Setting
from training.files import atomic_write_text
from training.market.dataset import DayEntry, Market, MarketError
from training.replay.oracle.oracles import ORACLE_GRID, day_oracle, slot_oracle
from training.replay.simulator import DayIndex

SEMANTICS_VERSION = (
    "rcb-oracle/1: win iff ratio*u > m, pay c; budget stops bidding at the first unaffordable win;"
    " candidates = grid + abstain(0.0), ties to the first; feasible iff C <= B and (C == 0 or D/C >= L);"
    " slot-wise MILP mip_rel_gap=1e-9"
)
"""Part of every cache fingerprint: change it whenever the oracle's answer could change."""

CACHE_DIR = Path(".rcb-cache") / "oracle"
"""Where :func:`market_oracle` caches answers, relative to the market directory."""


class OracleKind(StrEnum):
    SLOT = "slot"
    """One ratio per slot (the paper's slot-wise oracle: ``D*``, docs/metrics.md)."""
    DAY = "day"
    """One ratio for the whole day."""


@dataclass(frozen=True)
class OracleResult:
    """One day's oracle answer: the record of ``rcb oracle --json`` (docs/cli.md). ``budget`` is None without one."""

    day: int
    split: str
    setting: str
    roi_target: float
    budget: float | None
    delivery: float
    cost: float
    ratios: list[float]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> OracleResult:
        ratios = [float(r) for r in raw["ratios"]]
        if len(ratios) != SLOTS_PER_DAY:
            raise ValueError(f"expected {SLOTS_PER_DAY} ratios, got {len(ratios)}")
        budget = raw["budget"]
        return cls(
            day=int(raw["day"]),
            split=str(raw["split"]),
            setting=str(raw["setting"]),
            roi_target=float(raw["roi_target"]),
            budget=None if budget is None else float(budget),
            delivery=float(raw["delivery"]),
            cost=float(raw["cost"]),
            ratios=ratios,
        )


def setting_constraints(entry: DayEntry, setting: Setting | str) -> tuple[float, float]:
    """``(L, B)`` of a day under a setting (docs/data-schema.md): SC is ``(1, inf)``; MC, the manifest's ``mc``."""
    setting = Setting(setting)
    if setting is Setting.SC:
        return 1.0, math.inf
    return float(entry.mc.roi_target), float(entry.mc.budget)


def oracle_fingerprint(
    day_sha256: str, setting: str, kind: str, roi_target: float, budget: float, grid: np.ndarray = ORACLE_GRID
) -> str:
    """The cache key of one answer: sha256 over the day file's hash, the setting and kind, ``L``, ``B``, the grid
    and :data:`SEMANTICS_VERSION`. Floats enter by their exact hex form."""
    payload = {
        "day_sha256": day_sha256,
        "setting": str(setting),
        "kind": str(kind),
        "roi_target": float(roi_target).hex(),
        "budget": float(budget).hex(),
        "grid_sha256": hashlib.sha256(np.ascontiguousarray(grid, dtype="<f8").tobytes()).hexdigest(),
        "semantics": SEMANTICS_VERSION,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def solve_day(market: Market, entry: DayEntry, setting: Setting | str, kind: OracleKind | str) -> OracleResult:
    """Load one day and run one oracle on it (no cache)."""
    setting, kind = Setting(setting), OracleKind(kind)
    roi_target, budget = setting_constraints(entry, setting)
    index = DayIndex(market.load(entry.day))
    solve = slot_oracle if kind is OracleKind.SLOT else day_oracle
    found = solve(index, roi_target, budget)
    return OracleResult(
        day=entry.day,
        split=entry.split,
        setting=setting.value,
        roi_target=roi_target,
        budget=budget if math.isfinite(budget) else None,
        delivery=found.delivery,
        cost=found.cost,
        ratios=[float(r) for r in found.ratios],
    )


def _cache_path(market: Market, day: int, setting: Setting, kind: OracleKind) -> Path:
    return market.root / CACHE_DIR / f"{kind.value}-{setting.value}-day{day}.json"


def _read_cache(path: Path, fingerprint: str) -> OracleResult | None:
    """The cached answer if present, readable and made from the same inputs; None otherwise (a miss)."""
    try:
        raw = json.loads(path.read_text())
        if raw.get("fingerprint") != fingerprint:
            return None
        return OracleResult.from_dict(raw["result"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_cache(path: Path, fingerprint: str, result: OracleResult) -> None:
    """Atomically, so a reader never sees half an answer."""
    body = {"fingerprint": fingerprint, "semantics": SEMANTICS_VERSION, "result": result.to_dict()}
    atomic_write_text(path, json.dumps(body))


def _warn(message: str) -> None:
    warnings.warn(message, RuntimeWarning, stacklevel=3)


def market_oracle(
    market: Market,
    setting: Setting | str,
    kind: OracleKind | str = OracleKind.SLOT,
    days: Iterable[int] | None = None,
    progress: Callable[[OracleResult], None] | None = None,
    on_warning: Callable[[str], None] = _warn,
) -> list[OracleResult]:
    """The oracle's answer for each of ``days`` (default: every day of the market), in day order.

    Answers are cached in ``market.root / CACHE_DIR``, one JSON file per (day, setting, kind), and reused
    only when their fingerprint (:func:`oracle_fingerprint`) matches: changed data is recomputed. When the
    cache cannot be written (e.g. a read-only market), ``on_warning`` is told once and solving goes on.
    ``progress`` is called with each day's answer as it is ready.
    """
    setting, kind = Setting(setting), OracleKind(kind)
    entries = market.days if days is None else [market.entry(int(d)) for d in days]
    entries = sorted(entries, key=lambda e: e.day)
    if not entries:
        raise MarketError(f"{market.root}: no days to solve")
    can_write = True
    results = []
    for entry in entries:
        roi_target, budget = setting_constraints(entry, setting)
        fingerprint = oracle_fingerprint(market.fingerprint(entry.day), setting, kind, roi_target, budget)
        path = _cache_path(market, entry.day, setting, kind)
        result = _read_cache(path, fingerprint)
        if result is not None and result.split != entry.split:
            result = replace(result, split=entry.split)  # a re-split day: same answer, new label
        if result is None:
            result = solve_day(market, entry, setting, kind)
            if can_write:
                try:
                    _write_cache(path, fingerprint, result)
                except OSError as exc:
                    can_write = False
                    on_warning(f"cannot write the oracle cache in {path.parent} ({exc.strerror or exc}); not caching")
        results.append(result)
        if progress is not None:
            progress(result)
    return results
