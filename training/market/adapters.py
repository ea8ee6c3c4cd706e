"""Importers of public impression-log formats into the schema of docs/data-schema.md (``rcb market import``).

Each adapter reads its format, checks what only the source columns can tell (an hour of 24 maps to a
valid-looking slot once converted), maps the columns to ``day, slot, utility, market_price, delivery``
and hands the frame to :func:`training.market.schema.validate_frame`. Every rejected row is counted
under the reason that rejected it, in the :class:`ImportSummary` and in the manifest; nothing is
dropped silently. :func:`import_market` then writes a market directory like ``rcb market generate``
does: one ``day_XXX.parquet`` per day plus ``manifest.json``.

Formats
-------
``cbrl-syn``: the logs of the CBRL reference code (github.com/HaozheJasper/CBRL_KDD22). What we
mirror, from ``python/make_yewu.py`` (``get_df_from_file`` and ``dump_df_each``) and
``python/auction_simulator/envs/auction_market.py`` (``FileReader.read_data`` and
``LoaderTemplate.update_df``):

* one CSV per day, written by ``final.to_csv(folder + '/{day}.csv', index=False)``: comma-separated,
  a header row, no index column; the file name is the day, e.g. ``0901.csv`` (month and day);
* columns ``wkday, hr, min, user, pid, k2, dsp_pctr, pppc, pctr, costprice, click, rev`` (only
  ``hr, min, pppc, pctr, costprice, rev`` are used here; older dumps name ``pppc`` ``ppc`` and
  ``click`` ``clk1``, which the reference renames, and so do we);
* rows in arrival order (the reference groups a day by ``time_slot`` without reordering);
* ``time_slot = hr * 2 + min // 30`` for 30-minute slots, ``value = pctr * pppc``, a bid wins iff
  ``ratio * value > costprice * 1e-3`` and pays ``costprice * 1e-3``; revenue is ``rev``;
* a missing ``rev`` means no revenue: the reference reads it with ``rev.fillna(0.)``. We do the same
  and count such rows under ``notes`` in the summary and the manifest.

The synthetic environment the reference ships (``syn_cbrl.zip``) samples data with these same columns.
Mapping: ``utility = pctr * pppc``, ``market_price = costprice / 1000``, ``delivery = rev``,
``slot = hr * 2 + min // 30``. The source has no MC constraints, so each day's ``(L, B)`` is drawn by
:mod:`training.market.constraints` (recipe ``prior`` by default, ``paper`` on request) with
``default_rng([seed, day, 1])``, as the generator does.

``src`` is a directory of per-day files (``.csv``, ``.csv.gz``, ``.parquet``, ``.pq``; hidden files
and sub-directories are skipped) or a single file. The day id of a file is the last run of digits in
its name (``0901.csv`` is day 901); if a file name has no digits, or two names give the same number,
days are numbered 0, 1, ... in sorted file-name order instead. A single file with a ``day`` (or the
reference's ``day_no``) column holds many days; without one it is one day, numbered from its name.
The manifest records which file became which day.

``auctionnet``: the NeurIPS 2024 auto-bidding competition data (AuctionNet, alimama-tech; layout from
the README of github.com/alimama-tech/NeurIPS_Auto_Bidding_General_Track_Baseline and its
``bidding_train_env/dataloader/rl_data_generator.py``):

* one CSV per delivery period, ``data/traffic/period-7.csv`` ... ``period-13.csv``, comma-separated
  with a header row (read with a plain ``pd.read_csv``);
* columns ``deliveryPeriodIndex, advertiserNumber, advertiserCategoryIndex, budget, CPAConstraint,
  timeStepIndex, remainingBudget, pvIndex, pValue, pValueSigma, bid, xi, adSlot, cost, isExposed,
  conversionAction, leastWinningCost, isEnd``;
* one row per (advertiser, impression opportunity): all 48 advertisers appear for every ``pvIndex``;
  ``budget`` and ``CPAConstraint`` are per (period, advertiser); a period has 48 time steps
  ``timeStepIndex`` 0..47 (the baseline computes ``timeleft = (48 - t) / 48``);
* ``pvIndex`` grows through the period, so it is the arrival order within a step.

Mapping (with ``V`` the value of one conversion): ``day = deliveryPeriodIndex``,
``slot = timeStepIndex``, ``utility = pValue * V``, ``delivery = conversionAction * V``,
``market_price = leastWinningCost``; MC ``roi_target = V / CPAConstraint`` (ROI = V * conversions /
cost >= V / CPA is exactly cost per conversion <= CPA) and ``budget = budget``. With several advertisers
in the logs one must be chosen. Caveats of the real data, inherited by the mapping: ``conversionAction``
is only observed where the logged advertiser won an exposed slot (elsewhere it is 0), and
``leastWinningCost`` is the 4th-highest bid (the price of the last of 3 ad slots), not the top
competing bid.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from model.contract import SLOTS_PER_DAY
from training.market.constraints import (
    ConstraintRecipe,
    curve_of,
    draw_market_constraints,
    draw_paper_constraints,
)
from training.market.dataset import (
    MANIFEST,
    SPLITS,
    DayEntry,
    Market,
    MCConstraints,
    file_sha256,
    listed_day_files,
)
from training.market.logs import READABLE_SUFFIXES, read_frame, write_day
from training.market.schema import SchemaError, ValidationReport, reject_rows, split_days, validate_frame
from training.replay.simulator import DayIndex

SUPPORTED_FORMATS: tuple[str, ...] = ("cbrl-syn", "auctionnet")

ProgressCallback = Callable[[str, int, int], None]
"""``progress(stage, done, total)``: called as files are read and as days are written."""

CBRL_COLUMNS: tuple[str, ...] = ("hr", "min", "pppc", "pctr", "costprice", "rev")
"""The reference columns the ``cbrl-syn`` mapping needs."""

CBRL_ALIASES: dict[str, str] = {"ppc": "pppc", "clk1": "click"}
"""Older reference dumps' column names and their current names (as ``LoaderTemplate.update_df`` renames)."""

