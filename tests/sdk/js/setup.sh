#!/usr/bin/env bash
# Installs what the JS SDK interop suite needs, idempotently, under .local/sdk/js:
#   .local/sdk/js/ojs-js-sdk/  a copy of the unmodified SDK (shared/clients/ojs-js-sdk),
#                              built to dist/esm and dist/cjs with its own tsconfig files
#   .local/sdk/js/tools/       TypeScript, at the version the SDK's package-lock pins
#
# Only TypeScript is installed from npm: the SDK has no runtime dependencies, and the suite
# uses node's built-in test runner. The SDK's other devDependencies (vitest, eslint,
# grpc, typedoc...) are not needed to emit its JavaScript, so `npm ci` (~300 packages) is
# skipped. The build passes --noCheck: the SDK at this commit has upstream type errors
# (src/worker.ts, src/agent/client.ts, src/recorder/index.ts), and without its optional
# peer dependencies more appear; type errors never change the emitted JS
# (isolatedModules), so the suite only needs the emit. Needs node >= 18 and npm.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
SRC="$ROOT/../shared/clients/ojs-js-sdk"
DEST="$ROOT/.local/sdk/js"
SDK="$DEST/ojs-js-sdk"
TOOLS="$DEST/tools"

[ -f "$SRC/package.json" ] || { echo "setup: SDK source not found at $SRC" >&2; exit 1; }
command -v node >/dev/null || { echo "setup: node is required" >&2; exit 1; }
command -v npm >/dev/null || { echo "setup: npm is required" >&2; exit 1; }
mkdir -p "$DEST"

# 1. TypeScript, pinned to the version in the SDK's lockfile.
TS_VERSION="$(node -e '
  const lock = require(process.argv[1]);
  process.stdout.write(lock.packages["node_modules/typescript"].version);
' "$SRC/package-lock.json")"
have_ts="$(node -p 'try { require(process.argv[1]).version } catch { "" }' \
  "$TOOLS/node_modules/typescript/package.json" 2>/dev/null || true)"
if [ "$have_ts" != "$TS_VERSION" ]; then
  echo "setup: installing typescript@$TS_VERSION into $TOOLS"
  mkdir -p "$TOOLS"
  [ -f "$TOOLS/package.json" ] || echo '{"private": true}' > "$TOOLS/package.json"
  npm install --prefix "$TOOLS" --no-audit --no-fund --no-package-lock --silent \
    "typescript@$TS_VERSION"
fi
TSC="$TOOLS/node_modules/typescript/bin/tsc"

# 2. Copy the SDK sources (only what the build reads) and build when they changed.
#    The stamp is a hash of the copied inputs plus the compiler version.
stamp_of() {
  (cd "$1" && find src package.json tsconfig.json tsconfig.cjs.json -type f -print0 \
    | sort -z | xargs -0 sha256sum; echo "tsc $TS_VERSION") | sha256sum | cut -d' ' -f1
}
want="$(stamp_of "$SRC")"
have="$(cat "$SDK/.build-stamp" 2>/dev/null || true)"
if [ "$want" != "$have" ] || [ ! -f "$SDK/dist/esm/index.js" ]; then
  echo "setup: building @openjobspec/sdk from $SRC"
  rm -rf "$SDK"
  mkdir -p "$SDK"
  cp -R "$SRC/src" "$SRC/package.json" "$SRC/tsconfig.json" "$SRC/tsconfig.cjs.json" \
    "$SRC/LICENSE" "$SDK/"
  (cd "$SDK" \
    && node "$TSC" -p tsconfig.json --noCheck \
    && node "$TSC" -p tsconfig.cjs.json --noCheck \
    && printf '{"type":"commonjs"}\n' > dist/cjs/package.json)  # as the SDK's build script
  echo "$want" > "$SDK/.build-stamp"
fi

node -e 'import(process.argv[1]).then((m) => {
  if (typeof m.OJSClient !== "function" || typeof m.OJSWorker !== "function") process.exit(1);
})' "$SDK/dist/esm/index.js"
echo "setup: ok (@openjobspec/sdk $(node -p 'require(process.argv[1]).version' "$SDK/package.json"), typescript $TS_VERSION)"
