#!/usr/bin/env bash
# `make test`: every test of the workspace (cargo test --workspace --all-targets), including
# the official SDKs' interop suites (scripts/sdk-clients.sh installs what they need).
#
# If AWS_ENDPOINT_URL_DYNAMODB or AWS_ENDPOINT_URL is set, that endpoint is used as is.
# Otherwise DynamoDB Local and moto are installed and started (or reused if already running),
# and whatever this run started is stopped again at the end. Tests make their own tables.
# DynamoDB is reached through the tests' AWS-strict layer in its full mode (AWS's request
# rules, unprocessed batch keys, short pages, index lag, throttling; the seed is printed,
# OJS_STRICT_SEED replays it); OJS_STRICT_DDB=rules keeps the rules alone, =off bypasses.
# Extra arguments go to cargo test (e.g. `scripts/test.sh -- some_test_name`).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# shellcheck source=scripts/local-aws-session.sh
source scripts/local-aws-session.sh
log=""
sdk_setup_pid=""
# Per part of the conformance suite (short, long): its process, its DynamoDB Local's,
# its output file and when it started.
declare -A conformance_pid=() side_ddb_pid=() conformance_log=() conformance_t=()
cleanup() {
    if [ -n "$sdk_setup_pid" ]; then kill "$sdk_setup_pid" 2>/dev/null || true; fi
    local pid
    for pid in "${conformance_pid[@]}" "${side_ddb_pid[@]}"; do kill "$pid" 2>/dev/null || true; done
    if [ -n "${beside_pid:-}" ]; then kill "$beside_pid" 2>/dev/null || true; fi
    rm -f "${conformance_log[@]}" "${beside_log:-}"
    local_aws_down
    if [ -n "$log" ]; then rm -f "$log"; log=""; fi
    rm -f "${cpu_file:-}"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Durations and CPU seconds (user + sys of what the step ran and waited for; the SDK
# setup's, built beside the first suites, counts where it is waited for), printed as
# "== test <what>: N s, C s CPU" and listed again at the end.
cpu_file=$(mktemp) cpu=0
cpu_now() { # sets cpu: CPU seconds of every finished child of this shell (bash's `times`,
    times >"$cpu_file" # which must run in this shell, not in a $(...) subshell)
    cpu=$(awk 'NR == 2 { for (i = 1; i <= 2; i++) { split($i, t, "m"); s += t[1] * 60 + t[2] } }
        END { printf "%d", s }' "$cpu_file")
}
timings=()
timed() { # label, then the command
    local label=$1 t=$SECONDS c
    shift
    cpu_now
    c=$cpu
    "$@"
    cpu_now
    timings+=("$label: $((SECONDS - t)) s, $((cpu - c)) s CPU")
    echo "== test $label: $((SECONDS - t)) s, $((cpu - c)) s CPU"
}

timed "setup: local AWS" local_aws_up test

# The official SDKs' suites (tests/tests/sdk.rs) need their toolchains and dependencies:
# mostly a cargo build of the Rust SDK's suite (about a minute on 2 cores), which runs
# beside the tests below at a low CPU priority, until the SDK suites need it. Nice 15, not
# 19: .ci/run's infra checks, needed only at the end, run beside it at 19, and CFS gives
# the two the idle CPU 36 to 15; at 19 the setup was still building when the SDK suites
# wanted it (62 s of waiting in one run), and the tests keep 97 % of a core they want.
sdk_setup_log=.local/sdk-setup.log
mkdir -p .local
nice -n 15 bash scripts/sdk-clients.sh setup >"$sdk_setup_log" 2>&1 &
sdk_setup_pid=$!
sdk_setup_ready() {
    if [ -z "$sdk_setup_pid" ]; then return 0; fi
    local code=0
    wait "$sdk_setup_pid" || code=$?
    sdk_setup_pid=""
    cat "$sdk_setup_log"
    if [ "$code" -ne 0 ]; then
        echo "test: setting up the SDK suites failed (exit $code)" >&2
        exit "$code"
    fi
}

# OJS_TEST_CLIPPY=1 (.ci/run sets it): the workspace compiles with clippy's driver as its
# compiler (what `cargo clippy` does, with codegen), so the one build both lints, as
# `make lint` does (-D warnings: a lint fails the build), and makes the test binaries,
# instead of a second, check-only compile of every dependency beside it (409 CPU seconds
# of a 2-core CI run's 2,330). Every cargo command below then uses the same driver, or
# cargo would compile the workspace again. Set after the SDK setup started: the Rust SDK
# suite is a workspace of its own, not linted here.
if [ "${OJS_TEST_CLIPPY:-}" = 1 ]; then
    RUSTC_WORKSPACE_WRAPPER="$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver)" || {
        echo "test: OJS_TEST_CLIPPY=1 needs clippy (rustup component add clippy)" >&2
        exit 1
    }
    export RUSTC_WORKSPACE_WRAPPER
    export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
    echo "test: the workspace compiles with clippy's driver (-D warnings): $RUSTC_WORKSPACE_WRAPPER"
fi

# The dashboard browser test (tests/tests/integration/dashboard.rs) needs Chromium,
# playwright-core and the dashboard's build; with them in place it must run, not skip.
t_dash=$SECONDS
bash scripts/dashboard.sh browser
bash scripts/dashboard.sh build
export OJS_REQUIRE_BROWSER_TEST=1
echo "dashboard: browser and build ready ($((SECONDS - t_dash)) s)"
timings+=("setup: dashboard: $((SECONDS - t_dash)) s")

# Dependencies compile once for every cargo test below only if the workspace and
# ojs-tests alone resolve them with the same features (tests/Cargo.toml).
python3 scripts/feature-split.py || true

# DynamoDB Local keeps the records of every table's stream (deleted tables' too, as AWS
# does for 24 h), and its writes slow down as they pile up: measured here, a write to a
# table with a stream took 15 ms on a fresh instance and 60 ms after a few hundred test
# tables. When this run started DynamoDB Local, each large suite gets a fresh one.
restarts=0
fresh_dynamodb() {
    local restart t=$SECONDS
    restart="$(local_aws_fresh_ddb_command)"
    if [ -n "$restart" ]; then bash -c "$restart"; fi
    restarts=$((restarts + SECONDS - t))
}

# The official conformance suite: its binary run directly, in two parts (short and long
# cases, tests/tests/conformance.rs), each against a DynamoDB Local of its own when this
# run started one, output kept apart and added to the log when it is waited for. (It ran
# beside the integration parts once, to save the wall time its cases spend sleeping; its
# timing cases failed there: see where it is started.)
conformance_bin=""
# test_binary NAME: the path of ojs-tests' test binary NAME (built if it is not yet).
test_binary() {
    cargo test -p ojs-tests --test "$1" --no-run --message-format=json 2>>"$log" |
        python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("target", {}).get("name") == sys.argv[1] and m.get("executable"):
        print(m["executable"])' "$1" || true
}
# conformance_start PART: the suite's `short` or `long` cases, in the background.
conformance_start() {
    local part=$1 bin t=$SECONDS
    bin=$(test_binary conformance)
    echo "== test build: conformance: $((SECONDS - t)) s"
    timings+=("build: conformance: $((SECONDS - t)) s")
    if [ -z "$bin" ]; then
        echo "test: building the conformance suite failed" | tee -a "$log"
        cargo test -p ojs-tests --test conformance --no-run 2>&1 | tail -n 40
        rc=101
        return
    fi
    local endpoint="${AWS_ENDPOINT_URL_DYNAMODB:-${AWS_ENDPOINT_URL:-}}"
    if [ -n "$(local_aws_fresh_ddb_command)" ]; then
        local port
        port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
        local flags
        flags=$(bash scripts/local-aws.sh java-flags)
        # shellcheck disable=SC2086
        (cd .local/ddb && DDB_LOCAL_TELEMETRY=0 exec java $flags -Djava.library.path=./DynamoDBLocal_lib \
            -jar DynamoDBLocal.jar -port "$port" -inMemory -sharedDb -disableTelemetry) >".local/ddb-conformance-$part.log" 2>&1 &
        side_ddb_pid[$part]=$!
        endpoint="http://127.0.0.1:$port"
        local waited=0
        until curl -s --max-time 2 -o /dev/null "$endpoint"; do
            if ! kill -0 "${side_ddb_pid[$part]}" 2>/dev/null || ((waited > 600)); then
                echo "test: the conformance suite's DynamoDB Local did not start" | tee -a "$log"
                tail -n 20 ".local/ddb-conformance-$part.log"
                rc=1
                return
            fi
            sleep 0.1
            waited=$((waited + 1))
        done
    fi
    conformance_log[$part]=$(mktemp)
    conformance_t[$part]=$SECONDS
    conformance_bin=$bin
    (cd tests && OJS_CONFORMANCE_PART="$part" AWS_ENDPOINT_URL_DYNAMODB="$endpoint" exec "$bin" >"${conformance_log[$part]}" 2>&1) &
    conformance_pid[$part]=$!
    echo "== test conformance, $part cases: started (DynamoDB at $endpoint)"
}
# conformance_wait PART
conformance_wait() {
    local part=$1 code=0
    [ -n "${conformance_pid[$part]:-}" ] || return 0
    wait "${conformance_pid[$part]}" || code=$?
    unset "conformance_pid[$part]"
    if [ -n "${side_ddb_pid[$part]:-}" ]; then
        kill "${side_ddb_pid[$part]}" 2>/dev/null || true
        wait "${side_ddb_pid[$part]}" 2>/dev/null || true
        unset "side_ddb_pid[$part]"
    fi
    { echo "== suite: conformance, $part cases"; echo "     Running tests/conformance.rs ($conformance_bin)"; cat "${conformance_log[$part]}"; } >>"$log"
    cat "${conformance_log[$part]}"
    rm -f "${conformance_log[$part]}"
    unset "conformance_log[$part]"
    echo "== test conformance, $part cases: ran $((SECONDS - conformance_t[$part])) s"
    timings+=("conformance, $part cases: ran $((SECONDS - conformance_t[$part])) s")
    if [ "$code" -ne 0 ]; then rc=$code; fi
}

# beside_start LABEL COMMAND...: runs COMMAND in the background beside the suite that
# follows, its output kept apart; beside_wait adds that output to the log (the summary
# counts its "test result:" lines) and its failure to the run's.
beside_pid="" beside_log="" beside_label=""
beside_start() {
    beside_label=$1
    shift
    beside_log=$(mktemp)
    ("$@") >"$beside_log" 2>&1 &
    beside_pid=$!
}
beside_wait() {
    [ -n "$beside_pid" ] || return 0
    local code=0
    wait "$beside_pid" || code=$?
    beside_pid=""
    { echo "== suite: $beside_label"; cat "$beside_log"; } >>"$log"
    cat "$beside_log"
    rm -f "$beside_log"
    beside_log=""
    if [ "$code" -ne 0 ]; then rc=$code; fi
}
# integration_test TEST: one test of the integration binary, run alone (libtest's
# "Running" line written first, for the summary's list of slow binaries).
integration_test() {
    local bin
    bin=$(test_binary integration)
    if [ -z "$bin" ]; then
        echo "test: building the integration suite failed"
        return 101
    fi
    echo "     Running tests/integration/main.rs ($bin)"
    cd tests && exec "$bin" --exact "$1"
}

log="$(mktemp)"
t0=$SECONDS
rc=0
run_tests() {
    set +e
    cargo test "$@" 2>&1 | tee -a "$log"
    local code=${PIPESTATUS[0]}
    set -e
    if [ "$code" -ne 0 ]; then rc=$code; fi
}
# suite LABEL cargo-test-arguments...: one cargo test run (its build included), timed.
suite() {
    local label=$1
    shift
    echo "== suite: $label" >>"$log"
    timed "$label" run_tests "$@"
}
if [ $# -gt 0 ]; then
    timed "setup: SDK clients (the wait for it)" sdk_setup_ready
    suite "cargo test $*" --workspace --all-targets --no-fail-fast "$@"
else
    # Every target in one cargo build: the function bins, for the Lambda-level tests
    # (tests/tests/integration/lambda.rs), which run these instead of building their own,
    # and every test binary, so that cargo keeps both cores busy to the end instead of each
    # `cargo test` below compiling its own binary on one. `cargo build --all-targets`
    # resolves features as the `cargo test` runs below do (scripts/feature-split.py), so
    # they reuse all of it.
    timed "build: every target" cargo build --workspace --all-targets
    export OJS_FUNCTION_BINARIES="${CARGO_TARGET_DIR:-$ROOT/target}/debug"
    # The workspace's own tests and ojs-tests' library and stress tests keep about one core
    # each busy (57 and 48 CPU seconds in 52 and 49 s, one after the other): side by side.
    beside_start "ojs-tests lib, bins, stress" cargo test -p ojs-tests --lib --bins --test stress --no-fail-fast
    suite "workspace but ojs-tests" --workspace --all-targets --no-fail-fast --exclude ojs-tests
    timed "ojs-tests lib, bins, stress (beside; the wait for it)" beside_wait
    # The integration suite in three parts, each on a fresh DynamoDB Local: every write
    # to a table with a stream costs DynamoDB Local a stream lookup (its one SQLite thread
    # spent most of its time there, sampled) that grows as a run's tables pile up, and
    # one run of all 140-odd tests slowed it until FETCHes of the 32-worker test ran
    # past 30 s. The third part is whatever the first two do not name.
    part_a=(admin:: advanced:: api:: auth:: backlog:: backpressure:: bad_input:: cloudq:: compat:: counters:: idempotency::)
    part_b=(dashboard:: faults:: fencing:: fuzz_http:: hostile:: iam:: lambda:: proto:: workflows::)
    skips=()
    for m in "${part_a[@]}" "${part_b[@]}"; do skips+=(--skip "$m"); done
    # The 32-worker races run alone: beside other tests their FETCHes have queued behind
    # DynamoDB Local's one writer past the store's 8 s budget.
    long_b=workflows::batch_callbacks_fire_exactly_once_under_16_concurrent_ackers
    race=api::every_job_is_delivered_exactly_once_to_32_racing_fetchers
    shard_race=sharding::sharded_queue_delivers_every_job_exactly_once_to_32_racing_fetchers
    skips+=(--skip "$shard_race")
    for alone in "$race" "$shard_race"; do
        fresh_dynamodb
        suite "integration alone: ${alone%%::*}" -p ojs-tests --test integration --no-fail-fast -- --exact "$alone"
    done
    # Four tests at a time, not one a core: most of an integration test's time is waiting
    # (index lag, leases, back-offs, DynamoDB Local's one writer), so two at a time left a
    # core idle. Measured on 2 cores: parts a, b and the rest took 76, 130 and 117 s with
    # two threads, 52, 91 and 108 s with four.
    threads=(--test-threads 4)
    fresh_dynamodb
    suite "integration part a" -p ojs-tests --test integration --no-fail-fast -- "${threads[@]}" "${part_a[@]}" --skip "$race"
    fresh_dynamodb
    # libtest starts a binary's tests in name order, so part b's longest test (20 rounds of
    # workflow callbacks raced by 16 ackers, about 65 s) started last and the part waited
    # for it alone (124 s, for 264 s of tests on four threads). It starts first now, in a
    # process of its own beside the part, which runs the others three at a time.
    beside_start "integration part b: its longest test" integration_test "$long_b"
    suite "integration part b" -p ojs-tests --test integration --no-fail-fast -- --test-threads 3 "${part_b[@]}" --skip "$long_b"
    timed "integration part b: its longest test (the wait for it)" beside_wait
    fresh_dynamodb
    suite "integration rest" -p ojs-tests --test integration --no-fail-fast -- "${threads[@]}" "${skips[@]}"
    # The official suite runs alone: its timing cases leave a server 500 ms (a retry's
    # jittered back-off) to 1 s (a heartbeat's margin on its lease) between answers, which
    # it missed beside an integration part on 2 cores (L0-LC-005, L1-VIS-002, L4-RL-001
    # failed together in one such run). Alone but for its own two cron cases, which wait
    # on the clock's minutes (65 and 130 s, nearly all asleep; 130 s was this phase's
    # length with them in it): they run from here beside the short cases and then the
    # SDK suites, on a DynamoDB Local of their own.
    conformance_start long
    conformance_start short
    timed "conformance" conformance_wait short
    timed "setup: SDK clients (the wait for it)" sdk_setup_ready
    fresh_dynamodb
    # The push handlers' suite (four short tests, mostly waiting on their processes) beside
    # the SDK suites, which run two at a time and leave a core idle most of their time.
    beside_start "push_sdk" cargo test -p ojs-tests --test push_sdk --no-fail-fast
    suite sdk -p ojs-tests --test sdk --no-fail-fast
    timed "push_sdk (beside; the wait for it)" beside_wait
    timed "conformance, long cases (beside; the wait for it)" conformance_wait long
    timings+=("fresh DynamoDB Local restarts (all): $restarts s")
fi

# Add up cargo's per-binary "test result: ok. 5 passed; 0 failed; 1 ignored; ..." lines.
read -r passed failed ignored binaries < <(awk '
    /^test result:/ {
        n++
        for (i = 2; i <= NF; i++) {
            if ($i ~ /^passed;?$/)  p += $(i - 1)
            if ($i ~ /^failed;?$/)  f += $(i - 1)
            if ($i ~ /^ignored;?$/) s += $(i - 1)
        }
    }
    END { printf "%d %d %d %d\n", p, f, s, n }' "$log")

elapsed=$((SECONDS - t0))
local_aws_down  # stop what we started before the closing lines (the log stays for them)

# Where the time went: each step above, then the test binaries that ran longest (cargo's
# "finished in" of each, compile time excluded) and every test libtest reported running
# past 60 s (stable cargo test times no single test; --report-time is nightly-only).
echo "== test timings"
printf '    %s\n' "${timings[@]}"
echo "    slowest test binaries (run time, as cargo test reports it):"
awk '
    /^== suite: / { suite = substr($0, 11) }
    /^ *Running / {
        src = $0; sub(/^ *Running /, "", src); sub(/ \(.*$/, "", src)
        exe = $NF; gsub(/^\(.*\/|-[0-9a-f]+\)$/, "", exe)
        bin = exe " (" src "; " suite ")"
    }
    /^test result:/ && match($0, /finished in [0-9.]+s/) {
        printf "%8.1f s  %s\n", substr($0, RSTART + 12, RLENGTH - 13), bin
    }' "$log" | sort -rn | head -n 8 | sed 's/^/    /'
slow=$(grep -oE "^test .* has been running for over [0-9]+ seconds" "$log" | sort -u || true)
if [ -n "$slow" ]; then
    echo "    tests running past 60 s:"
    printf '%s\n' "$slow" | sed -E 's/^test (.*) has been running for over ([0-9]+) seconds/        \1/'
fi

if [ "$rc" -ne 0 ] && [ "$binaries" -eq 0 ]; then
    echo "test: FAILED before any test ran (cargo test exit code $rc, ${elapsed}s)"
    exit "$rc"
fi
if [ "$rc" -ne 0 ]; then
    echo "test: FAILED (cargo test exit code $rc, $binaries test binaries, ${elapsed}s)"
else
    echo "test: ok ($binaries test binaries, ${elapsed}s)"
fi
echo "summary: $passed passed, $failed failed, $ignored skipped"
exit "$rc"
