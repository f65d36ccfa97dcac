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
# Requests over 256 KiB keep their args and meta here (moto serves S3; ojs-local makes it).
export OJS_PAYLOAD_BUCKET="${OJS_PAYLOAD_BUCKET:-ojs-local-payloads}"
export OJS_HOST="${OJS_HOST:-127.0.0.1}"
# Local development serves without API keys unless asked (OJS_AUTH=api-key make dev;
# create a key with `cargo run -p ojs-local --bin ojs-keys -- create <name>`).
export OJS_AUTH="${OJS_AUTH:-off}"
# Push endpoints on this machine (a worker shim on 127.0.0.1) are allowed in development.
export OJS_PUSH_ALLOW_PRIVATE="${OJS_PUSH_ALLOW_PRIVATE:-on}"

# shellcheck source=scripts/local-aws-session.sh
source scripts/local-aws-session.sh
trap local_aws_down EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
local_aws_up dev

# OJS_STRICT_DDB=rules make dev: DynamoDB through the tests' AWS-strict layer (AWS's
# request rules); OJS_STRICT_DDB=on (or full) adds unprocessed batches, short pages, index
# lag and throttling (OJS_STRICT_* knobs).
case "${OJS_STRICT_DDB:-off}" in on | full | rules) strict=1 ;; *) strict=0 ;; esac
if [[ $strict == 1 ]]; then
    upstream="${AWS_ENDPOINT_URL_DYNAMODB:-${AWS_ENDPOINT_URL:-http://127.0.0.1:8000}}"
    listen="127.0.0.1:${OJS_STRICT_PORT:-8001}"
    cargo build --quiet -p ojs-tests --bin strict-ddb-proxy
    "${CARGO_TARGET_DIR:-target}/debug/strict-ddb-proxy" --listen "$listen" --upstream "$upstream" &
    strict_pid=$!
    trap 'kill "$strict_pid" 2>/dev/null; local_aws_down' EXIT
    for _ in $(seq 1 50); do
        curl -s -o /dev/null "http://$listen/" && break
        sleep 0.1
    done
    export AWS_ENDPOINT_URL_DYNAMODB="http://$listen"
fi

echo "dev: ojs-local on http://$OJS_HOST:$OJS_PORT (table $OJS_TABLE); Ctrl-C to stop" >&2
# A debug build: it shares compiled dependencies with `make test` and starts in seconds
# once built; request handling is still far below DynamoDB round-trip times.
cargo run -p ojs-local --bin ojs-local
