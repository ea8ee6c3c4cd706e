#!/usr/bin/env bash
# The market zoo: `rcb fit` on every market no choice of the project was tuned on, and what it serves there against
# the best single baseline tuned on the same train days. Markets: the zoo's 20 draws (zoo-00 .. zoo-19, `rcb market
# zoo`; draw k generated with --seed k, since draws generated with one seed share their day-level luck), the suite's
# four presets (bench, sparse, shifted, volatile; seed 0) and a second-price auction against pacing competitors
# (`rcb market simulate-auction --seed 0`, DAYS_ID days, imported with `rcb market import --format rcb`: half its
# days train, half test; it has no festival regime, so no OOD days). For each market and setting: `rcb fit` (SEEDS
# CBRL runs, FIT_ARGS passed through), then `rcb evaluate` on test and OOD with rm, pid, cem, plan, the served model
# as served (shield:onnx:MODEL: a learned model behind the shield around the market's PID, a controller model as it
# is) and oracle-day, then research/zoo_report.py's tables and plot.
# Resumable: markets are kept; a fit is skipped where its model's card has a complete fit section written with the
# same SEEDS and FIT_ARGS (a fit asked with other options runs again and replaces it, reusing its work directory's
# finished steps); an evaluation is kept where it played the model at MODEL and the model was not written after it.
#
#   bash research/scripts/zoo.sh                            # 25 markets x MC and SC: 50 fits (on 2 cores, JOBS=2:
#                                                           # about 6-10 hours, most of it CBRL's epochs; the
#                                                           # 1M-impression presets take 25 min a fit)
#   MARKETS="zoo-03 zoo-11" SETTINGS=mc bash research/scripts/zoo.sh   # a subset
#   FIT_ARGS="--updates-per-epoch 300" bash research/scripts/zoo.sh     # a smaller training budget for every fit
#   MARKETS="zoo-03 auction" IMPRESSIONS=20000 DAYS_ID=12 DAYS_OOD=4 SETTINGS=mc EVAL_SEEDS=1 \
#     FIT_ARGS="--epochs 2 --updates-per-epoch 20" bash research/scripts/zoo.sh   # a smoke run (a few minutes)
#
# Outputs: DATA/<market>/ (markets; the auction's logs in DATA/auction-logs/), MODELS/<market>/<setting>/ (the served
# models; rcb fit's work directories beside them, <setting>.work/), OUT/<market>/<setting>-<split>/ (rcb evaluate's
# outputs), OUT/<market>/<setting>-fit.log, OUT/ZOO.md and OUT/zoo.png. With IMPRESSIONS, DAYS_ID or DAYS_OOD other
# than the defaults, DATA, OUT and MODELS default to data/zoo-<sizes>/, out/zoo-<sizes>/ and models/zoo-<sizes>/,
# so a smaller run never mixes with the full one.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/setup.sh
ZOO_DRAWS="$(seq -f 'zoo-%02g' 0 19 | tr '\n' ' ')"
MARKETS="${MARKETS:-${ZOO_DRAWS}bench sparse shifted volatile auction}"
SETTINGS="${SETTINGS:-mc sc}"
SEEDS="${SEEDS:-1}"                # rcb fit --seeds: CBRL runs per fit
EVAL_SEEDS="${EVAL_SEEDS:-5}"      # rcb evaluate --seeds
JOBS="${JOBS:-2}"                  # fits, then evaluations, this many at once (each single-threaded)
IMPRESSIONS="${IMPRESSIONS:-}"     # impressions a day of every market (empty: each market's own)
DAYS_ID="${DAYS_ID:-60}"           # in-distribution days (half train, half test); the auction's days
DAYS_OOD="${DAYS_OOD:-20}"         # OOD days of the generated markets
FIT_ARGS="${FIT_ARGS:-}"           # extra `rcb fit` options (e.g. --epochs 12 --updates-per-epoch 300)
suffix=""
if [ -n "$IMPRESSIONS" ] || [ "$DAYS_ID" != 60 ] || [ "$DAYS_OOD" != 20 ]; then
  suffix="-i${IMPRESSIONS:-own}-id$DAYS_ID-ood$DAYS_OOD"
fi
DATA="${DATA:-data/zoo$suffix}"
OUT="${OUT:-out/zoo$suffix}"
MODELS="${MODELS:-models/zoo$suffix}"
size_args=()
[ -n "$IMPRESSIONS" ] && size_args=(--impressions-per-day "$IMPRESSIONS")

ood_days() {  # MARKET_DIR: its OOD days
  .venv/bin/python -c "import json, sys; m = json.load(open(sys.argv[1]));
print(sum(d['split'] == 'ood' for d in m['days']))" "$1/manifest.json"
}
all_days() {  # MARKET_DIR: its days
  .venv/bin/python -c "import json, sys; print(len(json.load(open(sys.argv[1]))['days']))" "$1/manifest.json"
}

