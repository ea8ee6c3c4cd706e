#!/usr/bin/env bash
# The main job at this stage of the project: set up, generate a small non-stationary market,
# report how non-stationary it is, solve its hindsight oracles and replay one day.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
OUT="${OUT:-out/quickstart}"
MARKET="$OUT/market"
rcb() { .venv/bin/rcb "$@"; }
rcb market generate --out "$MARKET" --days-id 12 --days-ood 4 --impressions-per-day 100000 --seed 0 --force
rcb market report "$MARKET" --out "$OUT/market_report.png"
rcb oracle "$MARKET" --setting sc > "$OUT/oracle_sc.txt" && tail -n 25 "$OUT/oracle_sc.txt"
rcb oracle "$MARKET" --setting mc --json > "$OUT/oracle_mc.jsonl"
FIRST_TEST_DAY=$(.venv/bin/python -c "import json,sys; m=json.load(open('$MARKET/manifest.json')); print(next(d['day'] for d in m['days'] if d['split']=='test'))")
rcb simulate "$MARKET" --day "$FIRST_TEST_DAY" --setting mc --ratios 1.5
echo "outputs in $OUT: market/, market_report.png, oracle_sc.txt, oracle_mc.jsonl"
