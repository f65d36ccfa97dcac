#!/usr/bin/env bash
# `make bench`: the benchmark harness (ojs-bench) against the local stack, from a fresh machine.
#
# If AWS_ENDPOINT_URL_DYNAMODB or AWS_ENDPOINT_URL is set, that endpoint is used as is.
# Otherwise DynamoDB Local and moto are installed and started (or reused if already running)
# with scripts/local-aws.sh, and whatever this run started is stopped again at the end.
# Builds the release binaries it measures (every Lambda function, ojs-local, ojs-bench).
# Arguments go to ojs-bench, e.g. `bench/run.sh --quick`; without --json the results go to
# bench/results.json (bench/results-quick.json with --quick).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

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
    echo "bench: using DynamoDB at ${AWS_ENDPOINT_URL_DYNAMODB:-$AWS_ENDPOINT_URL} (from the environment); not starting local AWS" >&2
else
    scripts/local-aws.sh install
    started_file="$(mktemp)"
    OJS_LOCAL_AWS_STARTED_FILE="$started_file" scripts/local-aws.sh start
    eval "$(scripts/local-aws.sh env)"
fi

# The function packages are discovered by ojs-bench itself (functions/*/Cargo.toml);
# build them here too so the build shows up front, before anything is timed.
packages=(-p ojs-bench -p ojs-local)
for manifest in functions/*/Cargo.toml; do
    if grep -Eq '^(lambda_http|lambda_runtime)' "$manifest"; then
        name="$(sed -n 's/^name = "\(.*\)"/\1/p' "$manifest" | head -n 1)"
        packages+=(-p "$name")
    fi
done
cargo build --release "${packages[@]}"

# The recorded full run lives in bench/results.json (docs/performance.md quotes it); a quick
# run writes bench/results-quick.json instead of overwriting it.
args=("$@")
case " $* " in
    *" --json "*) ;;
    *" --quick "*) args+=(--json bench/results-quick.json) ;;
    *) args+=(--json bench/results.json) ;;
esac
target_dir="${CARGO_TARGET_DIR:-target}"
"$target_dir/release/ojs-bench" --no-build "${args[@]}"
