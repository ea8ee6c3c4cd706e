"""Reading and writing impression logs (Parquet, CSV accepted on input) in the schema of docs/data-schema.md."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from training.files import atomic_write
from training.market.schema import DayLog, InvalidRowsError, SchemaError, ValidationReport, split_days, validate_frame

READABLE_SUFFIXES = (".parquet", ".pq", ".csv", ".csv.gz")


def read_frame(path: Path) -> pd.DataFrame:
    """Read a Parquet or CSV file as a raw frame (no validation)."""
    name = path.name.lower()
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    try:
        if name.endswith((".parquet", ".pq")):
            return pd.read_parquet(path)
        if name.endswith((".csv", ".csv.gz")):
            return pd.read_csv(path)
    except (ValueError, OSError, pa.ArrowException) as exc:  # empty, truncated or not the format its name says
        raise SchemaError(f"{path}: cannot be read ({exc})") from None
    raise SchemaError(f"{path}: unknown log format (expected one of {', '.join(READABLE_SUFFIXES)})")


def read_log(path: Path, on_invalid: str = "error") -> tuple[dict[int, DayLog], ValidationReport]:
    """Read a log file into DayLogs keyed by day.

    ``on_invalid="error"`` raises :class:`InvalidRowsError` naming every reason and count;
    ``on_invalid="drop"`` leaves the invalid rows out and returns the report, so the caller can show
    and record what was left out.
    """
    if on_invalid not in ("error", "drop"):
        raise ValueError(f"on_invalid must be 'error' or 'drop', not {on_invalid!r}")
    valid, report = validate_frame(read_frame(path), source=str(path))
    if report.n_invalid and on_invalid == "error":
        raise InvalidRowsError(report, str(path))
    return split_days(valid), report


def _narrowest_float(values: np.ndarray) -> pa.DataType:
    """float32 when it holds every value exactly (the generator emits such values), else float64."""
    as32 = values.astype(np.float32)
    return pa.float32() if np.array_equal(as32.astype(np.float64), values) else pa.float64()


def write_day(day: DayLog, path: Path) -> None:
    """Write one day as zstd Parquet, losslessly: float columns narrow to float32 only when exact.

    The file is written beside ``path`` and moved into place: a crash never leaves half a day, and a day file
    hard-linked into another market (``rcb market subset``) is replaced here, never rewritten under the other."""
    frame = day.to_frame()
    fields = [pa.field("day", pa.int32()), pa.field("slot", pa.int8())]
    fields += [
        pa.field(c, _narrowest_float(frame[c].to_numpy())) for c in ("utility", "market_price", "delivery", "cost")
    ]
    table = pa.Table.from_pandas(frame, preserve_index=False).cast(pa.schema(fields))
    atomic_write(path, lambda tmp: pq.write_table(table, tmp, compression="zstd"))
