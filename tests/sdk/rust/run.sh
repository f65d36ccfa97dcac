#!/usr/bin/env bash
# Runs the Rust SDK interop suite against $OJS_URL (builds it first if setup.sh has not).
# Every scenario is one libtest test, all run in parallel, each bounded in time; the whole
# run is cut at 300 s. Extra arguments go to libtest (e.g. a name filter, --nocapture).
# Exits non-zero on any failure; the last line is "N passed, N failed" (scenarios).
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
BIN="$ROOT/.local/sdk/rust/interop"
: "${OJS_URL:?set OJS_URL to the server under test, e.g. http://127.0.0.1:18084}"
export OJS_URL RUST_BACKTRACE=0

[ -x "$BIN" ] || bash "$HERE/setup.sh" || { echo "0 passed, 1 failed"; exit 1; }

total="$("$BIN" --list --format terse "$@" | grep -c ': test$')"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
timeout -k 5 300 "$BIN" --test-threads=64 "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 124 ] && echo "run.sh: the suite was cut off after 300 s"

# Counted from the per-test lines, so a run cut short still reports every scenario:
# whatever did not pass failed.
passed="$(grep -cE '^test .* \.\.\. ok$' "$log")"
failed=$((total - passed))
echo "$passed passed, $failed failed"
[ "$rc" -eq 0 ] && [ "$failed" -eq 0 ]
