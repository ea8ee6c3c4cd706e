"""A market directory: ``manifest.json`` plus one Parquet file per day (docs/data-schema.md).

The manifest lists every day with its split (``train``, ``test`` or ``ood``), its file, its MC
constraints ``{roi_target, budget}`` and, for synthetic markets, the day's latent regime (for
analysis only: nothing that bids may read it).

A day file whose manifest entry records a ``sha256`` is checked against it when the day is loaded or
fingerprinted: an edited or swapped file is a :class:`MarketError` naming the file, never silently
different data. The hash is computed once per file version (keyed by size and modification time).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from model.artifact import file_sha256
from training.files import atomic_write_text
from training.market.logs import read_log
from training.market.schema import DayLog

MANIFEST = "manifest.json"
FORMAT = "rcb-market/1"
SPLITS = ("train", "test", "ood")


class MarketError(ValueError):
    """The market directory is missing, malformed, or does not hold what was asked for."""


@dataclass(frozen=True)
class MCConstraints:
    """The MC setting's per-day constraints: ROI >= roi_target and cost <= budget."""

    roi_target: float
    budget: float


@dataclass
class DayEntry:
    """One manifest row."""

    day: int
    split: str
    file: str
    n_impressions: int
    mc: MCConstraints
    sha256: str = ""
    regime: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if not self.regime:
            out.pop("regime")
        return out

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> DayEntry:
        try:
            return cls(
                day=int(raw["day"]),
                split=str(raw["split"]),
                file=str(raw["file"]),
                n_impressions=int(raw.get("n_impressions", 0)),
                mc=MCConstraints(roi_target=float(raw["mc"]["roi_target"]), budget=float(raw["mc"]["budget"])),
                sha256=str(raw.get("sha256", "")),
                regime=dict(raw.get("regime", {})),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise MarketError(f"manifest day entry {raw!r} is malformed: {exc!r}") from exc


@dataclass
class Market:
    """An opened market directory."""

    root: Path
    days: list[DayEntry]
    source: dict[str, Any] = field(default_factory=dict)
    _hashes: dict[str, tuple[tuple[int, int], str]] = field(default_factory=dict, repr=False, compare=False)
    """file -> ((size, mtime_ns), sha256): each version of a day file is hashed once."""

    @classmethod
    def open(cls, root: Path | str) -> Market:
        root = Path(root)
        path = root / MANIFEST
        if not path.exists():
            raise MarketError(f"{root}: no {MANIFEST} (generate one with `rcb market generate` or `rcb market import`)")
        try:
            raw = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise MarketError(f"{path}: not valid JSON: {exc}") from exc
        if not isinstance(raw, dict):
            raise MarketError(f"{path}: expected a JSON object, found {type(raw).__name__}")
        if raw.get("format") != FORMAT:
            raise MarketError(f"{path}: format {raw.get('format')!r}, expected {FORMAT!r}")
        days = [DayEntry.from_dict(d) for d in raw.get("days", [])]
        for entry in days:
            if entry.split not in SPLITS:
                raise MarketError(f"{path}: day {entry.day} has split {entry.split!r}, expected one of {SPLITS}")
        return cls(root=root, days=sorted(days, key=lambda e: e.day), source=raw.get("source", {}))

    def save(self) -> None:
        body = {"format": FORMAT, "source": self.source, "days": [d.to_dict() for d in self.days]}
        atomic_write_text(self.root / MANIFEST, json.dumps(body, indent=1))  # never a half-written manifest

    def entry(self, day: int) -> DayEntry:
        for entry in self.days:
            if entry.day == day:
                return entry
        raise MarketError(
            f"{self.root}: no day {day} (days {self.days[0].day}..{self.days[-1].day})"
            if self.days
            else f"{self.root}: no days"
        )

    def split(self, name: str) -> list[DayEntry]:
        if name not in SPLITS:
            raise MarketError(f"unknown split {name!r}; expected one of {', '.join(SPLITS)}")
        return [d for d in self.days if d.split == name]

    def load(self, day: int) -> DayLog:
        """Load one day strictly: any invalid row is an error (a market directory is already clean)."""
        entry = self.entry(day)
        self.fingerprint(day)  # refuses a file that differs from the manifest's sha256
        logs, _ = read_log(self.root / entry.file, on_invalid="error")
        if list(logs) != [day]:
            raise MarketError(f"{entry.file}: expected rows of day {day} only, found days {sorted(logs)}")
        return logs[day]

    def fingerprint(self, day: int) -> str:
        """Content hash of a day's file (what caches are keyed by), checked against the manifest's sha256."""
        entry = self.entry(day)
        path = self.root / entry.file
        try:
            stat = path.stat()
        except FileNotFoundError:
            raise MarketError(f"{path}: day {day}'s file, listed in {MANIFEST}, is missing") from None
        version = (stat.st_size, stat.st_mtime_ns)
        cached = self._hashes.get(entry.file)
        if cached is not None and cached[0] == version:
            digest = cached[1]
        else:
            digest = file_sha256(path)
            self._hashes[entry.file] = (version, digest)
        if entry.sha256 and digest != entry.sha256:
            raise MarketError(
                f"{path}: contents differ from the sha256 in {MANIFEST} (the file was edited or replaced after the"
                " market was written); regenerate or re-import the market"
            )
        return digest

    def split_fingerprint(self, split: str) -> str:
        """sha256 over a split's day files and MC constraints: what a model tuned or trained on it saw."""
        days = [[e.day, self.fingerprint(e.day), e.mc.roi_target, e.mc.budget] for e in self.split(split)]
        return hashlib.sha256(json.dumps(days).encode()).hexdigest()


def listed_day_files(out: Path) -> set[str]:
    """The day files the market in ``out`` lists, directly in ``out`` (none where there is no readable manifest)."""
    if not (out / MANIFEST).exists():
        return set()
    try:
        return {entry.file for entry in Market.open(out).days if (out / entry.file).parent == out}
    except MarketError:
        return set()


def clear_market(out: Path) -> None:
    """Make ``out``; remove the manifest and day files of a market already there (only those it lists)."""
    out.mkdir(parents=True, exist_ok=True)
    stale = listed_day_files(out)
    # The manifest goes first: an interrupted rewrite never leaves a manifest pointing at missing or other files.
    (out / MANIFEST).unlink(missing_ok=True)
    for name in stale:
        (out / name).unlink(missing_ok=True)


def subset_market(source: Market, out: Path | str, train_days: int) -> Market:
    """A market of ``source``'s first ``train_days`` train days (in day order) and all its test and OOD days.

    What a learning curve over the amount of logs needs: nested train sets scored on the same held-out days. Day
    files are hard-linked (copied across file systems), so the subset costs no disk and its fingerprints equal the
    source's; day files are only ever replaced, never rewritten in place (:func:`training.market.logs.write_day`),
    so rewriting either market leaves the other's files as they were. A market already in ``out`` is cleared first
    (:func:`clear_market`), after every kept source file has been checked. The manifest keeps every entry as
    written, the MC constraints included (under the ``prior`` recipe they were drawn from the source's train days),
    and records where it came from in ``source["subset"]``.
    """
    out = Path(out)
    train = source.split("train")
    if not 1 <= train_days <= len(train):
        raise MarketError(f"{source.root}: has {len(train)} train days; asked for {train_days} (1..{len(train)})")
    kept_train = {e.day for e in train[:train_days]}
    days = [e for e in source.days if e.split != "train" or e.day in kept_train]
    for entry in days:  # every kept file present and as its manifest says, before anything is written
        source.fingerprint(entry.day)
    clear_market(out)
    for entry in days:
        target = out / entry.file
        if target.exists():
            target.unlink()
        try:
            os.link(source.root / entry.file, target)
        except OSError:  # another file system: copy
            shutil.copy2(source.root / entry.file, target)
    provenance = {"of": str(source.root.resolve()), "train_days": train_days, "source_train_days": len(train)}
    market = Market(root=out, days=list(days), source={**source.source, "subset": provenance})
    market.save()
    return market
