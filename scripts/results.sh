#!/usr/bin/env bash
# Reproduce RESULTS.md: the benchmark market (seed 0, 60 ID + 20 OOD days x ~1M impressions), every
# method trained or tuned on its 30 train days, and the paper-style tables for SC and MC on the test
# and OOD splits with 5 seeds per method, the learning curves of Hard, CRL and CBRL (Fig. 6) and the
# training times.
#
#   bash scripts/results.sh            # resumable: finished runs are kept, interrupted ones resumed
#   JOBS=4 bash scripts/results.sh     # more training runs at once on a bigger machine
#
# RL runs: $RUNS/<setting>/<algo>-s<seed>, the default `rcb train` config with seeds 0..4. USCB's
# gamma (among $USCB_GAMMAS) and RCPO's dual-ascent step (among $RCPO_RATES) are chosen per setting by
# the best validation score of a seed-0 run (held-out train days, never test or OOD); the chosen run
# is the method's seed 0. Baselines: tuned on the train days
# (tuning seed 0), evaluated with seeds 0..4. Hand-written: docs/results-discussion.md (what the
# tables say), docs/results-tuning.md (how the defaults were chosen) and docs/results-updates.md (the later
# reruns and the market suite, newest first; kept above the regenerated tables).
set -euo pipefail
cd "$(dirname "$0")/.."
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
CONSTRAINTS="${CONSTRAINTS:-prior}"   # MC constraint recipe of a generated market; the tables below the updates used paper
export MARKET RUNS TRAIN_ARGS
if [ ! -f "$MARKET/manifest.json" ]; then
  .venv/bin/rcb market generate --out "$MARKET" --seed 0 --constraints "$CONSTRAINTS"
fi

# One training run per line "SETTING ALGO SEED OUT [rcb train args]", on $MARKET (scripts/train_one.sh).
source scripts/train_one.sh
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

{
  echo "# Results"
  echo
  echo "Produced by \`bash scripts/results.sh\` (market: \`rcb market generate --out $MARKET --seed 0\`,"
  echo "60 ID days split 30 train / 30 test, 20 OOD days, ~1M impressions a day). Everything is fitted on the"
  echo "30 train days only: baselines are tuned there (tuning seed 0) and evaluated with seeds 0..$((SEEDS - 1));"
  echo "each RL method is $SEEDS training runs (seeds 0..$((SEEDS - 1)), the default \`rcb train\` config), model-selected"
  echo "on 6 held-out train days, run k evaluated with seed k. USCB's gamma (among $USCB_GAMMAS) and RCPO's"
  echo "dual-ascent step (among $RCPO_RATES) were chosen on those validation days: gamma ${USCB_GAMMA[sc]} and"
  echo "step ${RCPO_RATE[sc]} for SC, gamma ${USCB_GAMMA[mc]} and step ${RCPO_RATE[mc]} for MC. \`oracle-day\` and \`oracle-slot\`"
  echo "are hindsight reference rows, not bidders. Plots and per-episode CSVs: \`$OUT/<setting>-<split>/\`."
  echo "Machine: $(.venv/bin/python -c 'import benchmarks.machine as m; print(m.describe_machine())' 2>/dev/null || uname -srm)."
  echo
  [ -f docs/results-standing.md ] && cat docs/results-standing.md && echo  # the figures of record, one table
  [ -f docs/results-updates.md ] && cat docs/results-updates.md && echo   # hand-written, newest first
  [ -f docs/results-discussion.md ] && cat docs/results-discussion.md
  for setting in sc mc; do
    for split in test ood; do
      echo
      echo "## ${setting^^}, $split split"
      echo
      sed '1{/^# /d}' "$OUT/$setting-$split/summary.md"
    done
  done
  echo
  echo "## Learning curves (paper Fig. 6)"
  echo
  echo "Validation score (greedy policy on the 6 held-out train days) per gradient update, mean over the"
  echo "$SEEDS seeds with the seeds' min-max band. \"Updates to reach hard's final\": the first epoch at which"
  echo "the method's mean curve reaches Hard's final score (mean of its last 3 epochs)."
  for setting in sc mc; do
    echo
    echo "### ${setting^^}"
    echo
    echo "![${setting} learning curves]($FIGURES/curves-$setting.png)"
    echo
    cat "$OUT/curves-$setting.md"
  done
  echo
  echo "## Training time"
  echo
  cat "$OUT/training-time.md"
  echo
  cat docs/results-tuning.md
} > RESULTS.md
echo "wrote RESULTS.md"
