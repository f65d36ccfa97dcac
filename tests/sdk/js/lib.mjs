// Shared helpers for the JS SDK interop suite.
//
// The SDK is imported from the build that setup.sh makes under .local/sdk/js (this file
// lives at tests/sdk/js/, so the repo root is three levels up).
import { randomBytes } from 'node:crypto';
import * as sdk from '../../../.local/sdk/js/ojs-js-sdk/dist/esm/index.js';

export { sdk };
export const { OJSClient, OJSWorker, HttpTransport } = sdk;

if (!process.env.OJS_URL) {
  throw new Error('OJS_URL is not set (e.g. OJS_URL=http://127.0.0.1:18082)');
}
export const OJS_URL = process.env.OJS_URL;

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Waits until jobs pushed a moment ago show in the ready index (the strict layer's
 * lag, as on AWS; the harness passes OJS_INDEX_LAG_MS). */
export const afterIndexLag = () => sleep(Number(process.env.OJS_INDEX_LAG_MS || 0));

/** A queue name unique to this run; the SDK only accepts [a-z0-9] with single - or . */
export function uniqueQueue(scenario) {
  return `jsdk-${scenario}-${randomBytes(4).toString('hex')}`;
}

/** Fresh random suffix (for cron names and job args). */
export function rand() {
  return randomBytes(4).toString('hex');
}

export function newClient(extra = {}) {
  return new OJSClient({ url: OJS_URL, timeout: 30_000, ...extra });
}

/**
 * Polls `fn` until it returns a truthy value and returns that value. Throws after
 * `timeout` ms, with the last value (or error) seen, so a failure says what was there.
 */
export async function waitFor(fn, { timeout = 10_000, interval = 150, what = 'condition' } = {}) {
  const deadline = Date.now() + timeout;
  let last;
  let lastErr;
  for (;;) {
    try {
      last = await fn();
      lastErr = undefined;
      if (last) return last;
    } catch (err) {
      lastErr = err;
    }
    if (Date.now() >= deadline) {
      const seen = lastErr ? `last error: ${lastErr}` : `last value: ${JSON.stringify(last)}`;
      throw new Error(`timed out after ${timeout} ms waiting for ${what} (${seen})`);
    }
    await sleep(interval);
  }
}

/** Waits until getJob(id).state is one of `states`; returns the job. */
export function waitForState(client, id, states, timeout = 10_000) {
  const wanted = Array.isArray(states) ? states : [states];
  return waitFor(
    async () => {
      const job = await client.getJob(id);
      return wanted.includes(job?.state) ? job : false;
    },
    { timeout, what: `job ${id} in state ${wanted.join('|')}` },
  );
}

/**
 * A Transport that forwards to the SDK's own HttpTransport and records every exchange
 * (method, path, status or error). It is the SDK's documented extension point
 * (OJSWorkerConfig.transport); the suite uses it to see what the worker loop's own
 * fetch/ack/nack/heartbeat requests got back from the server.
 */
export class RecordingTransport {
  constructor(url = OJS_URL) {
    this.inner = new HttpTransport({ url, timeout: 30_000 });
    this.log = [];
  }

  async request(options) {
    const entry = { method: options.method, path: options.path, body: options.body };
    this.log.push(entry);
    try {
      const res = await this.inner.request(options);
      entry.status = res.status;
      entry.response = res.body;
      return res;
    } catch (err) {
      entry.error = `${err?.name}: ${err?.message}`;
      entry.status = err?.statusCode ?? err?.code;
      throw err;
    }
  }

  /** Exchanges on `path` (e.g. '/workers/heartbeat'). */
  on(path) {
    return this.log.filter((e) => e.path === path);
  }

  /** Exchanges that failed (threw), as short strings for assertion messages. */
  failures(path) {
    return this.log
      .filter((e) => e.error && (!path || e.path === path))
      .map((e) => `${e.method} ${e.path} -> ${e.error}`);
  }
}

// Workers started by a test file; stopAllWorkers() (in an after hook) stops the ones a
// failed check left running, so the process can exit.
const started = new Set();

/**
 * An OJSWorker tuned for tests: fast polling, a short shutdown grace, and no process
 * signal handlers (node's test runner owns those).
 */
export function newWorker(config) {
  const worker = new OJSWorker({
    url: OJS_URL,
    pollInterval: 100,
    heartbeatInterval: 1_000,
    shutdownTimeout: 2_000,
    handleSignals: false,
    ...config,
  });
  started.add(worker);
  const stop = worker.stop.bind(worker);
  worker.stop = async () => {
    started.delete(worker);
    await stop();
  };
  return worker;
}

export async function stopAllWorkers() {
  await Promise.all([...started].map((w) => w.stop().catch(() => {})));
}

/** Milliseconds since the epoch for an RFC 3339 timestamp (NaN when absent). */
export const ts = (s) => (s ? Date.parse(s) : NaN);
