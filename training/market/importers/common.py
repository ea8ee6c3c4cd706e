"""What every importer shares: the summary of an import, a converted source, and column helpers."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from training.market.dataset import SPLITS, DayEntry, MCConstraints
from training.market.logs import READABLE_SUFFIXES
from training.market.schema import SchemaError, ValidationReport

ProgressCallback = Callable[[str, int, int], None]
"""``progress(stage, done, total)``: called as files are read and as days are written."""

DELIVERY_MODES: tuple[str, ...] = ("realized", "expected")
"""What an imported impression delivers when won: the logged outcome, or the predicted value of the impression."""


@dataclass
class ImportSummary:
    """What an import read, kept, left out (by reason) and wrote."""

    format: str
    src: str
    out: str
    seed: int
    n_rows: int
    n_kept: int
    invalid_rows: dict[str, int]
    notes: dict[str, int]
    """Rows changed by a documented convention of the source format (e.g. a missing ``rev`` read as 0)."""
    days: list[DayEntry]
    details: dict[str, Any] = field(default_factory=dict)
    """Format-specific facts (file -> day, advertiser, value per conversion, delivery mode, constraints file)."""

    @property
    def n_invalid(self) -> int:
        return sum(self.invalid_rows.values())

    @property
    def days_per_split(self) -> dict[str, int]:
        counts = Counter(entry.split for entry in self.days)
        return {split: counts.get(split, 0) for split in SPLITS}

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "src": self.src,
            "out": self.out,
            "seed": self.seed,
            "n_rows": self.n_rows,
            "n_kept": self.n_kept,
            "n_invalid": self.n_invalid,
            "invalid_rows": dict(self.invalid_rows),
            "notes": dict(self.notes),
            "days_per_split": self.days_per_split,
            "days": [
                {
                    "day": e.day,
                    "split": e.split,
                    "file": e.file,
                    "n_impressions": e.n_impressions,
                    "roi_target": e.mc.roi_target,
                    "budget": e.mc.budget,
                }
                for e in self.days
            ],
            **self.details,
        }


@dataclass
class Converted:
    """A source converted to the schema's columns, before schema validation."""

    frame: pd.DataFrame
    """``day, slot, utility, market_price, delivery[, cost]`` in arrival order, source-rejected rows removed."""
    report: ValidationReport
    """Every source row (``n_rows``) and the rows the format checks rejected, by reason."""
    constraints: dict[int, MCConstraints] | None
    """Per-day MC constraints the source carries, or None to draw them (or read them from a constraints file)."""
    notes: Counter[str] = field(default_factory=Counter)
    details: dict[str, Any] = field(default_factory=dict)


def numeric(frame: pd.DataFrame, column: str) -> np.ndarray:
    """A column as float64, anything non-numeric as NaN."""
    return pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)


def not_integer_in(values: np.ndarray, low: int, high: int) -> np.ndarray:
    """Rows whose value is NaN, fractional or outside ``low..high``."""
    with np.errstate(invalid="ignore"):
        return ~np.isfinite(values) | (values != np.round(values)) | (values < low) | (values > high)


def log_files(src: Path) -> list[Path]:
    """The readable log files of ``src`` (a file, or a directory's top level), in sorted name order."""
    if not src.exists():
        raise FileNotFoundError(f"{src}: no such file or directory")
    if src.is_file():
        return [src]
    readable = [p for p in src.iterdir() if p.is_file() and p.name.lower().endswith(READABLE_SUFFIXES)]
    files = sorted(p for p in readable if not p.name.startswith("."))
    if not files:
        raise SchemaError(f"{src}: no log files (expected {', '.join(READABLE_SUFFIXES)})")
    return files


def header(path: Path) -> list[str]:
    """The column names of a log file, reading its header (CSV) or schema (Parquet) only."""
    name = path.name.lower()
    try:
        if name.endswith((".parquet", ".pq")):
            return list(pq.read_schema(path).names)
        return [str(c) for c in pd.read_csv(path, nrows=0).columns]
    except (ValueError, OSError, pa.ArrowException) as exc:  # empty, truncated or not the format its name says
        raise SchemaError(f"{path}: cannot be read ({exc})") from None


def require(columns: list[str] | pd.Index, needed: tuple[str, ...], source: str) -> None:
    """Raise :class:`SchemaError` naming every column of ``needed`` that ``columns`` lacks."""
    missing = [c for c in needed if c not in columns]
    if missing:
        raise SchemaError(f"{source}: missing column(s) {', '.join(missing)}; have {', '.join(map(str, columns))}")


def check_delivery(delivery: str) -> None:
    if delivery not in DELIVERY_MODES:
        raise ValueError(f"unknown delivery {delivery!r}; choose one of {', '.join(DELIVERY_MODES)}")


def shown_days(days: list[int], limit: int = 10) -> str:
    """``[1, 2, 3 and 40 more]``: a short list of day ids for a message."""
    more = f" and {len(days) - limit:,} more" if len(days) > limit else ""
    return f"[{', '.join(map(str, days[:limit]))}{more}]"