CBRL_DAY_COLUMNS: tuple[str, ...] = ("day", "day_no")
"""Columns that hold the day id when one file holds many days (``day_no`` is the reference's)."""

CBRL_COST_UNIT = 1000.0
"""``costprice`` is in thousandths of the value unit (the reference pays ``costprice * 1e-3``)."""

AUCTIONNET_COLUMNS: tuple[str, ...] = (
    "deliveryPeriodIndex",
    "timeStepIndex",
    "pValue",
    "leastWinningCost",
    "conversionAction",
    "CPAConstraint",
    "budget",
)
"""The AuctionNet columns the mapping needs."""

AUCTIONNET_OPTIONAL: tuple[str, ...] = ("advertiserNumber", "pvIndex")
"""Read when present: which advertiser a row belongs to, and the arrival order."""

AUCTIONNET_CHUNK_ROWS = 1_000_000
"""CSV rows per chunk: a real period file holds ~24M rows (48 advertisers x ~500k opportunities)."""


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
    """Format-specific facts (file -> day, advertiser, value per conversion)."""

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
class _Converted:
    """A source converted to the schema's columns, before schema validation."""

    frame: pd.DataFrame
    """``day, slot, utility, market_price, delivery`` in arrival order, source-rejected rows removed."""
    report: ValidationReport
    """Every source row (``n_rows``) and the rows the format checks rejected, by reason."""
    constraints: dict[int, MCConstraints] | None
    """Per-day MC constraints the source carries, or None to draw them."""
    notes: Counter[str] = field(default_factory=Counter)
    details: dict[str, Any] = field(default_factory=dict)


# ----------------------------------------------------------------------------------------------------------------------
# Shared helpers


def _numeric(frame: pd.DataFrame, column: str) -> np.ndarray:
    """A column as float64, anything non-numeric as NaN."""
    return pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)


def _not_integer_in(values: np.ndarray, low: int, high: int) -> np.ndarray:
    """Rows whose value is NaN, fractional or outside ``low..high``."""
    with np.errstate(invalid="ignore"):
        return ~np.isfinite(values) | (values != np.round(values)) | (values < low) | (values > high)


def _log_files(src: Path) -> list[Path]:
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


def _require(columns: list[str] | pd.Index, needed: tuple[str, ...], source: str) -> None:
    missing = [c for c in needed if c not in columns]
    if missing:
        raise SchemaError(f"{source}: missing column(s) {', '.join(missing)}; have {', '.join(map(str, columns))}")


# ----------------------------------------------------------------------------------------------------------------------
# cbrl-syn


def _day_ids_from_names(files: list[Path]) -> dict[Path, int]:
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


