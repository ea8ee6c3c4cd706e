#!/usr/bin/env bash
# The planner (`plan`, model/planner.py) on the market suite: each market's test days (data/suite/M) and 100 OOD
# days (data/long-ood-100/M), played by the PID, `plan` and `shield:plan` (rcb evaluate), then a table of each
# row's ANS (CSR) and its gap to the PID with a 95% paired bootstrap interval, and a plot of the gaps
# (RESULTS.md).
#
#   bash research/scripts/plan_suite.sh                  # SC, four markets
#   SETTING=mc MARKETS="sparse" bash research/scripts/plan_suite.sh
#   SEED=1 MARKETS="sparse" bash research/scripts/plan_suite.sh   # fresh draws of the market (data/seed1/...)
#
# Settings: SETTING (sc), MARKETS ("bench sparse shifted volatile"), SEED (0: the suite's markets, data/suite/M and
# data/long-ood-100/M; else data/seed$SEED/...), OUT (out/plan-suite/$SETTING, or out/plan-suite/seed$SEED/$SETTING).
# Markets are generated where missing (`--preset M --seed $SEED`; the 100-OOD market keeps the suite's days and adds
# 80). Resumable:
# an evaluation already in OUT is kept. About 3-6 minutes per market and split on 2 cores (the planner's tuning
# plays 12 candidates on every train day).
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/setup.sh
rcb() { .venv/bin/rcb "$@"; }

SETTING="${SETTING:-sc}"
MARKETS="${MARKETS:-bench sparse shifted volatile}"
SEED="${SEED:-0}"
if [ "$SEED" = 0 ]; then DATA=data; OUT="${OUT:-out/plan-suite/$SETTING}"
else DATA="data/seed$SEED"; OUT="${OUT:-out/plan-suite/seed$SEED/$SETTING}"; fi
METHODS="pid,plan,shield:plan"

rows=()
for m in $MARKETS; do
  [ -f "$DATA/suite/$m/manifest.json" ] ||
    rcb market generate --preset "$m" --seed "$SEED" --out "$DATA/suite/$m" > /dev/null
  [ -f "$DATA/long-ood-100/$m/manifest.json" ] ||
    rcb market generate --preset "$m" --seed "$SEED" --days-ood 100 --out "$DATA/long-ood-100/$m" > /dev/null
  for split in test ood; do
    data="$DATA/suite/$m"
    [ "$split" = ood ] && data="$DATA/long-ood-100/$m"
    out="$OUT/$m-$split"
    if [ ! -f "$out/episodes.csv" ]; then
      mkdir -p "$OUT"
      rcb evaluate "$data" --setting "$SETTING" --split "$split" --methods "$METHODS" --seeds 1 --out "$out.tmp" \
        > "$out.log" 2>&1 || { echo "evaluating $out failed; see $out.log" >&2; exit 1; }
      rm -rf "$out" && mv "$out.tmp" "$out"
    fi
    echo "evaluated $out" >&2
    rows+=("$m $split $out/episodes.csv")
  done
done

.venv/bin/python - "$OUT/plan-suite.png" "${rows[@]}" <<'EOF'
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from training.evaluation.evaluate import summarize
from research.significance import paired_gap

png, rows = sys.argv[1], [r.split() for r in sys.argv[2:]]
methods = ("plan", "shield:plan")
print("| market | split | PID | plan | shield:plan | plan - PID | shield:plan - PID |")
print("|:---|:---|---:|---:|---:|:---|:---|")
gaps = {m: [] for m in methods}
for market, split, path in rows:
    episodes = pd.read_csv(path)
    summary = summarize(episodes, ["pid", *methods])
    cell = {k: f"{v['ans_median']:.3f} ({v['csr']:.2f})" for k, v in summary.items()}
    found = {m: paired_gap(episodes, m) for m in methods}
    for m in methods:
        gaps[m].append(found[m])
    text = [f"{g.ans:+.3f} [{g.ans_low:+.3f}, {g.ans_high:+.3f}]" for g in found.values()]
    label = "OOD (100)" if split == "ood" else split
    print(f"| {market} | {label} | {cell['pid']} | {cell['plan']} | {cell['shield:plan']} | {text[0]} | {text[1]} |")

fig, ax = plt.subplots(figsize=(8.5, 4.2))
x = np.arange(len(rows))
for j, m in enumerate(methods):
    g = gaps[m]
    mean = np.array([r.ans for r in g])
    err = np.array([[r.ans - r.ans_low for r in g], [r.ans_high - r.ans for r in g]])
    ax.bar(x + (j - 0.5) * 0.38, mean, 0.38, yerr=err, capsize=3, label=f"{m} - PID")
ax.axhline(0.03, color="k", lw=0.8, ls=":", label="bar: PID + 0.03")
ax.axhline(0.0, color="grey", lw=0.6)
ax.set_xticks(x, [f"{m}\n{'OOD-100' if s == 'ood' else s}" for m, s, _ in rows], fontsize=8)
ax.set_ylabel("mean daily ANS gap over the PID (95% CI)")
ax.set_title("the planner against the PID, every suite row", fontsize=10)
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(png, dpi=120)
print(f"plot: {png}")
EOF
