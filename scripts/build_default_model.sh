#!/usr/bin/env bash
# Rebuild models/default/, the small CBRL model that ships with the repository so `rcb serve` works
# out of the box: generate a small market, train CBRL on its train days, export, then check that the
# exported model replays the run's test episodes (evaluate both, one seed). Fixed seeds throughout.
# Everything but models/default/ lands in $WORK (ignored by git). Change the knobs here, nowhere else.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
rcb() { .venv/bin/rcb "$@"; }

WORK="${WORK:-out/default-model}"
MODEL="models/default"
MARKET_ARGS=(--days-id 16 --days-ood 4 --impressions-per-day 50000 --seed 0)
TRAIN_ARGS=(--algo cbrl --setting mc --epochs 12 --updates-per-epoch 200 --seed 0)

rm -rf "$WORK"
rcb market generate --out "$WORK/market" "${MARKET_ARGS[@]}" --workers 1 --force
rcb train --data "$WORK/market" --out "$WORK/run" "${TRAIN_ARGS[@]}"
rcb export --run "$WORK/run" --out "$MODEL" --force
rcb evaluate "$WORK/market" --setting mc --split test --methods "$WORK/run,onnx:$MODEL" --seeds 1 \
  --out "$WORK/evaluate" > /dev/null
.venv/bin/python - "$WORK/evaluate/episodes.csv" <<'EOF'
import sys

import pandas as pd

episodes = pd.read_csv(sys.argv[1])
run, model = (group for _, group in episodes.groupby(episodes["method"].str.startswith("onnx:"), sort=True))
gap = (run["delivery"].to_numpy() - model["delivery"].to_numpy()).__abs__().max()
assert gap < 1e-6, f"the exported model does not replay its run: delivery differs by {gap}"
print(f"onnx model replays the run's {len(run)} test episodes (max delivery gap {gap:.1e})")
EOF
du -sh "$MODEL"
