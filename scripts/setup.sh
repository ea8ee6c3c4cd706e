#!/usr/bin/env bash
# Create .venv (once) and install rcb with its offline, training, benchmark and dev extras (the base install alone
# is the bidding service; pyproject.toml). Idempotent: a second run checks the installed packages and returns in
# seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
# Scripts started together (two research/scripts/plan_suite.sh, say) would race pip over one .venv: one setup at a time.
exec 9> .setup.lock
flock 9
PYTHON="${PYTHON:-python3}"
# A venv whose pip does not run is a failed creation (Debian without python3-venv leaves bin/python and no pip):
# made again, not skipped forever.
if [ -x .venv/bin/python ] && ! .venv/bin/python -m pip --version >/dev/null 2>&1; then
  # a venv made without pip (uv venv, --without-pip) gets one; one that cannot is deleted and made again
  if ! .venv/bin/python -m ensurepip --upgrade >/dev/null 2>&1; then
    echo "setup: .venv has no pip and cannot bootstrap one; deleting it and creating it again"
    rm -rf .venv
  fi
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
# torch first, pinned, and the CPU build: PyPI's torch for Linux x86_64 is the CUDA build (several GB). Where pip
# already resolves torch==2.13.0 to a +cpu wheel without any index (a local wheel directory, as on the project's
# machines), that is used; otherwise PyTorch's CPU index (TORCH_INDEX_URL to override), and if that cannot be
# reached, pip's own resolution.
[ -n "${fresh:-}" ] && echo "setup: torch 2.13.0 (CPU)"
TORCH=torch==2.13.0
local_build="$(.venv/bin/python -m pip install --dry-run --ignore-installed --no-deps --no-index --quiet \
  --report - "$TORCH" 2>/dev/null | .venv/bin/python -c \
  'import json, sys; print(*(i["metadata"]["version"] for i in json.load(sys.stdin)["install"]))' 2>/dev/null || true)"
install_torch() { .venv/bin/python -m pip install "${QUIET[@]}" "$@" "$TORCH" 2>&1 | { grep -v "^WARNING: Location" || true; }; }
installed="$(.venv/bin/python -c "import torch; print(torch.__version__)" 2>/dev/null || true)"
replace=()
if [ -n "$installed" ] && [ "$installed" != "2.13.0+cpu" ]; then
  echo "setup: torch $installed is installed; replacing it with 2.13.0+cpu" >&2
  replace=(--force-reinstall --no-deps)  # torch==2.13.0 alone would count a CUDA 2.13.0 as satisfying it
fi
if [ "$installed" = "2.13.0+cpu" ]; then
  :  # installed already
elif [[ "$local_build" == *+cpu ]]; then
  install_torch ${replace[@]+"${replace[@]}"}
else
  install_torch ${replace[@]+"${replace[@]}"} --index-url "${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}" \
    || { echo "setup: the CPU index is out of reach; installing torch as pip resolves it" >&2; install_torch; }
fi
[ -n "${fresh:-}" ] && echo "setup: rcb and its dependencies (pyproject.toml: base + offline, train, bench, dev extras)"
.venv/bin/python -m pip install "${QUIET[@]}" -e '.[offline,train,bench,dev]' 2>&1 | { grep -v "^WARNING: Location\|BuildBackendWarning\|^  *!!\|^  *\*\*\*\|Please be careful\|name as your package\|with strategy, WheelFile\|^  *$" || true; }
.venv/bin/python -c "import rcb, torch, onnxruntime, fastapi, redis, pandas, pyarrow, httpx" || { echo "setup: the install failed" >&2; exit 1; }
[ -n "${fresh:-}" ] && echo "setup: done (.venv)"
true