def _convert_cbrl(src: Path, progress: ProgressCallback | None) -> _Converted:
    files = _log_files(src)
    day_of_file = _day_ids_from_names(files)
    report = ValidationReport()
    notes: Counter[str] = Counter()
    parts: list[pd.DataFrame] = []
    day_source: dict[str, int | str] = {}
    for done, path in enumerate(files, start=1):
        raw = read_frame(path).rename(columns=CBRL_ALIASES)
        _require(list(raw.columns), CBRL_COLUMNS, str(path))
        day_column = next((c for c in CBRL_DAY_COLUMNS if c in raw.columns), None)
        day_source[path.name] = f"column {day_column}" if day_column else day_of_file[path]
        report.n_rows += len(raw)
        keep = np.ones(len(raw), dtype=bool)
        # An hour of 24 or a minute of 75 still maps to an in-range slot, so check them before mapping.
        hour, minute = _numeric(raw, "hr"), _numeric(raw, "min")
        reject_rows(keep, _not_integer_in(hour, 0, 23), "hr not an integer in 0..23", report)
        reject_rows(keep, _not_integer_in(minute, 0, 59), "min not an integer in 0..59", report)
        revenue = _numeric(raw, "rev")
        missing_rev = np.isnan(revenue) & raw["rev"].isna().to_numpy()
        if missing_rev.any():
            notes["rev missing, read as 0 (reference convention: rev.fillna(0))"] += int(missing_rev.sum())
            revenue = np.where(missing_rev, 0.0, revenue)
        # utility = pctr * pppc: two negatives would multiply into a plausible utility
        pctr, pppc = _numeric(raw, "pctr"), _numeric(raw, "pppc")
        reject_rows(keep, pctr < 0, "pctr < 0", report)
        reject_rows(keep, pppc < 0, "pppc < 0", report)
        day = _numeric(raw, day_column) if day_column else np.full(len(raw), float(day_of_file[path]))
        with np.errstate(invalid="ignore"):  # NaN hours and minutes are already rejected above
            slot = hour * 2 + minute // 30
        mapped = pd.DataFrame(
            {
                "day": day,
                "slot": slot,
                "utility": pctr * pppc,
                "market_price": _numeric(raw, "costprice") / CBRL_COST_UNIT,
                "delivery": revenue,
            }
        )
        parts.append(mapped[keep])
        if progress:
            progress("reading", done, len(files))
    frame = pd.concat(parts, ignore_index=True)
    return _Converted(
        frame=frame,
        report=report,
        constraints=None,
        notes=notes,
        details={
            "files": day_source,
            "mapping": {
                "utility": "pctr * pppc",
                "market_price": "costprice / 1000",
                "delivery": "rev",
                "slot": "hr * 2 + min // 30",
            },
            "constraints": "drawn (training.market.constraints, default_rng([seed, day, 1]))",
        },
    )


# ----------------------------------------------------------------------------------------------------------------------
# auctionnet


def _auctionnet_chunks(path: Path, columns: list[str], advertiser: int | None) -> Iterator[pd.DataFrame]:
    """The needed columns of one file, in chunks, keeping only ``advertiser``'s rows when one is given."""
    name = path.name.lower()
    if name.endswith((".parquet", ".pq")):
        have = pq.read_schema(path).names
        _require(have, AUCTIONNET_COLUMNS, str(path))
        wanted = [c for c in columns if c in have]
        if advertiser is not None and "advertiserNumber" in have:
            table = pq.read_table(path, columns=wanted, filters=[("advertiserNumber", "=", advertiser)])
        else:
            table = pq.read_table(path, columns=wanted)
        yield table.to_pandas()
        return
    have = list(pd.read_csv(path, nrows=0).columns)
    _require(have, AUCTIONNET_COLUMNS, str(path))
    wanted = [c for c in columns if c in have]
    for chunk in pd.read_csv(path, usecols=wanted, chunksize=AUCTIONNET_CHUNK_ROWS):
        if advertiser is not None and "advertiserNumber" in chunk.columns:
            chunk = chunk[_numeric(chunk, "advertiserNumber") == advertiser]
        yield chunk


def _advertisers_in(files: list[Path]) -> list[int]:
    """Every advertiser number in the files (reads that one column only)."""
    found: set[int] = set()
    for path in files:
        for chunk in _auctionnet_chunks(path, ["advertiserNumber"], None):
            if "advertiserNumber" in chunk.columns:
                values = _numeric(chunk, "advertiserNumber")
                found.update(int(v) for v in np.unique(values[np.isfinite(values)]))
    return sorted(found)