# 1. Markets.
for market in $MARKETS; do
  dir="$DATA/$market"
  if [ ! -f "$dir/manifest.json" ]; then
    case "$market" in
      zoo-*)
        .venv/bin/rcb market generate --zoo "$market" --seed "$((10#${market#zoo-}))" --days-id "$DAYS_ID" \
          --days-ood "$DAYS_OOD" ${size_args[@]+"${size_args[@]}"} --out "$dir" --json > /dev/null ;;
      bench | sparse | shifted | volatile)
        .venv/bin/rcb market generate --preset "$market" --seed 0 --days-id "$DAYS_ID" --days-ood "$DAYS_OOD" \
          ${size_args[@]+"${size_args[@]}"} --out "$dir" --json > /dev/null ;;
      auction)
        .venv/bin/rcb market simulate-auction --seed 0 --days "$DAYS_ID" ${size_args[@]+"${size_args[@]}"} \
          --out "$DATA/auction-logs" --force --json > /dev/null
        .venv/bin/rcb market import --format rcb "$DATA/auction-logs" --out "$dir" --seed 0 --json > /dev/null ;;
      *)
        echo "unknown market $market: zoo-00 .. zoo-19, bench, sparse, shifted, volatile or auction" >&2
        exit 2 ;;
    esac
    echo "generated $dir"
  fi
  want_ood=$([ "$market" = auction ] && echo 0 || echo "$DAYS_OOD")
  want_all=$((DAYS_ID + want_ood))
  have_ood=$(ood_days "$dir")
  have_all=$(all_days "$dir")
  if [ "$have_ood" != "$want_ood" ] || [ "$have_all" != "$want_all" ]; then
    echo "$dir has $have_all days ($have_ood OOD), not $want_all ($want_ood OOD); choose another DATA or remove it" >&2
    exit 2
  fi
done

# 2. Fits, $JOBS at once.
fit_done() {  # MODEL SETTING STAMP: the card's fit section is complete, for SETTING, written with the options STAMP
  local model=$1 setting=$2 stamp=$3
  [ -f "$model/model.json" ] && [ -f "$model.options" ] && [ "$(cat "$model.options")" = "$stamp" ] &&
    .venv/bin/python -c "import json, sys; fit = json.load(open(sys.argv[1])).get('fit') or {}
done = all(fit.get(k) for k in ('chosen', 'kind', 'served', 'candidates', 'train_fingerprint'))
chosen = [c for c in fit.get('candidates') or () if c.get('chosen')]
sys.exit(0 if done and fit.get('setting') == sys.argv[2] and len(chosen) == 1 else 1)" "$model/model.json" "$setting"
}
fit_one() {  # MARKET_DIR SETTING MODEL LOG
  local data=$1 setting=$2 model=$3 log=$4
  local stamp="--seeds $SEEDS $FIT_ARGS"
  if fit_done "$model" "$setting" "$stamp"; then
    echo "already fitted $model"
    return 0
  fi
  mkdir -p "$(dirname "$model")" "$(dirname "$log")"
  rm -f "$model.options"
  # shellcheck disable=SC2086  # FIT_ARGS is a list of options
  if ! .venv/bin/rcb fit "$data" --setting "$setting" --out "$model" --seeds "$SEEDS" $FIT_ARGS --json \
    > "$log" 2>&1; then
    echo "fitting $model failed; see $log" >&2
    return 1
  fi
  echo "$stamp" > "$model.options"
  echo "fitted $model ($(.venv/bin/python -c "import json, sys; f = json.load(open(sys.argv[1]))['fit'];
print(f['chosen'], f['kind'])" "$model/model.json"))"
}
export -f fit_done fit_one
export SEEDS FIT_ARGS
for market in $MARKETS; do
  for setting in $SETTINGS; do
    echo "$DATA/$market $setting $MODELS/$market/$setting $OUT/$market/$setting-fit.log"
  done
done | xargs -r -P "$JOBS" -L 1 bash -c 'fit_one "$@"' _

# 3. Evaluations, $JOBS at once: test, and OOD where the market has OOD days.
evaluate_one() {  # MARKET_DIR SETTING SPLIT MODEL OUT
  local data=$1 setting=$2 split=$3 model=$4 out=$5
  if [ -f "$out/summary.json" ] && [ ! "$model/model.json" -nt "$out/summary.json" ] &&
    grep -qF "\"shield:onnx:$model\"" "$out/summary.json"; then  # kept: it played this model, as now written
    return 0
  fi
  mkdir -p "$(dirname "$out")"
  if ! .venv/bin/rcb evaluate "$data" --setting "$setting" --split "$split" --seeds "$EVAL_SEEDS" \
    --methods "rm,pid,cem,plan,shield:onnx:$model,oracle-day" --out "$out" > /dev/null 2> "$out.log"; then
    echo "evaluating $out failed; see $out.log" >&2
    return 1
  fi
  echo "evaluated $out"
}
export -f evaluate_one
export EVAL_SEEDS
for market in $MARKETS; do
  splits="test"
  [ "$(ood_days "$DATA/$market")" -gt 0 ] && splits="test ood"
  for setting in $SETTINGS; do
    for split in $splits; do
      echo "$DATA/$market $setting $split $MODELS/$market/$setting $OUT/$market/$setting-$split"
    done
  done
done | xargs -r -P "$JOBS" -L 1 bash -c 'evaluate_one "$@"' _

# 4. The report: OUT/ZOO.md and OUT/zoo.png.
.venv/bin/python -m research.zoo_report "$OUT" > /dev/null
cat "$OUT/ZOO.md"
