"""The planted errors of scripts/check-infra.sh: copies of infra/template.yaml with one
error each, every one of which the validation (scripts/validate-template.sh) must reject,
each by the check that exists to catch it. This file is the one list of them.

  python scripts/plant-errors.py      (with the SAM venv's python: needs samtranslator)

An error that only scripts/check-template.py can see is planted and checked in process:
samtranslator's translation, then the one check-template.py check it is for (the steps
`validate-template.sh --checks-only` runs, but for the other checks, which prove nothing
about this plant: the CORS check alone translates the template twice more), in forks of
this process (one per core) that start with samtranslator imported, and with the
template's parse and translation shared by the check (check-template.py's cache), instead
of a fresh Python, imports and five parses per error. It must fail with its named check ("Error: <check>: ...") or, where the
translation itself refuses it, with "samtranslator". An error for cfn-lint (`lint=True`)
runs the whole of validate-template.sh on a copy (sam validate --lint, cfn-lint on the
translation) beside the others, and must fail with a cfn-lint rule ("E3030 ...", or
"[[E2015: ..." from sam validate --lint).

Prints, in list order, "==> planted error '<name>' rejected, as it must be:" and the
reason; exits 1 if any error passed or was rejected by another check than its own.
"""

import contextlib
import importlib.util
import io
import json
import logging
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "infra/template.yaml"


