"""`rcb market generate | zoo | simulate-auction | import | subset | report`: make, bring in, cut and inspect
impression logs."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import replace
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import orjson
import typer
from rich.console import Console

from rcb.commands import market_import
from rcb.commands.common import (
    CONSTRAINTS_HELP,
    DOCS_EPILOG,
    ConstraintRecipeName,
    check_output_dir,
    check_output_file,
    console,
    fail,
    plural,
    print_json,
    progress,
    stdout_console,
    user_errors,
)

# training/ (pandas, torch, matplotlib, the solvers) is imported inside the functions, so `rcb --help` loads none
# of it (rcb/cli.py).


class MarketPreset(StrEnum):
    """The keys of ``training.market.suite.PRESETS`` (spelled here so ``rcb --help`` need not import the generator;
    a test keeps the two equal)."""

    bench = "bench"
    sparse = "sparse"
    shifted = "shifted"
    volatile = "volatile"


PRESET_NAMES = tuple(p.value for p in MarketPreset)
"""The preset names, in ``PRESETS``' order."""

app = typer.Typer(
    help="Make, import and inspect market logs (schema: docs/data-schema.md).",
    epilog=DOCS_EPILOG,
    no_args_is_help=True,
)
app.command("import")(market_import.import_command)


@app.command("generate")
def generate_command(
    out: Annotated[Path, typer.Option("--out", help="Directory to write (one Parquet per day + manifest.json).")],
    days_id: Annotated[int, typer.Option("--days-id", min=0, help="In-distribution days (split train/test).")] = 60,
    days_ood: Annotated[int, typer.Option("--days-ood", min=0, help="Out-of-distribution (festival) days.")] = 20,
    impressions_per_day: Annotated[
        int | None,
        typer.Option(
            "--impressions-per-day", min=48, help="Expected impressions of a regular day (default: the preset's)."
        ),
    ] = None,
    preset: Annotated[
        MarketPreset | None,
        typer.Option(
            "--preset",
            help="Market configuration of the suite (training/market/suite.py) [default: bench].",
            case_sensitive=False,
            show_default=False,
        ),
    ] = None,
    zoo: Annotated[
        str | None,
        typer.Option(
            "--zoo",
            help="A draw of the market zoo instead of a preset: zoo-07 or 7 (rcb market zoo lists them).",
            show_default=False,
        ),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Seeds every day and the train/test split.")] = 0,
    constraints: Annotated[
        ConstraintRecipeName, typer.Option("--constraints", help=CONSTRAINTS_HELP, case_sensitive=False)
    ] = ConstraintRecipeName.prior,
    workers: Annotated[int, typer.Option("--workers", min=0, help="Processes (0 = one per core).")] = 0,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing market in OUT.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the manifest summary as JSON.")] = False,
) -> None:
    """Generate a synthetic non-stationary market (paper-style ID/OOD split; schema: docs/data-schema.md)."""
    from training.market.dataset import MANIFEST
    from training.market.generator import check_config, generate_market, min_days_id
    from training.market.suite import PRESETS
    from training.market.zoo import parse_zoo_name, zoo_config

    with user_errors():
        if zoo is not None and preset is not None:
            raise fail("--preset and --zoo each name a market configuration; give one")
        check_output_dir(out)
        if (out / MANIFEST).exists() and not force:
            raise fail(f"{out} already holds a market ({MANIFEST}); pass --force to overwrite")
        base = zoo_config(parse_zoo_name(zoo)) if zoo is not None else PRESETS[(preset or MarketPreset.bench).value]
        config = replace(
            base,
            days_id=days_id,
            days_ood=days_ood,
            impressions_per_day=impressions_per_day or base.impressions_per_day,
            seed=seed,
            constraints=replace(base.constraints, kind=constraints.value),
        )
        n_train = round(config.train_fraction * days_id)
        if days_id + days_ood > 0 and (n_train < 1 or days_id - n_train < 1):
            raise fail(
                f"--days-id {days_id} gives {n_train} train and {plural(days_id - n_train, 'test day')};"
                " a market needs at least 1 train and 1 test day:"
                f" --days-id {min_days_id(config.train_fraction)} or more"
            )
        check_config(config)
    started = time.perf_counter()
    with user_errors(), progress(quiet=as_json) as bar:
        task = bar.add_task("generating days", total=days_id + days_ood)
        market = generate_market(out, config, workers=workers or None, progress=lambda: bar.advance(task))
    elapsed = time.perf_counter() - started
    counts = {s: len(market.split(s)) for s in ("train", "test", "ood")}
    impressions = sum(d.n_impressions for d in market.days)
    if as_json:
        print_json({"out": str(out), "days": counts, "impressions": impressions, "seconds": round(elapsed, 2)})
    else:
        typer.echo(
            f"wrote {plural(len(market.days), 'day')} ({counts['train']} train / {counts['test']} test /"
            f" {counts['ood']} ood), {impressions:,} impressions to {out} in {elapsed:.1f}s"
        )


ZOO_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("impressions/day", "impressions_per_day", "{:,}"),
    ("cvr", "base_cvr", "{:.4g}"),
    ("deliv/slot", "deliveries_per_slot", "{:.1f}"),
    ("conversions", "whole_conversions", "whole|value"),
    ("day cycle", "diurnal", "yes|no"),
    ("best ratio", "best_ratio", "{:.2f}"),
    ("win share", "win_share", "{:.3f}"),
    ("miscal.", "miscalibration", "{:.2f}"),
    ("markup", "price_markup", "{:.3g}"),
    ("volatility", "volatility", "{0[0]:.3g}-{0[1]:.3g}"),
    ("shock rate", "shock_rate", "{0[0]:.3g}-{0[1]:.3g}"),
    ("budget f", "budget_fraction", "{0[0]:.3g}-{0[1]:.3g}"),
    ("money", "value_scale", "{:.2g}"),
)
"""The zoo table's declared columns: heading, summary key, format (``a|b``: a for true, b for false)."""

