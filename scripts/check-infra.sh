#!/usr/bin/env bash
# Offline checks of the deployment (CI runs this after `make test`):
#   1. scripts/validate-template.sh on infra/template.yaml must pass (sam validate --lint,
#      cfn-lint on the translated template, scripts/check-template.py);
#   2. the same validation on copies with one planted error each must FAIL, proving each
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
#      build of every bin, then each function packaged with its bootstrap).
# Usage: scripts/check-infra.sh [--no-build]
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Durations, printed as "== infra <part>: N s" and listed again at the end.
timings=() t_part=$SECONDS
done_part() {
    timings+=("$1: $((SECONDS - t_part)) s")
    echo "== infra $1: $((SECONDS - t_part)) s"
    t_part=$SECONDS
}

scripts/validate-template.sh infra/template.yaml
done_part "validation (with the SAM venv's install on a first run)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Each planted error is one run of the validation, run as a background job, as many at a
# time as there are cores; plants_done waits for them and reports in order. An error only
# check-template.py can see runs its steps alone (--checks-only: about 3 s of CPU); one for
# cfn-lint is planted with "lint" and runs the whole validation (about 13 s, mostly SAM
# CLI's and cfn-lint's start-up).
plant_jobs=$(nproc 2>/dev/null || echo 2) planted=()
plant() { # name, text to replace, replacement[, lint]
    local name=$1 from=$2 to=$3 only=--checks-only
    if [[ ${4:-} == lint ]]; then only=""; fi
    python3 - "$from" "$to" infra/template.yaml "$work/$name.yaml" <<'PY'
import sys
src = open(sys.argv[3], encoding="utf-8").read()
if sys.argv[1] not in src:
    sys.exit(f"plant: {sys.argv[1]!r} not found in the template")
open(sys.argv[4], "w", encoding="utf-8").write(src.replace(sys.argv[1], sys.argv[2], 1))
PY
    while (($(jobs -rp | wc -l) >= plant_jobs)); do wait -n || true; done
    # shellcheck disable=SC2086 # $only: one flag or none
    { if scripts/validate-template.sh "$work/$name.yaml" $only >"$work/$name.log" 2>&1; then
        echo 0; else echo 1; fi >"$work/$name.rc"; } &
    planted+=("$name")
}
plants_done() {
    wait
    local name
    for name in "${planted[@]}"; do
        if [[ $(cat "$work/$name.rc") == 0 ]]; then
            echo "check-infra: the planted error '$name' passed validation" >&2
            exit 1
        fi
        echo "==> planted error '$name' rejected, as it must be:"
        # The reason: cfn-lint's rule, a check's "Error:" line, or samtranslator's message.
        { grep -E "^[EW][0-9]|^Error: [a-z]+: |^    [A-Z].*(invalid|Invalid)" "$work/$name.log" ||
            grep -E "Error|error" "$work/$name.log" || true; } | head -n 2 | cut -c1-150 | sed "s/^/    /"
    done
}
plant unknown-architecture "      - !Ref Architecture" "      - arm65" lint
plant unknown-runtime "Runtime: provided.al2023" "Runtime: provided.al2099" lint
plant malformed-schedule "ScheduleExpression: rate(1 minute)" "ScheduleExpression: rate(1 minutes)"
plant cors-wildcard-origin '    Default: ""
    AllowedPattern: "^(https' '    Default: "*"
    AllowedPattern: "^(https' lint
plant cors-fixed-origins 'AllowOrigins: !Split [",", !Ref CorsAllowedOrigins]' 'AllowOrigins: ["https://example.com"]'
plant cors-without-authorization-header "AllowHeaders: [authorization, " "AllowHeaders: ["
plant route-without-authorizer "            Path: /ojs/v1/jobs
" "            Path: /ojs/v1/jobs
            Auth:
              Authorizer: NONE
"
plant no-default-authorizer "        DefaultAuthorizer: ApiKeyAuthorizer
" ""
plant authorizer-on-another-header "              Headers:
                - Authorization
" "              Headers:
                - X-Api-Key
"
plant uncached-authorizer "ReauthorizeEvery: 300" "ReauthorizeEvery: 0"
plant timer-loop-detection "      RecursiveLoop: Allow" "      RecursiveLoop: Terminate"
plant timer-reserved-concurrency "      RecursiveLoop: Allow
" "      RecursiveLoop: Allow
      ReservedConcurrentExecutions: 5