def plants(src):
    """(name, text to replace, replacement, the check that must reject it, lint) each."""
    out = []

    def plant(name, old, new, check, lint=False):
        out.append((name, old, new, check, lint))

    plant("unknown-architecture", "      - !Ref Architecture", "      - arm65", "cfn-lint", lint=True)
    plant("unknown-runtime", "Runtime: provided.al2023", "Runtime: provided.al2099", "cfn-lint", lint=True)
    plant("malformed-schedule", "ScheduleExpression: rate(1 minute)",
          "ScheduleExpression: rate(1 minutes)", "schedule")
    # E2015 (a default outside the AllowedPattern), from `sam validate --lint`.
    plant("cors-wildcard-origin", '    Default: ""\n    AllowedPattern: "^(https',
          '    Default: "*"\n    AllowedPattern: "^(https', "cfn-lint", lint=True)
    plant("cors-fixed-origins", 'AllowOrigins: !Split [",", !Ref CorsAllowedOrigins]',
          'AllowOrigins: ["https://example.com"]', "cors")
    plant("cors-without-authorization-header", "AllowHeaders: [authorization, ", "AllowHeaders: [",
          "cors")
    plant("route-without-authorizer", "            Path: /ojs/v1/jobs\n",
          "            Path: /ojs/v1/jobs\n            Auth:\n              Authorizer: NONE\n", "auth")
    # samtranslator refuses it: the health routes' "Authorizer: NONE" needs a default.
    plant("no-default-authorizer", "        DefaultAuthorizer: ApiKeyAuthorizer\n", "", "samtranslator")
    plant("authorizer-on-another-header", "              Headers:\n                - Authorization\n",
          "              Headers:\n                - X-Api-Key\n", "auth")
    plant("uncached-authorizer", "ReauthorizeEvery: 300", "ReauthorizeEvery: 0", "auth")
    plant("functions-untraced", "    Tracing: Active\n", "", "tracing")
    plant("timer-loop-detection", "      RecursiveLoop: Allow", "      RecursiveLoop: Terminate", "sqs")
    plant("timer-reserved-concurrency", "      RecursiveLoop: Allow\n",
          "      RecursiveLoop: Allow\n      ReservedConcurrentExecutions: 5\n", "sqs")
    plant("timer-without-maximum-concurrency",
          "            ScalingConfig:\n              MaximumConcurrency: !Ref TimerMaxConcurrency\n", "",
          "sqs")
    plant("timer-maximum-concurrency-below-two", "    MinValue: 2\n    MaxValue: 1000",
          "    MinValue: 1\n    MaxValue: 1000", "sqs")
    # Routes: an ANY route behind the authorizer (F3), and a function whose resource-based
    # policy (one invoke permission per HttpApi event) nears Lambda's 20 KB (F10).
    plant("any-route-behind-authorizer", "            Method: GET\n            Path: /ojs/v1/push/endpoints\n",
          "            Method: ANY\n            Path: /ojs/v1/push/endpoints\n", "routes")
    extra_routes = "".join(
        f"        AdminPlanted{i}:\n          Type: HttpApi\n          Properties:\n"
        f"            ApiId: !Ref OjsApi\n            Method: GET\n"
        f"            Path: /ojs/v1/admin/planted{i}\n" for i in range(1, 5))
    plant("admin-routes-past-policy-limit", "        AdminKeyRegistrations:\n",
          extra_routes + "        AdminKeyRegistrations:\n", "routes")
    # Parameters CloudFormation would take and the deploy then fail on (F7, F8).
    plant("push-function-arns-any-value", '    AllowedPattern: "^(arn:aws[a-z-]*:lambda:',
          '    AllowedPattern: ".*|^(arn:aws[a-z-]*:lambda:', "params")
    plant("push-function-arns-with-spaces",
          ":function:[A-Za-z0-9_-]{1,64}(:[A-Za-z0-9_$-]{1,128})?(,arn:",
          ":function:[A-Za-z0-9_-]{1,64}(:[A-Za-z0-9_$-]{1,128})?(, ?arn:", "params")
    plant("api-reserved-concurrency-unbounded", "    MaxValue: 80\n", "", "params")
    plant("api-reserved-concurrency-too-high", "    MaxValue: 80\n", "    MaxValue: 100\n", "params")
    plant("authorizer-cache-from-parameter", "ReauthorizeEvery: 300",
          "ReauthorizeEvery: !Ref LogRetentionDays", "auth")
    plant("function-without-errors-alarm",
          "MetricName: Errors\n      Dimensions: [{Name: FunctionName, Value: !Ref JobsFunction}]",
          "MetricName: Errors\n      Dimensions: [{Name: FunctionName, Value: !Ref WorkersFunction}]",
          "alarms")
    plant("dead-letter-queue-without-alarm", "Value: !GetAtt TimerDeadLetterQueue.QueueName}]",
          "Value: !GetAtt TimerQueue.QueueName}]", "alarms")
    plant("index-throttling-not-alarmed", "{Name: GlobalSecondaryIndexName, Value: due}",
          "{Name: GlobalSecondaryIndexName, Value: ready}", "alarms")
    plant("index-read-throttling-not-alarmed",
          "MetricName: ReadThrottleEvents, Dimensions: [{Name: TableName, Value: !Ref JobsTable}, "
          "{Name: GlobalSecondaryIndexName, Value: ready}]",
          "MetricName: WriteThrottleEvents, Dimensions: [{Name: TableName, Value: !Ref JobsTable}, "
          "{Name: GlobalSecondaryIndexName, Value: ready}]", "alarms")
    plant("alarm-on-missing-index", "{Name: GlobalSecondaryIndexName, Value: due}",
          "{Name: GlobalSecondaryIndexName, Value: gone}", "alarms")
    plant("dashboard-on-missing-index", '"GlobalSecondaryIndexName","due"',
          '"GlobalSecondaryIndexName","gone"', "dashboard")
    plant("alarm-notifies-no-one", "      AlarmActions: !If [HasAlarmTopic, [!Ref AlarmTopicArn], []]",
          "      AlarmActions: []", "alarms")
    plant("alarm-on-unemitted-metric", "MetricName: OldestReadyJobAge",
          "MetricName: OldestReadyJobAgeSeconds", "alarms")
    plant("dashboard-missing-function", '"FunctionName","${TimerFunction}"]',
          '"FunctionName","${TimerQueue.QueueName}"]', "dashboard")
    plant("function-allowed-api-keys", "                  dynamodb:LeadingKeys: [APIKEYS]\n",
          "                  dynamodb:LeadingKeys: [APIKEYZ]\n", "iam")
    plant("keys-function-any-partition", "                    - APIKEYS\n",
          "                    - APIKEYS\n                    - JOB\n", "iam")
    plant("api-keys-readable",
          "Action: [dynamodb:GetItem, dynamodb:BatchGetItem, dynamodb:Query, dynamodb:PutItem",
          "Action: [dynamodb:BatchGetItem, dynamodb:Query, dynamodb:PutItem", "iam")
    plant("foreign-cron-writes", "                  dynamodb:LeadingKeys: [CRON, SCHEMAS]",
          "                  dynamodb:LeadingKeys: [SCHEMAS]", "iam")
    # The change stream (StreamFunction, StreamEventSourceMapping; the "stream" check).
    plant("stream-keys-only", "StreamViewType: NEW_AND_OLD_IMAGES", "StreamViewType: KEYS_ONLY", "stream")
    plant("stream-without-batch-item-failures",
          "      FunctionResponseTypes:\n        - ReportBatchItemFailures\n      # Never halved",
          "      # Never halved", "stream")
    plant("stream-bisecting", "BisectBatchOnFunctionError: false",
          "BisectBatchOnFunctionError: true", "stream")
    plant("stream-unbounded-retries", "      MaximumRetryAttempts: 10\n",
          "      MaximumRetryAttempts: -1\n", "stream")
    plant("stream-without-on-failure-destination",
          "      DestinationConfig:\n        OnFailure:\n          Destination: !GetAtt StreamFailuresQueue.Arn\n",
          "", "stream")
    plant("stream-destination-not-sendable", "Resource: !GetAtt StreamFailuresQueue.Arn",
          "Resource: !GetAtt TimerQueue.Arn", "stream")
    plant("stream-filter-drops-jobs", '[{"prefix": "JOB#"}]', '[{"prefix": "JOBS#"}]', "stream")
    plant("stream-slow-batching", "MaximumBatchingWindowInSeconds: 1",
          "MaximumBatchingWindowInSeconds: 30", "stream")
    plant("stream-read-on-every-stream", "Resource: !GetAtt JobsTable.StreamArn", 'Resource: "*"', "stream")
    plant("stream-lag-not-alarmed", "MetricName: IteratorAge", "MetricName: Invocations", "stream")
    # The redrive of given-up batches (SchedulerFunction): told the queue, allowed to read
    # the records again.
    plant("stream-not-redriven", "          OJS_STREAM_FAILURES_QUEUE_URL: !Ref StreamFailuresQueue\n",
          "", "stream")
    plant("stream-redrive-cannot-read",
          "                - dynamodb:GetShardIterator\n                - dynamodb:GetRecords\n",
          "                - dynamodb:GetShardIterator\n", "stream")
    # The build (the "build" check): one cargo build of every bin, each function its own bin.
    plant("function-built-alone", "      BuildMethod: makefile", "      BuildMethod: rust-cargolambda",
          "build")
    plant("function-binary-not-its-name", "Binary: dead-letter", "Binary: deadletter", "build")
    plant("dashboard-missing-stream-lag", '"IteratorAge","FunctionName","${StreamFunction}"',
          '"IteratorAge","FunctionName","${TimerFunction}"', "dashboard")
    # Documentation held to the template (F12): the README's guided-deploy prompt table
    # lists every parameter in the order sam deploy --guided asks, docs/cost.md counts the
    # alarms. Two parameters swapped: sam deploy --guided asks them in another order.
    def block(name):
        return re.search(rf"^  {name}:\n(?:    .*\n)*", src, re.M).group(0)

    a, b = block("TerminalJobRetentionDays"), block("PushFunctionArns")
    assert a + b in src, "TerminalJobRetentionDays and PushFunctionArns are no longer adjacent"
    plant("readme-prompt-order", (a + b).rstrip("\n"), (b + a).rstrip("\n"), "docs")
    m = re.search(r"^  TimerDeadLetterQueueDepthAlarm:\n(?:    .*\n|\n)*?(?=^  \S)", src, re.M)
    extra_alarm = m.group(0).replace("TimerDeadLetterQueueDepthAlarm:", "PlantedCopyOfAnAlarm:", 1)
    plant("cost-model-alarm-count", "  TimerDeadLetterQueueDepthAlarm:\n",
          extra_alarm.rstrip("\n") + "\n\n  TimerDeadLetterQueueDepthAlarm:\n", "docs")
    return out


