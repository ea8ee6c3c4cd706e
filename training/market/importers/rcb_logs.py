"""``rcb``: logs already in the project's impression-log schema (docs/data-schema.md), in any number of files.

Each file (CSV or Parquet) holds rows ``day, slot | timestamp, utility, market_price, delivery[, cost]``
for any number of days; a day's rows may be spread over several files, and are merged. Arrival order
within a slot is the ``timestamp`` order where the rows carry one (ties keep file order), else file
order: files in sorted name order, rows in file order. Every row of one day must come from files that
all have a ``timestamp`` column or all lack one, since an order between timed and untimed rows is not
defined.

``timestamp`` is the number of seconds since the day's midnight, ``0 <= timestamp < 86400`` (fractions
allowed); ``slot = floor(timestamp / 1800)``. A datetime (or a string that reads as a date or time) is
refused: the day of a row is its ``day`` column, an episode id, not a calendar date. A file with both
``slot`` and ``timestamp`` keeps the rows whose slot is ``floor(timestamp / 1800)`` and leaves out the
others (``slot does not match timestamp``).

Delivery: ``realized`` (the default) imports the ``delivery`` column, the logged outcome; ``expected``
imports ``expected_delivery`` where a file has that column, else the ``utility`` itself (the predicted
value of the impression), and then needs no ``delivery`` column.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from training.market.importers.common import Converted, ProgressCallback, header, log_files, numeric
from training.market.logs import read_frame
from training.market.schema import SLOT_SECONDS, SchemaError, ValidationReport, reject_rows

SECONDS_PER_DAY = 24 * 3600

TIMESTAMP_HELP = "seconds since the day's midnight, a number with 0 <= timestamp < 86400"

TIMESTAMP_RANGE = "timestamp outside 0 <= t < 86400 (seconds since the day's midnight)"
"""Why a row whose timestamp is not a second of its day is left out."""


def _reads_as_datetime(value: object) -> bool:
    try:
        pd.Timestamp(str(value))
    except (ValueError, TypeError, OverflowError):
        return False
    return True


def timestamp_seconds(column: pd.Series, source: str) -> np.ndarray:
    """The seconds of the day of each row (NaN where missing or not a number); datetimes are refused."""
    refusal = f"{source}: timestamp must be {TIMESTAMP_HELP}, with the day in the day column"
    if pd.api.types.is_datetime64_any_dtype(column) or pd.api.types.is_timedelta64_dtype(column):
        raise SchemaError(f"{refusal}; this file stores {column.dtype} values")
    values = pd.to_numeric(column, errors="coerce")
    if not pd.api.types.is_numeric_dtype(column):
        text = column[values.isna() & column.notna()]
        text = text[text.astype(str).str.strip() != ""]
        if len(text) and _reads_as_datetime(text.iloc[0]):
            raise SchemaError(f"{refusal}, not a date or time such as {str(text.iloc[0])!r}")
    return values.to_numpy(dtype=np.float64, na_value=np.nan)


def _require_schema_columns(columns: list[str], delivery: str, source: str) -> None:
    needed = ["day", "utility", "market_price", *(["delivery"] if delivery == "realized" else [])]
    missing = [c for c in needed if c not in columns]
    if "slot" not in columns and "timestamp" not in columns:
        missing.append("slot (or timestamp)")
    if missing:
        raise SchemaError(f"{source}: missing column(s) {', '.join(missing)}; have {', '.join(map(str, columns))}")


def check_rcb_columns(files: list[Path], delivery: str) -> None:
    """Every file has the columns the import reads (headers only: run before any row is read)."""
    for path in files:
        _require_schema_columns(header(path), delivery, str(path))


def convert_rcb(src: Path, delivery: str, progress: ProgressCallback | None) -> Converted:
    """The schema logs at ``src`` (a file, or a directory of files) as one frame in arrival order."""
    files = log_files(src)
    report = ValidationReport()
    parts: list[pd.DataFrame] = []
    recorded: dict[str, dict[str, object]] = {}
    for number, path in enumerate(files):
        raw = read_frame(path)
        _require_schema_columns([str(c) for c in raw.columns], delivery, str(path))
        report.n_rows += len(raw)
        keep = np.ones(len(raw), dtype=bool)
        timed = "timestamp" in raw.columns
        utility = numeric(raw, "utility")
        market_price = numeric(raw, "market_price")
        if timed:
            seconds = timestamp_seconds(raw["timestamp"], str(path))
            reject_rows(keep, ~np.isfinite(seconds), "timestamp missing or not a number", report)
            with np.errstate(invalid="ignore"):
                reject_rows(keep, (seconds < 0) | (seconds >= SECONDS_PER_DAY), TIMESTAMP_RANGE, report)
                slot = np.floor(seconds / SLOT_SECONDS)
                if "slot" in raw.columns:
                    reject_rows(keep, numeric(raw, "slot") != slot, "slot does not match timestamp", report)
        else:
            slot = numeric(raw, "slot")
            seconds = np.zeros(len(raw))  # no timestamp: a constant key, so the stable sort keeps file order
        if delivery == "realized":
            delivered, delivered_from = numeric(raw, "delivery"), "delivery"
        elif "expected_delivery" in raw.columns:
            delivered, delivered_from = numeric(raw, "expected_delivery"), "expected_delivery"
            reject_rows(keep, ~np.isfinite(delivered), "expected_delivery missing or not a finite number", report)
            with np.errstate(invalid="ignore"):
                reject_rows(keep, delivered < 0, "expected_delivery < 0", report)
        else:
            delivered, delivered_from = utility, "utility"
        day = numeric(raw, "day")
        mapped = pd.DataFrame(
            {
                "day": day,
                "slot": slot,
                "utility": utility,
                "market_price": market_price,
                "delivery": delivered,
                # The schema's default: a win pays the market price (second price).
                "cost": numeric(raw, "cost") if "cost" in raw.columns else market_price,
                "_arrival": seconds,
                "_timed": timed,
                "_file": number,
            }
        )
        parts.append(mapped[keep])
        whole = day[np.isfinite(day) & (day == np.round(day))]
        recorded[path.name] = {
            "rows": len(raw),
            "days": [int(d) for d in np.unique(whole)],
            "slot": "floor(timestamp / 1800)" if timed else "slot",
            "delivery": delivered_from,
        }
        if progress:
            progress("reading", number + 1, len(files))
    frame = pd.concat(parts, ignore_index=True)
    _refuse_mixed_timing(frame, files)
    # Stable: rows with equal keys (the same second, or no timestamp at all) keep file order. Days are grouped
    # afterwards (training.market.schema.split_days keeps the order within a day), so interleaving days is harmless.
    frame = frame.iloc[np.argsort(frame["_arrival"].to_numpy(), kind="stable")].reset_index(drop=True)
    slots = sorted({str(r["slot"]) for r in recorded.values()})
    delivered_all = sorted({str(r["delivery"]) for r in recorded.values()})
    return Converted(
        frame=frame.drop(columns=["_arrival", "_timed", "_file"]),
        report=report,
        constraints=None,
        details={
            "files": recorded,
            "mapping": {
                "slot": " or ".join(slots),
                "delivery": " or ".join(delivered_all),
                "cost": "cost, or market_price where a file has no cost column",
                "arrival": "timestamp order where given (ties: file order), else file order",
            },
        },
    )


def _refuse_mixed_timing(frame: pd.DataFrame, files: list[Path]) -> None:
    """A day may not mix rows with and without a timestamp: their order within a slot would be undefined."""
    kinds = frame.groupby("day")["_timed"].nunique()
    mixed = kinds[kinds > 1]
    if mixed.empty:
        return
    day = mixed.index[0]
    rows = frame[frame["day"] == day]
    with_stamp = files[int(rows.loc[rows["_timed"], "_file"].iloc[0])].name
    without = files[int(rows.loc[~rows["_timed"], "_file"].iloc[0])].name
    shown = f"{int(day)}" if float(day).is_integer() else f"{day}"
    raise SchemaError(
        f"day {shown} has rows with a timestamp ({with_stamp}) and rows without one ({without}): give every file"
        " of a day a timestamp, or none, so the arrival order within a slot is defined"
    )
