#!/usr/bin/env bash
# Set up (idempotent), lint, run the whole test suite. This is README.md's test command.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/system-deps.sh   # redis-server, redis-cli, chromium, python3-venv (apt-get where missing)
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy   # model/, service/, training/ and rcb/ ([tool.mypy] in pyproject.toml)
.venv/bin/python -m pytest -q "$@"
