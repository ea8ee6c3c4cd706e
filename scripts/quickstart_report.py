"""The main job's closing table (``scripts/quickstart.sh``, step 6): offline rows beside the service's replays.

``python -m scripts.quickstart_report OUT [--default-model DIR]`` reads ``OUT/evaluate/summary.json``
(``rcb evaluate``), ``OUT/replay-{fresh,plan,default}/summary.json`` (``rcb replay``), ``OUT/model/model.json`` (the
model trained in the run), ``OUT/model-plan/model.json`` (the planner exported in the run) and the shipped model's
card, and prints the table and what the models are.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

TRAINED, PLANNER, SHIPPED = "CBRL trained now", "planner (no RL) exported now", "CBRL default model"


def rows(out: Path, default_model: Path) -> list[tuple[str, dict[str, Any]]]:
    """``(label, summary row)``: each offline method, then each model replayed through the service."""
    offline = json.loads((out / "evaluate" / "summary.json").read_text())
    names = {f"onnx:{out}/model": TRAINED, f"onnx:{out}/model-plan": PLANNER, f"onnx:{default_model}": SHIPPED}
    found = []
    for name, summary in offline.items():
        shielded = name.startswith("shield:")
        label = names.get(name.removeprefix("shield:"), name) + (" + shield" if shielded else "")
        found.append((label + ", offline", summary))
    for replay, title in (("fresh", TRAINED), ("plan", PLANNER), ("default", SHIPPED)):
        path = out / f"replay-{replay}" / "summary.json"
        if replay == "default" and not path.exists():  # the shipped model sits out a run of the other setting
            continue
        found.append((title + " + shield, through the service", json.loads(path.read_text())["service"]))
    return found


def describe_shipped(card: dict[str, Any]) -> str:
    """What the shipped model is, from its card: one run (its best validation score) or an ensemble (its members')."""
    evaluation = card["evaluation"]
    members = evaluation.get("member_validation_scores") or []
    if members:  # the ensemble's own figures are in evaluation.measured
        return (
            f"the ensemble of {len(members)} runs of the same config trained on the benchmark market's train days"
            f" (members' best validation scores {min(members):.3f}-{max(members):.3f})"
        )
    score = evaluation.get("best_validation_score")
    scored = f" (best validation score {score:.3f})" if score is not None else ""
    return f"the same config trained on the benchmark market's train days{scored}"


def report(out: Path, default_model: Path) -> str:
    setting = str(json.loads((out / "evaluate" / "meta.json").read_text())["setting"]).upper()
    lines = [
        f"{setting} test days of {out / 'market'}: ANS (mean D/D*, 0 when infeasible), CSR (share of feasible days)",
        "",
        f"| {'method':<60} | {'ANS':>6} | {'CSR':>5} | {'days':>4} |",
        f"|{'-' * 62}|{'-' * 8}|{'-' * 7}|{'-' * 6}|",
    ]
    for label, s in rows(out, default_model):
        lines.append(f"| {label:<60} | {s['ans_mean']:6.3f} | {s['csr']:5.2f} | {s['n_episodes']:4d} |")
    card = json.loads((out / "model" / "model.json").read_text())
    planner = json.loads((out / "model-plan" / "model.json").read_text())["planner"]
    default = json.loads((default_model / "model.json").read_text())
    score = card["evaluation"].get("best_validation_score")
    lines += [
        "",
        f"{TRAINED}: the default config, {card['training']['epochs']} epochs on this market's train days"
        + (f" (best validation score {score:.3f})" if score is not None else "")
        + f". {PLANNER}: model/planner.py's Bayesian plan on the same {planner['train_days']} train days as scenarios"
        f" (margin {planner['margin']:g}, cost sd {planner['cost_sd']:g}, tuned there)."
        + (
            f" {SHIPPED} ({default_model}): {describe_shipped(default)}, served here on days it has not seen."
            if str(default["setting"]).upper() == setting
            else f" {SHIPPED} ({default_model}) is a {default['setting']} model and sits out a {setting} run."
        )
        + " The service runs the safety shield by default: its episodes equal the offline '+ shield' rows.",
        "Full results on the benchmark market and the market suite: RESULTS.md",
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.quickstart_report", description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="scripts/quickstart.sh's OUT (e.g. out/quickstart)")
    parser.add_argument("--default-model", type=Path, default=Path("models/default"))
    args = parser.parse_args(argv)
    try:
        print("\n" + report(args.out, args.default_model))
    except (OSError, KeyError, ValueError) as exc:
        print(f"error: {args.out} lacks what the main job writes ({exc}); run scripts/quickstart.sh", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