MEASURED_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("deliv/slot*", "deliveries_per_slot", "{:.1f}"),
    ("best ratio*", "best_ratio", "{:.2f}"),
    ("win share*", "win_share", "{:.3f}"),
    ("whole*", "whole_share", "{:.2f}"),
    ("miscal.*", "miscalibration", "{:.2f}"),
    ("eve/night*", "evening_to_night", "{:.1f}"),
    ("budget binds*", "budget_binds", "{:.2f}"),
)
"""The zoo table's measured columns (``--measure``), marked ``*``."""


def _cell(value: object, spec: str) -> str:
    if "|" in spec:
        yes, no = spec.split("|")
        return yes if value else no
    return spec.format(value)


@app.command("zoo")
def zoo_command(
    count: Annotated[int, typer.Option("--count", min=1, help="How many draws to list (zoo-00 onwards).")] = 20,
    measure: Annotated[
        bool,
        typer.Option("--measure", help="Also generate a few train days of each draw and show what they realize."),
    ] = False,
    train_days: Annotated[int, typer.Option("--train-days", min=1, help="Train days each --measure reads.")] = 4,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Seed of the days --measure generates.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the draws (and measurements) as JSON.")] = False,
) -> None:
    """List the market zoo: generator configurations drawn at random over wide ranges (training/market/zoo.py),
    for checking a method on markets it was not tuned on. Generate one with `rcb market generate --zoo NAME`."""
    from rich.table import Table

    from training.market.zoo import measure as measure_config
    from training.market.zoo import zoo as zoo_draws

    with user_errors():
        draws = zoo_draws(count)
        rows = []
        with progress(quiet=as_json or not measure) as bar:
            task = bar.add_task("measuring draws", total=len(draws))
            for draw in draws:
                row: dict[str, object] = {"declared": draw.summary()}
                if measure:
                    config = replace(draw.config, seed=seed)
                    row["measured"] = {k: round(v, 4) for k, v in measure_config(config, train_days).items()}
                    bar.advance(task)
                rows.append(row)
    if as_json:
        print_json(rows)
        return
    title = f"market zoo: {plural(len(draws), 'draw')}" + (
        f" (* measured on {plural(train_days, 'train day')}, seed {seed})" if measure else ""
    )
    table = Table(title=title)
    table.add_column("name")
    for heading, _, _ in ZOO_COLUMNS + (MEASURED_COLUMNS if measure else ()):
        table.add_column(heading, justify="right")
    for row in rows:
        declared = row["declared"]
        assert isinstance(declared, dict)
        cells = [str(declared["name"])] + [_cell(declared[key], spec) for _, key, spec in ZOO_COLUMNS]
        if measure:
            measured = row["measured"]
            assert isinstance(measured, dict)
            cells += [_cell(measured[key], spec) for _, key, spec in MEASURED_COLUMNS]
        table.add_row(*cells)
    # a wide table: on a terminal rich fits it to the window; piped, it gets room for every column
    wide = stdout_console()
    if not wide.is_terminal:
        wide = Console(file=sys.stdout, soft_wrap=True, width=260)
    wide.print(table)


class LogFormat(StrEnum):
    """``training.market.auction.LOG_FORMATS``."""

    parquet = "parquet"
    csv = "csv"


