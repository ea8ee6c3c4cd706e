"""``auctionnet``: the NeurIPS 2024 auto-bidding competition data (AuctionNet, alimama-tech).

Layout, from the README of github.com/alimama-tech/NeurIPS_Auto_Bidding_General_Track_Baseline and its
``bidding_train_env/dataloader/rl_data_generator.py``:

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
``slot = timeStepIndex``, ``utility = pValue * V``, ``market_price = leastWinningCost``;
``delivery = conversionAction * V`` (``realized``, the default) or ``pValue * V`` (``expected``: the
predicted value, i.e. the utility; ``conversionAction`` is then neither read nor required);
MC ``roi_target = V / CPAConstraint`` (ROI = V * conversions / cost >= V / CPA is exactly cost per
conversion <= CPA) and ``budget = budget``. With several advertisers in the logs one must be chosen.
Caveats of the real data, inherited by the mapping: ``conversionAction`` is only observed where the
logged advertiser won an exposed slot (elsewhere it is 0, so under ``realized`` a win the logged
advertiser did not get delivers nothing), and ``leastWinningCost`` is the 4th-highest bid (the price of
the last of 3 ad slots), not the top competing bid.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from model.contract import SLOTS_PER_DAY
from training.market.dataset import MCConstraints
from training.market.importers.common import (
    Converted,
    ProgressCallback,
    header,
    log_files,
    not_integer_in,
    numeric,
    require,
)
from training.market.schema import SchemaError, ValidationReport, reject_rows

AUCTIONNET_COLUMNS: tuple[str, ...] = (
    "deliveryPeriodIndex",
    "timeStepIndex",
    "pValue",
    "leastWinningCost",
    "conversionAction",
    "CPAConstraint",
    "budget",
)
"""The AuctionNet columns the mapping needs with realized delivery."""

AUCTIONNET_EXPECTED_COLUMNS: tuple[str, ...] = tuple(c for c in AUCTIONNET_COLUMNS if c != "conversionAction")
"""The columns the mapping needs with expected delivery (no outcome is read)."""

AUCTIONNET_OPTIONAL: tuple[str, ...] = ("advertiserNumber", "pvIndex")
"""Read when present: which advertiser a row belongs to, and the arrival order."""

AUCTIONNET_CHUNK_ROWS = 1_000_000
"""CSV rows per chunk: a real period file holds ~24M rows (48 advertisers x ~500k opportunities)."""


def needed_columns(delivery: str) -> tuple[str, ...]:
    return AUCTIONNET_COLUMNS if delivery == "realized" else AUCTIONNET_EXPECTED_COLUMNS


def check_auctionnet_columns(files: list[Path], delivery: str) -> None:
    """Every file has the columns the mapping reads (headers only: run before any row is read)."""
    for path in files:
        require(header(path), needed_columns(delivery), str(path))


def auctionnet_chunks(
    path: Path, columns: list[str], advertiser: int | None, needed: tuple[str, ...] = AUCTIONNET_COLUMNS
) -> Iterator[pd.DataFrame]:
    """``columns`` of one file (those it has; it must have ``needed``), in chunks, keeping only ``advertiser``'s
    rows when one is given."""
    name = path.name.lower()
    if name.endswith((".parquet", ".pq")):
        have = pq.read_schema(path).names
        require(have, needed, str(path))
        wanted = [c for c in columns if c in have]
        if advertiser is not None and "advertiserNumber" in have:
            table = pq.read_table(path, columns=wanted, filters=[("advertiserNumber", "=", advertiser)])
        else:
            table = pq.read_table(path, columns=wanted)
        yield table.to_pandas()
        return
    have = list(pd.read_csv(path, nrows=0).columns)
    require(have, needed, str(path))
    wanted = [c for c in columns if c in have]
    for chunk in pd.read_csv(path, usecols=wanted, chunksize=AUCTIONNET_CHUNK_ROWS):
        if advertiser is not None and "advertiserNumber" in chunk.columns:
            chunk = chunk[numeric(chunk, "advertiserNumber") == advertiser]
        yield chunk


def advertisers_in(files: list[Path]) -> list[int]:
    """Every advertiser number in the files (reads that one column only)."""
    found: set[int] = set()
    for path in files:
        for chunk in auctionnet_chunks(path, ["advertiserNumber"], None, ()):
            if "advertiserNumber" in chunk.columns:
                values = numeric(chunk, "advertiserNumber")
                found.update(int(v) for v in np.unique(values[np.isfinite(values)]))
    return sorted(found)


def per_period_constant(
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


def convert_auctionnet(
    src: Path,
    value_per_conversion: float | None,
    advertiser: int | None,
    delivery: str,
    progress: ProgressCallback | None,
) -> Converted:
    """The traffic logs at ``src`` as schema columns, with each period's L and B; ``delivery`` is ``realized``
    (``conversionAction * V``) or ``expected`` (``pValue * V``, the utility)."""
    files = log_files(src)
    needed = needed_columns(delivery)
    columns = [*needed, *AUCTIONNET_OPTIONAL]
    chunks: list[pd.DataFrame] = []
    seen: set[int] = set()
    has_advertiser_column = False
    for done, path in enumerate(files, start=1):
        for chunk in auctionnet_chunks(path, columns, advertiser, needed):
            if "advertiserNumber" in chunk.columns:
                has_advertiser_column = True
                if advertiser is None:
                    numbers = numeric(chunk, "advertiserNumber")
                    seen.update(int(v) for v in np.unique(numbers[np.isfinite(numbers)]))
                    if len(seen) > 1:
                        # Real logs hold every advertiser for every opportunity: stop reading impressions now.
                        present = ", ".join(map(str, advertisers_in(files)))
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
            present = ", ".join(map(str, advertisers_in(files)))
            raise ValueError(f"{src}: no rows of advertiser {advertiser}; advertisers present: {present}")
    if advertiser is None and len(seen) == 1:
        advertiser = seen.pop()  # the only one present: record it
    raw = pd.concat(chunks, ignore_index=True)
    if "pvIndex" in raw.columns:
        # pvIndex numbers the opportunities through the period: it is the arrival order within a step.
        raw = raw.sort_values("pvIndex", kind="stable", ignore_index=True)

    report = ValidationReport(n_rows=len(raw))
    keep = np.ones(len(raw), dtype=bool)
    period = numeric(raw, "deliveryPeriodIndex")
    step = numeric(raw, "timeStepIndex")
    cpa = numeric(raw, "CPAConstraint")
    budget = numeric(raw, "budget")
    reject_rows(keep, ~np.isfinite(period) | (period != np.round(period)), "deliveryPeriodIndex not an integer", report)
    last_step = SLOTS_PER_DAY - 1
    reject_rows(keep, not_integer_in(step, 0, last_step), f"timeStepIndex not an integer in 0..{last_step}", report)
    with np.errstate(invalid="ignore"):
        reject_rows(keep, ~(np.isfinite(cpa) & (cpa > 0)), "CPAConstraint missing or <= 0", report)
        reject_rows(keep, ~(np.isfinite(budget) & (budget > 0)), "budget missing or <= 0", report)
    # V defaults to the period's CPA: then L = V / CPA = 1 and the ratios that win sit inside [0, 4]
    # (with V = 1, pValue ~ 0.01 against prices ~ 0.3 would need ratios of ~20).
    value = cpa if value_per_conversion is None else value_per_conversion
    utility = numeric(raw, "pValue") * value
    mapped = pd.DataFrame(
        {
            "day": period,
            "slot": step,
            "utility": utility,
            "market_price": numeric(raw, "leastWinningCost"),
            "delivery": numeric(raw, "conversionAction") * value if delivery == "realized" else utility,
        }
    )
    cpa_of = per_period_constant(period, cpa, keep, "CPAConstraint", advertiser)
    budget_of = per_period_constant(period, budget, keep, "budget", advertiser)
    constraints = {
        d: MCConstraints(
            roi_target=1.0 if value_per_conversion is None else value_per_conversion / cpa_of[d], budget=budget_of[d]
        )
        for d in cpa_of
    }
    return Converted(
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
                "delivery": "conversionAction * V" if delivery == "realized" else "pValue * V",
                "roi_target": "V / CPAConstraint",
                "budget": "budget",
            },
            "constraints": "from source (CPAConstraint, budget)",
        },
    )
