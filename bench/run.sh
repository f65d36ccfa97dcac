#!/usr/bin/env bash
# `make bench`: the benchmark harness (ojs-bench) against the local stack, from a fresh machine.
#
# If AWS_ENDPOINT_URL_DYNAMODB or AWS_ENDPOINT_URL is set, that endpoint is used as is.
# Otherwise DynamoDB Local and moto are installed and started (or reused if already running)
# with scripts/local-aws.sh, and whatever this run started is stopped again at the end.
# Builds the release binaries it measures (every Lambda function, ojs-local, ojs-bench).
# Arguments go to ojs-bench, e.g. `bench/run.sh --quick`; without --json the results go to
# bench/results.json (bench/results-quick.json with --quick). OJS_BENCH_BASELINE=<commit>
# adds that commit's build to the CPU section (see below).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# shellcheck source=scripts/local-aws-session.sh
source scripts/local-aws-session.sh
trap local_aws_down EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
local_aws_up bench

# The product is measured against DynamoDB as it is: the tests' AWS-strict layer (its
# index lag, short pages and throttling) stays out unless asked for.
export OJS_STRICT_DDB="${OJS_STRICT_DDB:-off}"

# DynamoDB Local slows as a run's stream records pile up (docs/performance.md), so each
# throughput level starts on a fresh one when this run owns it; ojs-bench records which.
OJS_BENCH_FRESH_DYNAMODB="$(local_aws_fresh_ddb_command)"
export OJS_BENCH_FRESH_DYNAMODB

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

# OJS_BENCH_BASELINE=<commit> (issue #17's "before" is 68c502c): the CPU section also
# measures that commit's ojs-local beside this build, taking turns, so "N % of before"
# compares two builds on one machine in one run. Built once into target/baseline-<commit>.
if [ -n "${OJS_BENCH_BASELINE:-}" ]; then
    sha="$(git rev-parse --short "${OJS_BENCH_BASELINE}^{commit}")"
    base_target="$(realpath -m "$target_dir")/baseline-$sha"
    if [ ! -x "$base_target/release/ojs-local" ] || [ ! -x "$base_target/release/ojs-keys" ]; then
        tree="$(mktemp -d)"
        git worktree add --detach "$tree" "$sha"
        (cd "$tree" && CARGO_TARGET_DIR="$base_target" cargo build --release -p ojs-local)
        git worktree remove --force "$tree"
    fi
    args+=(--cpu-baseline "$base_target/release" --cpu-baseline-label "$sha")
fi
"$target_dir/release/ojs-bench" --no-build "${args[@]}"
