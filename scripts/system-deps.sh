#!/usr/bin/env bash
# The system programs the tests need: redis-server and redis-cli (the fixtures start their own private server and
# a 3-node Redis Cluster on free ports) and chromium (the /ui screenshot test). Installed with apt-get where missing
# (Debian/Ubuntu, as root); elsewhere, a clear message.
set -euo pipefail
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || missing+=(chromium)
[ "${#missing[@]}" -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "system-deps: installing ${missing[*]} (Debian packages; a minute or two)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null
else
  echo "system-deps: the tests need ${missing[*]} (Debian/Ubuntu: sudo apt-get install ${missing[*]})" >&2
  exit 2
fi
