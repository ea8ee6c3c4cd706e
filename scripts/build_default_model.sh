#!/usr/bin/env bash
# Rebuild models/default/, the CBRL model that ships with the repository so `rcb serve` works out of
# the box: CBRL in the MC setting with the default `rcb train` config, seed 0, trained on the train
# days of the benchmark market (`rcb market generate --out data/bench --seed 0`, generated if absent),
# exported, then checked: the exported model must replay its run's test episodes (up to float rounding:
# torch and onnxruntime differ by ~1e-6 on a ratio, which can flip the one impression bid at exactly
# that price and move one episode by one win).
#
#   bash scripts/build_default_model.sh                          # ~40 s market + ~5-8 min training
#   RUN=runs/bench/mc/cbrl-s0 bash scripts/build_default_model.sh  # export a finished run of the same config
#
# (scripts/results.sh trains exactly that run as CBRL's MC seed 0.) Scratch files land in $WORK.
set -euo pipefail
cd "$(dirname "$0")/.."
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
if [ -n "${RUN:-}" ]; then
  finished "$RUN" || { echo "error: $RUN is not a finished training run" >&2; exit 2; }
else
  RUN="$WORK/run"
  if ! finished "$RUN"; then
    rm -rf "$RUN"  # our own scratch run, interrupted: start it again
    rcb train --data "$MARKET" --out "$RUN" "${TRAIN_ARGS[@]}"
  fi
fi
rcb export --run "$RUN" --out "$MODEL" --force
rcb evaluate "$MARKET" --setting mc --split test --methods "$RUN,onnx:$MODEL" --seeds 1 \
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
du -sh "$MODEL"
