#!/usr/bin/env bash
# The market suite: train the default CBRL config on every market of the suite and evaluate
# every method on each, so a design choice is checked beyond the benchmark market. Markets are the
# presets of training/market/suite.py (bench, sparse, shifted, volatile; seed 0, prior MC constraints),
# plus the two importer fixtures (tests/fixtures), which are too small to train on: there the shipped
# model and the baselines play, with and without the shield. CBRL plays as its SEEDS runs (run k with
# seed k) and as one ensemble of them (ensemble:, the median log-ratio), each with and without the shield. In SC the
# ensemble is the SC default's snapshot ensemble (RESULTS.md): the SC runs train with --keep-epochs and every
# epoch of each run's last quarter becomes a member (rcb reselect --snapshots: $RUNS/<market>/sc/snapshots/cbrl-s<k>/
# epoch-NNN); in MC it is the runs as trained (MC's early epochs validate best).
# The paper's RL rivals (RIVALS: Hard, CRL, USCB, RCPO) are trained with the same seeds and play beside it,
# with and without the shield; USCB's gamma and RCPO's dual-ascent step are the values research/scripts/benchmark.sh
# validated per setting.
# Resumable: finished runs, markets and evaluations are kept, an interrupted training run is resumed; a finished
# run of another config than asked (a changed default or TRAIN_ARGS) stops the script (rcb train --skip-done).
#
#   bash research/scripts/suite.sh                          # MC, 5 seeds, all four generated markets, every method
#                                                  # (100 runs: about 5 hours on 2 cores)
#   MARKETS="sparse" SEEDS=3 RIVALS= bash research/scripts/suite.sh   # a subset, CBRL and the tuned baselines only
#   SETTINGS="sc mc" JOBS=4 bash research/scripts/suite.sh  # both settings, more runs at once on a bigger machine
#   DAYS_OOD=100 bash research/scripts/suite.sh             # OOD rows read on 100 days: markets data/suite-ood100/<market>
#                                                  # (the same train, test and first 20 OOD days), the same runs
#   FOLDS=1 bash research/scripts/suite.sh                  # CBRL run k holds out validation fold k (rcb train
#                                                  # --validation-fold): runs/suite-folds, out/suite-folds
#
# Outputs: data/suite/<market>/ (markets), runs/suite/<market>/<setting>/cbrl-s<k>/ (runs),
# out/suite/<market>/<setting>-<split>/ (rcb evaluate's outputs) and out/suite/SUITE.md (the per-market table).
# With DAYS_OOD other than 20 the markets and outputs go to data/suite-ood<N>/ and out/suite-ood<N>/; the runs
# are shared, since the train days (all a run is fitted to) are byte-identical.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/setup.sh
MARKETS="${MARKETS:-bench sparse shifted volatile}"
SETTINGS="${SETTINGS:-mc}"
SEEDS="${SEEDS:-5}"
JOBS="${JOBS:-2}"
DAYS_OOD="${DAYS_OOD:-20}"          # OOD days per generated market (20: the suite's tables)
suffix=$([ "$DAYS_OOD" = 20 ] || echo "-ood$DAYS_OOD")
DATA="${DATA:-data/suite$suffix}"
FOLDS="${FOLDS:-0}"                # 1: CBRL run k holds out fold k of the train days, not fold 0 (no shared
                                   # held-out days, so no validation evaluation and the ensemble is what ships)
folds=$([ "$FOLDS" = 1 ] && echo "-folds" || true)
if [ "$FOLDS" = 1 ] && [ "$SEEDS" -gt 5 ]; then
  echo "FOLDS=1 trains run k on fold k of 5: SEEDS must be at most 5" >&2
  exit 2
fi
RUNS="${RUNS:-runs/suite$folds}"
OUT="${OUT:-out/suite$folds$suffix}"
MODEL="${MODEL:-models/default}"    # the shipped model, played on every market of its setting (a transfer check)
MODEL_SETTING=$(.venv/bin/python -c "import json, sys; print(json.load(open(sys.argv[1]))['setting'])" \
  "$MODEL/model.json")
model_methods() {  # SETTING: the shipped model alone and shielded, where it was trained for that setting
  [ "$1" = "$MODEL_SETTING" ] && echo ",onnx:$MODEL,shield:onnx:$MODEL"
  return 0
}
TRAIN_ARGS="${TRAIN_ARGS:-}"       # extra `rcb train` options for every CBRL run (empty: the defaults)
FIXTURES="${FIXTURES:-1}"          # 0: skip the importer fixtures
RIVALS="${RIVALS-hard crl uscb rcpo}"  # the RL rivals trained beside CBRL (empty: none)
rival_args() {  # SETTING ALGO: the rival's validated knob (research/scripts/benchmark.sh: gamma 3 SC / 2 MC, step 1)
  case "$2" in
    uscb) [ "$1" = mc ] && echo "--uscb-gamma 2" || echo "--uscb-gamma 3" ;;
    rcpo) echo "--rcpo-learning-rate 1" ;;
  esac
}
export TRAIN_ARGS
source research/scripts/train_one.sh

