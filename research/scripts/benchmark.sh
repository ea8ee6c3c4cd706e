#!/usr/bin/env bash
# The benchmark market's tables (RESULTS.md, "The benchmark market"): the market (seed 0, 60 ID + 20 OOD days x ~1M
# impressions), every method trained or tuned on its 30 train days, SC and MC tables on the test and OOD splits with
# 5 seeds per method, the learning curves of Hard, CRL and CBRL (paper Fig. 6) and the training times.
#
#   bash research/scripts/benchmark.sh            # resumable: finished runs are kept, interrupted ones resumed
#   JOBS=4 bash research/scripts/benchmark.sh     # more training runs at once on a bigger machine
#
# RL runs: $RUNS/<setting>/<algo>-s<seed>, the default `rcb train` config with seeds 0..4. USCB's gamma (among
# $USCB_GAMMAS) and RCPO's dual-ascent step (among $RCPO_RATES) are chosen per setting by the best validation score
# of a seed-0 run (held-out train days, never test or OOD); the chosen run is the method's seed 0. Baselines: tuned
# on the train days (tuning seed 0), evaluated with seeds 0..4. Tables land in $OUT/<setting>-<split>/summary.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/setup.sh
MARKET="${MARKET:-data/bench}"
OUT="${OUT:-out/results}"
RUNS="${RUNS:-runs/bench}"
JOBS="${JOBS:-2}"
SEEDS="${SEEDS:-5}"
USCB_GAMMAS="${USCB_GAMMAS:-2 3 10}"
RCPO_RATES="${RCPO_RATES:-0.1 1 5}"
FIGURES="${FIGURES:-docs/results}"   # committed figures RESULTS.md shows
TRAIN_ARGS="${TRAIN_ARGS:-}"   # extra `rcb train` options for every run (empty: the defaults)
CONSTRAINTS="${CONSTRAINTS:-prior}"   # MC constraint recipe of a generated market
export MARKET RUNS TRAIN_ARGS
if [ ! -f "$MARKET/manifest.json" ]; then
  .venv/bin/rcb market generate --out "$MARKET" --seed 0 --constraints "$CONSTRAINTS"
fi

# One training run per line "SETTING ALGO SEED OUT [rcb train args]", on $MARKET (research/scripts/train_one.sh).
source research/scripts/train_one.sh
train_one() { train_run "$MARKET" "$@"; }
export -f train_one
run_jobs() { xargs -r -P "$JOBS" -L 1 bash -c 'train_one "$@"' _; }

# 1. The rivals' own knobs, per setting, on validation days: USCB's gamma, RCPO's dual-ascent step.
for setting in sc mc; do
  for gamma in $USCB_GAMMAS; do
    echo "$setting uscb 0 $RUNS/$setting/uscb-gamma$gamma --uscb-gamma $gamma"
  done
  for rate in $RCPO_RATES; do
    echo "$setting rcpo 0 $RUNS/$setting/rcpo-rate$rate --rcpo-learning-rate $rate"
  done
done | run_jobs
# The candidate with the best validation score (ties: the first listed); its run is the method's seed 0.
choose() {
  .venv/bin/python - "$@" <<'EOF'
import json, sys
prefix, candidates = sys.argv[1], sys.argv[2:]
scores = [json.load(open(f"{prefix}{c}/run.json"))["best_validation_score"] for c in candidates]
print(candidates[scores.index(max(scores))])
EOF
}
declare -A USCB_GAMMA RCPO_RATE
for setting in sc mc; do
  USCB_GAMMA[$setting]=$(choose "$RUNS/$setting/uscb-gamma" $USCB_GAMMAS)
  RCPO_RATE[$setting]=$(choose "$RUNS/$setting/rcpo-rate" $RCPO_RATES)
  ln -sfn "uscb-gamma${USCB_GAMMA[$setting]}" "$RUNS/$setting/uscb-s0"
  ln -sfn "rcpo-rate${RCPO_RATE[$setting]}" "$RUNS/$setting/rcpo-s0"
done

# 2. Every other run; the slowest (CBRL) first so the last jobs are short.
for algo in cbrl crl hard rcpo uscb; do
  for setting in sc mc; do
    for seed in $(seq 0 $((SEEDS - 1))); do
      if [ "$algo" = uscb ]; then
        [ "$seed" = 0 ] || echo "$setting uscb $seed $RUNS/$setting/uscb-s$seed --uscb-gamma ${USCB_GAMMA[$setting]}"
      elif [ "$algo" = rcpo ]; then
        [ "$seed" = 0 ] || echo "$setting rcpo $seed $RUNS/$setting/rcpo-s$seed --rcpo-learning-rate ${RCPO_RATE[$setting]}"
      else
        echo "$setting $algo $seed $RUNS/$setting/$algo-s$seed"
      fi
    done
  done
done | run_jobs

# 3. Tables, curves, training times.
for setting in sc mc; do
  groups="uscb=$RUNS/$setting/uscb-s*,rcpo=$RUNS/$setting/rcpo-s*,hard=$RUNS/$setting/hard-s*"
  groups="$groups,crl=$RUNS/$setting/crl-s*,cbrl=$RUNS/$setting/cbrl-s*"
  for split in test ood; do
    .venv/bin/rcb evaluate "$MARKET" --setting "$setting" --split "$split" --seeds "$SEEDS" \
      --methods "rm,pid,cem,$groups,oracle-day,oracle-slot" --out "$OUT/$setting-$split" > /dev/null
  done
  .venv/bin/rcb curves "hard=$RUNS/$setting/hard-s*" "crl=$RUNS/$setting/crl-s*" "cbrl=$RUNS/$setting/cbrl-s*" \
    --reference hard --title "${setting^^}: validation score during training" \
    --out "$FIGURES/curves-$setting.png" > "$OUT/curves-$setting.md"
done
.venv/bin/python - "$RUNS" > "$OUT/training-time.md" <<'EOF'
import json, statistics, sys
from pathlib import Path
root = Path(sys.argv[1])
print("| setting | algo | runs | median minutes per run | max | epochs | gradient updates |")
print("|:---|:---|---:|---:|---:|---:|---:|")
for setting in ("sc", "mc"):
    for algo in ("hard", "crl", "cbrl", "uscb", "rcpo"):
        bodies = [json.loads((p / "run.json").read_text()) for p in sorted((root / setting).glob(f"{algo}-s*")) if p.is_dir()]
        if not bodies:
            continue
        minutes = [b["train_seconds"] / 60 for b in bodies]
        last = bodies[0]["history"][-1]
        print(f"| {setting.upper()} | {algo} | {len(bodies)} | {statistics.median(minutes):.1f} | {max(minutes):.1f}"
              f" | {len(bodies[0]['history'])} | {last['updates']:,} |")
EOF

for setting in sc mc; do
  for split in test ood; do
    echo "## ${setting^^}, $split split"
    sed '1{/^# /d}' "$OUT/$setting-$split/summary.md"
  done
done
echo "tables in $OUT/<setting>-<split>/, curves in $FIGURES/curves-<setting>.png, training times in $OUT/training-time.md" >&2
