#!/usr/bin/env bash
# Create .venv (once) and install rcb with its training, benchmark and dev extras. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
# torch first, pinned: this version resolves to the CPU wheel; a looser spec could pull a multi-GB CUDA build.
.venv/bin/python -m pip install --quiet torch==2.13.0
.venv/bin/python -m pip install --quiet -e '.[train,bench,dev]'
