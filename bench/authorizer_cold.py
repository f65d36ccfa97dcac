"""Cold start and handle time of the authorizer function, as quoted in docs/cost.md.

Runs the release `authorizer` binary 10 times on a minimal fake Lambda Runtime API (this
file), against DynamoDB Local, with a key created by the `keys` binary:

  cargo build --release -p ojs-fn-authorizer && cargo build -p ojs-fn-keys
  .local/sam-venv/bin/python bench/authorizer_cold.py target/debug/keys target/release/authorizer

(DynamoDB Local at OJS_DDB_ENDPOINT, default http://127.0.0.1:8000; boto3 comes with the
SAM CLI venv.) Times include this fake runtime's own HTTP round trips.
"""
import json, os, statistics, subprocess, sys, threading, time, uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import boto3


events, results, t = [], [], {}
gen = [0]
cv = threading.Condition()

class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        mine = gen[0]
        with cv:
            t.setdefault("first_poll", time.perf_counter())
            while not events or gen[0] != mine:
                if gen[0] != mine:
                    return
                cv.wait(1)
            ev = events.pop(0)
        body = json.dumps(ev).encode()
        self.send_response(200)
        rid = str(uuid.uuid4())
        self.send_header("Lambda-Runtime-Aws-Request-Id", rid)
        self.send_header("Lambda-Runtime-Deadline-Ms", str(int(time.time() * 1000) + 30000))
        self.send_header("Lambda-Runtime-Invoked-Function-Arn", "arn:aws:lambda:us-east-1:000000000000:function:authorizer")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        with cv:
            t["sent"] = time.perf_counter()
    def do_POST(self):
        n = int(self.headers.get("Content-Length", 0))
        data = self.rfile.read(n)
        now = time.perf_counter()
        self.send_response(202); self.send_header("Content-Length", "0"); self.end_headers()
        with cv:
            results.append((now - t["sent"], now, data.decode()))
            cv.notify_all()

def run(binary, env, evs):
    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    with cv:
        gen[0] += 1
        events.clear(); results.clear(); t.clear()
        cv.notify_all()
    events.extend(evs)
    e = dict(env, AWS_LAMBDA_RUNTIME_API=f"127.0.0.1:{srv.server_address[1]}",
             AWS_LAMBDA_FUNCTION_NAME="authorizer", AWS_LAMBDA_FUNCTION_MEMORY_SIZE="256",
             AWS_LAMBDA_FUNCTION_VERSION="$LATEST", AWS_LAMBDA_LOG_STREAM_NAME="s", AWS_LAMBDA_LOG_GROUP_NAME="g")
    t0 = time.perf_counter()
    p = subprocess.Popen([binary], env=e, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with cv:
        while len(results) < len(evs):
            cv.wait(30)
    p.kill(); srv.shutdown()
    return t["first_poll"] - t0, results[0][1] - t0, [r[0] for r in results], [r[2] for r in results]
endpoint = os.environ.get("OJS_DDB_ENDPOINT", "http://127.0.0.1:8000")
env = dict(AWS_ENDPOINT_URL_DYNAMODB=endpoint, AWS_REGION="us-east-1", AWS_ACCESS_KEY_ID="local",
           AWS_SECRET_ACCESS_KEY="local", AWS_EC2_METADATA_DISABLED="true", OJS_TABLE="authz-meas",
           RUST_LOG="warn", PATH=os.environ["PATH"])
ddb = boto3.client("dynamodb", endpoint_url=endpoint, region_name="us-east-1",
                   aws_access_key_id="local", aws_secret_access_key="local")
try:
    ddb.delete_table(TableName="authz-meas")
except Exception:
    pass
ddb.create_table(TableName="authz-meas", BillingMode="PAY_PER_REQUEST",
                 AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}, {"AttributeName": "sk", "AttributeType": "S"}],
                 KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}])
keys_bin, auth_bin = sys.argv[1], sys.argv[2]
_, _, _, out = run(keys_bin, env, [{"action": "create", "name": "meas"}])
key = json.loads(out[0])["key"]
ev = lambda a: {"version": "2.0", "type": "REQUEST", "routeKey": "GET /ojs/v1/queues", "headers": {"authorization": a}}
rows = []
for i in range(10):
    init, first, handles, answers = run(auth_bin, env, [ev(f"Bearer {key}"), ev(f"Bearer {key}"), ev("Bearer ojs_bad")])
    assert json.loads(answers[0])["isAuthorized"] is True, answers
    assert json.loads(answers[2])["isAuthorized"] is False, answers
    rows.append((init * 1000, first * 1000, handles[0] * 1000, handles[1] * 1000, handles[2] * 1000))
med = lambda k: statistics.median(r[k] for r in rows)
print(f"authorizer (release, x86_64, DynamoDB Local), median of {len(rows)} cold starts:")
print(f"  init {med(0):.1f} ms; first response (valid key: GetItem + Argon2id) {med(1):.1f} ms after spawn")
print(f"  handle: valid key, first {med(2):.2f} ms; same key again (instance cache) {med(3):.3f} ms; malformed key {med(4):.3f} ms")
