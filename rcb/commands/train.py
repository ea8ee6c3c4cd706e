"""`rcb train`: train a bidding policy on a market's train days into a run directory."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from model.contract import Setting
from rcb.commands.common import console, fail, print_json, progress, user_errors


def train_command(
    data: Annotated[Path, typer.Option("--data", help="Market directory (trains on its train split only).")],
    setting: Annotated[Setting, typer.Option("--setting", help="sc (L=1, no budget) or mc (per-day L, B).")],
    out: Annotated[Path, typer.Option("--out", help="Run directory to write.")],
    algo: Annotated[
        str,
        typer.Option(
            "--algo",
            help="hard (sparse indicator reward), crl (curriculum), cbrl (curriculum + posterior encoder),"
            " uscb (gamma^violation penalty) or rcpo (Lagrangian).",
        ),
    ] = "crl",
    epochs: Annotated[
        int | None, typer.Option("--epochs", min=1, help="Training epochs [default: SACConfig's].")
    ] = None,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Seeds networks, collection and sampling.")] = 0,
    uscb_gamma: Annotated[
        float | None, typer.Option("--uscb-gamma", min=1.0, help="uscb: penalty base gamma [default: SACConfig's].")
    ] = None,
    rcpo_learning_rate: Annotated[
        float | None,
        typer.Option("--rcpo-learning-rate", min=0.0, help="rcpo: dual-ascent step [default: SACConfig's]."),
    ] = None,
    updates_per_epoch: Annotated[
        int | None, typer.Option("--updates-per-epoch", min=1, help="Gradient steps per epoch [default: SACConfig's].")
    ] = None,
    auto_curriculum: Annotated[
        bool,
        typer.Option(
            "--auto-curriculum", help="crl/cbrl: learn each stage's ROI relaxation b_k (regret minimization)."
        ),
    ] = False,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the run already in OUT.")] = False,
    json: Annotated[bool, typer.Option("--json", help="Print run.json's summary as JSON.")] = False,
) -> None:
    """Train SAC (CBRL or a rival) on the train days; resumable, with a progress bar and learning curves."""
    from training.agents.sac import SACConfig
    from training.train import ALGOS, RunError, run_training

    if algo not in ALGOS:
        raise fail(f"unknown or not yet trainable algo {algo!r}; available: {', '.join(ALGOS)}")
    with user_errors():
        try:
            overrides = {
                "epochs": epochs,
                "updates_per_epoch": updates_per_epoch,
                "uscb_gamma": uscb_gamma,
                "rcpo_learning_rate": rcpo_learning_rate,
            }
            config = SACConfig(
                algo=algo,
                seed=seed,
                auto_curriculum=auto_curriculum,
                **{k: v for k, v in overrides.items() if v is not None},
            )
            with progress(quiet=json) as bar:
                task = bar.add_task(f"training {algo} on {setting.value}", total=config.epochs)

                def tick(log) -> None:
                    bar.update(task, completed=log.epoch + 1)
                    bar.console.print(
                        f"epoch {log.epoch:3d} ({log.stage}) train {log.train_score:.3f}"
                        f" validation {log.validation_score:.3f}"
                    )

                body = run_training(data, setting, config, out, resume=resume, on_epoch=tick)
        except RunError as exc:
            raise fail(str(exc)) from None
    summary = {"out": str(out), "best_validation_score": body["best_validation_score"], "epochs": len(body["history"])}
    if json:
        print_json(summary)
    else:
        console.print(
            f"run in {out}: best validation score {summary['best_validation_score']:.3f}; curves {out}/curves.png"
        )
