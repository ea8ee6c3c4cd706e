#!/usr/bin/env bash
# The main job at this stage of the project: set up, generate a small non-stationary market,
# report how non-stationary it is, solve its hindsight oracles, replay one day, and evaluate the
# baselines (tuned on the train days) against the oracles on the test days.
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
rcb evaluate "$MARKET" --setting mc --split test --methods rm,pid,cem,oracle-day,oracle-slot --seeds 3 \
  --out "$OUT/evaluate-mc-test"
echo "outputs in $OUT: market/, market_report.png, oracle_sc.jsonl, oracle_mc.jsonl, simulate_mc.json, evaluate-mc-test/"
