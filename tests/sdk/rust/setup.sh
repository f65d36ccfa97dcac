#!/usr/bin/env bash
# Builds the Rust SDK interop suite, idempotently: one test binary, copied to
# <repo>/.local/sdk/rust/interop (run.sh runs it).
#   - The SDK (crate `ojs`) is a path dependency on the unmodified source in
#     <repo>/../shared/clients/ojs-rust-sdk: cargo compiles it into this suite's own target
#     dir and writes nothing beside the source.
#   - Everything else comes from crates.io, pinned by this folder's Cargo.lock (--locked).
#   - Target dir: <repo>/target/sdk-rust (CARGO_TARGET_DIR overrides), apart from the
#     workspace's, so the two builds never wait on each other's lock.
# A warm run is cargo's no-op check plus a copy.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
SDK_SRC="$ROOT/../shared/clients/ojs-rust-sdk"
DEST="$ROOT/.local/sdk/rust"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target/sdk-rust}"
# The workspace's clippy-as-compiler (scripts/test.sh, OJS_TEST_CLIPPY) is not for this one.
unset RUSTC_WORKSPACE_WRAPPER CLIPPY_ARGS

[ -f "$SDK_SRC/Cargo.toml" ] || { echo "setup.sh: SDK source not found at $SDK_SRC" >&2; exit 1; }
command -v cargo >/dev/null || { echo "setup.sh: needs a Rust toolchain (cargo)" >&2; exit 1; }

# The SDK turns on reqwest's default features, whose TLS is native-tls: openssl-sys links
# the system OpenSSL, found through pkg-config. Install both from Debian when missing.
if ! { command -v pkg-config >/dev/null && pkg-config --exists openssl; }; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup.sh: installing libssl-dev and pkg-config (for reqwest's native-tls)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libssl-dev pkg-config >/dev/null
  else
    echo "setup.sh: needs OpenSSL headers and pkg-config (Debian: libssl-dev pkg-config)" >&2
    exit 1
  fi
fi

mkdir -p "$DEST"
cd "$HERE"
# Build once, without running; the JSON messages name the test executable.
cargo test --locked --no-run --message-format=json-render-diagnostics > "$DEST/build.json"
BIN="$(python3 - "$DEST/build.json" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    msg = json.loads(line)
    if msg.get("reason") == "compiler-artifact" and msg["target"]["name"] == "interop" \
            and msg.get("executable"):
        print(msg["executable"])
PY
)"
[ -n "$BIN" ] && [ -x "$BIN" ] || { echo "setup.sh: no test executable in cargo's output" >&2; exit 1; }
install -m 755 "$BIN" "$DEST/interop"
echo "setup.sh: built $DEST/interop"
