# Sourced by scripts/results.sh and scripts/suite.sh: one resumable `rcb train` run per input line.
#
#   train_run DATA SETTING ALGO SEED OUT [rcb train args]   # skipped when finished with the same config and
#                                                           # train days (refused when the config differs: a
#                                                           # changed default or option), resumed when interrupted
#   ... | run_jobs                                          # one train_run per line, $JOBS at once
# Logs: <dir of OUT's setting>/../logs/<OUT with / as _>.log; $TRAIN_ARGS is added to every run.
train_run() {
  local data=$1 setting=$2 algo=$3 seed=$4 out=$5
  shift 5
  local resume=(--skip-done)  # rcb train compares a finished run's config with this one's
  [ -f "$out/run.json" ] && ! grep -q '"status": "done"' "$out/run.json" && resume+=(--resume)
  local logs
  logs="$(dirname "$(dirname "$out")")/logs"
  local log
  log="$logs/$(echo "$out" | tr / _).log"
  mkdir -p "$(dirname "$out")" "$logs"
  local before=0  # the log's lines before this call: its summary line is among those it appends
  [ -f "$log" ] && before=$(wc -l < "$log")
  # shellcheck disable=SC2086  # TRAIN_ARGS is a list of options
  if ! .venv/bin/rcb train --data "$data" --setting "$setting" --algo "$algo" --seed "$seed" --out "$out" \
    "${resume[@]}" "$@" $TRAIN_ARGS --json >> "$log" 2>&1; then  # appended: a rerun keeps the training log
    echo "training $out failed; see $log" >&2
    return 1
  fi
  tail -n "+$((before + 1))" "$log" | grep -q '"already_done":true' && echo "already trained $out" || echo "trained $out"
}
export -f train_run
run_jobs() { xargs -r -P "${JOBS:-2}" -L 1 bash -c 'train_run "$@"' _; }  # -r: no input, no run
