#!/usr/bin/env bash
# `make dev`: the API (every endpoint group, binary ojs-local) on ${OJS_HOST:-127.0.0.1}:${OJS_PORT:-8080}.
#
# If AWS_ENDPOINT_URL_DYNAMODB or AWS_ENDPOINT_URL is set, that endpoint is used as is.
# Otherwise DynamoDB Local and moto are installed and started (or reused if already running),
# and whatever this run started is stopped again on exit or Ctrl-C.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

export OJS_PORT="${OJS_PORT:-8080}"
export OJS_TABLE="${OJS_TABLE:-ojs-local}"
export OJS_HOST="${OJS_HOST:-127.0.0.1}"
# Local development serves without API keys unless asked (OJS_AUTH=api-key make dev;
# create a key with `cargo run -p ojs-local --bin ojs-keys -- create <name>`).
export OJS_AUTH="${OJS_AUTH:-off}"

started_file=""
cleanup() {
    if [ -n "$started_file" ]; then
        if [ -s "$started_file" ]; then
            # shellcheck disable=SC2046
            scripts/local-aws.sh stop $(cat "$started_file") || true
        fi
        rm -f "$started_file"
        started_file=""
    fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ -n "${AWS_ENDPOINT_URL_DYNAMODB:-}" ] || [ -n "${AWS_ENDPOINT_URL:-}" ]; then
    echo "dev: using DynamoDB at ${AWS_ENDPOINT_URL_DYNAMODB:-$AWS_ENDPOINT_URL} (from the environment); not starting local AWS" >&2
else
    scripts/local-aws.sh install
    started_file="$(mktemp)"
    OJS_LOCAL_AWS_STARTED_FILE="$started_file" scripts/local-aws.sh start
    eval "$(scripts/local-aws.sh env)"
fi

echo "dev: ojs-local on http://$OJS_HOST:$OJS_PORT (table $OJS_TABLE); Ctrl-C to stop" >&2
# A debug build: it shares compiled dependencies with `make test` and starts in seconds
# once built; request handling is still far below DynamoDB round-trip times.
cargo run -p ojs-local --bin ojs-local
