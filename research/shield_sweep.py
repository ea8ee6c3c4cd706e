"""Play one bidder behind several shield settings on one market and split: how each trades ANS for CSR.

The shield's parameters (:class:`model.shield.ShieldConfig`) are chosen on days no evaluated number is read
from (the train days of a market the model was not trained on, or a run's validation days); this tool plays
the candidates side by side on such days, beside the tuned PID whose CSR the shield's bound refers to::

    python -m research.shield_sweep data/suite/sparse --split train --method onnx:models/default \\
        --config default --config 'asym:tight_above=0' --config 'steep:tight_above=0,roi_alarm=0.1'

``--method`` is ``onnx:MODEL_DIR`` (the card's controller, as the service reads it), ``ensemble:LABEL=GLOB``
(training runs; the PID tuned on this market's train days, as their export would write) or a tuned baseline such
as ``plan`` (behind that PID too; ``plan`` plays the train days leave-one-out). ``--config NAME``
is the code's default setting (not a card's own band, its ``shield`` section, which ``shield:onnx:`` plays);
``NAME:FIELD=VALUE,...`` overrides fields of it. The table goes to stdout (``--json``:
one JSON object); ``--episodes CSV`` writes every row's episodes in ``rcb evaluate``'s ``episodes.csv`` format,
for ``python -m research.significance`` (a setting's rows are labelled by its name).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import Annotated, Any

import pandas as pd
import typer

from model.contract import Setting
from model.controller import ControllerGains
from model.shield import ShieldConfig
from training.bidders.base import Bidder
from training.bidders.shielded import ShieldedBidder
from training.bidders.tuned import BASELINES, tuned_baseline
from training.evaluation.evaluate import EvaluationError, episode_rows, split_days, summarize
from training.evaluation.leakage import check_split, own_days_left_out
from training.evaluation.methods import ENSEMBLE_PREFIX, ONNX_PREFIX, method_bidder
from training.evaluation.shielding import shield_gains
from training.market.dataset import Market, MarketError
from training.replay.dayset import DaySet

REFERENCE = "pid"
"""The row the shield's bound refers to: the market's tuned PID."""
UNSHIELDED = "unshielded"
"""The row of the bidder alone."""


def parse_config(text: str) -> tuple[str, ShieldConfig]:
    """``NAME`` (the defaults) or ``NAME:FIELD=VALUE,...`` -> (name, config); a clear error for unknown fields."""
    name, _, body = text.partition(":")
    if not name or name in (REFERENCE, UNSHIELDED):
        raise typer.BadParameter(f"{text!r}: a setting needs a name other than {REFERENCE!r} and {UNSHIELDED!r}")
    known = [f.name for f in fields(ShieldConfig)]
    changes: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in body.split(","))):
        key, sep, value = item.partition("=")
        if not sep or key not in known:
            raise typer.BadParameter(f"{item!r}: expected FIELD=VALUE with FIELD one of {', '.join(known)}")
        try:
            changes[key] = int(value) if key == "warmup_slots" else float(value)
        except ValueError:
            raise typer.BadParameter(f"{item!r}: {value!r} is not a number") from None
    try:
        return name, replace(ShieldConfig(), **changes)
    except ValueError as exc:
        raise typer.BadParameter(f"{text!r}: {exc}") from None


def inner_bidder(
    method: str, market: Market, setting: Setting, train: Callable[[], DaySet], split: str, days: DaySet
) -> tuple[Bidder, ControllerGains]:
    """The bidder to shield on ``days`` of ``split`` and the controller of its shield (as ``rcb evaluate``'s
    ``shield:`` picks them: a planner plays train and validation days each without its own scenario)."""
    if not (method.startswith((ONNX_PREFIX, ENSEMBLE_PREFIX)) or method in BASELINES) or method == REFERENCE:
        raise EvaluationError(f"{method!r}: expected onnx:MODEL_DIR, ensemble:LABEL=GLOB or a baseline other than pid")
    bidder, _ = method_bidder(method, market, setting, train)
    gains = shield_gains(bidder, market, setting, train)
    return own_days_left_out(bidder, method, split, days, train)[0], gains


def sweep(
    data: Path, split: str, setting: Setting, method: str, configs: list[tuple[str, ShieldConfig]], seeds: int
) -> tuple[dict[str, dict[str, Any]], pd.DataFrame]:
    """Per config (and the unshielded method and the PID): the summary of
    :func:`training.evaluation.evaluate.summarize`;
    and every row's episodes (:func:`training.evaluation.evaluate.episode_rows`)."""
    market = Market.open(data)
    check_split([method], market, split)
    days, train = split_days(market, split, setting)
    inner, gains = inner_bidder(method, market, setting, train, split, days)
    pid, _ = tuned_baseline(market, REFERENCE, setting, train)
    frames, acted = [], {}
    players: list[tuple[str, Bidder]] = [(REFERENCE, pid), (UNSHIELDED, inner)]
    players += [(name, ShieldedBidder(inner, gains, config)) for name, config in configs]
    for label, bidder in players:
        for seed in range(1 if bidder.deterministic else seeds):
            outcome = days.play(bidder, seed)
            frames.append(episode_rows(label, seed, days, outcome.delivery, outcome.cost))
        if isinstance(bidder, ShieldedBidder):
            acted[label] = bidder.acted_share
    episodes = pd.concat(frames, ignore_index=True)
    summary = summarize(episodes, [label for label, _ in players])
    for label, share in acted.items():
        summary[label]["shield_acted_share"] = share
    for name, config in configs:
        summary[name]["config"] = asdict(config)
    return summary, episodes


