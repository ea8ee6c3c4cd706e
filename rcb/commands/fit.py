"""`rcb fit MARKET --setting sc|mc --out MODEL_DIR`: the model to serve on a market, chosen and fitted from its train
days alone (training/fit/).

It tunes the PID, RM and CEM and builds the planner on the train days less their validation fold, trains CBRL there,
plays every candidate on the held-out fold as it would be served, chooses by the rule of training/fit/rule.py and
writes the chosen one, fitted for serving, to MODEL_DIR: `rcb serve --model MODEL_DIR` serves it. Resumable: the work
directory keeps what is finished.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.progress import Progress, TaskID

from model.contract import Setting
from rcb.commands.common import (
    check_output_dir,
    console,
    fail,
    print_json,
    progress,
    stdout_console,
    user_errors,
)
from training.rl.config import SACConfig  # torch-free: its defaults are the budget's

# training/ (pandas, torch, matplotlib, the solvers) is imported inside the functions, so `rcb --help` loads none
# of it (rcb/cli.py).


class Bars:
    """The fit's progress bars on stderr, one per step, made when the step begins."""

    def __init__(self, bar: Progress):
        self.bar = bar
        self.tasks: dict[str, TaskID] = {}

    def task(self, key: str, description: str, total: float | None) -> None:
        self.tasks[key] = self.bar.add_task(description, total=total)

    def advance(self, key: str, amount: float = 1, description: str | None = None) -> None:
        if key in self.tasks:
            self.bar.update(self.tasks[key], advance=amount, description=description)


def fit_command(
    market: Annotated[Path, typer.Argument(help="Market directory: its train days are all the fit reads.")],
    setting: Annotated[Setting, typer.Option("--setting", help="sc (L=1, no budget) or mc (per-day L, B).")],
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            help="Model directory to write (rcb serve --model OUT serves it). It may hold a model an earlier rcb fit"
            " of this market and setting wrote, which is replaced; any other model needs --force.",
        ),
    ],
    seeds: Annotated[
        int,
        typer.Option(
            "--seeds",
            min=0,
            help="CBRL runs of the default config, seeds 0..K-1; more than one is one candidate, their ensemble"
            " (0: no CBRL candidate).",
        ),
    ] = 1,
    candidates: Annotated[
        list[Path] | None,
        typer.Option(
            "--candidate",
            help="An exported model directory (e.g. models/default) to choose among too, played behind the shield"
            " around this market's PID; repeatable. Refused where it learned or was calibrated on the held-out days.",
        ),
    ] = None,
    epochs: Annotated[
        int, typer.Option("--epochs", min=1, help="CBRL's training epochs (rcb train --epochs).")
    ] = SACConfig.epochs,
    updates_per_epoch: Annotated[
        int, typer.Option("--updates-per-epoch", min=1, help="CBRL's gradient steps per epoch (rcb train's).")
    ] = SACConfig.updates_per_epoch,
    play_seeds: Annotated[
        int,
        typer.Option(
            "--play-seeds", min=1, help="Seeds a stochastic candidate (CBRL, CEM) plays the held-out days with."
        ),
    ] = 5,
    work: Annotated[
        Path | None,
        typer.Option(
            "--work",
            help="Work directory: tunings, training runs, exported candidates and plays a rerun with the same"
            " arguments reuses, and the report (default: OUT.work beside OUT).",
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace a model already in OUT.")] = False,
    require_learned: Annotated[
        bool,
        typer.Option(
            "--require-learned",
            help="Exit 1, writing no model, where a controller (the PID or RM) is chosen: no learned candidate"
            " qualified.",
        ),
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the choice and every candidate's row as JSON.")
    ] = False,
) -> None:
    """Choose the model to serve on MARKET from its train days alone and write it to OUT.

    The PID, RM, CEM, the planner, CBRL (and any --candidate) are fitted on the train days less their validation
    fold and played there as served; the chosen one is the highest median ANS among those whose mean CSR is at least
    the PID's (the PID always eligible; ties to the simpler kind), fitted on all the train days and written to OUT
    with its card's fit section. Prints the table; the report (fit.md, fit.png, fit.json) goes to the work
    directory."""
    from training.files import built_in
    from training.fit.candidates import FitError
    from training.fit.fit import FitRequest, NotLearned, prepare, run_fit
    from training.fit.workdir import WorkDir

    with user_errors():
        check_output_dir(out)
        check_output_dir(built_in(out), "--out's directory")  # the model is built there, --out there or not
        work_dir = WorkDir(work) if work is not None else WorkDir.beside(out)
        check_output_dir(work_dir.root, "--work" if work is not None else "--out's work directory")
        request = FitRequest(
            market_dir=market,
            setting=setting,
            out=out,
            work=work_dir,
            seeds=seeds,
            candidates=tuple(candidates or ()),
            epochs=epochs,
            updates_per_epoch=updates_per_epoch,
            play_seeds=play_seeds,
            force=force,
            require_learned=require_learned,
        )
        try:
            prepared = prepare(request)  # every refusal before the bars are drawn
        except FitError as exc:
            raise fail(str(exc)) from None
        n_train = len(prepared.market.split("train"))
        console.print(
            f"fitting {escape(str(market))} ({setting.value}): {n_train} train days,"
            f" {prepared.train_impressions:,} impressions; {prepared.estimate.line()}",
            highlight=False,
        )
        try:
            with progress(quiet=as_json) as bar:
                result = run_fit(prepared, Bars(bar))
        except NotLearned as exc:
            raise fail(str(exc), code=1) from None
        except FitError as exc:
            raise fail(str(exc)) from None
    if result.message:
        console.print(f"[yellow]note:[/] {escape(result.message)}", highlight=False)
    if as_json:
        print_json(_summary(result, out))
        return
    from training.fit.report import markdown

    stdout = stdout_console()
    stdout.print(markdown(result.lines, len(result.section["held_out_days"]), setting.value), highlight=False)
    chosen = next(line for line in result.lines if line.chosen)
    stdout.print(
        f"chosen: {chosen.name} ({chosen.kind}), median ANS {chosen.figures.ans:.3f}, CSR {chosen.figures.csr:.2f} on"
        f" the held-out days; {result.section['served']}",
        highlight=False,
        markup=False,
    )
    paths = result.paths
    wrote = f"wrote {out} (rcb serve --model {out}); report {paths['table']}, {paths['plot']}"
    stdout.print(wrote, highlight=False, markup=False)
    total = sum(result.seconds.values())
    console.print(f"took {total / 60:.1f} minutes ({_split(result.seconds)})", highlight=False)


def _split(seconds: dict[str, float]) -> str:
    return ", ".join(f"{step} {value:.0f} s" for step, value in seconds.items())


def _summary(result: Any, out: Path) -> dict[str, Any]:
    section = result.section
    return {
        "out": str(out),
        "chosen": section["chosen"],
        "kind": section["kind"],
        "served": section["served"],
        "held_out_days": section["held_out_days"],
        "train_fingerprint": section["train_fingerprint"],
        "candidates": section["candidates"],
        "message": result.message,
        "seconds": {k: round(v, 1) for k, v in result.seconds.items()},
        "trained": result.trained,
        "reused": result.reused,
        "report": {k: str(v) for k, v in result.paths.items()},
    }