"
plant timer-without-maximum-concurrency "            ScalingConfig:
              MaximumConcurrency: !Ref TimerMaxConcurrency
" ""
plant timer-maximum-concurrency-below-two "    MinValue: 2
    MaxValue: 1000" "    MinValue: 1
    MaxValue: 1000"
# Routes: an ANY route behind the authorizer (F3), and a function whose resource-based
# policy (one invoke permission per HttpApi event) nears Lambda's 20 KB (F10).
plant any-route-behind-authorizer "            Method: GET
            Path: /ojs/v1/push/endpoints
" "            Method: ANY
            Path: /ojs/v1/push/endpoints
"
extra_routes=$(for i in 1 2 3 4; do
    printf '        AdminPlanted%s:\n          Type: HttpApi\n          Properties:\n            ApiId: !Ref OjsApi\n            Method: GET\n            Path: /ojs/v1/admin/planted%s\n' "$i" "$i"
done)
plant admin-routes-past-policy-limit "        AdminKeyRegistrations:
" "$extra_routes
        AdminKeyRegistrations:
"
# Parameters CloudFormation would take and the deploy then fail on (F7, F8).
plant push-function-arns-any-value '    AllowedPattern: "^(arn:aws[a-z-]*:lambda:' '    AllowedPattern: ".*|^(arn:aws[a-z-]*:lambda:'
plant push-function-arns-with-spaces ':function:[A-Za-z0-9_-]{1,64}(:[A-Za-z0-9_$-]{1,128})?(,arn:' ':function:[A-Za-z0-9_-]{1,64}(:[A-Za-z0-9_$-]{1,128})?(, ?arn:'
plant api-reserved-concurrency-unbounded "    MaxValue: 80
" ""
plant api-reserved-concurrency-too-high "    MaxValue: 80
" "    MaxValue: 100
"
plant authorizer-cache-from-parameter "ReauthorizeEvery: 300" "ReauthorizeEvery: !Ref LogRetentionDays"
plant function-without-errors-alarm "MetricName: Errors
      Dimensions: [{Name: FunctionName, Value: !Ref JobsFunction}]" "MetricName: Errors
      Dimensions: [{Name: FunctionName, Value: !Ref WorkersFunction}]"
plant dead-letter-queue-without-alarm "Value: !GetAtt TimerDeadLetterQueue.QueueName}]" "Value: !GetAtt TimerQueue.QueueName}]"
plant index-throttling-not-alarmed "{Name: GlobalSecondaryIndexName, Value: due}" "{Name: GlobalSecondaryIndexName, Value: ready}"
plant index-read-throttling-not-alarmed "MetricName: ReadThrottleEvents, Dimensions: [{Name: TableName, Value: !Ref JobsTable}, {Name: GlobalSecondaryIndexName, Value: ready}]" "MetricName: WriteThrottleEvents, Dimensions: [{Name: TableName, Value: !Ref JobsTable}, {Name: GlobalSecondaryIndexName, Value: ready}]"
plant alarm-on-missing-index "{Name: GlobalSecondaryIndexName, Value: due}" "{Name: GlobalSecondaryIndexName, Value: gone}"
plant dashboard-on-missing-index '"GlobalSecondaryIndexName","due"' '"GlobalSecondaryIndexName","gone"'
plant alarm-notifies-no-one "      AlarmActions: !If [HasAlarmTopic, [!Ref AlarmTopicArn], []]" "      AlarmActions: []"
plant alarm-on-unemitted-metric "MetricName: OldestReadyJobAge" "MetricName: OldestReadyJobAgeSeconds"
plant dashboard-missing-function '"FunctionName","${TimerFunction}"]' '"FunctionName","${TimerQueue.QueueName}"]'
plant function-allowed-api-keys "                  dynamodb:LeadingKeys: [APIKEYS]
" "                  dynamodb:LeadingKeys: [APIKEYZ]
"
plant keys-function-any-partition "                    - APIKEYS
" "                    - APIKEYS
                    - JOB