def main(
    data: Annotated[Path, typer.Argument(help="A market directory (rcb market generate/import).")],
    method: Annotated[str, typer.Option(help="onnx:MODEL_DIR, ensemble:LABEL=GLOB or a baseline (rm, cem, plan).")],
    config: Annotated[list[str], typer.Option(help="NAME or NAME:FIELD=VALUE,... (repeat).")],
    split: Annotated[str, typer.Option(help="train, validation, test or ood.")] = "train",
    setting: Annotated[Setting, typer.Option(help="sc or mc.")] = Setting.MC,
    seeds: Annotated[int, typer.Option(min=1, help="Seeds of a stochastic bidder.")] = 5,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
    episodes: Annotated[
        Path | None, typer.Option(help="Write every row's episodes here (CSV, as rcb evaluate's episodes.csv).")
    ] = None,
) -> None:
    configs = [parse_config(text) for text in config]
    names = [name for name, _ in configs]
    if len(set(names)) < len(names):
        raise typer.BadParameter(f"setting names repeat: {', '.join(names)}")
    try:
        summary, played = sweep(data, split, setting, method, configs, seeds)
    except (EvaluationError, MarketError) as exc:
        raise typer.BadParameter(str(exc)) from None
    if episodes is not None:
        episodes.parent.mkdir(parents=True, exist_ok=True)
        played.to_csv(episodes, index=False)
    if as_json:
        typer.echo(json.dumps(summary, default=float))
        return
    bound = summary[REFERENCE]["csr"] - 0.05
    typer.echo(f"{data} {split} {setting}: {method}; shield bound CSR >= {bound:.3f}")
    typer.echo("| setting | ANS | CSR | acted | bound |")
    typer.echo("|:---|---:|---:|---:|:---|")
    for label, row in summary.items():
        acted = f"{row['shield_acted_share']:.3f}" if "shield_acted_share" in row else ""
        ok = "" if label in (REFERENCE, UNSHIELDED) else ("met" if row["csr"] >= bound - 1e-9 else "missed")
        typer.echo(f"| {label} | {row['ans_median']:.3f} | {row['csr']:.3f} | {acted} | {ok} |")


if __name__ == "__main__":
    typer.run(main)