@app.command("simulate-auction")
def simulate_auction_command(
    out: Annotated[Path, typer.Option("--out", help="Directory to write the logs (and auction.json) into.")],
    days: Annotated[int, typer.Option("--days", min=1, help="Days to simulate (0 .. N-1).")] = 10,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Seeds the competitors and every day.")] = 0,
    agents: Annotated[int, typer.Option("--agents", min=2, help="Competing pacing bidders.")] = 30,
    impressions_per_day: Annotated[
        int, typer.Option("--impressions-per-day", min=48, help="Expected impressions of a day.")
    ] = 200_000,
    days_per_file: Annotated[int, typer.Option("--days-per-file", min=1, help="Days written to each log file.")] = 1,
    log_format: Annotated[
        LogFormat, typer.Option("--format", help="Log file format.", case_sensitive=False)
    ] = LogFormat.parquet,
    force: Annotated[bool, typer.Option("--force", help="Overwrite the logs of an earlier run in OUT.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the run's description as JSON.")] = False,
) -> None:
    """Simulate a second-price auction market against pacing competitors (training/market/auction.py) and write
    its logs in the impression-log schema, ready for `rcb market import --format rcb OUT --out MARKET`."""
    from training.market.auction import DESCRIPTION, AuctionConfig, write_logs

    with user_errors():
        check_output_dir(out)
        if out.exists() and any(out.iterdir()):
            if not (out / DESCRIPTION).exists():
                raise fail(f"{out} is not empty and holds no {DESCRIPTION}; choose an empty or new directory")
            if not force:
                raise fail(f"{out} already holds simulated logs ({DESCRIPTION}); pass --force to overwrite")
            for old in out.glob("auction_day*"):
                old.unlink()
        config = AuctionConfig(days=days, seed=seed, agents=agents, impressions_per_day=impressions_per_day)
    started = time.perf_counter()
    with user_errors(), progress(quiet=as_json) as bar:
        task = bar.add_task("simulating days", total=days)
        description = write_logs(
            out, config, days_per_file=days_per_file, fmt=log_format.value, progress=lambda: bar.advance(task)
        )
    elapsed = time.perf_counter() - started
    impressions = sum(d["impressions"] for d in description["days"])
    if as_json:
        print_json({"out": str(out), "seconds": round(elapsed, 2), **description})
    else:
        typer.echo(
            f"wrote {plural(days, 'day')} ({impressions:,} impressions, {plural(len(description['files']), 'file')})"
            f" to {out} in {elapsed:.1f}s; import with: rcb market import --format rcb {out} --out MARKET"
        )


@app.command("subset")
def subset_command(
    data_dir: Annotated[Path, typer.Argument(help="Market directory to take days from.")],
    out: Annotated[Path, typer.Option("--out", help="Directory to write (manifest.json + linked day files).")],
    train_days: Annotated[int, typer.Option("--train-days", min=1, help="How many train days to keep (the first).")],
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing market in OUT.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Keep the first N train days of a market and all its test and OOD days (files hard-linked): nested train
    sets scored on the same held-out days, e.g. to see how many days of logs a method needs."""
    from training.market.dataset import MANIFEST, Market, subset_market

    with user_errors():
        check_output_dir(out)
        if out.resolve() == data_dir.resolve() or (out.exists() and data_dir.exists() and out.samefile(data_dir)):
            raise fail("--out must differ from the source market")
        if (out / MANIFEST).exists() and not force:
            raise fail(f"{out} already holds a market ({MANIFEST}); pass --force to overwrite")
        market = subset_market(Market.open(data_dir), out, train_days)
    counts = {s: len(market.split(s)) for s in ("train", "test", "ood")}
    if as_json:
        print_json({"out": str(out), "days": counts})
    else:
        typer.echo(
            f"wrote {out}: {counts['train']} train / {counts['test']} test / {counts['ood']} ood days of {data_dir}"
        )


def _is_report_summary(path: Path) -> bool:
    """Whether ``path`` holds what ``rcb market report`` writes beside its plot (per split, a summary with its
    day count), so a rerun may replace it while any other file (a market's manifest.json, an evaluation's
    summary.json) is left alone."""
    from training.market.dataset import SPLITS

    try:
        body = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return (
        isinstance(body, dict)
        and bool(body)
        and set(body) <= set(SPLITS)
        and all(isinstance(v, dict) and "days" in v for v in body.values())
    )


@app.command("report")
def report_command(
    data_dir: Annotated[Path, typer.Argument(help="Market directory.")],
    out: Annotated[Path | None, typer.Option("--out", help="PNG path (default DIR/report.png).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Show how non-stationary a market is: a Fig.-4-style PNG and a per-split summary (stdout)."""
    from training.market.dataset import Market
    from training.market.report import collect_facts, format_summary, plot, summarize

    with user_errors():
        png = out or data_dir / "report.png"
        png = png if png.suffix else png.with_suffix(".png")  # what matplotlib writes for a path without one
        png = check_output_file(png, what="--out" if out else "report")
        summary_file = check_output_file(png.with_suffix(".json"), what="--out" if out else "report")
        if summary_file.exists() and not _is_report_summary(summary_file):
            raise fail(f"--out {png} would overwrite {summary_file}, which is not a market report; choose another name")
        market = Market.open(data_dir)
        if not market.days:
            raise fail(f"{data_dir}: the manifest lists no days")
        with progress(quiet=as_json) as bar:
            task = bar.add_task("oracles (cached after the first run)", total=3 * len(market.days))
            facts = collect_facts(market, progress=lambda _result: bar.advance(task))
        summary = summarize(facts)
        png.parent.mkdir(parents=True, exist_ok=True)
        plot(facts, png, title=f"{data_dir.name}: {plural(len(market.days), 'day')}")
        # orjson writes a missing figure (NaN: no slot won, no delivering day) as null, which every parser reads
        summary_file.write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2) + b"\n")
    if as_json:
        print_json({"png": str(png), "summary": summary})
    else:
        typer.echo(format_summary(summary, title=f"{data_dir}: non-stationarity per split"))
        console.print(f"plot: {png}, summary: {png.with_suffix('.json')}", markup=False)
