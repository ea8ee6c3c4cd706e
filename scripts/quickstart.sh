#!/usr/bin/env bash
# The main job at this stage of the project: set up, generate a small non-stationary market,
# report how non-stationary it is, solve its hindsight oracles, replay one day, train a small CBRL
# policy on the train days, export it to ONNX, and evaluate it (as the exported artifact) against the
# baselines (tuned on the train days) and the oracles on the test days. Serving comes with its issue.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
OUT="${OUT:-out/quickstart}"
MARKET="$OUT/market"
rcb() { .venv/bin/rcb "$@"; }
rcb market generate --out "$MARKET" --days-id 12 --days-ood 4 --impressions-per-day 100000 --seed 0 --force
rcb market report "$MARKET" --out "$OUT/market_report.png"
rcb oracle "$MARKET" --setting sc --json > "$OUT/oracle_sc.jsonl"
rcb oracle "$MARKET" --setting mc                      # a table of the MC oracle, day by day
rcb oracle "$MARKET" --setting mc --json > "$OUT/oracle_mc.jsonl"   # the same, cached, as JSON lines
FIRST_TEST_DAY=$(.venv/bin/python -c "import json,sys; m=json.load(open('$MARKET/manifest.json')); print(next(d['day'] for d in m['days'] if d['split']=='test'))")
rcb simulate "$MARKET" --day "$FIRST_TEST_DAY" --setting mc --ratios 1.5 --json > "$OUT/simulate_mc.json"
rm -rf "$OUT/run-cbrl"
rcb train --data "$MARKET" --setting mc --algo cbrl --epochs 6 --updates-per-epoch 150 --seed 0 --out "$OUT/run-cbrl"
rcb export --run "$OUT/run-cbrl" --out "$OUT/model" --force
rcb evaluate "$MARKET" --setting mc --split test --seeds 3 --out "$OUT/evaluate-mc-test" \
  --methods "rm,pid,cem,onnx:$OUT/model,oracle-day,oracle-slot"
echo "outputs in $OUT: market/, market_report.png, oracle_sc.jsonl, oracle_mc.jsonl, simulate_mc.json,"
echo "  run-cbrl/ (training run, curves.png), model/ (ONNX artifact), evaluate-mc-test/ (table, plots)"
