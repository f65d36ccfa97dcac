#!/usr/bin/env bash
# Runs the Python SDK interop suite against $OJS_URL (default http://127.0.0.1:18081).
# Installs what it needs first (setup.sh; a no-op when already installed).
# Exits non-zero on any failure; the last line printed is exactly "N passed, N failed".
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
VENV="$ROOT/.local/sdk/python/venv"
export PYTHONDONTWRITEBYTECODE=1
export OJS_URL="${OJS_URL:-http://127.0.0.1:18081}"

if ! bash "$HERE/setup.sh" >/tmp/ojs-python-setup.$$.log 2>&1; then
  cat /tmp/ojs-python-setup.$$.log >&2
  rm -f /tmp/ojs-python-setup.$$.log
  echo "0 passed, 1 failed"
  exit 1
fi
rm -f /tmp/ojs-python-setup.$$.log

TALLY="$(mktemp)"
trap 'rm -f "$TALLY"' EXIT
export OJS_TALLY="$TALLY"

cd "$HERE"
# Outer guard: the suite budget (conftest.py) and per-test timeout (pytest.ini) keep the
# run well below this; it only stops a wedged interpreter.
timeout -k 5 330 "$VENV/bin/python" -m pytest "$@"
rc=$?

# Counts from the tally conftest.py writes after every test: a test that never ran
# (e.g. the run was stopped) counts as failed.
read -r passed failed < <("$VENV/bin/python" - "$TALLY" <<'PY'
import json, sys
try:
    data = json.load(open(sys.argv[1]))["results"]
except Exception:
    data = {}
passed = sum(1 for v in data.values() if v == "passed")
failed = sum(1 for v in data.values() if v != "passed")
print(passed, failed)
PY
)
if [ "$passed" -eq 0 ] && [ "$failed" -eq 0 ]; then
  failed=1  # nothing collected or ran: that is a failure too
fi
if [ "$rc" -eq 0 ] && [ "$failed" -ne 0 ]; then rc=1; fi
if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi
echo "$passed passed, $failed failed"
exit "$rc"
