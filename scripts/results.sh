#!/usr/bin/env bash
# Reproduce RESULTS.md: the benchmark market (seed 0, 60 ID + 20 OOD days x ~1M impressions) and the
# paper-style tables for SC and MC on the test and OOD splits, 5 seeds per method.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
MARKET="${MARKET:-data/bench}"
OUT="${OUT:-out/results}"
METHODS="${METHODS:-rm,pid,cem,oracle-day,oracle-slot}"
if [ ! -f "$MARKET/manifest.json" ]; then
  .venv/bin/rcb market generate --out "$MARKET" --seed 0
fi
for setting in sc mc; do
  for split in test ood; do
    .venv/bin/rcb evaluate "$MARKET" --setting "$setting" --split "$split" --methods "$METHODS" --seeds 5 \
      --out "$OUT/$setting-$split" > /dev/null
  done
done
{
  echo "# Results"
  echo
  echo "Produced by \`bash scripts/results.sh\` (market: \`rcb market generate --out $MARKET --seed 0\`,"
  echo "60 ID days split 30 train / 30 test, 20 OOD days, ~1M impressions a day). Baselines are tuned on the"
  echo "30 train days only (tuning seed 0); every method runs seeds 0..4. \`oracle-day\` and \`oracle-slot\` are"
  echo "hindsight reference rows, not bidders. Plots and per-episode CSVs: \`$OUT/<setting>-<split>/\`."
  for setting in sc mc; do
    for split in test ood; do
      echo
      echo "## ${setting^^}, $split split"
      echo
      sed '1{/^# /d}' "$OUT/$setting-$split/summary.md"
    done
  done
} > RESULTS.md
echo "wrote RESULTS.md"
