"""Checks of the translated CloudFormation template that cfn-lint cannot make: what the
deployment must do, read the way API Gateway, EventBridge and CloudWatch will read it.

Run by scripts/validate-template.sh after samtranslator and cfn-lint (so every planted
error of scripts/check-infra.sh reaches it):

  python check-template.py <SAM template> <translated.json> <repository root>

(with the python that has samtranslator: CORS is checked on translations of the
template under several CorsAllowedOrigins values, as CloudFormation would translate it.)

Each check prints what it verified; the first failure exits 1 with the reason.
  schedule   every EventBridge schedule expression is well formed (rate/cron/at)
  cors       the HTTP API answers CORS preflights for exactly the origins of the
             CorsAllowedOrigins parameter (none when it is empty), with the headers and
             methods the routes need
  auth       a cached Lambda authorizer on the Authorization header guards every route
             but GET /ojs/manifest and GET /ojs/v1/health; API Gateway may invoke it
  alarms     errors and throttles of every function (but the keys function), API 5xx and
             latency, DynamoDB throttling of the table and its indexes, the depth of every
             dead-letter and failure queue, the oldest ready job, the sweep: each alarm
             notifies AlarmTopicArn and exists only with Monitoring=on; every custom metric
             an alarm reads is emitted by the Rust code
  dashboard  one dashboard showing every function, the API, the table, every failure
             queue, the per-queue job metrics and the lag of every stream consumer
  iam        the APIKEYS partition: only the keys function writes it, the authorizer
             only reads it, every other function is denied it; beside it the keys
             function may only list and update (disable) what a key registered
  stream     the table's stream records what the code reads (ojs_store::schema::
             STREAM_VIEW, NEW_AND_OLD_IMAGES); exactly one event source mapping consumes
             it, reporting batch item failures (the handler's partial batch response),
             bisecting failing batches, with bounded retries and record age, an SQS
             on-failure destination of the stack and a batching window of at most
             STREAM_MAX_BATCHING_WINDOW s; its function's role reads that stream only
             (no stream action on "*") and may send to the destination; an IteratorAge
             alarm watches it; its event filter, if any, lets every job item's record
             through (the keys of shared/store/src/dynamo/keys.rs JOB_PREFIX and JOB_SK);
             a function redrives the destination (told its URL, may receive and delete
             its messages and read the stream's records again)
  routes     no ANY route (x-amazon-apigateway-any-method): behind the authorizer it
             would answer CORS preflights with 401 and be judged by the route key
             "ANY /..." (a read with a read-only key refused); each function's
             resource-based policy (one statement per HttpApi event) stays within
             MAX_ROUTES_PER_FUNCTION statements and, with the longest names
             CloudFormation may give, within POLICY_BUDGET of Lambda's 20 KB
  params     PushFunctionArns takes only comma-separated Lambda ARNs (no spaces, no
             empty entry); ApiReservedConcurrency's MaxValue times the functions that
             reserve it leaves Lambda's 100 unreserved of the default 1 000
  docs       the README's guided-deploy prompt table lists every parameter in template
             order; docs/cost.md's alarm and metric counts are the template's
  sqs        every SQS event source is capped by its mapping's MaximumConcurrency, not by
             reserved concurrency; a function sending to the queue that invokes it has
             RecursiveLoop: Allow (Lambda's loop detection)
  build      every function is built by infra/lambda/<Architecture>/Makefile (BuildMethod
             makefile, ContextPath !Sub lambda/${Architecture}, CodeUri lambda, a Makefile
             for each allowed Architecture), and its Binary is the bin its LogicalId names
             there (DeadLetterFunction: dead-letter), a bin of functions/*/Cargo.toml,
             built by one function only
"""

import copy
import json
import re
import sys
from pathlib import Path

FAILED = []


def fail(check, message):
    FAILED.append(f"{check}: {message}")


def ok(check, message):
    print(f"    {check}: {message}")


def resources(cfn, rtype):
    return {k: v for k, v in cfn["Resources"].items() if v.get("Type") == rtype}