def _per_period_constant(
    day: np.ndarray, values: np.ndarray, keep: np.ndarray, column: str, advertiser: int | None
) -> dict[int, float]:
    """The single value of ``column`` in each period (over kept rows); an error if a period has several."""
    frame = pd.DataFrame({"day": day[keep].astype(np.int64), "value": values[keep]})
    result: dict[int, float] = {}
    for period, group in frame.groupby("day", sort=True):
        distinct = np.unique(group["value"].to_numpy())
        if len(distinct) > 1:
            who = f" of advertiser {advertiser}" if advertiser is not None else ""
            shown = ", ".join(f"{v:g}" for v in distinct[:5]) + (" ..." if len(distinct) > 5 else "")
            raise ValueError(
                f"{column}{who} varies within deliveryPeriodIndex {period} ({shown}); "
                "AuctionNet constraints are per period, so one value is expected"
            )
        result[int(period)] = float(distinct[0])
    return result


def _convert_auctionnet(
    src: Path, value_per_conversion: float | None, advertiser: int | None, progress: ProgressCallback | None
) -> _Converted:
    files = _log_files(src)
    columns = [*AUCTIONNET_COLUMNS, *AUCTIONNET_OPTIONAL]
    chunks: list[pd.DataFrame] = []
    seen: set[int] = set()
    has_advertiser_column = False
    for done, path in enumerate(files, start=1):
        for chunk in _auctionnet_chunks(path, columns, advertiser):
            if "advertiserNumber" in chunk.columns:
                has_advertiser_column = True
                if advertiser is None:
                    numbers = _numeric(chunk, "advertiserNumber")
                    seen.update(int(v) for v in np.unique(numbers[np.isfinite(numbers)]))
                    if len(seen) > 1:
                        # Real logs hold every advertiser for every opportunity: stop reading impressions now.
                        present = ", ".join(map(str, _advertisers_in(files)))
                        raise ValueError(
                            f"{src}: the logs hold several advertisers ({present}); choose one with advertiser=N"
                        )
            chunks.append(chunk)
        if progress:
            progress("reading", done, len(files))
    if advertiser is not None:
        if not has_advertiser_column:
            raise SchemaError(f"{src}: advertiser {advertiser} asked for, but the logs have no advertiserNumber column")
        if not any(len(c) for c in chunks):
            present = ", ".join(map(str, _advertisers_in(files)))
            raise ValueError(f"{src}: no rows of advertiser {advertiser}; advertisers present: {present}")
    if advertiser is None and len(seen) == 1:
        advertiser = seen.pop()  # the only one present: record it
    raw = pd.concat(chunks, ignore_index=True)
    if "pvIndex" in raw.columns:
        # pvIndex numbers the opportunities through the period: it is the arrival order within a step.
        raw = raw.sort_values("pvIndex", kind="stable", ignore_index=True)

    report = ValidationReport(n_rows=len(raw))
    keep = np.ones(len(raw), dtype=bool)
    period = _numeric(raw, "deliveryPeriodIndex")
    step = _numeric(raw, "timeStepIndex")
    cpa = _numeric(raw, "CPAConstraint")
    budget = _numeric(raw, "budget")
    reject_rows(keep, ~np.isfinite(period) | (period != np.round(period)), "deliveryPeriodIndex not an integer", report)
    last_step = SLOTS_PER_DAY - 1
    reject_rows(keep, _not_integer_in(step, 0, last_step), f"timeStepIndex not an integer in 0..{last_step}", report)
    with np.errstate(invalid="ignore"):
        reject_rows(keep, ~(np.isfinite(cpa) & (cpa > 0)), "CPAConstraint missing or <= 0", report)
        reject_rows(keep, ~(np.isfinite(budget) & (budget > 0)), "budget missing or <= 0", report)
    # V defaults to the period's CPA: then L = V / CPA = 1 and the ratios that win sit inside [0, 4]
    # (with V = 1, pValue ~ 0.01 against prices ~ 0.3 would need ratios of ~20).
    value = cpa if value_per_conversion is None else value_per_conversion
    mapped = pd.DataFrame(
        {
            "day": period,
            "slot": step,
            "utility": _numeric(raw, "pValue") * value,
            "market_price": _numeric(raw, "leastWinningCost"),
            "delivery": _numeric(raw, "conversionAction") * value,
        }
    )
    cpa_of = _per_period_constant(period, cpa, keep, "CPAConstraint", advertiser)
    budget_of = _per_period_constant(period, budget, keep, "budget", advertiser)
    constraints = {
        d: MCConstraints(
            roi_target=1.0 if value_per_conversion is None else value_per_conversion / cpa_of[d], budget=budget_of[d]
        )
        for d in cpa_of
    }
    return _Converted(
        frame=mapped[keep].reset_index(drop=True),
        report=report,
        constraints=constraints,
        details={
            "files": [path.name for path in files],
            "advertiser": advertiser,
            "value_per_conversion": "CPAConstraint" if value_per_conversion is None else value_per_conversion,
            "cpa_constraint": {str(d): c for d, c in cpa_of.items()},
            "mapping": {
                "day": "deliveryPeriodIndex",
                "slot": "timeStepIndex",
                "utility": "pValue * V",
                "market_price": "leastWinningCost",
                "delivery": "conversionAction * V",
                "roi_target": "V / CPAConstraint",
                "budget": "budget",
            },
            "constraints": "from source (CPAConstraint, budget)",
        },
    )


