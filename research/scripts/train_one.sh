# Sourced by research/scripts/benchmark.sh and research/scripts/suite.sh: one resumable `rcb train` run per input line.
#
#   train_run DATA SETTING ALGO SEED OUT [rcb train args]   # skipped when finished with the same config and
#                                                           # train days (refused when the config differs: a
#                                                           # changed default or option), resumed when interrupted
#   ... | run_jobs                                          # one train_run per line, $JOBS at once
#   snapshot_members RUN DIR                                # a snapshot ensemble's members of a finished
#                                                           # --keep-epochs run (rcb reselect --snapshots) in DIR;
#                                                           # kept unless RUN changed since, rebuilt whole if so
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

snapshot_members() {
  local run=$1 dir=$2
  if [ -d "$dir" ] && [ ! "$run/run.json" -nt "$dir" ]; then
    echo "already built $dir"
    return 0
  fi
  # Written beside (hidden from a members glob such as snapshots/cbrl-s*/epoch-*) and moved into place: an
  # interrupted build never passes for a whole one.
  local partial
  partial="$(dirname "$dir")/.partial-$(basename "$dir")"
  rm -rf "$dir" "$partial"
  mkdir -p "$(dirname "$dir")"
  if ! .venv/bin/rcb reselect "$run" --out "$partial" --snapshots --json > "$dir.log" 2>&1; then
    echo "snapshot members of $run failed; see $dir.log" >&2
    return 1
  fi
  mv "$partial" "$dir"
  touch "$dir"  # newer than the run it was built from, whatever the rename kept
  echo "built $dir"
}
