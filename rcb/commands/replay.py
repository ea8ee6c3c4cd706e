"""`rcb replay`: play logged days through a running service as the ad engine would; write rcb evaluate's outputs."""

from __future__ import annotations

import asyncio
import importlib.util
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from model.contract import Setting
from rcb.commands.common import check_output_dir, console, fail, print_json, progress, stdout_console, user_errors

# training/ (pandas, torch, matplotlib, the solvers) is imported inside the functions, so `rcb --help` loads none
# of it (rcb/cli.py).


class ReplaySplit(StrEnum):
    """``--split``: the held-out days (a service is never replayed on the days its model trained on)."""

    test = "test"
    ood = "ood"


def replay_command(
    data: Annotated[Path, typer.Option("--data", help="Market directory (rcb market generate / import).")],
    out: Annotated[Path, typer.Option("--out", help="Directory for episodes.csv, summary.json, slots.csv, plots.")],
    url: Annotated[str, typer.Option("--url", help="The service's base URL.")] = "http://127.0.0.1:8000",
    setting: Annotated[Setting, typer.Option("--setting", help="Constraints: sc or mc.")] = Setting.MC,
    split: Annotated[ReplaySplit, typer.Option("--split", help="The days to replay.")] = ReplaySplit.test,
    days: Annotated[
        str | None, typer.Option("--days", help="Comma-separated day ids of the split (default: all of them).")
    ] = None,
    concurrency: Annotated[int, typer.Option("--concurrency", min=1, max=256, help="Episodes in flight.")] = 4,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="Utilities per /v1/bid call.")] = 5000,
    episode_id: Annotated[
        str,
        typer.Option(
            "--episode-id", help="Episode id registered for every campaign; 'offline' reproduces rcb evaluate's noise."
        ),
    ] = "offline",
    token: Annotated[str | None, typer.Option("--token", envvar="RCB_API_TOKEN", help="Bearer token.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print summary.json to stdout.")] = False,
) -> None:
    """Register a campaign per day, bid each slot's impressions, report each slot: the service's own numbers."""
    from training.evaluation.evaluate import write_outputs
    from training.evaluation.service_replay import ReplayError, probe, replay_days, replay_evaluation, slot_table
    from training.market.dataset import Market
    from training.replay.dayset import DaySet

    with user_errors():
        check_output_dir(out)
        market = Market.open(data)
        try:  # before loading the days (seconds): the URL, the service's readiness and its model's setting
            asyncio.run(probe(url, token, setting.value))
        except ReplayError as exc:
            raise fail(str(exc)) from None
        plots = importlib.util.find_spec("matplotlib") is not None
        if not plots:  # the service image has rcb replay but not the training extra
            console.print("[yellow]note:[/] matplotlib is not installed (pip install 'rcb[train]'): no plots")
        with progress(quiet=as_json) as bar:
            loading = bar.add_task(f"loading {split.value}/{setting.value}", total=None)
            dayset = DaySet.load(market, split.value, setting)
            numbers = None
            if days:
                try:
                    wanted = [int(d) for d in days.split(",")]
                except ValueError:
                    raise ValueError(f"--days must be day ids separated by commas, not {days!r}") from None
                missing = sorted(set(wanted) - set(dayset.days))
                if missing:
                    raise ValueError(f"days {missing} are not in the {split.value} split")
                repeated = sorted({d for d in wanted if wanted.count(d) > 1})
                if repeated:
                    raise ValueError(f"--days names {repeated} more than once")
                import numpy as np

                # each day keeps its place in the split: the campaign (and noise) rcb evaluate plays it as
                numbers = [dayset.days.index(d) for d in wanted]
                dayset = dayset.subset(np.array(numbers))
            bar.remove_task(loading)
            task = bar.add_task(f"replaying {len(dayset)} episodes through {url}", total=len(dayset))
            try:
                traces, ready = asyncio.run(
                    replay_days(
                        url,
                        dayset,
                        concurrency=concurrency,
                        batch_size=batch_size,
                        episode=episode_id,
                        token=token,
                        on_episode=lambda _t: bar.advance(task),
                        numbers=numbers,
                    )
                )
            except ReplayError as exc:
                raise fail(str(exc)) from None
        evaluation = replay_evaluation(dayset, traces, ready, url)
        write_outputs(evaluation, out, plots=plots)
        slot_table(traces).to_csv(out / "slots.csv", index=False)
    if as_json:
        print_json(evaluation.summary)
        return
    from training.evaluation.report import markdown_table

    stdout_console().print(markdown_table(evaluation.summary, evaluation.meta), markup=False, highlight=False)
    console.print(
        f"model {ready.get('model_version')} ({ready.get('store')} store); outputs in {out}",
        highlight=False,
        markup=False,
    )
