"""``cbrl-syn``: the logs of the CBRL reference code (github.com/HaozheJasper/CBRL_KDD22).

What is mirrored, from ``python/make_yewu.py`` (``get_df_from_file`` and ``dump_df_each``) and
``python/auction_simulator/envs/auction_market.py`` (``FileReader.read_data`` and
``LoaderTemplate.update_df``):

* one CSV per day, written by ``final.to_csv(folder + '/{day}.csv', index=False)``: comma-separated,
  a header row, no index column; the file name is the day, e.g. ``0901.csv`` (month and day);
* columns ``wkday, hr, min, user, pid, k2, dsp_pctr, pppc, pctr, costprice, click, rev`` (only
  ``hr, min, pppc, pctr, costprice, rev`` are used here; older dumps name ``pppc`` ``ppc`` and
  ``click`` ``clk1``, which the reference renames, and so does this importer);
* rows in arrival order (the reference groups a day by ``time_slot`` without reordering);
* ``time_slot = hr * 2 + min // 30`` for 30-minute slots, ``value = pctr * pppc``, a bid wins iff
  ``ratio * value > costprice * 1e-3`` and pays ``costprice * 1e-3``; revenue is ``rev``;
* a missing ``rev`` means no revenue: the reference reads it with ``rev.fillna(0.)``. So does this
  importer, and it counts such rows under ``notes`` in the summary and the manifest.

The synthetic environment the reference ships (``syn_cbrl.zip``) samples data with these same columns.
Mapping: ``utility = pctr * pppc``, ``market_price = costprice / 1000``, ``slot = hr * 2 + min // 30``;
``delivery = rev`` (``realized``, the default) or ``pctr * pppc`` (``expected``: the predicted value, i.e.
the utility itself; ``rev`` is then neither read nor required). The source has no MC constraints: each
day's ``(L, B)`` is drawn by :mod:`training.market.constraints`, or read from a constraints file.

``src`` is a directory of per-day files (``.csv``, ``.csv.gz``, ``.parquet``, ``.pq``; hidden files
and sub-directories are skipped) or a single file. The day id of a file is the last run of digits in
its name (``0901.csv`` is day 901); if a file name has no digits, or two names give the same number,
days are numbered 0, 1, ... in sorted file-name order instead. A single file with a ``day`` (or the
reference's ``day_no``) column holds many days; without one it is one day, numbered from its name.
The manifest records which file became which day.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from training.market.importers.common import (
    Converted,
    ProgressCallback,
    header,
    log_files,
    not_integer_in,
    numeric,
    require,
)
from training.market.logs import read_frame
from training.market.schema import ValidationReport, reject_rows

CBRL_COLUMNS: tuple[str, ...] = ("hr", "min", "pppc", "pctr", "costprice", "rev")
"""The reference columns the ``cbrl-syn`` mapping needs (``rev`` only for realized delivery)."""

CBRL_ALIASES: dict[str, str] = {"ppc": "pppc", "clk1": "click"}
"""Older reference dumps' column names and their current names (as ``LoaderTemplate.update_df`` renames)."""

CBRL_DAY_COLUMNS: tuple[str, ...] = ("day", "day_no")
"""Columns that hold the day id when one file holds many days (``day_no`` is the reference's)."""

CBRL_COST_UNIT = 1000.0
"""``costprice`` is in thousandths of the value unit (the reference pays ``costprice * 1e-3``)."""

REV_NOTE = "rev missing, read as 0 (reference convention: rev.fillna(0))"


def day_ids_from_names(files: list[Path]) -> dict[Path, int]:
    """Day id per file: the last run of digits in its name, or sorted-name order if that is not usable."""
    numbers: dict[Path, int] = {}
    for path in files:
        stem = path.name.split(".", 1)[0]
        digits = re.findall(r"\d+", stem)
        if not digits:
            break
        numbers[path] = int(digits[-1])
    if len(numbers) == len(files) and len(set(numbers.values())) == len(files):
        return numbers
    return {path: position for position, path in enumerate(files)}


def needed_columns(delivery: str) -> tuple[str, ...]:
    return CBRL_COLUMNS if delivery == "realized" else tuple(c for c in CBRL_COLUMNS if c != "rev")


def check_cbrl_columns(files: list[Path], delivery: str) -> None:
    """Every file has the columns the mapping reads (headers only: run before any row is read)."""
    for path in files:
        require([CBRL_ALIASES.get(c, c) for c in header(path)], needed_columns(delivery), str(path))


def convert_cbrl(src: Path, delivery: str, progress: ProgressCallback | None) -> Converted:
    """The reference dumps at ``src`` as schema columns; ``delivery`` is ``realized`` (rev) or ``expected``."""
    files = log_files(src)
    day_of_file = day_ids_from_names(files)
    needed = needed_columns(delivery)
    report = ValidationReport()
    notes: Counter[str] = Counter()
    parts: list[pd.DataFrame] = []
    day_source: dict[str, int | str] = {}
    for done, path in enumerate(files, start=1):
        raw = read_frame(path).rename(columns=CBRL_ALIASES)
        require(list(raw.columns), needed, str(path))
        day_column = next((c for c in CBRL_DAY_COLUMNS if c in raw.columns), None)
        day_source[path.name] = f"column {day_column}" if day_column else day_of_file[path]
        report.n_rows += len(raw)
        keep = np.ones(len(raw), dtype=bool)
        # An hour of 24 or a minute of 75 still maps to an in-range slot, so check them before mapping.
        hour, minute = numeric(raw, "hr"), numeric(raw, "min")
        reject_rows(keep, not_integer_in(hour, 0, 23), "hr not an integer in 0..23", report)
        reject_rows(keep, not_integer_in(minute, 0, 59), "min not an integer in 0..59", report)
        # utility = pctr * pppc: two negatives would multiply into a plausible utility
        pctr, pppc = numeric(raw, "pctr"), numeric(raw, "pppc")
        utility = pctr * pppc
        if delivery == "realized":
            revenue = numeric(raw, "rev")
            missing_rev = np.isnan(revenue) & raw["rev"].isna().to_numpy()
            if missing_rev.any():
                notes[REV_NOTE] += int(missing_rev.sum())
                revenue = np.where(missing_rev, 0.0, revenue)
        else:
            revenue = utility
        reject_rows(keep, pctr < 0, "pctr < 0", report)
        reject_rows(keep, pppc < 0, "pppc < 0", report)
        day = numeric(raw, day_column) if day_column else np.full(len(raw), float(day_of_file[path]))
        with np.errstate(invalid="ignore"):  # NaN hours and minutes are already rejected above
            slot = hour * 2 + minute // 30
        mapped = pd.DataFrame(
            {
                "day": day,
                "slot": slot,
                "utility": utility,
                "market_price": numeric(raw, "costprice") / CBRL_COST_UNIT,
                "delivery": revenue,
            }
        )
        parts.append(mapped[keep])
        if progress:
            progress("reading", done, len(files))
    frame = pd.concat(parts, ignore_index=True)
    return Converted(
        frame=frame,
        report=report,
        constraints=None,
        notes=notes,
        details={
            "files": day_source,
            "mapping": {
                "utility": "pctr * pppc",
                "market_price": "costprice / 1000",
                "delivery": "rev" if delivery == "realized" else "pctr * pppc",
                "slot": "hr * 2 + min // 30",
            },
        },
    )