# ----------------------------------------------------------------------------------------------------------------------
# The market directory


def split_assignment(days: list[int], ood_days: set[int], test_fraction: float, seed: int) -> dict[int, str]:
    """``ood`` for ``ood_days``; the others, in increasing day order, ``test`` with probability ``test_fraction``.

    The draw is i.i.d. from ``numpy.random.default_rng(seed)`` (one uniform per non-OOD day), so the
    same days, seed and fraction always give the same split.
    """
    rng = np.random.default_rng(seed)
    in_distribution = sorted(d for d in days if d not in ood_days)
    draws = rng.random(len(in_distribution))
    split = {day: ("test" if u < test_fraction else "train") for day, u in zip(in_distribution, draws, strict=True)}
    split.update({day: "ood" for day in days if day in ood_days})
    return split


def _check_out(out: Path, overwrite: bool) -> None:
    """Refuse to replace an existing market unless asked (checked before any reading)."""
    if (out / MANIFEST).exists() and not overwrite:
        raise ValueError(
            f"{out} already holds a market ({MANIFEST}); choose another directory, or overwrite it (--force)"
        )


def _day_file(day: int) -> str:
    return f"day_{day:03d}.parquet"


def import_market(
    fmt: str,
    src: Path,
    out: Path,
    *,
    seed: int = 0,
    test_fraction: float = 0.5,
    ood_days: set[int] | None = None,
    value_per_conversion: float | None = None,
    advertiser: int | None = None,
    progress: ProgressCallback | None = None,
    overwrite: bool = False,
    constraints: str = "prior",
) -> ImportSummary:
    """Convert the ``fmt`` logs at ``src`` into a market directory ``out``; return what was done.

    ``ood_days`` go to the ``ood`` split; the other days are split train/test by
    :func:`split_assignment`. Invalid rows are left out and counted by reason (summary and manifest).
    ``value_per_conversion`` and ``advertiser`` only apply to ``auctionnet``; V defaults to each
    period's CPAConstraint (so L = 1). ``constraints`` names the recipe that draws MC constraints for a
    source without them (:mod:`training.market.constraints`: ``prior`` or ``paper``).
    """
    recipe = ConstraintRecipe(kind=constraints)
    if fmt not in SUPPORTED_FORMATS:
        raise ValueError(f"unknown log format {fmt!r}; supported: {', '.join(SUPPORTED_FORMATS)}")
    if not 0.0 <= test_fraction <= 1.0:
        raise ValueError(f"test_fraction must be in [0, 1], not {test_fraction}")
    if seed < 0:
        raise ValueError(f"seed must be >= 0, not {seed}")
    if value_per_conversion is not None and not (math.isfinite(value_per_conversion) and value_per_conversion > 0):
        raise ValueError(f"value_per_conversion must be a positive number, not {value_per_conversion}")
    if fmt != "auctionnet" and advertiser is not None:
        raise ValueError(f"advertiser only applies to the auctionnet format, not {fmt}")
    ood_days = set(ood_days or ())
    src, out = Path(src), Path(out)
    if out.resolve() == src.resolve():
        raise ValueError(f"--out {out} is the source itself; choose another directory")
    _check_out(out, overwrite)

    if fmt == "cbrl-syn":
        converted = _convert_cbrl(src, progress)
    else:
        converted = _convert_auctionnet(src, value_per_conversion, advertiser, progress)
    valid, schema_report = validate_frame(converted.frame, source=str(src))
    report = ValidationReport(n_rows=converted.report.n_rows, reasons=converted.report.reasons + schema_report.reasons)
    logs = split_days(valid)
    if not logs:
        raise ValueError(f"{src}: no valid rows ({report.n_rows} read; {report.describe()})")
    unknown_ood = sorted(ood_days - set(logs))
    if unknown_ood:
        more = f" and {len(unknown_ood) - 10:,} more" if len(unknown_ood) > 10 else ""
        shown = f"[{', '.join(map(str, unknown_ood[:10]))}{more}]"
        raise ValueError(f"ood_days {shown} are not in the logs (days {min(logs)}..{max(logs)})")
    splits = split_assignment(list(logs), ood_days, test_fraction, seed)

    # Days are written into a staging directory inside the destination (one file system, so moving them in is a
    # rename) and moved in only once every one is written and every constraint drawn: a failure before that leaves
    # an existing market as it was. The moves and the new manifest are the commit.
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    staging = out / f".import-{os.getpid()}.{uuid.uuid4().hex}"
    staging.mkdir()
    committed = False
    try:
        entries: list[DayEntry] = []
        curves = {}
        for done, (day, log) in enumerate(sorted(logs.items()), start=1):
            name = _day_file(day)
            write_day(log, staging / name)
            regime: dict[str, Any] = {}
            if converted.constraints is not None:
                mc = converted.constraints[day]
            elif recipe.kind == "paper":
                index = DayIndex(log)
                drawn = draw_paper_constraints(index, np.random.default_rng([seed, day, 1]), recipe)
                mc = MCConstraints(roi_target=drawn.roi_target, budget=drawn.budget)
                regime.update(drawn.regime_fields())  # kept for analysis, as the generator does
            else:  # prior: drawn below, once every train day's curve is known
                curves[day] = curve_of(DayIndex(log))
                mc = MCConstraints(roi_target=float("nan"), budget=float("nan"))
            entries.append(
                DayEntry(
                    day=day,
                    split=splits[day],
                    file=name,
                    n_impressions=log.n_impressions,
                    mc=mc,
                    sha256=file_sha256(staging / name),
                    regime=regime,
                )
            )
            if progress:
                progress("writing days", done, len(logs))
        if curves:
            drawn_days = draw_market_constraints(curves, splits, seed, recipe)
            for k, entry in enumerate(entries):
                drawn = drawn_days[entry.day]
                mc = MCConstraints(roi_target=drawn.roi_target, budget=drawn.budget)
                entries[k] = replace(entry, mc=mc, regime={**entry.regime, **drawn.regime_fields()})

        source: dict[str, Any] = {
            "kind": "import",
            "format": fmt,
            "src": str(src),
            "seed": seed,
            "test_fraction": test_fraction,
            "ood_days": sorted(ood_days),
            "n_rows": report.n_rows,
            "n_kept": report.n_valid,
            "invalid_rows": dict(report.reasons),
            "notes": dict(converted.notes),
            **converted.details,
        }
        if converted.constraints is None:
            source["constraints"] = (
                f"drawn: {recipe.kind} recipe (training.market.constraints, default_rng([seed, day, 1]))"
            )
        stale = listed_day_files(out)
        (out / MANIFEST).unlink(missing_ok=True)  # first: no manifest ever lists files that are not its own
        for entry in entries:
            os.replace(staging / entry.file, out / entry.file)
        Market(root=out, days=entries, source=source).save()
        committed = True
        for name in stale - {entry.file for entry in entries}:
            (out / name).unlink(missing_ok=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if created and not committed:
            with contextlib.suppress(OSError):
                out.rmdir()  # only if empty: the directory this import made for nothing
    return ImportSummary(
        format=fmt,
        src=str(src),
        out=str(out),
        seed=seed,
        n_rows=report.n_rows,
        n_kept=report.n_valid,
        invalid_rows=dict(report.reasons),
        notes=dict(converted.notes),
        days=entries,
        details=converted.details,
    )
