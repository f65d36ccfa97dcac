// Serves the JS SDK's Lambda push adapter (httpHandler), unmodified, on 127.0.0.1.
// Usage: node js_shim.mjs <path to the built SDK's dist/esm/serverless/lambda.js>
import { createHmac, timingSafeEqual } from 'node:crypto';
import { createServer } from 'node:http';

const { createLambdaHandler } = await import(process.argv[2]);
const secret = process.env.PUSH_SECRET;
const slowMs = Number(process.env.SLOW_MS ?? 2500);
const deliveries = [];
// The adapter calls back `${url}/ojs/v1/jobs/<id>/ack` itself; pointed at the server.
const handler = createLambdaHandler({ url: process.env.OJS_URL });
handler.register('push.echo', async () => {});
handler.register('push.flaky', async ({ job }) => {
  if ((job.attempt ?? 1) < 2) throw new Error('flaky handler fails its first attempt');
});
handler.register('push.slow', async ({ job }) => {
  if ((job.attempt ?? 1) < 2) await new Promise((r) => setTimeout(r, slowMs));
});

const server = createServer(async (req, res) => {
  if (req.method === 'GET') {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify(deliveries));
    return;
  }
  const chunks = [];
  for await (const c of req) chunks.push(c);
  const raw = Buffer.concat(chunks);
  const ts = req.headers['x-ojs-timestamp'] ?? '';
  const expected = Buffer.from(
    'sha256=' + createHmac('sha256', secret).update(`${ts}.`).update(raw).digest('hex'),
  );
  const got = Buffer.from(String(req.headers['x-ojs-signature'] ?? ''));
  const sigOk = got.length === expected.length && timingSafeEqual(got, expected);
  let body = {};
  try { body = JSON.parse(raw.toString()); } catch { /* recorded as is */ }
  deliveries.push({
    delivery_id: req.headers['x-ojs-delivery-id'],
    body_delivery_id: body.delivery_id,
    job_id: req.headers['x-ojs-job-id'],
    attempt: body.job?.attempt,
    sig_ok: sigOk,
  });
  if (!sigOk) {
    res.writeHead(401, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ error: 'signature mismatch' }));
    return;
  }
  const event = {
    version: '2.0',
    rawPath: req.url,
    headers: req.headers,
    requestContext: { http: { method: 'POST', path: req.url } },
    body: raw.toString(),
    isBase64Encoded: false,
  };
  try {
    const out = await handler.httpHandler(event);
    res.writeHead(out.statusCode ?? 500, out.headers ?? {});
    res.end(out.body ?? '');
  } catch (err) {
    res.writeHead(500, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ error: String(err) }));
  }
});
server.listen(0, '127.0.0.1', () => {
  console.log(`LISTENING ${server.address().port}`);
});
