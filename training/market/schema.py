"""The impression-log schema (docs/data-schema.md) and its validation.

One row per impression: ``day, slot, utility, market_price, delivery[, cost]``. Rows within a slot
are in arrival order. Validation never drops a row silently: every rejected row is counted under
the reason that rejected it, and the caller decides whether that is fatal.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from model.contract import SLOTS_PER_DAY

REQUIRED_COLUMNS: tuple[str, ...] = ("day", "utility", "market_price", "delivery")
"""Columns every log must have (plus ``slot`` or ``timestamp``)."""

OPTIONAL_COLUMNS: tuple[str, ...] = ("cost",)

MAX_DAY = 2**31 - 1
"""The largest day id: a day file stores its id as int32 (:meth:`DayLog.to_frame`), and seeds built from it
(constraint draws) need it non-negative."""

SLOT_SECONDS = 24 * 3600 // SLOTS_PER_DAY


class SchemaError(ValueError):
    """The log cannot be read as impressions of the schema at all (e.g. a required column is missing)."""


class InvalidRowsError(ValueError):
    """Some rows are invalid and the caller asked for strict loading."""

    def __init__(self, report: ValidationReport, source: str):
        self.report = report
        super().__init__(f"{source}: {report.n_invalid} of {report.n_rows} rows invalid ({report.describe()})")


@dataclass
class ValidationReport:
    """How many rows were read and, per reason, how many were rejected."""

    n_rows: int = 0
    reasons: Counter[str] = field(default_factory=Counter)

    @property
    def n_invalid(self) -> int:
        return sum(self.reasons.values())

    @property
    def n_valid(self) -> int:
        return self.n_rows - self.n_invalid

    def merge(self, other: ValidationReport) -> None:
        self.n_rows += other.n_rows
        self.reasons.update(other.reasons)

    def describe(self) -> str:
        if not self.reasons:
            return "no invalid rows"
        return ", ".join(f"{reason}: {count}" for reason, count in self.reasons.most_common())

    def to_dict(self) -> dict[str, object]:
        return {"n_rows": self.n_rows, "n_invalid": self.n_invalid, "reasons": dict(self.reasons)}


@dataclass(frozen=True)
class DayLog:
    """One day's impressions in slot order, arrival order within each slot (float64 arrays).

    ``slot_offsets[t]:slot_offsets[t + 1]`` is the row range of slot ``t``.
    """

    day: int
    utility: np.ndarray
    market_price: np.ndarray
    delivery: np.ndarray
    cost: np.ndarray
    slot_offsets: np.ndarray

    @property
    def n_impressions(self) -> int:
        return int(self.utility.shape[0])

    @property
    def slot(self) -> np.ndarray:
        """The slot of every row, derived from the offsets."""
        return np.repeat(np.arange(len(self.slot_offsets) - 1), np.diff(self.slot_offsets))

    def slot_rows(self, t: int) -> slice:
        return slice(int(self.slot_offsets[t]), int(self.slot_offsets[t + 1]))

    def to_frame(self) -> pd.DataFrame:
        """The day in the schema (``cost`` always written)."""
        return pd.DataFrame(
            {
                "day": np.full(self.n_impressions, self.day, dtype=np.int32),
                "slot": self.slot.astype(np.int8),
                "utility": self.utility,
                "market_price": self.market_price,
                "delivery": self.delivery,
                "cost": self.cost,
            }
        )


def reject_rows(keep: np.ndarray, bad: np.ndarray, reason: str, report: ValidationReport) -> None:
    """Count rows newly found bad under ``reason`` (each row is counted once, by its first reason)."""
    newly = bad & keep
    n = int(newly.sum())
    if n:
        report.reasons[reason] += n
        keep &= ~newly


def validate_frame(frame: pd.DataFrame, source: str = "log") -> tuple[pd.DataFrame, ValidationReport]:
    """Check a raw frame against the schema; return the valid rows (in their original order) and the report.

    ``slot`` may be replaced by ``timestamp`` (seconds, or anything pandas parses as a datetime):
    the slot is then the 30-minute bucket of the time of day, and rows are ordered by timestamp.
    """
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if "slot" not in frame.columns and "timestamp" not in frame.columns:
        missing.append("slot (or timestamp)")
    if missing:
        raise SchemaError(
            f"{source}: missing column(s) {', '.join(missing)}; have {', '.join(map(str, frame.columns))}"
        )

    report = ValidationReport(n_rows=len(frame))
    keep = np.ones(len(frame), dtype=bool)
    frame = frame.reset_index(drop=True)

    arrival: np.ndarray | None = None
    if "slot" not in frame.columns:
        slot_of_day, arrival = _slot_from_timestamp(frame["timestamp"], keep, report)
        frame = frame.assign(slot=slot_of_day)
    numeric = {}
    for col in ("day", "slot", "utility", "market_price", "delivery", *[c for c in OPTIONAL_COLUMNS if c in frame]):
        values = pd.to_numeric(frame[col], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        numeric[col] = values
        reject_rows(keep, ~np.isfinite(values), f"{col} missing or not a finite number", report)

    reject_rows(keep, numeric["day"] != np.round(numeric["day"]), "day not an integer", report)
    reject_rows(keep, (numeric["day"] < 0) | (numeric["day"] > MAX_DAY), f"day outside 0..{MAX_DAY}", report)
    slot = numeric["slot"]
    reject_rows(keep, slot != np.round(slot), "slot not an integer", report)
    reject_rows(keep, (slot < 0) | (slot >= SLOTS_PER_DAY), f"slot outside 0..{SLOTS_PER_DAY - 1}", report)
    reject_rows(keep, numeric["utility"] <= 0, "utility <= 0", report)
    reject_rows(keep, numeric["market_price"] < 0, "market_price < 0", report)
    reject_rows(keep, numeric["delivery"] < 0, "delivery < 0", report)
    if "cost" in numeric:
        reject_rows(keep, numeric["cost"] < 0, "cost < 0", report)

    # With timestamps, arrival order is timestamp order (stable: equal stamps keep file order).
    order = np.argsort(arrival[keep], kind="stable") if arrival is not None else slice(None)
    out = pd.DataFrame(
        {
            "day": numeric["day"][keep][order].astype(np.int64),
            "slot": numeric["slot"][keep][order].astype(np.int64),
            "utility": numeric["utility"][keep][order],
            "market_price": numeric["market_price"][keep][order],
            "delivery": numeric["delivery"][keep][order],
            "cost": (numeric["cost"] if "cost" in numeric else numeric["market_price"])[keep][order],
        }
    )
    return out, report


def _slot_from_timestamp(stamp: pd.Series, keep: np.ndarray, report: ValidationReport) -> tuple[np.ndarray, np.ndarray]:
    """(30-minute slot of the time of day, arrival key) of each row.

    Numbers are seconds (since midnight or since the epoch); anything else is parsed as a datetime.
    """
    if pd.api.types.is_numeric_dtype(stamp):
        seconds = stamp.to_numpy(dtype=np.float64, na_value=np.nan)
        arrival = seconds
    else:
        parsed = pd.to_datetime(stamp, errors="coerce")
        seconds = (parsed.dt.hour * 3600 + parsed.dt.minute * 60 + parsed.dt.second).to_numpy(
            dtype=np.float64, na_value=np.nan
        )
        arrival = np.where(parsed.isna(), np.nan, parsed.astype("int64").to_numpy(dtype=np.float64))
    reject_rows(keep, ~np.isfinite(seconds), "timestamp missing or unparseable", report)
    slot = np.floor(np.mod(np.nan_to_num(seconds), 24 * 3600) / SLOT_SECONDS)
    return np.where(np.isfinite(seconds), slot, np.nan), arrival


def split_days(valid: pd.DataFrame) -> dict[int, DayLog]:
    """Group validated rows into DayLogs, slot-ordered with arrival order kept within each slot."""
    days: dict[int, DayLog] = {}
    for day, rows in valid.groupby("day", sort=True):
        order = np.argsort(rows["slot"].to_numpy(), kind="stable")
        rows = rows.iloc[order]
        counts = np.bincount(rows["slot"].to_numpy(), minlength=SLOTS_PER_DAY)
        days[int(day)] = DayLog(
            day=int(day),
            utility=np.ascontiguousarray(rows["utility"].to_numpy(np.float64)),
            market_price=np.ascontiguousarray(rows["market_price"].to_numpy(np.float64)),
            delivery=np.ascontiguousarray(rows["delivery"].to_numpy(np.float64)),
            cost=np.ascontiguousarray(rows["cost"].to_numpy(np.float64)),
            slot_offsets=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
        )
    return days