# ---------------------------------------------------------------- intrinsic evaluation
def evaluate(value, params, conditions):
    """Resolves Ref (parameters), Fn::If, Fn::Split, Fn::Equals, Fn::Not under `params`;
    anything else is returned as is."""
    if isinstance(value, list):
        return [evaluate(v, params, conditions) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        (key, arg), = value.items()
        if key == "Ref" and arg in params:
            return params[arg]
        if key == "Fn::If":
            name, yes, no = arg
            return evaluate(yes if condition(name, params, conditions) else no, params, conditions)
        if key == "Fn::Split":
            sep, text = evaluate(arg, params, conditions)
            return text.split(sep)
        if key == "Condition":
            return condition(arg, params, conditions)
        if key == "Fn::Equals":
            a, b = evaluate(arg, params, conditions)
            return str(a) == str(b)
        if key == "Fn::Not":
            return not evaluate(arg[0], params, conditions)
    out = {k: evaluate(v, params, conditions) for k, v in value.items()}
    return {k: v for k, v in out.items() if v != {"Ref": "AWS::NoValue"}}


def condition(name, params, conditions):
    return bool(evaluate(conditions[name], params, conditions))


def defaults(cfn):
    return {k: str(v.get("Default", "")) for k, v in cfn.get("Parameters", {}).items()}


# ---------------------------------------------------------------- checks
SCHEDULE = re.compile(
    r"^(rate\((1 (minute|hour|day)|([2-9]|[1-9][0-9]+) (minutes|hours|days))\)"
    r"|cron\(\S+ \S+ \S+ \S+ \S+ \S+\)"
    r"|at\(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\))$"
)


def check_schedules(cfn):
    found = 0
    for name, res in cfn["Resources"].items():
        props = res.get("Properties", {})
        expr = None
        if res["Type"] == "AWS::Scheduler::Schedule":
            expr = props.get("ScheduleExpression")
        elif res["Type"] == "AWS::Events::Rule" and "ScheduleExpression" in props:
            expr = props["ScheduleExpression"]
        if expr is None:
            continue
        found += 1
        if not isinstance(expr, str) or not SCHEDULE.match(expr):
            fail("schedule", f"{name}: malformed schedule expression {expr!r}")
    if not found:
        fail("schedule", "no schedule found (the sweep must run every minute)")
    ok("schedule", f"{found} schedule expression(s) well formed")


def api_body(cfn):
    apis = resources(cfn, "AWS::ApiGatewayV2::Api")
    if len(apis) != 1:
        fail("api", f"expected one HTTP API, found {sorted(apis)}")
        return None, None
    (name, api), = apis.items()
    return name, api["Properties"].get("Body", {})


def routes(body):
    for path, ops in body.get("paths", {}).items():
        for method, op in ops.items():
            if method.startswith("x-"):
                continue
            yield method.upper(), path, op


# The parse of the SAM template and its translations, for one text of it at a time: the
# checks parse it several times and translate it under several parameter values, and
# scripts/plant-errors.py runs them on 46 texts in one process. Each caller gets a copy.
_CACHE = {"text": None, "parsed": None, "translations": {}}


def _cached(sam_path):
    text = Path(sam_path).read_text(encoding="utf-8")
    if _CACHE["text"] != text:
        from samtranslator.yaml_helper import yaml_parse

        _CACHE.update(text=text, parsed=yaml_parse(text), translations={})
    return _CACHE


def parse(sam_path):
    """The SAM template at `sam_path`, parsed as samtranslator parses it."""
    return copy.deepcopy(_cached(sam_path)["parsed"])


def translate(sam_path, params):
    """The SAM template at `sam_path` as CloudFormation, translated offline with
    `params` (SAM resolves some parameter references while translating, as
    CloudFormation's transform does with the deployed values)."""
    import logging

    logging.disable(logging.WARNING)  # samtranslator's own metrics chatter
    from samtranslator.translator.transform import transform

    class OfflinePolicyLoader:
        def load(self):
            return {}

    cache = _cached(sam_path)
    key = json.dumps(params, sort_keys=True)
    if key not in cache["translations"]:
        sam = copy.deepcopy(cache["parsed"])
        for res in sam.get("Resources", {}).values():
            props = res.get("Properties") or {}
            if res.get("Type") == "AWS::Serverless::Function" and isinstance(props.get("CodeUri"), str):
                props["CodeUri"] = "s3://offline-validation/code.zip"
        cache["translations"][key] = transform(sam, params, OfflinePolicyLoader())
    return copy.deepcopy(cache["translations"][key])


def translate_with(sam_path, name, value):
    """translate() with the parameter `name` set to `value`. Where `value` is the
    parameter's default, that is the translation without parameters (samtranslator fills
    in every default before translating), which is reused if made already."""
    default = parse(sam_path).get("Parameters", {}).get(name, {}).get("Default")
    return translate(sam_path, {} if default == value and isinstance(default, str) else {name: value})


def check_cors(cfn, sam_path):
    _, body = api_body(cfn)
    if body is None:
        return
    methods = {m for m, _, _ in routes(body)}
    for origins in ["", "https://admin.example.com", "https://a.example.com,http://localhost:5173"]:
        params = dict(defaults(cfn), CorsAllowedOrigins=origins)
        variant = translate_with(sam_path, "CorsAllowedOrigins", origins)
        _, body = api_body(variant)
        resolved = evaluate(body, params, variant.get("Conditions", {}))
        cors = resolved.get("x-amazon-apigateway-cors")
        want = [o for o in origins.split(",") if o]
        if not want:
            if cors and cors.get("allowOrigins"):
                fail("cors", f"CorsAllowedOrigins empty, yet origins {cors['allowOrigins']} allowed")
            continue
        if not isinstance(cors, dict):
            fail("cors", f"CorsAllowedOrigins={origins!r}: the API has no CORS configuration "
                 "(API Gateway would answer every browser preflight with 404)")
            continue
        if cors.get("allowOrigins") != want:
            fail("cors", f"CorsAllowedOrigins={origins!r} gives allowOrigins "
                 f"{cors.get('allowOrigins')!r}, not {want!r}")
        headers = {h.lower() for h in cors.get("allowHeaders", [])}
        for h in ["authorization", "content-type"]:
            if h not in headers:
                fail("cors", f"allowHeaders lacks {h} (every API request sends it)")
        allowed = {m.upper() for m in cors.get("allowMethods", [])}
        if "*" not in allowed and not methods <= allowed:
            fail("cors", f"allowMethods {sorted(allowed)} lacks {sorted(methods - allowed)}")
        if cors.get("allowCredentials"):
            fail("cors", "allowCredentials must stay off (keys travel in Authorization)")
    ok("cors", "preflights answered by the gateway for exactly CorsAllowedOrigins "
       f"(none when empty), methods {sorted(methods)}")


PUBLIC_ROUTES = {("GET", "/ojs/manifest"), ("GET", "/ojs/v1/health"), ("GET", "/health"), ("GET", "/ready")}


def check_auth(cfn):
    api_name, body = api_body(cfn)
    if body is None:
        return
    schemes = body.get("components", {}).get("securitySchemes", {})
    authorizers = {
        name: s["x-amazon-apigateway-authorizer"]
        for name, s in schemes.items()
        if "x-amazon-apigateway-authorizer" in s
    }
    lambda_authorizers = {}
    for name, a in authorizers.items():
        uri = json.dumps(a.get("authorizerUri"))
        target = re.search(r'"Fn::GetAtt": \["(\w+)", "Arn"\]', uri)
        if a.get("type") != "request" or not target:
            fail("auth", f"authorizer {name} is not a Lambda REQUEST authorizer")
            continue
        if "$request.header.Authorization" not in a.get("identitySource", []):
            fail("auth", f"authorizer {name} does not read the Authorization header")
        ttl = a.get("authorizerResultTtlInSeconds")
        if not isinstance(ttl, int) or not 0 < ttl <= 3600:
            fail("auth", f"authorizer {name} must cache verdicts (an integer of 1-3600 "
                 f"seconds in the OpenAPI body), not {ttl!r}")
        if a.get("authorizerPayloadFormatVersion") != "2.0" or not a.get("enableSimpleResponses"):
            fail("auth", f"authorizer {name} must use payload 2.0 simple responses "
                 "(what functions/authorizer answers)")
        lambda_authorizers[name] = target.group(1)
    if not lambda_authorizers:
        fail("auth", "the HTTP API has no Lambda authorizer")
        return
    for method, path, op in routes(body):
        names = [n for req in op.get("security", []) for n in req]
        if (method, path) in PUBLIC_ROUTES:
            if any(n in lambda_authorizers for n in names):
                fail("auth", f"{method} {path} must stay public")
        elif not any(n in lambda_authorizers for n in names):
            fail("auth", f"{method} {path} is not guarded by the authorizer (security {names})")
    functions = resources(cfn, "AWS::Lambda::Function")
    permissions = resources(cfn, "AWS::Lambda::Permission")
    for name, fn in lambda_authorizers.items():
        if fn not in functions:
            fail("auth", f"authorizer {name} names {fn}, not a function of the stack")
            continue
        env = functions[fn]["Properties"].get("Environment", {}).get("Variables", {})
        if env.get("OJS_AUTH") != "api-key":
            fail("auth", f"{fn} must run with OJS_AUTH=api-key (has {env.get('OJS_AUTH')!r})")
        if not any(
            p["Properties"].get("Principal") == "apigateway.amazonaws.com"
            and fn in json.dumps(p["Properties"].get("FunctionName"))
            for p in permissions.values()
        ):
            fail("auth", f"API Gateway has no permission to invoke {fn}")
    ok("auth", f"authorizer(s) {sorted(lambda_authorizers.values())} guard every route "
       f"but {sorted(p for _, p in PUBLIC_ROUTES)}")


def metric_of(alarm):
    """(namespace, metric name, dimension values) of every metric an alarm reads."""
    p = alarm["Properties"]
    out = []
    if "MetricName" in p:
        out.append((p.get("Namespace"), p["MetricName"], p.get("Dimensions", [])))
    for m in p.get("Metrics", []):
        stat = m.get("MetricStat", {}).get("Metric")
        if stat:
            out.append((stat.get("Namespace"), stat["MetricName"], stat.get("Dimensions", [])))
    return out


def refs(value):
    """Logical ids a value references (Ref, GetAtt, ${X} in Sub)."""
    text = json.dumps(value)
    ids = set(re.findall(r'"Ref": "(\w+)"', text))
    ids |= set(re.findall(r'"Fn::GetAtt": \["(\w+)"', text))
    ids |= set(re.findall(r"\$\{(\w+)(?:\.\w+)?\}", text))
    return ids


def find_failure_queues(cfn):
    """Dead-letter and failure queues: redrive targets, on-failure destinations (of a
    function's asynchronous invocations or of an event source mapping), schedule DLQs."""
    text = json.dumps(cfn["Resources"])
    found = set()
    for q in resources(cfn, "AWS::SQS::Queue"):
        patterns = [
            rf'"deadLetterTargetArn": \{{"Fn::GetAtt": \["{q}", "Arn"\]',
            rf'"OnFailure": \{{"Destination": \{{"Fn::GetAtt": \["{q}", "Arn"\]',
            rf'"DeadLetterConfig": \{{"Arn": \{{"Fn::GetAtt": \["{q}", "Arn"\]',
        ]
        if any(re.search(p, text) for p in patterns):
            found.add(q)
    return found


def check_alarms(cfn, root):
    alarms = resources(cfn, "AWS::CloudWatch::Alarm")
    if not alarms:
        fail("alarms", "no CloudWatch alarm")
        return
    read = []  # (alarm, namespace, metric, referenced ids)
    for name, alarm in alarms.items():
        if alarm.get("Condition") != "MonitoringOn":
            fail("alarms", f"{name} is not conditional on Monitoring=on")
        p = alarm["Properties"]
        for key in ["AlarmActions", "OKActions"]:
            if "AlarmTopicArn" not in refs(p.get(key)):
                fail("alarms", f"{name} {key} does not notify AlarmTopicArn")
        for ns, metric, dims in metric_of(alarm):
            read.append((name, json.dumps(ns), metric, refs(dims)))

    def alarmed(namespace, metric, target=None):
        return [
            a for a, ns, m, ids in read
            if namespace in ns and m == metric and (target is None or target in ids)
        ]

    functions = resources(cfn, "AWS::Lambda::Function")
    exempt = {"KeysFunction"}
    for fn in sorted(set(functions) - exempt):
        for metric in ["Errors", "Throttles"]:
            if not alarmed("AWS/Lambda", metric, fn):
                fail("alarms", f"no {metric} alarm on {fn}")
    api_name, _ = api_body(cfn)
    for metric in ["5xx", "Latency"]:
        if not alarmed("AWS/ApiGateway", metric, api_name):
            fail("alarms", f"no API {metric} alarm on {api_name}")
    tables = resources(cfn, "AWS::DynamoDB::Table")
    index_count = 0
    for table, t in tables.items():
        for metric in ["ReadThrottleEvents", "WriteThrottleEvents"]:
            if not alarmed("AWS/DynamoDB", metric, table):
                fail("alarms", f"no {metric} alarm on {table}")
        indexes = {g["IndexName"] for g in t["Properties"].get("GlobalSecondaryIndexes", [])}
        index_count += len(indexes)
        # Writes (every job write updates an index) and reads (FETCH, the sweep and the
        # admin API query them): an index's throttling is not the table's metric.
        for metric, what in [("WriteThrottleEvents", "write"), ("ReadThrottleEvents", "read")]:
            covered = {
                d.get("Value")
                for _, alarm in alarms.items()
                for ns, m, dims in metric_of(alarm)
                if m == metric
                for d in dims
                if d.get("Name") == "GlobalSecondaryIndexName"
            }
            if indexes - covered:
                fail("alarms", f"index {what} throttling not alarmed for {sorted(indexes - covered)}")
            if covered - indexes:
                fail("alarms", f"alarm on indexes the table does not have: {sorted(covered - indexes)}")
    failure_queues = find_failure_queues(cfn)
    if not failure_queues:
        fail("alarms", "found no dead-letter or failure queue (the patterns no longer match)")
    for q in sorted(failure_queues):
        if not alarmed("AWS/SQS", "ApproximateNumberOfMessagesVisible", q):
            fail("alarms", f"no depth alarm on the failure queue {q}")
    # Custom metrics: the alarm's metric must be one the code emits.
    custom = {(m, ns) for _, ns, m, _ in read if "OJS/" in ns}
    if not any(m == "OldestReadyJobAge" for m, _ in custom):
        fail("alarms", "no alarm on the oldest ready job (OldestReadyJobAge)")
    sources = "\n".join(p.read_text(encoding="utf-8") for p in Path(root, "shared").rglob("*.rs"))
    for metric, _ in sorted(custom):
        if f'"{metric}"' not in sources:
            fail("alarms", f"alarm reads {metric}, which no Rust source emits")
    ok("alarms", f"{len(alarms)} alarms: {len(set(functions) - exempt)} functions x errors and "
       f"throttles, API 5xx/latency, table+{index_count} index read and write throttling, "
       f"failure queues {sorted(failure_queues)}, custom {sorted(m for m, _ in custom)}")


def check_dashboard(cfn):
    boards = resources(cfn, "AWS::CloudWatch::Dashboard")
    if len(boards) != 1:
        fail("dashboard", f"expected one dashboard, found {sorted(boards)}")
        return
    (name, board), = boards.items()
    body = board["Properties"]["DashboardBody"]
    template = body.get("Fn::Sub") if isinstance(body, dict) else body
    if isinstance(template, list):
        template = template[0]
    try:
        doc = json.loads(template)
    except (TypeError, ValueError) as e:
        fail("dashboard", f"{name} body is not JSON: {e}")
        return
    widgets = {w["properties"].get("title", ""): json.dumps(w) for w in doc.get("widgets", [])}
    functions = resources(cfn, "AWS::Lambda::Function")
    for title in ["Function errors", "Function throttles"]:
        text = widgets.get(title)
        if text is None:
            fail("dashboard", f"no widget {title!r}")
            continue
        for fn in functions:
            if "${" + fn + "}" not in text:
                fail("dashboard", f"widget {title!r} does not show {fn}")
    whole = json.dumps(doc)
    indexes = {g["IndexName"] for t in resources(cfn, "AWS::DynamoDB::Table").values()
               for g in t["Properties"].get("GlobalSecondaryIndexes", [])}
    shown = set(re.findall(r'"GlobalSecondaryIndexName", "([^"]+)"', whole))
    if shown - indexes:
        fail("dashboard", f"{name} shows indexes the table does not have: {sorted(shown - indexes)}")
    api_name, _ = api_body(cfn)
    for needed in ["${" + api_name + "}", "${JobsTable}", "OldestReadyJobAge", "JobsCompleted"]:
        if needed not in whole:
            fail("dashboard", f"{name} does not show {needed}")
    for q in sorted(find_failure_queues(cfn)):
        if "${" + q + ".QueueName}" not in whole:
            fail("dashboard", f"{name} does not show the failure queue {q}")
    # The lag of every stream consumer: IteratorAge of the function of each mapping.
    for m in resources(cfn, "AWS::Lambda::EventSourceMapping").values():
        fn = mapped_function(m)
        if not is_stream_mapping(m):
            continue
        if fn and not re.search(r'"IteratorAge", "FunctionName", "\$\{' + fn + r'\}"', whole):
            fail("dashboard", f"{name} does not show the IteratorAge of {fn}")
    if board.get("Condition") != "MonitoringOn":
        fail("dashboard", f"{name} is not conditional on Monitoring=on")
    ok("dashboard", f"{len(widgets)} widgets over {len(functions)} functions, the API, "
       "the table, the failure queues, per-queue job metrics and the stream's lag")


WRITES = {"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem",
          "dynamodb:BatchWriteItem"}

# Reads of a table's stream (on the stream's ARN, never items: no partition applies).
STREAM_READS = {"dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator",
                "dynamodb:ListStreams"}


# Registries only their owners may write (shared/store: cron.rs is written by the cron
# routes, the sweep and the timer; schemas.rs by the schema routes).
REGISTRY_WRITERS = {
    # KeysFunction disables the cron jobs of a revoked key when asked
    # (shared/http/src/registrations.rs).
    "CRON": {"CronFunction", "SchedulerFunction", "TimerFunction", "KeysFunction"},
    "SCHEMAS": {"SchemasFunction"},
}

# What KeysFunction may do beside its APIKEYS records: list what a key registered and
# disable it on revocation (Query and UpdateItem; never a Put or a Delete, and schemas
# are only read).
KEY_REGISTRATIONS = {"PUSH", "PUSHQ#*", "WEBHOOKS", "CRON", "SCHEMAS"}
KEY_REGISTRATION_ACTIONS = {"dynamodb:Query", "dynamodb:UpdateItem"}


def statements(role):
    for policy in role["Properties"].get("Policies", []):
        yield from policy["PolicyDocument"].get("Statement", [])


def leading_keys(st, operator):
    return st.get("Condition", {}).get(operator, {}).get("dynamodb:LeadingKeys", [])


# The payload bucket's objects (large job requests, ojs_store::payloads): which function may
# do what, on jobs/* of PayloadBucket only.
PAYLOAD_ACTIONS = {
    "JobsFunction": {"s3:PutObject", "s3:PutObjectTagging", "s3:GetObject", "s3:DeleteObject"},
    "WorkersFunction": {"s3:GetObject"},
    "CloudqFunction": {"s3:GetObject"},
    "DeadLetterFunction": {"s3:GetObject"},
    "AdminFunction": {"s3:GetObject"},
    "StreamFunction": {"s3:DeleteObject"},
    # The stream redrive applies given-up batches as StreamFunction does.
    "SchedulerFunction": {"s3:DeleteObject"},
    "DeliveryFunction": {"s3:GetObject"},
}
PAYLOAD_RESOURCE = {"Fn::Sub": "${PayloadBucket.Arn}/jobs/*"}


def check_payload_iam(fn, role):
    s3 = [st for st in statements(role)
          if any(str(a).startswith("s3:") for a in actions_of(st))]
    granted = set()
    for st in s3:
        if st["Effect"] != "Allow":
            continue
        if st.get("Resource") != PAYLOAD_RESOURCE:
            fail("iam", f"{fn}: S3 statement {st.get('Sid')} is not limited to {PAYLOAD_RESOURCE}")
        granted |= set(actions_of(st))
    allowed = PAYLOAD_ACTIONS.get(fn, set())
    if granted - allowed:
        fail("iam", f"{fn}: S3 actions {sorted(granted - allowed)} beyond {sorted(allowed)}")
    if allowed - granted:
        fail("iam", f"{fn}: lacks S3 actions {sorted(allowed - granted)} it needs")


def check_iam(cfn):
    functions = resources(cfn, "AWS::Lambda::Function")
    roles = resources(cfn, "AWS::IAM::Role")
    for fn, f in functions.items():
        role_ref = f["Properties"].get("Role", {})
        role = roles.get(role_ref.get("Fn::GetAtt", [None])[0]) if isinstance(role_ref, dict) else None
        if role is not None:
            check_payload_iam(fn, role)
    for fn, f in functions.items():
        role_ref = f["Properties"].get("Role", {})
        role = roles.get(role_ref.get("Fn::GetAtt", [None])[0]) if isinstance(role_ref, dict) else None
        if role is None:
            fail("iam", f"{fn}: role not found")
            continue
        dynamo = [st for st in statements(role)
                  if any(str(a).startswith("dynamodb:") for a in
                         (st["Action"] if isinstance(st["Action"], list) else [st["Action"]]))]
        allows = [st for st in dynamo if st["Effect"] == "Allow"]
        if fn in ("KeysFunction", "AuthorizerFunction"):
            for st in allows:
                registrations = (
                    fn == "KeysFunction"
                    and st.get("Sid") == "KeyRegistrations"
                    and set(leading_keys(st, "ForAllValues:StringLike")) <= KEY_REGISTRATIONS
                    and leading_keys(st, "ForAllValues:StringLike")
                    and set(actions_of(st)) <= KEY_REGISTRATION_ACTIONS
                )
                if registrations:
                    continue
                if leading_keys(st, "ForAllValues:StringEquals") != ["APIKEYS"]:
                    fail("iam", f"{fn}: statement {st.get('Sid')} is not limited to the APIKEYS partition")
            if fn == "AuthorizerFunction" and any(
                set(st["Action"]) & WRITES for st in allows
            ):
                fail("iam", "AuthorizerFunction may write key records")
            continue
        denied = [st for st in dynamo if st["Effect"] == "Deny"
                  and "APIKEYS" in leading_keys(st, "ForAnyValue:StringEquals")]
        if allows and not denied:
            fail("iam", f"{fn}: nothing denies it the APIKEYS partition")
        granted = {a for st in allows for a in
                   (st["Action"] if isinstance(st["Action"], list) else [st["Action"]])}
        covered = {a for st in denied for a in
                   (st["Action"] if isinstance(st["Action"], list) else [st["Action"]])}
        item_actions = granted - {"dynamodb:Scan"} - STREAM_READS
        if denied and "dynamodb:*" not in covered and item_actions - covered:
            fail("iam", f"{fn}: the APIKEYS Deny leaves {sorted(item_actions - covered)} allowed there")
        for partition, owners in REGISTRY_WRITERS.items():
            if fn in owners or not allows:
                continue
            if not any(
                st["Effect"] == "Deny"
                and WRITES <= set(st["Action"] if isinstance(st["Action"], list) else [st["Action"]])
                and partition in leading_keys(st, "ForAnyValue:StringEquals")
                for st in dynamo
            ) and not any(st["Effect"] == "Deny" and st["Action"] == "dynamodb:*"
                          and partition in leading_keys(st, "ForAnyValue:StringEquals")
                          for st in dynamo):
                fail("iam", f"{fn}: nothing denies it writes to the {partition} partition")
    ok("iam", "only KeysFunction writes APIKEYS, the authorizer only reads it, every other "
       "function is denied it; CRON and SCHEMAS are written only by their owners "
       f"{REGISTRY_WRITERS}; S3 payload objects only on jobs/* of PayloadBucket, "
       f"for {sorted(PAYLOAD_ACTIONS)}")


# "Events and stats lag about a second" (docs): the longest batching window that keeps it.
STREAM_MAX_BATCHING_WINDOW = 1


def actions_of(st):
    a = st.get("Action", [])
    return a if isinstance(a, list) else [a]


def resources_of(st):
    r = st.get("Resource", [])
    return r if isinstance(r, list) else [r]


def mapped_function(mapping):
    """The logical id of the function an event source mapping invokes."""
    ref = mapping["Properties"].get("FunctionName")
    if isinstance(ref, dict):
        return ref.get("Ref") or (ref.get("Fn::GetAtt") or [None])[0]
    return None


def is_stream_mapping(mapping):
    """Whether an event source mapping reads a DynamoDB table's stream."""
    arn = mapping["Properties"].get("EventSourceArn")
    return isinstance(arn, dict) and (arn.get("Fn::GetAtt") or [None, None])[1] == "StreamArn"


def role_of(cfn, fn):
    functions = resources(cfn, "AWS::Lambda::Function")
    role_ref = functions.get(fn, {}).get("Properties", {}).get("Role", {})
    if isinstance(role_ref, dict) and "Fn::GetAtt" in role_ref:
        return resources(cfn, "AWS::IAM::Role").get(role_ref["Fn::GetAtt"][0])
    return None


def check_stream_filter(name, criteria, root):
    """An event filter of the stream mapping must let every job item's record through:
    a pattern on the job item's keys (pk starting with JOB_PREFIX, sk JOB_SK, as
    shared/store/src/dynamo/keys.rs defines them), nothing narrower."""
    if not criteria:
        return
    keys = Path(root, "shared/store/src/dynamo/keys.rs").read_text(encoding="utf-8")
    const = {k: v for k, v in re.findall(r'const (JOB_PREFIX|JOB_SK): &str = "([^"]*)";', keys)}
    if set(const) != {"JOB_PREFIX", "JOB_SK"}:
        fail("stream", "shared/store/src/dynamo/keys.rs no longer defines JOB_PREFIX and JOB_SK")
        return
    want = {"dynamodb": {"Keys": {"pk": {"S": [{"prefix": const["JOB_PREFIX"]}]},
                                  "sk": {"S": [const["JOB_SK"]]}}}}
    filters = criteria.get("Filters", [])
    try:
        patterns = [json.loads(f.get("Pattern", "")) for f in filters]
    except (TypeError, ValueError) as e:
        fail("stream", f"{name}: a FilterCriteria pattern is not JSON: {e}")
        return
    if want not in patterns:
        fail("stream", f"{name}: FilterCriteria {patterns} does not let job items' records "
             f"through ({json.dumps(want)}): events and counters would miss them")


def redrivers_of(cfn, queue, stream_arn):
    """The functions that redrive the batches a stream mapping gave up on: told the queue's
    URL, allowed to take and delete its messages and to read the records again from the
    stream (shared/store/src/derived/stream/redrive.rs)."""
    out = []
    for fn, f in resources(cfn, "AWS::Lambda::Function").items():
        role = role_of(cfn, fn)
        if role is None:
            continue
        allows = [st for st in statements(role) if st.get("Effect") == "Allow"]

        def granted(action, resource):
            return any(action in actions_of(st) and resource in resources_of(st) for st in allows)

        env = f["Properties"].get("Environment", {}).get("Variables", {})
        if (env.get("OJS_STREAM_FAILURES_QUEUE_URL") == {"Ref": queue}
                and granted("sqs:ReceiveMessage", {"Fn::GetAtt": [queue, "Arn"]})
                and granted("sqs:DeleteMessage", {"Fn::GetAtt": [queue, "Arn"]})
                and granted("dynamodb:GetShardIterator", stream_arn)
                and granted("dynamodb:GetRecords", stream_arn)):
            out.append(fn)
    return out


def check_stream(cfn, root):
    schema = Path(root, "shared/store/src/dynamo/schema.rs").read_text(encoding="utf-8")
    m = re.search(r'pub const STREAM_VIEW: &str = "([A-Z_]+)";', schema)
    if not m:
        fail("stream", "shared/store/src/dynamo/schema.rs defines no STREAM_VIEW")
        return
    want = m.group(1)
    mappings = resources(cfn, "AWS::Lambda::EventSourceMapping")
    queues = resources(cfn, "AWS::SQS::Queue")
    alarms = resources(cfn, "AWS::CloudWatch::Alarm")
    checked = []
    for table, t in resources(cfn, "AWS::DynamoDB::Table").items():
        spec = t["Properties"].get("StreamSpecification") or {}
        if spec.get("StreamViewType") != want:
            fail("stream", f"{table} streams {spec.get('StreamViewType')!r}; the stream "
                 f"consumer reads both images of each write: StreamViewType must be {want}")
        consumers = {
            name: mp for name, mp in mappings.items()
            if mp["Properties"].get("EventSourceArn") == {"Fn::GetAtt": [table, "StreamArn"]}
        }
        if len(consumers) != 1:
            fail("stream", f"{table}'s stream has {len(consumers)} event source mappings "
                 f"{sorted(consumers)}, not one (a second would apply every change twice)")
        for name, mp in consumers.items():
            p = mp["Properties"]
            fn = mapped_function(mp)
            if "ReportBatchItemFailures" not in p.get("FunctionResponseTypes", []):
                fail("stream", f"{name}: FunctionResponseTypes lacks ReportBatchItemFailures "
                     "(the handler answers a partial batch response; without it Lambda "
                     "reads it as success and skips the failed batch)")
            if p.get("BisectBatchOnFunctionError") not in (None, False, "false"):
                fail("stream", f"{name}: BisectBatchOnFunctionError must be false (a batch "
                     "is applied exactly once because it comes again from where it started; "
                     "a half of a bisected batch starts inside a run already applied, and "
                     "the handler skips unreadable records rather than failing on them)")
            retries = p.get("MaximumRetryAttempts")
            if not isinstance(retries, int) or not 0 <= retries <= 10000:
                fail("stream", f"{name}: MaximumRetryAttempts must be a bound (0-10000), not "
                     f"{retries!r} (unbounded retries of one failing batch stall its shard)")
            age = p.get("MaximumRecordAgeInSeconds")
            if not isinstance(age, int) or not 60 <= age <= 604800:
                fail("stream", f"{name}: MaximumRecordAgeInSeconds must be a bound "
                     f"(60-604800), not {age!r}")
            if p.get("StartingPosition") not in ("LATEST", "TRIM_HORIZON"):
                fail("stream", f"{name}: StartingPosition {p.get('StartingPosition')!r}")
            window = p.get("MaximumBatchingWindowInSeconds", 0)
            if not isinstance(window, int) or window > STREAM_MAX_BATCHING_WINDOW:
                fail("stream", f"{name}: MaximumBatchingWindowInSeconds {window!r} makes "
                     f"events and stats lag more than {STREAM_MAX_BATCHING_WINDOW} s")
            check_stream_filter(name, p.get("FilterCriteria"), root)
            dest = (p.get("DestinationConfig") or {}).get("OnFailure", {}).get("Destination")
            dest_queue = dest.get("Fn::GetAtt", [None])[0] if isinstance(dest, dict) else None
            if dest_queue not in queues:
                fail("stream", f"{name}: no on-failure destination on an SQS queue of the "
                     f"stack ({dest!r}): a skipped batch would leave no trace")
            role = role_of(cfn, fn)
            if role is None:
                fail("stream", f"{name}: its function {fn!r} or that function's role is not "
                     "in the stack")
                continue
            allows = [st for st in statements(role) if st.get("Effect") == "Allow"]
            stream_arn = {"Fn::GetAtt": [table, "StreamArn"]}
            for action in sorted(STREAM_READS - {"dynamodb:ListStreams"}):
                if not any(action in actions_of(st) and stream_arn in resources_of(st)
                           for st in allows):
                    fail("stream", f"{fn}: its role does not allow {action} on {table}'s "
                         "stream (the mapping polls with it)")
            if not any("dynamodb:ListStreams" in actions_of(st) for st in allows):
                fail("stream", f"{fn}: its role does not allow dynamodb:ListStreams")
            for st in allows:
                wide = set(actions_of(st)) & (STREAM_READS | {"dynamodb:*"})
                if wide and "*" in resources_of(st):
                    fail("stream", f"{fn}: statement {st.get('Sid')} allows {sorted(wide)} "
                         "on every resource, not this table's stream")
            if role["Properties"].get("ManagedPolicyArns") and "DynamoDBExecutionRole" in \
                    json.dumps(role["Properties"]["ManagedPolicyArns"]):
                fail("stream", f"{fn}: AWSLambdaDynamoDBExecutionRole reads every stream of "
                     "the account")
            if dest_queue in queues and not any(
                "sqs:SendMessage" in actions_of(st)
                and {"Fn::GetAtt": [dest_queue, "Arn"]} in resources_of(st)
                for st in allows
            ):
                fail("stream", f"{fn}: its role may not sqs:SendMessage to {dest_queue} "
                     "(the mapping sends skipped batches there with it)")
            if not any(
                ns == "AWS/Lambda" and metric == "IteratorAge" and fn in refs(dims)
                for alarm in alarms.values()
                for ns, metric, dims in metric_of(alarm)
            ):
                fail("stream", f"no IteratorAge alarm on {fn} (the stream's lag)")
            redrivers = redrivers_of(cfn, dest_queue, stream_arn) if dest_queue in queues else []
            if dest_queue in queues and not redrivers:
                fail("stream", f"no function redrives {dest_queue}: one must be told its URL "
                     "(OJS_STREAM_FAILURES_QUEUE_URL), may sqs:ReceiveMessage and "
                     f"sqs:DeleteMessage on it and dynamodb:GetShardIterator and GetRecords on "
                     f"{table}'s stream, or a skipped batch's counter moves are lost for good")
            checked.append(f"{table} -> {name} -> {fn} (on failure: {dest_queue}, "
                           f"redriven by {', '.join(redrivers) or 'nobody'})")
    if not checked:
        fail("stream", "no table stream is consumed (events and counters would never be kept)")
    ok("stream", f"{want}; " + "; ".join(checked))


ANY_METHOD = "x-amazon-apigateway-any-method"

# Lambda keeps one resource-based policy per function, at most 20 KB (20 480 bytes; the
# Lambda quotas page); SAM adds one lambda:InvokeFunction statement to it per HttpApi
# event. A statement is about 500 bytes with the longest names CloudFormation may give
# (estimate_statement), so 36 routes are about 18 KB: the limit here, ~10% short of the
# quota. A function needing more routes: split it, or route it by {proxy+} and decide the
# scope on the raw path.
LAMBDA_POLICY_LIMIT = 20_480
POLICY_BUDGET = 18_432  # 90% of LAMBDA_POLICY_LIMIT
MAX_ROUTES_PER_FUNCTION = 36


def estimate_statement(permission):
    """The bytes of the policy statement a Lambda::Permission adds, with the longest names
    CloudFormation may give: a 100-character statement id (the permission's physical id,
    <stack>-<LogicalId>-<suffix>), a 64-character function name, the aws-us-gov
    partition, a 14-character region, a 10-character API id."""
    src = permission["Properties"].get("SourceArn")
    if isinstance(src, dict) and "Fn::Sub" in src:
        sub = src["Fn::Sub"]
        text = sub[0] if isinstance(sub, list) else sub
        for var, value in [("${AWS::Partition}", "aws-us-gov"), ("${AWS::Region}", "ap-southeast-2"),
                           ("${AWS::AccountId}", "123456789012"), ("${__ApiId__}", "a" * 10),
                           ("${__Stage__}", "*")]:
            text = text.replace(var, value)
        src = text
    statement = {
        "Sid": "s" * 100, "Effect": "Allow",
        "Principal": {"Service": str(permission["Properties"].get("Principal"))},
        "Action": "lambda:InvokeFunction",
        "Resource": "arn:aws-us-gov:lambda:ap-southeast-2:123456789012:function:" + "f" * 64,
        "Condition": {"ArnLike": {"AWS:SourceArn": str(src)}},
    }
    return len(json.dumps(statement, separators=(",", ":"))) + 1


def check_routes(cfn):
    _, body = api_body(cfn)
    if body is None:
        return
    for path, ops in body.get("paths", {}).items():
        if ANY_METHOD in ops:
            names = [n for req in ops[ANY_METHOD].get("security", []) for n in req]
            if names and names != ["NONE"]:
                fail("routes", f"ANY {path} is behind the authorizer {names}: browsers' CORS "
                     "preflights (OPTIONS, no Authorization) get 401, and the authorizer "
                     "judges the route key 'ANY ...' as a write; declare each method")
            else:
                fail("routes", f"ANY {path}: declare each method (an ANY route also "
                     "takes OPTIONS and every method the function does not serve)")
    counts = {}
    sizes = {}
    for p in resources(cfn, "AWS::Lambda::Permission").values():
        fn = refs(p["Properties"].get("FunctionName"))
        for f in fn:
            counts[f] = counts.get(f, 0) + 1
            sizes[f] = sizes.get(f, 60) + estimate_statement(p)  # 60: the policy envelope
    for f in sorted(counts):
        if counts[f] > MAX_ROUTES_PER_FUNCTION:
            fail("routes", f"{f} has {counts[f]} invoke permissions (one per HttpApi event), "
                 f"more than {MAX_ROUTES_PER_FUNCTION}: its resource-based policy nears "
                 f"Lambda's {LAMBDA_POLICY_LIMIT} bytes and the deploy would fail past it")
        if sizes[f] > POLICY_BUDGET:
            fail("routes", f"{f}'s resource-based policy may reach {sizes[f]} bytes, over "
                 f"{POLICY_BUDGET} (Lambda refuses past {LAMBDA_POLICY_LIMIT})")
    busiest = max(counts, key=counts.get) if counts else None
    ok("routes", f"no ANY route; busiest function {busiest}: {counts.get(busiest)} of "
       f"{MAX_ROUTES_PER_FUNCTION} invoke permissions, policy at most {sizes.get(busiest)} "
       f"of {POLICY_BUDGET} bytes")


# Lambda refuses reservations that leave fewer than this many of the account's
# concurrency unreserved; the default account limit.
UNRESERVED_MINIMUM = 100
DEFAULT_ACCOUNT_CONCURRENCY = 1000

PUSH_ARNS_ACCEPTED = [
    "",
    "arn:aws:lambda:us-east-1:123456789012:function:worker",
    "arn:aws:lambda:eu-west-1:123456789012:function:a-b_c:live,"
    "arn:aws-cn:lambda:cn-north-1:123456789012:function:other:$LATEST",
]
PUSH_ARNS_REFUSED = [
    "arn:aws:lambda:us-east-1:123456789012:function:a, arn:aws:lambda:us-east-1:123456789012:function:b",
    "arn:aws:lambda:us-east-1:123456789012:function:a,",
    ",arn:aws:lambda:us-east-1:123456789012:function:a",
    "worker",
    "*",
    "arn:aws:lambda:us-east-1:123456789012:*",
]


def check_params(cfn):
    """Parameters whose bad values CloudFormation would only refuse half-way (a rolled back
    deploy): PushFunctionArns (each entry a Resource of an IAM policy) and
    ApiReservedConcurrency (each HTTP function reserves it)."""
    params = cfn.get("Parameters", {})
    arns = params.get("PushFunctionArns")
    pattern = (arns or {}).get("AllowedPattern")
    if not pattern:
        fail("params", "PushFunctionArns has no AllowedPattern: 'a, b' or a trailing comma "
             "makes the stream function's policy malformed and the deploy roll back")
    else:
        bad = [v for v in PUSH_ARNS_ACCEPTED if not re.fullmatch(pattern, v)]
        bad += [v for v in PUSH_ARNS_REFUSED if re.fullmatch(pattern, v)]
        for v in bad:
            fail("params", f"PushFunctionArns AllowedPattern gets {v!r} wrong")
    reserved = [
        fn for fn, f in resources(cfn, "AWS::Lambda::Function").items()
        if "ApiReservedConcurrency" in refs(f["Properties"].get("ReservedConcurrentExecutions"))
    ]
    most = (params.get("ApiReservedConcurrency") or {}).get("MaxValue")
    room = DEFAULT_ACCOUNT_CONCURRENCY - UNRESERVED_MINIMUM
    if not isinstance(most, int):
        fail("params", "ApiReservedConcurrency has no MaxValue")
    elif reserved and most * len(reserved) > room:
        fail("params", f"ApiReservedConcurrency MaxValue {most} x {len(reserved)} functions "
             f"= {most * len(reserved)} > {room}: Lambda keeps {UNRESERVED_MINIMUM} of the "
             f"default {DEFAULT_ACCOUNT_CONCURRENCY} unreserved and would refuse the deploy")
    ok("params", f"PushFunctionArns pattern right on {len(PUSH_ARNS_ACCEPTED) + len(PUSH_ARNS_REFUSED)} "
       f"examples; ApiReservedConcurrency at most {most} x {len(reserved)} functions <= {room}")


def check_docs(cfn, sam_path, root):
    """What the documentation says of the template, held to it: the README's table of
    `sam deploy --guided` prompts lists every parameter in template order (the order the
    prompts come in), and docs/cost.md counts the alarms and the metrics they read (each
    metric of an alarm is billed)."""
    readme = Path(root, "README.md").read_text(encoding="utf-8")
    listed = re.findall(r"^\| Parameter (\w+) \|", readme, re.M)
    # In the order of the SAM template (the translation reorders them).
    sam = Path(sam_path).read_text(encoding="utf-8")
    section = re.search(r"^Parameters:\n(.*?)^\S", sam, re.M | re.S)
    params = re.findall(r"^  (\w+):", section[1], re.M) if section else []
    if sorted(params) != sorted(cfn.get("Parameters", {})):
        fail("docs", f"could not read the parameters of {sam_path} in order ({params})")
    if listed != params:
        fail("docs", f"README's prompt table lists parameters {listed}, the template asks "
             f"{params} (missing {[p for p in params if p not in listed]}, extra "
             f"{[p for p in listed if p not in params]})")
    alarms = resources(cfn, "AWS::CloudWatch::Alarm")
    metrics = sum(len(metric_of(a)) for a in alarms.values())
    cost = Path(root, "docs/cost.md").read_text(encoding="utf-8")
    m = re.search(r"(\d+) alarms reading (\d+) metrics[^|]*\| (\d+) \| (\d+\.\d\d) ", cost)
    if not m:
        fail("docs", "docs/cost.md has no line 'N alarms reading M metrics | M | USD'")
    elif (int(m[1]), int(m[2]), int(m[3])) != (len(alarms), metrics, metrics) or \
            m[4] != f"{metrics * 0.10:.2f}":
        fail("docs", f"docs/cost.md counts {m[1]} alarms reading {m[2]} metrics (${m[4]}); "
             f"the template has {len(alarms)} reading {metrics} (${metrics * 0.10:.2f})")
    ok("docs", f"README prompt table lists the {len(params)} parameters in order; "
       f"docs/cost.md: {len(alarms)} alarms reading {metrics} metrics")


def check_sqs_sources(cfn):
    """Every SQS event source: scaled by its mapping's MaximumConcurrency (>= 2), never by
    reserved concurrency on its function (Lambda would throttle the poller, and messages
    would come back late and end in the dead-letter queue); a function that sends to the
    queue that invokes it runs with RecursiveLoop: Allow (loop detection stops such a
    chain after about 16 hops)."""
    functions = resources(cfn, "AWS::Lambda::Function")
    checked = []
    for name, mapping in resources(cfn, "AWS::Lambda::EventSourceMapping").items():
        arn = mapping["Properties"].get("EventSourceArn")
        queue = arn.get("Fn::GetAtt", [None, None]) if isinstance(arn, dict) else [None, None]
        queues = resources(cfn, "AWS::SQS::Queue")
        if queue[0] not in queues:
            continue
        fn = mapped_function(mapping)
        props = functions.get(fn, {}).get("Properties", {})
        if "ReservedConcurrentExecutions" in props:
            fail("sqs", f"{fn} is invoked by SQS ({queue[0]}) and has reserved concurrency: "
                 "cap it with the mapping's ScalingConfig.MaximumConcurrency instead")
        scaling = mapping["Properties"].get("ScalingConfig", {}).get("MaximumConcurrency")
        if scaling is None:
            fail("sqs", f"{name} ({queue[0]} -> {fn}) has no ScalingConfig.MaximumConcurrency")
        else:
            # SQS's minimum is 2; a parameter must not allow less.
            param = cfn.get("Parameters", {}).get(scaling.get("Ref")) if isinstance(scaling, dict) else None
            least = (param or {}).get("MinValue") if isinstance(scaling, dict) else scaling
            if not isinstance(least, int) or least < 2:
                fail("sqs", f"{name}: MaximumConcurrency {scaling!r} may be {least!r}; it must "
                     "be at least 2 (a parameter with MinValue 2 or more)")
        role = role_of(cfn, fn)
        sends_back = role is not None and any(
            st["Effect"] == "Allow"
            and any(str(a).startswith("sqs:SendMessage") for a in actions_of(st))
            and any(isinstance(r, dict) and r.get("Fn::GetAtt", [None])[0] == queue[0]
                    for r in resources_of(st))
            for st in statements(role)
        )
        if sends_back and props.get("RecursiveLoop") != "Allow":
            fail("sqs", f"{fn} sends to {queue[0]}, which invokes it: without RecursiveLoop: "
                 "Allow, Lambda's loop detection stops the chain after about 16 hops")
        checked.append(f"{queue[0]} -> {fn}" + (" (sends back: RecursiveLoop Allow)" if sends_back else ""))
    if not checked:
        fail("sqs", "no SQS event source found (the timer queue's)")
    ok("sqs", "MaximumConcurrency, no reserved concurrency: " + "; ".join(checked))
def check_tracing(cfn):
    """Every function traced by X-Ray (TracingConfig Active) with the role to send its
    segments: one job's path through the functions is followed as one trace."""
    functions = resources(cfn, "AWS::Lambda::Function")
    untraced = sorted(name for name, fn in functions.items()
                      if fn["Properties"].get("TracingConfig", {}).get("Mode") != "Active")
    if untraced:
        fail("tracing", f"functions without X-Ray active tracing: {untraced}")
    cannot = []
    for name in functions:
        role = role_of(cfn, name)
        managed = json.dumps((role or {}).get("Properties", {}).get("ManagedPolicyArns", []))
        allowed = role is not None and (
            "AWSXrayWriteOnlyAccess" in managed or "AWSXRayDaemonWriteAccess" in managed
            or any(st["Effect"] == "Allow" and "xray:PutTraceSegments" in actions_of(st)
                   for st in statements(role)))
        if not allowed:
            cannot.append(name)
    if cannot:
        fail("tracing", f"functions whose role may not send X-Ray segments: {sorted(cannot)}")
    ok("tracing", f"{len(functions)} functions traced by X-Ray")


def bin_of(logical_id):
    """The bin infra/lambda/lambda.mk packages for a function: JobsFunction -> jobs,
    DeadLetterFunction -> dead-letter."""
    stem = re.sub(r"Function$", "", logical_id)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1-\2", stem).lower()


def cargo_bins(root):
    """Every [[bin]] name of functions/*/Cargo.toml (the package name without one)."""
    bins = set()
    for manifest in sorted(Path(root, "functions").glob("*/Cargo.toml")):
        section, package, own = "", None, []
        for line in manifest.read_text(encoding="utf-8").splitlines():
            line = line.strip()
            if line.startswith("["):
                section = line
            elif m := re.match(r'^name\s*=\s*"([^"]+)"', line):
                if section == "[[bin]]":
                    own.append(m.group(1))
                elif section == "[package]":
                    package = m.group(1)
        bins.update(own or ([package] if (manifest.parent / "src/main.rs").is_file() else []))
    return bins


def check_build(sam_path, root):
    sam = parse(sam_path)
    arches = sam.get("Parameters", {}).get("Architecture", {}).get("AllowedValues", [])
    for arch in arches:
        if not Path(root, "infra/lambda", arch, "Makefile").is_file():
            fail("build", f"Architecture {arch} is allowed, but infra/lambda/{arch}/Makefile is missing")
    known, used = cargo_bins(root), {}
    for name, res in sam.get("Resources", {}).items():
        if res.get("Type") != "AWS::Serverless::Function":
            continue
        meta = res.get("Metadata") or {}
        binary = (meta.get("BuildProperties") or {}).get("Binary")
        if meta.get("BuildMethod") != "makefile":
            fail("build", f"{name}: BuildMethod {meta.get('BuildMethod')!r}, not makefile "
                 "(one cargo build for every function, infra/lambda/lambda.mk)")
        if meta.get("ContextPath") != {"Fn::Sub": "lambda/${Architecture}"}:
            fail("build", f"{name}: ContextPath {meta.get('ContextPath')!r}, not "
                 "!Sub lambda/${Architecture} (the Makefile of the stack's architecture)")
        if (res.get("Properties") or {}).get("CodeUri") != "lambda":
            fail("build", f"{name}: CodeUri {(res.get('Properties') or {}).get('CodeUri')!r}, "
                 "not lambda (SAM copies CodeUri per function; the Makefile finds the repository)")
        if binary != bin_of(name):
            fail("build", f"{name}: Binary {binary!r}, but infra/lambda/lambda.mk packages "
                 f"{bin_of(name)!r} for it (the LogicalId names the bin)")
        elif binary not in known:
            fail("build", f"{name}: no functions/*/Cargo.toml defines the bin {binary!r}")
        if binary in used:
            fail("build", f"{name}: the bin {binary!r} is already built by {used[binary]}")
        used[binary] = name
    if not used:
        fail("build", "the template declares no function")
    ok("build", f"{len(used)} functions, one `cargo lambda build` of their bins "
       f"(infra/lambda/{{{','.join(arches)}}}/Makefile)")


def run_checks(cfn, sam_path, root, only=None):
    """Every check on `cfn` (the translation of the SAM template at `sam_path`), or only
    the one named `only`; returns the failures, "<check>: <reason>" each.
    scripts/plant-errors.py runs the check each planted error is for, in process: that
    check must reject it, whatever the others say, and the CORS check alone translates
    the template twice more (with other CorsAllowedOrigins), two thirds of a plant's CPU."""
    FAILED.clear()
    checks = {
        "schedule": lambda: check_schedules(cfn),
        "cors": lambda: check_cors(cfn, sam_path),
        "auth": lambda: check_auth(cfn),
        "alarms": lambda: check_alarms(cfn, root),
        "dashboard": lambda: check_dashboard(cfn),
        "iam": lambda: check_iam(cfn),
        "stream": lambda: check_stream(cfn, root),
        "sqs": lambda: check_sqs_sources(cfn),
        "tracing": lambda: check_tracing(cfn),
        "build": lambda: check_build(sam_path, root),
        "routes": lambda: check_routes(cfn),
        "params": lambda: check_params(cfn),
        "docs": lambda: check_docs(cfn, sam_path, root),
    }
    if only is not None and only not in checks:
        raise KeyError(f"no check named {only!r}; checks are {sorted(checks)}")
    for name, check in checks.items():
        if only is None or name == only:
            check()
    return list(FAILED)


def main():
    sam_path, translated, root = sys.argv[1], sys.argv[2], sys.argv[3]
    with open(translated, encoding="utf-8") as f:
        cfn = json.load(f)
    failed = run_checks(cfn, sam_path, root)
    if failed:
        for line in failed:
            print(f"Error: {line}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
