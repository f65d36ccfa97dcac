"""Serves the Python SDK's Lambda push adapter (http_handler), unmodified, on 127.0.0.1."""
import asyncio
import hashlib
import hmac
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

from ojs.serverless import LambdaHandler

SECRET = os.environ["PUSH_SECRET"].encode()
SLOW_S = int(os.environ.get("SLOW_MS", "2500")) / 1000
deliveries = []
lock = threading.Lock()
handler = LambdaHandler()


@handler.register("push.echo")
async def echo(ctx):
    return {"echo": ctx.args}


@handler.register("push.flaky")
async def flaky(ctx):
    if ctx.attempt < 2:
        raise ValueError("flaky handler fails its first attempt")
    return {"attempt": ctx.attempt}


@handler.register("push.slow")
async def slow(ctx):
    if ctx.attempt < 2:
        await asyncio.sleep(SLOW_S)
    return {"attempt": ctx.attempt}


class Shim(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, status, body, headers=None):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        for k, v in (headers or {"Content-Type": "application/json"}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server gave up on this delivery (its timeout): a late answer

    def do_GET(self):
        with lock:
            self.reply(200, json.dumps(deliveries))

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path.startswith("/2015-03-31/functions/"):
            self.invoke(raw)
            return
        ts = self.headers.get("X-OJS-Timestamp", "")
        expected = "sha256=" + hmac.new(SECRET, ts.encode() + b"." + raw, hashlib.sha256).hexdigest()
        sig_ok = hmac.compare_digest(expected, self.headers.get("X-OJS-Signature", ""))
        try:
            body = json.loads(raw)
        except ValueError:
            body = {}
        with lock:
            deliveries.append({
                "delivery_id": self.headers.get("X-OJS-Delivery-ID"),
                "body_delivery_id": body.get("delivery_id"),
                "job_id": self.headers.get("X-OJS-Job-ID"),
                "attempt": body.get("job", {}).get("attempt"),
                "sig_ok": sig_ok,
            })
        if not sig_ok:
            self.reply(401, json.dumps({"error": "signature mismatch"}))
            return
        event = {
            "version": "2.0",
            "rawPath": self.path,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "requestContext": {"http": {"method": "POST", "path": self.path}},
            "body": raw.decode(),
            "isBase64Encoded": False,
        }
        out = handler.http_handler(event, None)
        self.reply(out.get("statusCode", 500), out.get("body", ""), out.get("headers"))


    def invoke(self, raw):
        """Lambda's Invoke API (RequestResponse), in front of direct_handler: the event is
        the payload as sent; IAM, not a signature, authenticates it on AWS."""
        event = json.loads(raw)
        with lock:
            deliveries.append({
                "delivery_id": event.get("delivery_id"),
                "body_delivery_id": event.get("delivery_id"),
                "job_id": event.get("id"),
                "attempt": event.get("attempt"),
                "sig_ok": True,
                "function": unquote(self.path.split("/")[3]),
            })
        out = handler.direct_handler(event, None)
        self.reply(200, json.dumps(out), {"Content-Type": "application/json", "X-Amz-Executed-Version": "$LATEST"})


server = ThreadingHTTPServer(("127.0.0.1", 0), Shim)
print(f"LISTENING {server.server_address[1]}", flush=True)
sys.stdout.flush()
server.serve_forever()
