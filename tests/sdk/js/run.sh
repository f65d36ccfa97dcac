#!/usr/bin/env bash
# Runs the JS SDK interop suite against $OJS_URL with node's built-in test runner.
# Prints the spec reporter's output, then as its last line exactly "N passed, N failed"
# (N = checks, i.e. node:test leaf tests, counted by count-reporter.mjs).
# Exits non-zero on any failure. Run setup.sh first.
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"

if [ -z "${OJS_URL:-}" ]; then
  echo "run: set OJS_URL (e.g. OJS_URL=http://127.0.0.1:18082)" >&2
  echo "0 passed, 1 failed"
  exit 2
fi
if [ ! -f "$ROOT/.local/sdk/js/ojs-js-sdk/dist/esm/index.js" ]; then
  echo "run: the SDK is not built; run $HERE/setup.sh first" >&2
  echo "0 passed, 1 failed"
  exit 2
fi

COUNTS="$(mktemp)"
trap 'rm -f "$COUNTS"' EXIT

# The three files run in parallel (they use disjoint queues); each file's scenarios run
# in order. Every wait inside is bounded; `timeout` is the backstop for the 3-minute cap.
cd "$HERE"
timeout --kill-after=5 300 node --test --test-concurrency=3 --test-timeout=120000 \
  --test-reporter=spec --test-reporter-destination=stdout \
  --test-reporter=./count-reporter.mjs --test-reporter-destination="$COUNTS" \
  producer.test.mjs workflow.test.mjs worker.test.mjs
rc=$?

read -r passed failed < "$COUNTS" || true
if [ -z "${passed:-}" ] || [ -z "${failed:-}" ]; then
  echo "run: the test runner did not finish (exit $rc)" >&2
  passed=0
  failed=1
fi
# Anything else that made node fail (e.g. an error outside any test) is a failure too.
if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$rc" -eq 0 ]
