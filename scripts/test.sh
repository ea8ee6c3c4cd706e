#!/usr/bin/env bash
# Set up (idempotent), lint, run the whole test suite. This is README.md's test command.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/python -m pytest -q "$@"
