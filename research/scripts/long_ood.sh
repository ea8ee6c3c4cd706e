#!/usr/bin/env bash
# Read models on more OOD days than the suite's 20 (RESULTS.md, "100 OOD days instead of 20"). Each market is the
# suite's (`rcb market generate --preset M --seed 0`) with --days-ood N: its train, test and first 20 OOD days
# are the suite's own, byte for byte, and N - 20 OOD days of the same process follow. Then, per market, the model
# and the PID are evaluated on every OOD day, alone and behind the shield, and `python -m research.long_ood`
# prints each row's gap to PID over the first 20 days and over all N (95% paired bootstrap) and plots the
# running gap.
#
#   bash research/scripts/long_ood.sh                        # the shipped model (MC) on the four markets, 100 OOD days
#   SC_RUNS=runs/suite bash research/scripts/long_ood.sh     # also each market's SC ensemble: the snapshot members
#                                                   # $SC_RUNS/M/sc/snapshots/cbrl-s*/epoch-* that research/scripts/suite.sh
#                                                   # builds (the SC default), else the runs $SC_RUNS/M/sc/cbrl-s*
#
# Settings: DAYS_OOD (100), MARKETS ("bench sparse shifted volatile"), MODEL (models/default), DATA
# (data/long-ood-$DAYS_OOD), OUT (out/long-ood-$DAYS_OOD); paths are relative to the repository root. Resumable:
# markets, and evaluations made by the same methods from the same model card or runs' best actors, are kept.
# About 1 minute per market to generate and 3-4 minutes per model and market to evaluate on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/setup.sh
rcb() { .venv/bin/rcb "$@"; }

DAYS_OOD="${DAYS_OOD:-100}"
MARKETS="${MARKETS:-bench sparse shifted volatile}"
MODEL="${MODEL:-models/default}"
DATA="${DATA:-data/long-ood-$DAYS_OOD}"
OUT="${OUT:-out/long-ood-$DAYS_OOD}"

evaluate() {  # MARKET SETTING OUT_DIR METHOD [WHAT]: METHOD and PID, alone and behind the shield, every OOD day
  local market=$1 setting=$2 out=$3 method=$4 what=${5:-}
  local methods="pid,shield:pid,$method,shield:$method"
  # Kept only if made by the same methods from the same model or runs (the stamp is written after success).
  local stamp="$methods $what"
  if [ ! -f "$out/episodes.csv" ] || [ "$(cat "$out/.long-ood-stamp" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$out"
    mkdir -p "$(dirname "$out")"
    rcb evaluate "$market" --setting "$setting" --split ood --methods "$methods" --out "$out" > "$out.log" 2>&1 ||
      { echo "evaluating $out failed; see $out.log" >&2; exit 1; }
    echo "$stamp" > "$out/.long-ood-stamp"
  fi
  echo "evaluated $out" >&2
}

rows=()
for market in $MARKETS; do
  if [ ! -f "$DATA/$market/manifest.json" ]; then
    rcb market generate --preset "$market" --seed 0 --days-ood "$DAYS_OOD" --out "$DATA/$market" > /dev/null
  fi
  evaluate "$DATA/$market" mc "$OUT/$market/mc" "onnx:$MODEL" "$(sha256sum "$MODEL/model.json" | cut -c1-16)"
  rows+=(--row "$market MC" "$OUT/$market/mc/episodes.csv" "shield:onnx:$MODEL")
  runs="${SC_RUNS:-}/$market/sc/snapshots/cbrl-s*/epoch-*"
  compgen -G "$runs" > /dev/null || runs="${SC_RUNS:-}/$market/sc/cbrl-s*"
  if [ -n "${SC_RUNS:-}" ] && compgen -G "$runs" > /dev/null; then
    evaluate "$DATA/$market" sc "$OUT/$market/sc" "ensemble:cbrl=$runs" "$(cat $runs/best.pt 2>/dev/null | sha256sum | cut -c1-16)"
    rows+=(--row "$market SC" "$OUT/$market/sc/episodes.csv" "shield:ensemble:cbrl")
  fi
done
.venv/bin/python -m research.long_ood "$OUT/running-gap.png" "${rows[@]}"