"
plant api-keys-readable "Action: [dynamodb:GetItem, dynamodb:BatchGetItem, dynamodb:Query, dynamodb:PutItem" "Action: [dynamodb:BatchGetItem, dynamodb:Query, dynamodb:PutItem"
plant foreign-cron-writes "                  dynamodb:LeadingKeys: [CRON, SCHEMAS]" "                  dynamodb:LeadingKeys: [SCHEMAS]"
# The change stream (StreamFunction, StreamEventSourceMapping; the "stream" check).
plant stream-keys-only "StreamViewType: NEW_AND_OLD_IMAGES" "StreamViewType: KEYS_ONLY"
plant stream-without-batch-item-failures "      FunctionResponseTypes:
        - ReportBatchItemFailures
      BisectBatchOnFunctionError" "      BisectBatchOnFunctionError"
plant stream-without-bisect "BisectBatchOnFunctionError: true" "BisectBatchOnFunctionError: false"
plant stream-unbounded-retries "      MaximumRetryAttempts: 10
" "      MaximumRetryAttempts: -1
"
plant stream-without-on-failure-destination "      DestinationConfig:
        OnFailure:
          Destination: !GetAtt StreamFailuresQueue.Arn
" ""
plant stream-destination-not-sendable "Resource: !GetAtt StreamFailuresQueue.Arn" "Resource: !GetAtt TimerQueue.Arn"
plant stream-filter-drops-jobs '[{"prefix": "JOB#"}]' '[{"prefix": "JOBS#"}]'
plant stream-slow-batching "MaximumBatchingWindowInSeconds: 1" "MaximumBatchingWindowInSeconds: 30"
plant stream-read-on-every-stream "Resource: !GetAtt JobsTable.StreamArn" 'Resource: "*"'
plant stream-lag-not-alarmed "MetricName: IteratorAge" "MetricName: Invocations"
# The build (the "build" check): one cargo build of every bin, each function its own bin.
plant function-built-alone "      BuildMethod: makefile" "      BuildMethod: rust-cargolambda"
plant function-binary-not-its-name "Binary: dead-letter" "Binary: deadletter"
plant dashboard-missing-stream-lag '"IteratorAge","FunctionName","${StreamFunction}"' '"IteratorAge","FunctionName","${TimerFunction}"'
# Documentation held to the template (F12): the README's guided-deploy prompt table lists
# every parameter in the order sam deploy --guided asks, docs/cost.md counts the alarms.
# Two parameters swapped: sam deploy --guided asks them in another order than the README.
swapped=$(python3 - <<'PY'
import re
src = open("infra/template.yaml", encoding="utf-8").read()
block = lambda name: re.search(rf"^  {name}:\n(?:    .*\n)*", src, re.M).group(0)
a, b = block("TerminalJobRetentionDays"), block("PushFunctionArns")
assert a + b in src
print(b + a, end="")
PY
)
plant readme-prompt-order "$(python3 - <<'PY'
import re
src = open("infra/template.yaml", encoding="utf-8").read()
block = lambda name: re.search(rf"^  {name}:\n(?:    .*\n)*", src, re.M).group(0)
print(block("TerminalJobRetentionDays") + block("PushFunctionArns"), end="")
PY
)" "$swapped"
extra_alarm=$(python3 - <<'PY'
import re
src = open("infra/template.yaml", encoding="utf-8").read()
m = re.search(r"^  TimerDeadLetterQueueDepthAlarm:\n(?:    .*\n|\n)*?(?=^  \S)", src, re.M)
print(m.group(0).replace("TimerDeadLetterQueueDepthAlarm:", "PlantedCopyOfAnAlarm:", 1).rstrip("\n"))
PY
)
plant cost-model-alarm-count "  TimerDeadLetterQueueDepthAlarm:
" "$extra_alarm

  TimerDeadLetterQueueDepthAlarm:
"

plants_done
done_part "planted errors (${#planted[@]} runs of the validation, $plant_jobs at a time)"

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
scripts/guided-deploy-test.sh
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
if scripts/guided-deploy-test.sh "$work/no-authorizer.yaml" >"$work/guided-no-authorizer.log" 2>&1; then
    echo "check-infra: a guided deploy of the API without its authorizer passed the guided test" >&2
    exit 1
fi
echo "==> planted error 'guided-deploy-without-authorizer' rejected, as it must be:"
grep -m2 "^guided-deploy-test:" "$work/guided-no-authorizer.log" | sed "s/^/    /"
done_part "guided deploy test, and its planted error (moto)"

if [[ ${1:-} != --no-build ]]; then
    scripts/sam-build.sh --fast
    done_part "sam build --fast (with cargo-lambda's install on a first run)"
fi
echo "== infra timings"
printf '    %s\n' "${timings[@]}"
echo "check-infra: ok"
