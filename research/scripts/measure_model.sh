#!/usr/bin/env bash
# Measure an exported model on its market and write the figures into its card (`evaluation.measured`):
# test and OOD days, 5 seeds (one play for a deterministic model: a planner), the model alone, behind the safety
# shield (the card's band: its `shield` section, model/shield.py's defaults where it has none; written beside the
# figures) and the market's tuned PID. The ONNX files are untouched. research/scripts/build_default_model.sh
# ends with it; run it alone to re-measure a shipped model after the shield or the metrics changed:
#
#   bash research/scripts/measure_model.sh models/default data/suite/bench
#
# A card's earlier `measured.selection` (how the model was chosen) is kept unless SELECTION (JSON) is given.
set -euo pipefail
cd "$(dirname "$0")/../.."
MODEL="${1:?usage: measure_model.sh MODEL_DIR MARKET_DIR}"
MARKET="${2:?usage: measure_model.sh MODEL_DIR MARKET_DIR}"
WORK="${WORK:-out/measure-model}"
# the card's setting (a planner model, rcb export --plan, may be SC)
SETTING="$(.venv/bin/python -c '
import sys
from model.artifact import ArtifactError, read_card
try:
    print(read_card(sys.argv[1]).setting)
except ArtifactError as exc:
    sys.exit(f"measure_model.sh: {exc}")
' "$MODEL")"
for split in test ood; do
  .venv/bin/rcb evaluate "$MARKET" --setting "$SETTING" --split "$split" --methods "pid,onnx:$MODEL,shield:onnx:$MODEL" \
    --seeds 5 --out "$WORK/figures-$split" > /dev/null
done
.venv/bin/python - "$MODEL" "$MARKET" "$WORK" "${SELECTION:-}" <<'PY'
import json, sys
from pathlib import Path

from model.artifact import read_card
from training.export.card import record_figures

model, market, work, selection = sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4]
before = read_card(Path(model)).evaluation.measured or {}
measured = {"market": market, "seeds": 5, "metric": "median ANS over seeds, mean CSR (docs/metrics.md)"}
if selection:  # how it was chosen: research.selection's rule on the validation days
    measured["selection"] = {"rule": "research/selection.py", **json.loads(selection)}
elif "selection" in before:
    measured["selection"] = before["selection"]
bands = [  # the band each split's `shielded` row was played with (rcb evaluate's meta.json: the card's)
    json.loads((work / f"figures-{split}" / "meta.json").read_text())["tuned"][f"shield:onnx:{model}"]["shield"]
    for split in ("test", "ood")
]
if bands[0] != bands[1]:
    sys.exit("measure_model.sh: the test and OOD figures were played behind different shield bands")
measured["shield"] = bands[0]
for split in ("test", "ood"):
    summary = json.loads((work / f"figures-{split}" / "summary.json").read_text())
    rows = {"model": f"onnx:{model}", "shielded": f"shield:onnx:{model}", "pid": "pid"}
    measured[split] = {
        name: {"ans": round(summary[key]["ans_median"], 4), "csr": round(summary[key]["csr"], 4)}
        for name, key in rows.items()
    }
    measured["seeds"] = summary[f"onnx:{model}"]["n_seeds"]  # 1 for a deterministic model (a planner)
    print(f"{split}: " + ", ".join(f"{n} ANS {v['ans']:.3f} CSR {v['csr']:.2f}" for n, v in measured[split].items()))
record_figures(Path(model), measured)
PY
