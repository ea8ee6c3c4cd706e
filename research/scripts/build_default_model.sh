#!/usr/bin/env bash
# Rebuild models/default/, the CBRL model that ships with the repository so `rcb serve` works out of
# the box: CBRL in the MC setting with the default `rcb train` config on the train days of the benchmark
# market (`rcb market generate --out data/bench --seed 0`, generated if absent), exported, then checked
# and measured:
# - the exported model must replay its run's test episodes (up to float rounding: torch and onnxruntime
#   differ by ~1e-6 on a ratio, which can flip the one impression bid at exactly that price);
# - its figures on the market's test and OOD days (5 seeds; alone, behind the shield, and PID's) are
#   written into the card (`evaluation.measured`).
#
#   bash research/scripts/build_default_model.sh                                   # trains seed 0 (~8 min on 2 cores)
#   RUN=runs/bench/mc/cbrl-s0 bash research/scripts/build_default_model.sh         # export a finished run
#   RUNS='runs/suite/bench/mc/cbrl-s*' MARKET=data/suite/bench bash research/scripts/build_default_model.sh
#       # model selection on validation days (held-out train days), by the rule of research/selection.py:
#       # the ensemble of all RUNS, unless the best single run beats it there by more than 0.02 ANS
#
# (research/scripts/benchmark.sh and research/scripts/suite.sh train runs of exactly that config.) Scratch files land in $WORK.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/setup.sh
rcb() { .venv/bin/rcb "$@"; }

WORK="${WORK:-out/default-model}"
MODEL="models/default"
MARKET="${MARKET:-data/bench}"
TRAIN_ARGS=(--algo cbrl --setting mc --seed 0)

if [ ! -f "$MARKET/manifest.json" ]; then
  rcb market generate --out "$MARKET" --seed 0
fi
finished() { [ -f "$1/run.json" ] && grep -q '"status": "done"' "$1/run.json"; }
if [ -n "${RUNS:-}" ]; then  # model selection on validation days only, never test or OOD
  mapfile -t MEMBERS < <(.venv/bin/python - "$RUNS" <<'EOF'
import glob, sys
from pathlib import Path
runs = [r for r in sorted(Path(p) for p in glob.glob(sys.argv[1])) if (r / "run.json").is_file()]
unfinished = [str(r) for r in runs if '"status": "done"' not in (r / "run.json").read_text()]
if not runs or unfinished:
    sys.exit(f"error: {sys.argv[1]} matches no training run" if not runs else f"error: unfinished runs: {unfinished}")
print("\n".join(map(str, runs)))
EOF
)
  # Each run plays the validation days once (run k with seed k, as in research/scripts/suite.sh), the ensemble with
  # every seed; research.selection applies the rule fixed in advance (the ensemble unless the best run beats
  # it by more than its margin).
  rcb evaluate "$MARKET" --setting mc --split validation --seeds "${#MEMBERS[@]}" \
    --methods "cbrl=$RUNS,ensemble:cbrl=$RUNS" --out "$WORK/selection" > /dev/null
  echo -n "selected on validation days: " >&2
  SELECTION=$(.venv/bin/python -m research.selection "$WORK/selection" --json)  # the choice's description: stderr
  read -r CHOICE BEST_SEED < <(.venv/bin/python -c \
    "import json, sys; s = json.loads(sys.argv[1]); print(s['choice'], s['best_seed'])" "$SELECTION")
  RUN=${MEMBERS[$BEST_SEED]}
fi
if [ -n "${RUN:-}" ]; then
  finished "$RUN" || { echo "error: $RUN is not a finished training run" >&2; exit 2; }
else
  RUN="$WORK/run"
  if ! finished "$RUN"; then
    rm -rf "$RUN"  # our own scratch run, interrupted: start it again
    rcb train --data "$MARKET" --out "$RUN" "${TRAIN_ARGS[@]}"
  fi
fi
if [ "${CHOICE:-single}" = ensemble ]; then
  rcb export "${MEMBERS[@]/#/--run=}" --out "$MODEL" --force
  REPLAYED="ensemble:all=$RUNS"
else
  rcb export --run "$RUN" --out "$MODEL" --force
  REPLAYED="$RUN"
fi
rcb evaluate "$MARKET" --setting mc --split test --methods "$REPLAYED,onnx:$MODEL" --seeds 1 \
  --out "$WORK/evaluate" > /dev/null
.venv/bin/python - "$WORK/evaluate/episodes.csv" <<'EOF'
import sys

import pandas as pd

episodes = pd.read_csv(sys.argv[1])
run, model = (group for _, group in episodes.groupby(episodes["method"].str.startswith("onnx:"), sort=True))
gap = (run["delivery"].to_numpy() - model["delivery"].to_numpy()).__abs__()
relative = gap / run["delivery"].clip(lower=1e-9).to_numpy()
same = int((gap < 1e-6).sum())
assert same >= 0.9 * len(run) and relative.max() < 1e-2, (
    f"the exported model does not replay its run: {len(run) - same} of {len(run)} episodes differ, "
    f"by up to {relative.max():.2%} of their delivery"
)
print(f"onnx model replays the run's {len(run)} test episodes: {same} identical (within 1e-6), the others within "
      f"{relative.max():.2%} of delivery (float rounding between torch and onnxruntime)")
EOF
# Figures on the card: test and OOD, 5 seeds, the model alone, behind the shield, and the market's tuned PID.
WORK="$WORK" SELECTION="${SELECTION:-}" bash research/scripts/measure_model.sh "$MODEL" "$MARKET"
du -sh "$MODEL"
