"""Model selection between a set of training runs and their ensemble, on validation days only.

The rule, fixed before the test and OOD days are read: **ship the ensemble** (the median log-ratio of all
runs), **unless the best single run beats it on the validation days by more than** :data:`SELECTION_MARGIN`.

Why the ensemble is the default: the best single run's validation score is a maximum over seeds (and each
run's epoch was chosen on those same days), so it is biased upward by the seed spread, while the ensemble
is one bidder whose score has no such maximum in it. On the benchmark market the best run beat
its ensemble on validation by 0.005 and then lost to it by 0.04 on test and 0.07 on OOD ANS.

``python -m research.selection VALIDATION_DIR [--method cbrl] [--ensemble ensemble:cbrl]`` prints the choice
for an ``rcb evaluate --split validation`` output that played the runs (``METHOD=RUNS``: run k with seed k)
and their ensemble; ``research/scripts/build_default_model.sh`` and :mod:`research.suite_report` apply the same rule.

**One market's train days or several** (``rcb train --data HOME --data B ...``), fixed before the
held-out days of the runs it was first applied to were read: train both on the home market with the default
config, the pooled runs with ``--selection-days home`` (so both pick their epochs on the same six home days and
their scores there carry the same selection bias), and serve the pooled runs' ensemble **only when, behind the
shield (as served), it scores a higher validation ANS on the home market than the one-market ensemble**; ties go
to the one-market runs (the cheaper ones: a quarter of the days in memory). :func:`choose_training_days`;
``python -m research.selection VALIDATION_DIR --ensemble shield:ensemble:sc --pooled shield:ensemble:pooled``.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

from training.evaluation.report import per_seed_metrics

SELECTION_MARGIN = 0.02
"""How much more validation ANS the best single run needs to be shipped instead of the ensemble: about the
spread of the runs' best validation scores on the benchmark market (0.01-0.03 over five seeds)."""


@dataclass(frozen=True)
class Selection:
    """The rule's choice, ``"ensemble"`` or ``"single"``, and the best single run (run k played seed k), the one
    shipped when the choice is ``"single"``."""

    choice: str
    best_seed: int
    single_validation: float
    ensemble_validation: float

    def describe(self) -> str:
        picked = "the ensemble" if self.choice == "ensemble" else f"the single run of seed {self.best_seed}"
        return (
            f"{picked} (validation ANS: best single run {self.single_validation:.3f} (seed {self.best_seed}), "
            f"ensemble {self.ensemble_validation:.3f}; margin {SELECTION_MARGIN})"
        )


def choose(single_validation: float, ensemble_validation: float, margin: float = SELECTION_MARGIN) -> str:
    """``"single"`` when the best run's validation ANS exceeds the ensemble's by more than ``margin``, else
    ``"ensemble"`` (ties, and a missing ensemble score, go to the side that has a number)."""
    if pd.isna(ensemble_validation):
        return "single"
    if pd.isna(single_validation):
        return "ensemble"
    return "single" if single_validation > ensemble_validation + margin else "ensemble"


def choose_training_days(one_market_validation: float, pooled_validation: float) -> str:
    """``"pooled"`` when the pooled runs' ensemble scores a strictly higher validation ANS on the home market than
    the one-market runs' ensemble (both selected on those days), else ``"one-market"``; a missing score loses."""
    if pd.isna(pooled_validation):
        return "one-market"
    if pd.isna(one_market_validation):
        return "pooled"
    return "pooled" if pooled_validation > one_market_validation else "one-market"


def median_validation_ans(table: pd.DataFrame, label: str) -> float:
    """An ensemble's validation ANS from the episodes' :func:`per_seed_metrics` ``table``: the median over its
    seeds (``nan`` if ``label`` did not play)."""
    scores = table.loc[table["method"] == label, "ans"]
    return float(scores.median()) if len(scores) else float("nan")


def select(
    episodes: pd.DataFrame, method: str = "cbrl", ensemble: str = "ensemble:cbrl", margin: float = SELECTION_MARGIN
) -> Selection:
    """Apply the rule to validation ``episodes`` (``rcb evaluate``'s episodes.csv): each seed of ``method``
    is one run, scored by its ANS over the days; ``ensemble`` is scored by its median ANS over seeds."""
    table = per_seed_metrics(episodes)
    runs = table[table["method"] == method]
    if runs.empty:
        raise ValueError(f"no episodes of {method!r} to select from (methods: {sorted(table['method'].unique())})")
    best = runs.loc[runs["ans"].idxmax()]
    ensemble_score = median_validation_ans(table, ensemble)
    choice = choose(float(best["ans"]), ensemble_score, margin)
    return Selection(choice, int(best["seed"]), float(best["ans"]), ensemble_score)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m research.selection", description=__doc__.splitlines()[0])
    parser.add_argument("validation_dir", type=Path, help="an `rcb evaluate --split validation` output directory")
    parser.add_argument("--method", default="cbrl", help="the runs' label in episodes.csv (default cbrl)")
    parser.add_argument("--ensemble", default="ensemble:cbrl", help="the ensemble's label (default ensemble:cbrl)")
    parser.add_argument(
        "--pooled",
        metavar="LABEL",
        help="instead: choose between the --ensemble (one market's runs) and this pooled runs' ensemble",
    )
    parser.add_argument("--json", action="store_true", help="print the selection as JSON (its description on stderr)")
    args = parser.parse_args(argv)
    path = args.validation_dir / "episodes.csv"
    if not path.is_file():
        print(f"{path}: no such file (run rcb evaluate --split validation first)", file=sys.stderr)
        return 2
    episodes = pd.read_csv(path)
    if args.pooled is not None:
        return _print_training_days(episodes, args.ensemble, args.pooled, args.json)
    try:
        selection = select(episodes, args.method, args.ensemble)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(selection.describe(), file=sys.stderr)
        print(json.dumps(asdict(selection)))
    else:
        print(selection.describe())
    return 0


def _print_training_days(episodes: pd.DataFrame, one_market: str, pooled: str, as_json: bool) -> int:
    table = per_seed_metrics(episodes)
    scores = {label: median_validation_ans(table, label) for label in (one_market, pooled)}
    missing = [label for label, value in scores.items() if pd.isna(value)]
    if missing:
        print(f"error: no episodes of {', '.join(map(repr, missing))} in the validation output", file=sys.stderr)
        return 2
    choice = choose_training_days(scores[one_market], scores[pooled])
    text = f"{choice} (validation ANS: {one_market} {scores[one_market]:.3f}, {pooled} {scores[pooled]:.3f})"
    if as_json:
        print(text, file=sys.stderr)
        print(
            json.dumps(
                {"choice": choice, "one_market_validation": scores[one_market], "pooled_validation": scores[pooled]}
            )
        )
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
