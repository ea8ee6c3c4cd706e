"""`rcb evaluate`: methods over a split and setting for N seeds -> episodes.csv, summary.json, tables, plots.

Everything that can be refused is checked before any work: the output directory, the split, every
method (an exported model or a training run made for the other setting is refused here, not after the
baselines were tuned and the other methods played).
"""

from __future__ import annotations

import json
import shlex
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from model.contract import Setting
from rcb.commands.common import check_output_dir, console, fail, print_json, progress, user_errors

# training/ (pandas, torch, matplotlib, the solvers) is imported inside the functions, so `rcb --help` loads none
# of it (rcb/cli.py).

RUN_FILE = "run.json"


class EvaluationSplit(StrEnum):
    """``--split``: never the train days the baselines were tuned on, except their held-out validation fold."""

    test = "test"
    ood = "ood"
    validation = "validation"


def _run_record(run_dir: Path) -> tuple[str, str]:
    """``(setting, algo)`` of a training run, from its ``run.json``."""
    try:
        body = json.loads((run_dir / RUN_FILE).read_text())
        return str(body["setting"]), str(body["config"]["algo"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{run_dir / RUN_FILE}: unreadable run record ({exc})") from None


def check_methods(methods: list[str], setting: Setting) -> dict[str, int]:
    """Each method's setting matches ``setting`` (cards and run records only: nothing heavy is loaded).

    Returns how many times each method plays the split, for the progress bar's total: a run group once
    per run, every other method (an ensemble of runs included) once per seed (-1 here). Raises ValueError
    naming the first method that cannot be played.
    """
    from model.artifact import ArtifactError, read_card
    from training.evaluation.methods import ENSEMBLE_PREFIX, ONNX_PREFIX, is_run_dir, run_group, unshielded

    plays: dict[str, int] = {}
    for listed in methods:
        method = unshielded(listed)[0]
        group = run_group(method)
        if group is not None:
            label, runs = group
            for run in runs:
                trained = _run_record(run)[0]
                if trained != setting.value:
                    raise ValueError(f"{run} (in {label}) was trained for {trained}, not {setting.value}")
            plays[listed] = -1 if method.startswith(ENSEMBLE_PREFIX) else len(runs)  # an ensemble: once per seed
        elif method.startswith(ONNX_PREFIX):
            try:
                card = read_card(Path(method[len(ONNX_PREFIX) :]))
            except ArtifactError as exc:
                raise ValueError(f"{method}: {exc}") from None
            if str(card.setting) != setting.value:
                raise ValueError(f"{method} was trained for {card.setting}, not {setting.value}")
            plays[listed] = -1 if card.latent_dim > 0 else 1  # a non-Bayesian policy is deterministic
        elif is_run_dir(method):
            trained, algo = _run_record(Path(method))
            if trained != setting.value:
                raise ValueError(f"{method} was trained for {trained}, not {setting.value}")
            plays[listed] = -1 if algo == "cbrl" else 1
        else:
            plays[listed] = -1 if method == "cem" else 1  # RM, PID and the references are deterministic
    return plays


def evaluate_command(
    data_dir: Annotated[Path, typer.Argument(help="Market directory.")],
    setting: Annotated[Setting, typer.Option("--setting", help="sc (L=1, no budget) or mc (per-day L, B).")],
    split: Annotated[
        EvaluationSplit,
        typer.Option(
            "--split",
            help="test, ood, or validation (the train days training holds out for model selection: choose there).",
        ),
    ] = EvaluationSplit.test,
    methods: Annotated[
        str,
        typer.Option(
            "--methods",
            help="Comma-separated: rm, pid, cem, plan, oracle-day, oracle-slot, a run directory (rcb train),"
            " LABEL=GLOB (one method's runs, run k played with seed k), ensemble:LABEL=GLOB (those runs as one bidder:"
            " the median of their log-ratios) or onnx:MODEL_DIR (rcb export); shield:METHOD"
            " plays METHOD behind the safety shield.",
        ),
    ] = "rm,pid,cem,oracle-day",
    seeds: Annotated[
        int, typer.Option("--seeds", min=1, help="Seeds 0..N-1 per stochastic method (deterministic ones play once).")
    ] = 5,
    gamma: Annotated[
        float,
        typer.Option("--gamma", min=1.0, help="The G-metric's gamma (results.sh passes the one validated for USCB)."),
    ] = 3.0,
    out: Annotated[Path, typer.Option("--out", help="Output directory.")] = Path("out/evaluate"),
    as_json: Annotated[bool, typer.Option("--json", help="Print summary.json on stdout.")] = False,
) -> None:
    """Evaluate methods (baselines tuned on train days only) with the paper's metrics (docs/metrics.md)."""
    from training.bidders.tuned import BASELINES
    from training.evaluation.evaluate import EvaluationError, evaluate, write_outputs
    from training.evaluation.leakage import calibration_warnings
    from training.evaluation.methods import method_warnings, parse_methods
    from training.evaluation.report import markdown_table
    from training.market.dataset import Market

    day_split = split.value
    with user_errors():
        try:
            check_output_dir(out)
            chosen = parse_methods(methods)
            for warning in method_warnings(chosen):
                console.print(f"[yellow]warning:[/] {escape(warning)}")
            market = Market.open(data_dir)
            for warning in calibration_warnings(chosen, market, day_split):
                console.print(f"[yellow]warning:[/] {escape(warning)}")
            if not market.split("train" if day_split == "validation" else day_split):
                raise EvaluationError(f"{data_dir}: split {day_split!r} has no days")
            if any(m in BASELINES for m in chosen) and not market.split("train"):
                raise EvaluationError(f"{data_dir}: baselines are tuned on the train split, which has no days")
            plays = check_methods(chosen, setting)
            total = sum(seeds if n < 0 else n for n in plays.values())
            with progress(quiet=as_json) as bar:
                title = f"evaluating on {day_split}/{setting.value}"
                task = bar.add_task(f"{title}: loading days", total=total)

                def tick(stage: str) -> None:
                    if stage == "episodes":
                        bar.update(task, advance=1, description=f"{title}: playing")
                    else:  # loading days, solving oracles, tuning a baseline: work of unknown length
                        bar.update(task, description=f"{title}: {STAGES.get(stage, stage)}")

                evaluation = evaluate(market, setting.value, day_split, chosen, seeds, progress=tick, gamma=gamma)
        except EvaluationError as exc:
            raise fail(str(exc)) from None
        evaluation.meta["command"] = "rcb evaluate " + " ".join(shlex.quote(a) for a in sys.argv[2:])
        paths = write_outputs(evaluation, out)
    if as_json:
        print_json(evaluation.summary)
    else:
        typer.echo(markdown_table(evaluation.summary, evaluation.meta))
        console.print("wrote " + ", ".join(str(p) for p in paths.values()))


STAGES = {"oracle": "oracles", "load": "loading days", "rm": "tuning rm", "pid": "tuning pid", "cem": "tuning cem"}
"""What the progress bar says while training.evaluation.evaluate reports a stage other than a played episode."""
