#!/usr/bin/env bash
# Offline checks of the deployment (CI runs this after `make test`):
#   1. scripts/validate-template.sh on infra/template.yaml must pass (sam validate --lint,
#      cfn-lint on the translated template, scripts/check-template.py);
#   2. the same validation on copies with one planted error each must FAIL, each by the
#      check that exists for it (scripts/plant-errors.py lists them), proving each
#      check bites: an unknown architecture or runtime, a malformed schedule expression,
#      a "*" CORS origin, CORS not driven by CorsAllowedOrigins or without the
#      Authorization header, a route without the authorizer, no default authorizer, an
#      authorizer reading another header or caching nothing (or its cache time as a
#      string), a function, index or failure queue without its alarm, an alarm or the
#      dashboard on an index the table lacks, an alarm that notifies no one, an alarm on a
#      metric the code does not emit, a dashboard missing a function, a function allowed
#      the API key partition (or some of its actions there) or another's registry; a
#      table stream without both images, a stream mapping that does not report batch
#      item failures, does not bisect, retries forever, has no on-failure destination
#      (or a role that cannot send to it), filters out job records or batches for longer
#      than a second, stream reads granted on "*", no alarm or dashboard line on the
#      stream's lag; the SQS timer capped by reserved concurrency instead of its
#      event source's MaximumConcurrency (or without it, or allowing less than 2), or its
#      loop detection on; an ANY route behind the authorizer; a function with more
#      HttpApi events than its resource-based policy has room for; PushFunctionArns
#      without its AllowedPattern or one taking spaces; ApiReservedConcurrency without
#      a MaxValue or with one the account cannot reserve 11 times; an index's read
#      throttling not alarmed; parameters in another order than the README's prompt table, an
#      alarm count docs/cost.md does not give; a function not built by infra/lambda's
#      Makefile, or packaging a bin its LogicalId does not name;
#   3. samconfig.toml: build and deploy read one Architecture (scripts/check-samconfig.py),
#      and a planted divergence fails;
#   4. `sam deploy --guided` with every prompt answered by its default gets to the change
#      set against a local moto (scripts/guided-deploy-test.sh; no AWS account needed),
#      and the same run on the template without its authorizer fails;
#   5. scripts/sam-build.sh --fast: `sam build` of every function for x86_64 (one cargo
#      build of every bin, then each function packaged with its bootstrap). It starts once
#      the SAM venv exists (after 1) and runs beside 2-4: most of its CPU is one cargo
#      build, and beside the tests the two streams take more of the CPU the tests leave
#      idle than one would (its output is printed when it ends).
# Usage: scripts/check-infra.sh [--no-build]
#   --no-build leaves out 5 (CI runs `scripts/sam-build.sh --prebuilt` after its tests,
#   packaging the bins their build made instead of compiling the workspace again).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Durations and CPU seconds (user + sys of the part's processes: the wall time of a part
# run at nice 19 beside the tests says little), printed as "== infra <part>: N s, C s CPU"
# and listed again at the end.
cpu_file=$(mktemp) cpu=0
cpu_now() { # sets cpu: CPU seconds of every finished child of this shell (bash's `times`,
    times >"$cpu_file" # which must run in this shell, not in a $(...) subshell)
    cpu=$(awk 'NR == 2 { for (i = 1; i <= 2; i++) { split($i, t, "m"); s += t[1] * 60 + t[2] } }
        END { printf "%d", s }' "$cpu_file")
}
cpu_now
timings=() t_part=$SECONDS cpu_part=$cpu
# done_beside LABEL START: a part that ran beside the others since START (its SECONDS),
# just waited for: its CPU is counted now, its time since it started.
done_beside() {
    cpu_now
    timings+=("$1: $((SECONDS - $2)) s since its start, $((cpu - cpu_part)) s CPU")
    echo "== infra ${timings[-1]}"
    t_part=$SECONDS cpu_part=$cpu
}
done_part() {
    cpu_now
    timings+=("$1: $((SECONDS - t_part)) s, $((cpu - cpu_part)) s CPU")
    echo "== infra $1: $((SECONDS - t_part)) s, $((cpu - cpu_part)) s CPU"
    t_part=$SECONDS cpu_part=$cpu
}

scripts/validate-template.sh infra/template.yaml
done_part "validation (with the SAM venv's install on a first run)"

work=$(mktemp -d)
build_pid=""
guided_pid=""
trap '[[ -n $build_pid ]] && kill "$build_pid" 2>/dev/null; [[ -n $guided_pid ]] && kill "$guided_pid" 2>/dev/null; rm -rf "$work" "$cpu_file"' EXIT
if [[ ${1:-} != --no-build ]]; then
    t_build=$SECONDS
    scripts/sam-build.sh --fast >"$work/sam-build.log" 2>&1 &
    build_pid=$!
fi
# The guided deploy test (`sam deploy --guided` against moto) and its planted error, one
# after the other, beside the planted errors below: each is mostly one process at a time,
# and at the end of a CI run, once the tests had stopped, the two one after the other
# were what remained of the run (68 s on 2 cores, one of them idle).
guided() {
    scripts/guided-deploy-test.sh || return
    # Planted: the API without its authorizer (the template before #20) must fail the test.
    python3 - infra/template.yaml "$work/no-authorizer.yaml" <<'PY'
import re, sys
src = open(sys.argv[1], encoding="utf-8").read()
src, n = re.subn(r"\n      Auth:\n        DefaultAuthorizer:.*?\n(?=      [A-Z#])", "\n", src, count=1, flags=re.S)
src, m = re.subn(r"            Auth:\n              Authorizer: NONE\n", "", src)
if n != 1 or m == 0:
    sys.exit("plant: the authorizer blocks were not found in the template")
open(sys.argv[2], "w", encoding="utf-8").write(src)
PY
    [[ -s $work/no-authorizer.yaml ]] || return
    if scripts/guided-deploy-test.sh "$work/no-authorizer.yaml" >"$work/guided-no-authorizer.log" 2>&1; then
        echo "check-infra: a guided deploy of the API without its authorizer passed the guided test" >&2
        return 1
    fi
    echo "==> planted error 'guided-deploy-without-authorizer' rejected, as it must be:"
    grep -m2 "^guided-deploy-test:" "$work/guided-no-authorizer.log" | sed "s/^/    /"
}
t_guided=$SECONDS
(
    set +e
    guided >"$work/guided.out" 2>&1
    echo $? >"$work/guided.rc"
) &
guided_pid=$!
# The planted errors: scripts/plant-errors.py holds the list, with the check that must
# reject each. The 46 that only check-template.py can see are checked in its process
# (forked per core: one Python start-up, import and parse of the template instead of one
# per error); the 3 for cfn-lint each run the whole validation, beside them.
"${SAM_VENV:-.local/sam-venv}/bin/python" scripts/plant-errors.py
done_part "planted errors (scripts/plant-errors.py)"

echo "==> samconfig.toml: one Architecture for build and deploy"
python3 scripts/check-samconfig.py samconfig.toml
python3 - samconfig.toml "$work/samconfig-diverged.toml" <<'PY'
import sys
src = open(sys.argv[1], encoding="utf-8").read()
marker = "[default.deploy.parameters]\n"
if marker not in src:
    sys.exit("plant: no [default.deploy.parameters] in samconfig.toml")
src = src.replace(marker, marker + 'parameter_overrides = "Architecture=x86_64"\n', 1)
open(sys.argv[2], "w", encoding="utf-8").write(src)
PY
if python3 scripts/check-samconfig.py "$work/samconfig-diverged.toml" >"$work/samconfig.log" 2>&1; then
    echo "check-infra: a deploy Architecture differing from the build's passed the samconfig check" >&2
    exit 1
fi
echo "==> planted error 'samconfig-diverging-architecture' rejected, as it must be:"
sed "s/^/    /" "$work/samconfig.log" | head -n 2

done_part "samconfig check"
wait "$guided_pid" || true
guided_pid=""
cat "$work/guided.out"
guided_status=$(cat "$work/guided.rc" 2>/dev/null || echo 1)
if [[ $guided_status -ne 0 ]]; then
    echo "check-infra: the guided deploy test failed (exit $guided_status)" >&2
    exit "$guided_status"
fi
done_beside "guided deploy test, and its planted error (moto), beside the planted errors" "$t_guided"

if [[ -n $build_pid ]]; then
    build_status=0
    wait "$build_pid" || build_status=$?
    build_pid=""
    cat "$work/sam-build.log"
    if [[ $build_status -ne 0 ]]; then
        echo "check-infra: scripts/sam-build.sh --fast failed (exit $build_status)" >&2
        exit "$build_status"
    fi
    done_beside "sam build --fast, beside 2-4 (with cargo-lambda's install on a first run)" "$t_build"
fi
echo "== infra timings"
printf '    %s\n' "${timings[@]}"
echo "check-infra: ok"
