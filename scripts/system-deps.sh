#!/usr/bin/env bash
# The system programs the tests need: redis-server and redis-cli (the fixtures start their own private server and
# a 3-node Redis Cluster on free ports), chromium (the /ui screenshot test; google-chrome serves too) and python3's
# venv module (scripts/setup.sh). Installed with apt-get where missing (Debian/Ubuntu, as root, or through sudo
# where it needs no password); elsewhere, a clear message.
set -euo pipefail
PYTHON="${PYTHON:-python3}"
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 \
  || command -v google-chrome >/dev/null 2>&1 || missing+=(chromium)
# Debian splits venv's pip bootstrap into python3-venv: `python3 -m venv` fails without it. Tried in a throwaway
# directory, and only while the project's .venv is not yet a working one.
cd "$(dirname "$0")/.."
if ! { [ -x .venv/bin/python ] && .venv/bin/python -m pip --version >/dev/null 2>&1; }; then
  probe="$(mktemp -d)"
  "$PYTHON" -m venv "$probe/venv" >/dev/null 2>&1 || missing+=(python3-venv)
  rm -rf "$probe"
fi
[ "${#missing[@]}" -eq 0 ] && exit 0
if command -v apt-get >/dev/null 2>&1 && { [ "$(id -u)" = 0 ] || sudo -n true >/dev/null 2>&1; }; then
  echo "system-deps: installing ${missing[*]} (Debian packages; a minute or two)"
  as_root=()
  [ "$(id -u)" = 0 ] || as_root=(sudo -n)
  export DEBIAN_FRONTEND=noninteractive
  "${as_root[@]}" apt-get update -qq && "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
else
  echo "system-deps: the tests need ${missing[*]} (Debian/Ubuntu: sudo apt-get install ${missing[*]})" >&2
  exit 2
fi
