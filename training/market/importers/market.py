"""From converted logs to a market directory: validation, splits, MC constraints, day files and the manifest."""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from training.market.constraints import (
    ConstraintRecipe,
    curve_of,
    draw_market_constraints,
    draw_paper_constraints,
    roi_reachable,
)
from training.market.dataset import MANIFEST, DayEntry, Market, MCConstraints, file_sha256, listed_day_files
from training.market.importers.auctionnet import check_auctionnet_columns, convert_auctionnet
from training.market.importers.cbrl import check_cbrl_columns, convert_cbrl
from training.market.importers.common import (
    Converted,
    ImportSummary,
    ProgressCallback,
    check_delivery,
    log_files,
    shown_days,
)
from training.market.importers.constraints_file import match_days, read_constraints_file
from training.market.importers.rcb_logs import check_rcb_columns, convert_rcb
from training.market.logs import write_day
from training.market.schema import ValidationReport, split_days, validate_frame
from training.replay.simulator import DayIndex

SUPPORTED_FORMATS: tuple[str, ...] = ("cbrl-syn", "auctionnet", "rcb")

CONSTRAINTS_FILE_FORMATS: tuple[str, ...] = ("cbrl-syn", "rcb")
"""The formats whose logs carry no MC constraints, so that a constraints file may give them (auctionnet's carry
each period's CPAConstraint and budget)."""


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


def check_source(fmt: str, src: Path, delivery: str = "realized") -> list[Path]:
    """The log files of ``src``, once every one is found to have the columns ``fmt`` reads with ``delivery``.

    Reads headers only, so a command can refuse a source that lacks files or columns before it draws a progress bar.
    """
    if fmt not in SUPPORTED_FORMATS:
        raise ValueError(f"unknown log format {fmt!r}; supported: {', '.join(SUPPORTED_FORMATS)}")
    check_delivery(delivery)
    files = log_files(Path(src))
    {"cbrl-syn": check_cbrl_columns, "auctionnet": check_auctionnet_columns, "rcb": check_rcb_columns}[fmt](
        files, delivery
    )
    return files


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
    constraints: str | None = None,
    constraints_file: Path | None = None,
    delivery: str = "realized",
) -> ImportSummary:
    """Convert the ``fmt`` logs at ``src`` into a market directory ``out``; return what was done.

    ``ood_days`` go to the ``ood`` split; the other days are split train/test by
    :func:`split_assignment`. Invalid rows are left out and counted by reason (summary and manifest).
    ``value_per_conversion`` and ``advertiser`` only apply to ``auctionnet``; V defaults to each
    period's CPAConstraint (so L = 1). A source without MC constraints (``cbrl-syn``, ``rcb``) gets
    them from ``constraints_file`` (:mod:`training.market.importers.constraints_file`) or, without
    one, drawn by the recipe ``constraints`` (:mod:`training.market.constraints`: ``prior``, the
    default, or ``paper``). ``delivery`` is ``realized`` (the logged outcome, the default) or
    ``expected`` (the predicted value of each impression); docs/data-schema.md says what each format maps.
    """
    if fmt not in SUPPORTED_FORMATS:
        raise ValueError(f"unknown log format {fmt!r}; supported: {', '.join(SUPPORTED_FORMATS)}")
    if constraints_file is not None and constraints is not None:
        raise ValueError(
            "a constraints file gives each day's roi_target and budget; a recipe (constraints) draws them: give one"
        )
    recipe = ConstraintRecipe(kind=constraints or "prior")
    check_delivery(delivery)
    if not 0.0 <= test_fraction <= 1.0:
        raise ValueError(f"test_fraction must be in [0, 1], not {test_fraction}")
    if seed < 0:
        raise ValueError(f"seed must be >= 0, not {seed}")
    if value_per_conversion is not None and not (math.isfinite(value_per_conversion) and value_per_conversion > 0):
        raise ValueError(f"value_per_conversion must be a positive number, not {value_per_conversion}")
    if fmt != "auctionnet" and advertiser is not None:
        raise ValueError(f"advertiser only applies to the auctionnet format, not {fmt}")
    if fmt != "auctionnet" and value_per_conversion is not None:
        raise ValueError(f"value_per_conversion only applies to the auctionnet format, not {fmt}")
    if constraints_file is not None and fmt not in CONSTRAINTS_FILE_FORMATS:
        raise ValueError(
            f"a constraints file applies to {' and '.join(CONSTRAINTS_FILE_FORMATS)};"
            f" {fmt} takes each period's roi_target and budget from its CPAConstraint and budget"
        )
    ood_days = set(ood_days or ())
    src, out = Path(src), Path(out)
    if out.resolve() == src.resolve():
        raise ValueError(f"--out {out} is the source itself; choose another directory")
    _check_out(out, overwrite)
    check_source(fmt, src, delivery)
    given = read_constraints_file(Path(constraints_file)) if constraints_file is not None else None

    converted: Converted
    if fmt == "cbrl-syn":
        converted = convert_cbrl(src, delivery, progress)
    elif fmt == "rcb":
        converted = convert_rcb(src, delivery, progress)
    else:
        converted = convert_auctionnet(src, value_per_conversion, advertiser, delivery, progress)
    valid, schema_report = validate_frame(converted.frame, source=str(src))
    report = ValidationReport(n_rows=converted.report.n_rows, reasons=converted.report.reasons + schema_report.reasons)
    logs = split_days(valid)
    if not logs:
        raise ValueError(f"{src}: no valid rows ({report.n_rows} read; {report.describe()})")
    unknown_ood = sorted(ood_days - set(logs))
    if unknown_ood:
        raise ValueError(f"ood_days {shown_days(unknown_ood)} are not in the logs (days {min(logs)}..{max(logs)})")
    splits = split_assignment(list(logs), ood_days, test_fraction, seed)
    details: dict[str, Any] = {**converted.details, "delivery": delivery}
    from_file: dict[int, MCConstraints] | None = None
    if given is not None:
        from_file, details["constraints_file"] = match_days(given, sorted(logs))
        details["constraints"] = f"from file {given.path} (roi_target, budget per day)"
    elif converted.constraints is not None:
        details["constraints"] = "from source (CPAConstraint, budget)"
    else:
        details["constraints"] = (
            f"drawn: {recipe.kind} recipe (training.market.constraints, default_rng([seed, day, 1]))"
        )

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
            elif from_file is not None:
                mc = from_file[day]
                # For analysis, as the recipes record it: whether any constant ratio reaches the file's L that day.
                regime["roi_reachable"] = roi_reachable(curve_of(DayIndex(log)), mc.roi_target)
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
            **details,
        }
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
        details=details,
    )
