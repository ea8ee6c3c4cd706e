"""`rcb evaluate`: methods over a split and setting for N seeds -> episodes.csv, summary.json, tables, plots."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from model.contract import Setting
from rcb.commands.common import console, fail, print_json, progress, user_errors


def evaluate_command(
    data_dir: Annotated[Path, typer.Argument(help="Market directory.")],
    setting: Annotated[Setting, typer.Option("--setting", help="sc (L=1, no budget) or mc (per-day L, B).")],
    split: Annotated[str, typer.Option("--split", help="test or ood.")] = "test",
    methods: Annotated[
        str,
        typer.Option(
            "--methods",
            help="Comma-separated: rm, pid, cem, oracle-day, oracle-slot, a run directory (rcb train),"
            " LABEL=GLOB (one method's runs, run k played with seed k) or onnx:MODEL_DIR (rcb export).",
        ),
    ] = "rm,pid,cem,oracle-day",
    seeds: Annotated[int, typer.Option("--seeds", min=1, help="Seeds 0..N-1 per method.")] = 5,
    out: Annotated[Path, typer.Option("--out", help="Output directory.")] = Path("out/evaluate"),
    json: Annotated[bool, typer.Option("--json", help="Print summary.json on stdout.")] = False,
) -> None:
    """Evaluate methods (baselines tuned on train days only) with the paper's metrics."""
    from training.evaluate import EvaluationError, evaluate, parse_methods, write_outputs
    from training.evaluation_report import markdown_table
    from training.market.dataset import Market

    with user_errors():
        try:
            chosen = parse_methods(methods)
            market = Market.open(data_dir)
            if split not in ("test", "ood"):
                raise EvaluationError(f"unknown split {split!r}; expected test or ood")
            if not market.split(split):
                raise EvaluationError(f"{data_dir}: split {split!r} has no days")
            with progress(quiet=json) as bar:
                task = bar.add_task(f"evaluating on {split}/{setting.value}", total=None)
                evaluation = evaluate(
                    market, setting.value, split, chosen, seeds, progress=lambda stage: bar.advance(task)
                )
        except EvaluationError as exc:
            raise fail(str(exc)) from None
        evaluation.meta["command"] = "rcb evaluate " + " ".join(shlex.quote(a) for a in sys.argv[2:])
        paths = write_outputs(evaluation, out)
    if json:
        print_json(evaluation.summary)
    else:
        typer.echo(markdown_table(evaluation.summary, evaluation.meta))
        console.print("wrote " + ", ".join(str(p) for p in paths.values()))