def load_checks():
    spec = importlib.util.spec_from_file_location("check_template", ROOT / "scripts/check-template.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def checks_only(checks, path, check):
    """validate-template.sh --checks-only, in process, with check-template.py's `check`
    alone (the one that must reject the plant; a translation the plant breaks is the
    "samtranslator" check): the failures, "<check>: <reason>"."""
    from samtranslator.model.exceptions import InvalidDocumentException

    try:
        cfn = checks.translate(str(path), {})
    except InvalidDocumentException as e:
        return [f"samtranslator: {cause.message}" for cause in e.causes]
    # What validate-template.sh hands check-template.py: the translation as JSON.
    cfn = json.loads(json.dumps(cfn))
    with contextlib.redirect_stdout(io.StringIO()):
        return checks.run_checks(cfn, str(path), str(ROOT), None if check == "samtranslator" else check)


STATE = {}


def run_in_process(name):
    try:
        return checks_only(STATE["checks"], STATE["files"][name], STATE["check_of"][name])
    except Exception as e:  # noqa: BLE001 - reported as the reason, matches no check
        return [f"crash: {type(e).__name__}: {e}"]


def full_validation(path):
    """The whole of validate-template.sh (cfn-lint included) on `path`: (exit code, output)."""
    run = subprocess.run(["bash", str(ROOT / "scripts/validate-template.sh"), str(path)],
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return run.returncode, run.stdout


def main():
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    os.environ.setdefault("AWS_REGION", "us-east-1")
    src = TEMPLATE.read_text(encoding="utf-8")
    planted = plants(src)
    names = [p[0] for p in planted]
    if len(set(names)) != len(names):
        sys.exit("plant-errors: a name is used twice")
    checks = load_checks()
    logging.disable(logging.WARNING)
    import samtranslator.translator.transform  # noqa: F401 - loaded once, before the forks
    results, problems = {}, []
    with tempfile.TemporaryDirectory() as work:
        files = {}
        for name, old, new, _, _ in planted:
            if old not in src:
                sys.exit(f"plant-errors: {name}: {old!r} not found in the template")
            files[name] = Path(work, f"{name}.yaml")
            files[name].write_text(src.replace(old, new, 1), encoding="utf-8")
        # The in-process ones in forks of this process (samtranslator loaded), as many as
        # there are cores, forked before any thread starts; the cfn-lint ones as processes
        # of their own beside them.
        STATE.update(checks=checks, files=files,
                     check_of={name: check for name, _, _, check, _ in planted})
        in_process = [name for name, *_, lint in planted if not lint]
        with multiprocessing.get_context("fork").Pool(os.cpu_count() or 2) as workers:
            checked = workers.map_async(run_in_process, in_process, chunksize=1)
            with ThreadPoolExecutor(max_workers=1) as pool:
                linted = {name: pool.submit(full_validation, files[name])
                          for name, *_, lint in planted if lint}
                for name, future in linted.items():
                    code, output = future.result()
                    rules = [line for line in output.splitlines() if re.match(r"^(\[\[)?[EW]\d{4}", line)]
                    results[name] = [f"cfn-lint: {line}" for line in rules] if code != 0 else []
                    if code != 0 and not rules:
                        results[name] = [f"exit {code}: " + " | ".join(output.splitlines()[-3:])]
            results.update(zip(in_process, checked.get()))
    for name, _, _, check, _ in planted:
        failures = results[name]
        if not failures:
            problems.append(f"the planted error '{name}' passed validation")
            continue
        if not any(f.startswith(f"{check}: ") for f in failures):
            problems.append(f"the planted error '{name}' was rejected, but not by the "
                            f"{check!r} check that must catch it: {failures}")
            continue
        print(f"==> planted error '{name}' rejected, as it must be:")
        for line in failures[:2]:
            print(f"    Error: {line}"[:154] if not line.startswith("cfn-lint: ") else f"    {line[10:]}"[:154])
    for line in problems:
        print(f"check-infra: {line}", file=sys.stderr)
    if problems:
        sys.exit(1)
    print(f"plant-errors: {len(planted)} planted errors rejected, each by its own check "
          f"({sum(1 for p in planted if p[4])} by cfn-lint)")


if __name__ == "__main__":
    main()
