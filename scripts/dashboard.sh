#!/usr/bin/env bash
# The official OJS dashboard (../shared/clients/ojs-admin-ui, unmodified) for this server.
#
# Usage: scripts/dashboard.sh build|serve|browser|run
#
#   build    copies the dashboard's sources to .local/dashboard/src (the original is never
#            touched), `npm ci` there (skipped while package-lock.json is unchanged) and
#            `npx vite build` (the upstream `build:app` stops at a type error, see
#            ../shared/clients/README.md) into .local/dashboard/src/dist-app
#   serve    serves the build on http://127.0.0.1:$OJS_DASHBOARD_PORT/ojs/admin/ (default
#            8090) and forwards every other /ojs/ request to $OJS_URL (default
#            http://127.0.0.1:$OJS_PORT, i.e. `make dev`), adding
#            "Authorization: Bearer $OJS_ADMIN_KEY" when that is set: the key stays in
#            this process, never in the browser (scripts/dashboard-server.mjs)
#   browser  idempotent: installs Debian's chromium (apt) and playwright-core (npm, into
#            .local/browser) for the browser test
#   run      build, then serve (what `make dashboard` does)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

UPSTREAM="${OJS_DASHBOARD_SOURCE:-$ROOT/../shared/clients/ojs-admin-ui}"
# This repository may be a worktree elsewhere; fall back to the shared checkout.
[ -d "$UPSTREAM" ] || UPSTREAM=/work/shared/clients/ojs-admin-ui
DIR="$ROOT/.local/dashboard"
SRC="$DIR/src"
BROWSER_DIR="$ROOT/.local/browser"
PLAYWRIGHT_PKG="playwright-core@1.57.0"

log() { printf 'dashboard: %s\n' "$*" >&2; }
die() { printf 'dashboard: error: %s\n' "$*" >&2; exit 1; }

build() {
    [ -f "$UPSTREAM/package.json" ] || die "no dashboard sources at $UPSTREAM"
    command -v npm >/dev/null || die "npm is needed (apt-get install nodejs npm)"
    mkdir -p "$SRC"
    # Copy the sources (not node_modules or earlier builds).
    tar -C "$UPSTREAM" --exclude=./node_modules --exclude=./dist --exclude=./dist-app -cf - . |
        tar -C "$SRC" -xf -
    # The originals are read-only; the copy must be writable for the next copy and build.
    chmod -R u+w "$SRC"
    local stamp="$SRC/node_modules/.ojs-lock"
    if ! cmp -s "$SRC/package-lock.json" "$stamp" 2>/dev/null; then
        log "npm ci (first build or new package-lock.json)"
        (cd "$SRC" && npm ci --no-audit --no-fund --loglevel=error)
        cp "$SRC/package-lock.json" "$stamp"
    fi
    log "vite build -> $SRC/dist-app"
    (cd "$SRC" && npx --no-install vite build --logLevel warn)
    [ -f "$SRC/dist-app/index.html" ] || die "the build produced no dist-app/index.html"
}

serve() {
    [ -f "$SRC/dist-app/index.html" ] || die "not built yet: run scripts/dashboard.sh build"
    OJS_DASHBOARD_DIST="$SRC/dist-app" exec node "$ROOT/scripts/dashboard-server.mjs"
}

browser() {
    if [ ! -x /usr/bin/chromium ]; then
        log "installing chromium (apt)"
        local sudo=""
        [ "$(id -u)" -eq 0 ] || sudo="sudo"
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium >/dev/null
    fi
    if [ ! -f "$BROWSER_DIR/node_modules/playwright-core/package.json" ]; then
        log "installing $PLAYWRIGHT_PKG into $BROWSER_DIR"
        mkdir -p "$BROWSER_DIR"
        [ -f "$BROWSER_DIR/package.json" ] || echo '{"private": true}' >"$BROWSER_DIR/package.json"
        (cd "$BROWSER_DIR" && npm install --no-audit --no-fund --loglevel=error "$PLAYWRIGHT_PKG")
    fi
}

case "${1:-}" in
    build) build ;;
    serve) serve ;;
    browser) browser ;;
    run) build && serve ;;
    *) die "usage: scripts/dashboard.sh build|serve|browser|run" ;;
esac