# 1. Markets.
for market in $MARKETS; do
  if [ ! -f "$DATA/$market/manifest.json" ]; then
    .venv/bin/rcb market generate --preset "$market" --seed 0 --days-ood "$DAYS_OOD" --out "$DATA/$market" \
      --json > /dev/null
    echo "generated $DATA/$market"
  fi
  have=$(.venv/bin/python -c "import json, sys; m = json.load(open(sys.argv[1]));
print(sum(d['split'] == 'ood' for d in m['days']))" "$DATA/$market/manifest.json")
  if [ "$have" != "$DAYS_OOD" ]; then
    echo "$DATA/$market has $have OOD days, not DAYS_OOD=$DAYS_OOD; choose another DATA or remove it" >&2
    exit 2
  fi
done
if [ "$FIXTURES" = 1 ]; then
  [ -f "$DATA/fixture-cbrl-syn/manifest.json" ] ||
    .venv/bin/rcb market import --format cbrl-syn tests/fixtures/cbrl_syn --out "$DATA/fixture-cbrl-syn" --seed 1 \
      --json > /dev/null
  [ -f "$DATA/fixture-auctionnet/manifest.json" ] ||
    .venv/bin/rcb market import --format auctionnet tests/fixtures/auctionnet --advertiser 12 \
      --out "$DATA/fixture-auctionnet" --seed 1 --json > /dev/null
fi

# 2. Training runs, seeds 0..SEEDS-1 of the default config per (market, setting).
for seed in $(seq 0 $((SEEDS - 1))); do
  for market in $MARKETS; do
    for setting in $SETTINGS; do
      echo "$DATA/$market $setting cbrl $seed $RUNS/$market/$setting/cbrl-s$seed$([ "$FOLDS" = 1 ] &&
        echo " --validation-fold $seed")$([ "$setting" = sc ] && echo " --keep-epochs")"
    done
  done
done | run_jobs
# The rivals: their own runs, without TRAIN_ARGS (those are CBRL's options).
for seed in $(seq 0 $((SEEDS - 1))); do
  for market in $MARKETS; do
    for setting in $SETTINGS; do
      for algo in $RIVALS; do
        extra=$(rival_args "$setting" "$algo")  # no trailing blank: xargs -L would join the next line to it
        echo "$DATA/$market $setting $algo $seed $RUNS/$market/$setting/$algo-s$seed${extra:+ $extra}"
      done
    done
  done
done | TRAIN_ARGS= run_jobs
# SC's snapshot members (snapshot_members, research/scripts/train_one.sh), rebuilt when their run changed.
snapshots_dir() { echo "$RUNS/$1/sc/snapshots"; }  # MARKET: where its SC runs' members are built and played from
if [[ " $SETTINGS " == *" sc "* ]]; then
  for market in $MARKETS; do
    for seed in $(seq 0 $((SEEDS - 1))); do
      snapshot_members "$RUNS/$market/sc/cbrl-s$seed" "$(snapshots_dir "$market")/cbrl-s$seed"
    done
  done
fi
ensemble_glob() {  # MARKET SETTING: the members of the CBRL ensemble (the SC snapshot ensemble, MC's runs)
  if [ "$2" = sc ]; then echo "$(snapshots_dir "$1")/cbrl-s*/epoch-*"; else echo "$RUNS/$1/$2/cbrl-s*"; fi
}

# 3. Evaluations, $JOBS at once (each redone when a run of its market and setting, or a snapshot member, was written
#    after it).
evaluate_one() {  # MARKET_DIR SETTING SPLIT OUT METHODS
  local data=$1 setting=$2 split=$3 out=$4 methods=$5
  local runs="$RUNS/$(basename "$data")/$setting"  # what this evaluation plays (the fixtures: no runs of their own)
  if [ -f "$out/summary.json" ] && { [ ! -d "$runs" ] ||
    [ -z "$(find "$runs" -name run.json -newer "$out/summary.json" | head -1)" ]; }; then
    return 0
  fi
  if ! .venv/bin/rcb evaluate "$data" --setting "$setting" --split "$split" --seeds "$SEEDS" --methods "$methods" \
    --out "$out" > /dev/null 2> "$out.log"; then
    echo "evaluating $out failed; see $out.log" >&2
    return 1
  fi
  echo "evaluated $out"
}
export -f evaluate_one
export SEEDS RUNS
mkdir -p "$OUT"
{
  for market in $MARKETS; do
    for setting in $SETTINGS; do
      runs="$RUNS/$market/$setting/cbrl-s*"
      members=$(ensemble_glob "$market" "$setting")
      methods="rm,pid,cem,cbrl=$runs,shield:cbrl=$runs,ensemble:cbrl=$members,shield:ensemble:cbrl=$members"
      for algo in $RIVALS; do
        methods="$methods,$algo=$RUNS/$market/$setting/$algo-s*,shield:$algo=$RUNS/$market/$setting/$algo-s*"
      done
      methods="$methods$(model_methods "$setting"),oracle-slot"
      for split in test ood; do
        mkdir -p "$OUT/$market"
        echo "$DATA/$market $setting $split $OUT/$market/$setting-$split $methods"
      done
      # Model selection between the runs and their ensemble reads the validation days only (fold 0: with FOLDS=1
      # those are training days of four runs in five, so the ensemble ships).
      [ "$FOLDS" = 1 ] ||
        echo "$DATA/$market $setting validation $OUT/$market/$setting-validation pid,cbrl=$runs,ensemble:cbrl=$members"
    done
  done
  if [ "$FIXTURES" = 1 ]; then
    for fixture in fixture-cbrl-syn fixture-auctionnet; do
      for setting in $SETTINGS; do
        mkdir -p "$OUT/$fixture"
        echo "$DATA/$fixture $setting test $OUT/$fixture/$setting-test rm,pid$(model_methods "$setting"),oracle-slot"
      done
    done
  fi
} | xargs -r -P "$JOBS" -L 1 bash -c 'evaluate_one "$@"' _

# 4. The per-market table.
.venv/bin/python -m research.suite_report "$OUT" --plot "$OUT/suite.png" > "$OUT/SUITE.md"
cat "$OUT/SUITE.md"
