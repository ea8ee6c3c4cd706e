"""`rcb market generate | import | subset | report`: make, bring in, cut and inspect impression logs."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import orjson
import typer

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
        MarketPreset,
        typer.Option(
            "--preset", help="Market configuration of the suite (training/market/suite.py).", case_sensitive=False
        ),
    ] = MarketPreset.bench,
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

    with user_errors():
        check_output_dir(out)
        if (out / MANIFEST).exists() and not force:
            raise fail(f"{out} already holds a market ({MANIFEST}); pass --force to overwrite")
        base = PRESETS[preset.value]
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
