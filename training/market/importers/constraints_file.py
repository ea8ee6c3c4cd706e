"""Per-day MC constraints read from a file (``rcb market import --constraints-file FILE``).

The file is CSV (``.csv``, ``.csv.gz``) or Parquet (``.parquet``, ``.pq``) with one row per day and the
columns ``day, roi_target, budget`` (others are ignored): ``day`` an integer day id of the schema,
``roi_target`` (L) and ``budget`` (B) positive finite numbers. The constraints decide every MC figure
of the market, so the file is read strictly: a malformed value or a day given twice is an error naming
the row, never a row left out. Matching it to the logs is :func:`match_days`: every imported day must
have a row (an error otherwise); rows for days absent from the logs are left out and reported (a
constraints file may cover more days than one import reads).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from training.market.dataset import MCConstraints, file_sha256
from training.market.importers.common import numeric, require, shown_days
from training.market.logs import read_frame
from training.market.schema import MAX_DAY, SchemaError

CONSTRAINT_COLUMNS: tuple[str, ...] = ("day", "roi_target", "budget")

UNUSED_REASON = "day not in the logs"
"""Why a row of the constraints file is left out: no valid impression of its day was imported."""

SHOWN_PROBLEMS = 3
"""How many bad rows an error message names (then ``and N more``)."""


@dataclass(frozen=True)
class ConstraintsFile:
    """The per-day ``(L, B)`` of a constraints file, keyed by day."""

    path: Path
    constraints: dict[int, MCConstraints]
    sha256: str

    @property
    def n_rows(self) -> int:
        return len(self.constraints)


def _cell(value: object) -> str:
    """A cell as a message shows it: text quoted, numbers plain (``nan`` for an empty cell)."""
    return repr(value) if isinstance(value, str) else str(value)


def read_constraints_file(path: Path) -> ConstraintsFile:
    """Read and check a constraints file; raise :class:`SchemaError` naming its bad rows."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"constraints file {path}: no such file")
    raw = read_frame(path)
    require(list(raw.columns), CONSTRAINT_COLUMNS, f"constraints file {path}")
    if raw.empty:
        raise SchemaError(f"constraints file {path}: no rows")
    day, roi_target, budget = (numeric(raw, c) for c in CONSTRAINT_COLUMNS)
    problems: list[str] = []
    seen: dict[int, int] = {}
    with np.errstate(invalid="ignore"):
        for i in range(len(raw)):
            row = f"row {i + 1}"  # data rows, the header not counted
            d = day[i]
            if not (np.isfinite(d) and d == round(d) and 0 <= d <= MAX_DAY):
                problems.append(f"{row}: day {_cell(raw['day'].iloc[i])} is not an integer in 0..{MAX_DAY}")
                continue
            for name, value in (("roi_target", roi_target[i]), ("budget", budget[i])):
                if not (np.isfinite(value) and value > 0):
                    problems.append(f"{row} (day {int(d)}): {name} {_cell(raw[name].iloc[i])} is not a positive number")
            if int(d) in seen:
                problems.append(f"{row}: day {int(d)} already given in row {seen[int(d)] + 1}")
            else:
                seen[int(d)] = i
    if problems:
        more = f"; and {len(problems) - SHOWN_PROBLEMS} more" if len(problems) > SHOWN_PROBLEMS else ""
        raise SchemaError(f"constraints file {path}: {'; '.join(problems[:SHOWN_PROBLEMS])}{more}")
    constraints = {
        int(day[i]): MCConstraints(roi_target=float(roi_target[i]), budget=float(budget[i])) for i in range(len(raw))
    }
    return ConstraintsFile(path=path, constraints=constraints, sha256=file_sha256(path))


def match_days(file: ConstraintsFile, days: list[int]) -> tuple[dict[int, MCConstraints], dict[str, Any]]:
    """The constraints of ``days`` (the imported days) and what the manifest records about the file.

    A day without a row is an error; rows for other days are left out and counted under :data:`UNUSED_REASON`.
    """
    missing = sorted(set(days) - set(file.constraints))
    if missing:
        raise ValueError(
            f"constraints file {file.path}: no row for day(s) {shown_days(missing)} of the logs;"
            " every imported day needs its roi_target and budget"
        )
    unused = sorted(set(file.constraints) - set(days))
    record: dict[str, Any] = {
        "path": str(file.path),
        "sha256": file.sha256,
        "n_rows": file.n_rows,
        "n_used": file.n_rows - len(unused),
        "left_out": {UNUSED_REASON: len(unused)} if unused else {},
        "days_not_in_logs": unused,
    }
    return {d: file.constraints[d] for d in days}, record
