#!/usr/bin/env bash
# Create .venv (once) and install rcb with its training, benchmark and dev extras. Idempotent: a second run
# checks the installed packages and returns in seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
# Scripts started together (two scripts/plan_suite.sh, say) would race pip over one .venv: one setup at a time.
exec 9> .setup.lock
flock 9
PYTHON="${PYTHON:-python3}"
# A venv whose pip does not run is a failed creation (Debian without python3-venv leaves bin/python and no pip):
# made again, not skipped forever.
if [ -x .venv/bin/python ] && ! .venv/bin/python -m pip --version >/dev/null 2>&1; then
  echo "setup: .venv is incomplete (no pip); creating it again"
  rm -rf .venv
fi
if [ ! -x .venv/bin/python ]; then
  echo "setup: first run: creating .venv and installing about 1.6 GB (torch 2.13.0 CPU build, onnxruntime, onnx,"
  echo "  numpy, pandas, pyarrow, highspy, matplotlib, fastapi, uvicorn, redis, pytest, ...): 2-4 minutes"
  "$PYTHON" -m venv .venv || {
    rm -rf .venv
    echo "setup: $PYTHON -m venv failed (Debian/Ubuntu: apt-get install python3-venv; scripts/system-deps.sh does)" >&2
    exit 1
  }
  fresh=1
fi
QUIET=(--quiet)
[ -n "${fresh:-}" ] && QUIET=(--progress-bar on)
.venv/bin/python -m pip install --quiet --upgrade pip
# torch first, pinned: this version resolves to the CPU wheel; a looser spec could pull a multi-GB CUDA build.
[ -n "${fresh:-}" ] && echo "setup: torch 2.13.0 (CPU)"
.venv/bin/python -m pip install "${QUIET[@]}" torch==2.13.0 2>&1 | { grep -v "^WARNING: Location" || true; }
[ -n "${fresh:-}" ] && echo "setup: rcb and its dependencies (pyproject.toml: base + train, bench, dev extras)"
.venv/bin/python -m pip install "${QUIET[@]}" -e '.[train,bench,dev]' 2>&1 | { grep -v "^WARNING: Location\|BuildBackendWarning\|^  *!!\|^  *\*\*\*\|Please be careful\|name as your package\|with strategy, WheelFile\|^  *$" || true; }
.venv/bin/python -c "import rcb, torch, onnxruntime, fastapi, redis" || { echo "setup: the install failed" >&2; exit 1; }
[ -n "${fresh:-}" ] && echo "setup: done (.venv)"
true
