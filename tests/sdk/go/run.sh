#!/usr/bin/env bash
# Runs the Go SDK interop suite against $OJS_URL (run setup.sh first). Exits
# non-zero on any failure; the last line is "N passed, N failed".
set -uo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/env.sh"

if [ -z "${OJS_URL:-}" ]; then
  echo "run.sh: set OJS_URL (e.g. http://127.0.0.1:18083)"; echo "0 passed, 1 failed"; exit 1
fi
if ! GO="$(go_bin)"; then
  echo "run.sh: Go not installed, run $HERE/setup.sh"; echo "0 passed, 1 failed"; exit 1
fi
cd "$HERE"
# Scenarios run in parallel (own queues); -timeout bounds the whole run even if
# the server hangs. -count=1: never reuse a cached result against a live server.
"$GO" test -count=1 -json -timeout 300s -parallel 24 "$@" ./... 2>&1 \
  | "$GO_VENV/bin/python" "$HERE/summarize.py"
