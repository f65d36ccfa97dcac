// Worker-side scenarios, run by the SDK's own OJSWorker (its fetch/ack/nack/heartbeat
// loop and handler registration); results are checked with the client's getJob().
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import {
  sdk, newClient, newWorker, stopAllWorkers, uniqueQueue, rand, sleep, waitFor, waitForState,
  RecordingTransport, HttpTransport, OJS_URL, ts, afterIndexLag,
} from './lib.mjs';

const { OJSConflictError } = sdk;
const client = newClient();

after(stopAllWorkers);

describe('worker: handler result', () => {
  const queue = uniqueQueue('result');
  let done;

  before(async () => {
    const worker = newWorker({ queues: [queue], concurrency: 2 });
    worker.register('email.send', async (ctx) => {
      const { to } = ctx.job.args[0];
      return { messageId: `msg-${to}`, delivered: true };
    });
    await worker.start();
    const job = await client.enqueue('email.send', { to: 'user@example.com' }, { queue });
    done = await waitForState(client, job.id, ['completed', 'retryable', 'discarded']);
    await worker.stop();
  });

  it('the job completes on its first attempt', () => {
    assert.equal(done.state, 'completed');
    assert.equal(done.attempt, 1);
    assert.ok(!Number.isNaN(ts(done.completed_at)), `completed_at: ${done.completed_at}`);
  });

  it("getJob() returns the handler's return value as result", () => {
    assert.deepEqual(done.result, { messageId: 'msg-user@example.com', delivered: true });
  });
});

describe('worker: a job of 1 MiB', () => {
  // Random hex: nothing for the server's deflate to shrink below its item, so the server
  // keeps the args in its payload bucket (PL-001's 1 MiB envelope).
  const queue = uniqueQueue('large');
  const blob = randomBytes(500_000).toString('hex');
  const seen = [];
  let done;
  let info;

  before(async () => {
    const worker = newWorker({ queues: [queue], concurrency: 1 });
    worker.register('large.measure', async (ctx) => {
      const [text] = ctx.job.args;
      seen.push(text.length);
      return { length: text.length, same: text === blob };
    });
    await worker.start();
    const job = await client.enqueue('large.measure', [blob], { queue });
    done = await waitForState(client, job.id, ['completed', 'retryable', 'discarded'], 30_000);
    await worker.stop();
    info = await client.getJob(job.id);
  });

  it("reaches the worker whole, and its result reads back", () => {
    assert.equal(done.state, 'completed');
    assert.deepEqual(seen, [1_000_000]);
    assert.deepEqual(done.result, { length: 1_000_000, same: true });
    assert.ok(info.args[0] === blob, 'getJob() changed the args');
  });
});

describe('worker: fail, retry with backoff, then succeed', () => {
  const queue = uniqueQueue('retry');
  const calls = []; // { attempt, at }
  let done;

  before(async () => {
    const worker = newWorker({ queues: [queue], concurrency: 2 });
    worker.register('flaky.call', async (ctx) => {
      calls.push({ attempt: ctx.attempt, at: Date.now() });
      if (ctx.attempt < 3) throw new Error(`transient failure ${ctx.attempt}`);
      return { succeededOn: ctx.attempt };
    });
    await worker.start();
    const job = await client.enqueue('flaky.call', [], {
      queue,
      retry: { maxAttempts: 3, initialInterval: 'PT1S', backoffCoefficient: 2, jitter: false },
    });
    done = await waitForState(client, job.id, ['completed', 'discarded'], 40_000).catch((e) => e);
    await worker.stop();
  });

  it('the handler sees attempts 1, 2, 3 and the job completes on attempt 3', () => {
    assert.deepEqual(calls.map((c) => c.attempt), [1, 2, 3]);
    assert.equal(done.state, 'completed', String(done));
    assert.equal(done.attempt, 3);
    assert.deepEqual(done.result, { succeededOn: 3 });
  });

  it('retries wait the exponential backoff: ~1 s, then ~2 s', () => {
    assert.equal(calls.length, 3);
    const gap1 = calls[1].at - calls[0].at;
    const gap2 = calls[2].at - calls[1].at;
    assert.ok(gap1 >= 900 && gap1 <= 6_000, `first retry after ${gap1} ms`);
    assert.ok(gap2 >= 1_900 && gap2 <= 7_000, `second retry after ${gap2} ms`);
  });
});

describe('worker: exhaustion and the dead letter queue', () => {
  // listDeadLetter() takes no paging parameters, so it sees the server's first page
  // (50 jobs, ordered by queue name): a leading "0" keeps these jobs on it even when a
  // shared table holds many dead letters.
  const queue = `0jsdk-dead-${rand()}`;
  const calls = new Map(); // job id -> invocations
  let healed = false;
  let a;
  let b;
  let afterA;
  let afterB;

  before(async () => {
    const worker = newWorker({ queues: [queue], concurrency: 2 });
    worker.register('flaky.export', async (ctx) => {
      calls.set(ctx.job.id, (calls.get(ctx.job.id) ?? 0) + 1);
      if (!healed) throw new Error('export backend down');
      return { exported: true };
    });
    await worker.start();
    const retry = { maxAttempts: 2, initialInterval: 'PT1S', jitter: false, onExhaustion: 'dead_letter' };
    a = await client.enqueue('flaky.export', { n: 'a' }, { queue, retry });
    b = await client.enqueue('flaky.export', { n: 'b' }, { queue, retry });
    [afterA, afterB] = await Promise.all([
      waitForState(client, a.id, ['discarded', 'completed'], 30_000),
      waitForState(client, b.id, ['discarded', 'completed'], 30_000),
    ]);
  });

  it('after max_attempts (2) failures the job is discarded, attempt 2, handler called twice', async () => {
    await sleep(300);
    for (const job of [afterA, afterB]) {
      assert.equal(job.state, 'discarded');
      assert.equal(job.attempt, 2);
      assert.equal(calls.get(job.id), 2);
    }
  });

  it("getJob() keeps the worker's error (code handler_error, the message)", () => {
    assert.equal(afterA.error?.code, 'handler_error', `error: ${JSON.stringify(afterA.error)}`);
    assert.match(afterA.error.message, /export backend down/);
  });

  it('listDeadLetter() lists both jobs', async () => {
    await waitFor(async () => {
      const ids = (await client.queues.listDeadLetter()).map((j) => j.id);
      return ids.includes(a.id) && ids.includes(b.id);
    }, { timeout: 30_000, what: 'both jobs in the dead letter list' });
  });

  it('retryDeadLetter() re-enqueues the job: it runs again and completes', async () => {
    healed = true;
    await client.queues.retryDeadLetter(a.id);
    const done = await waitForState(client, a.id, 'completed', 30_000);
    assert.equal(calls.get(a.id), 3);
    assert.deepEqual(done.result, { exported: true });
    const ids = (await client.queues.listDeadLetter()).map((j) => j.id);
    assert.ok(!ids.includes(a.id), 'retried job still in the dead letter list');
  });

  it('discardDeadLetter() removes the job from the list', async () => {
    await client.queues.discardDeadLetter(b.id);
    const ids = (await client.queues.listDeadLetter()).map((j) => j.id);
    assert.ok(!ids.includes(b.id), 'discarded job still in the dead letter list');
    assert.equal(calls.get(b.id), 2, 'a discarded dead letter job must not run again');
  });
});

describe('worker: delayed job', () => {
  it("a job enqueued with delay '3s' is not run early and runs on time (±2 s)", async () => {
    const queue = uniqueQueue('delayed');
    let ranAt;
    const worker = newWorker({ queues: [queue], concurrency: 2 });
    worker.register('reminder.send', async () => { ranAt = Date.now(); });
    await worker.start();
    const job = await client.enqueue('reminder.send', { n: 1 }, { queue, delay: '3s' });
    assert.equal(job.state, 'scheduled');
    const due = ts(job.scheduled_at);
    await waitFor(() => ranAt, { timeout: 30_000, what: 'the delayed job to run' });
    await worker.stop();
    assert.ok(ranAt >= due - 100, `ran ${due - ranAt} ms before scheduled_at`);
    // Never early; "on time" allows the poll interval plus a loaded machine.
    assert.ok(ranAt <= due + 5_000, `ran ${ranAt - due} ms after scheduled_at`);
  });
});

describe('worker: priority', () => {
  it('with concurrency 1, higher-priority jobs run first', async () => {
    const queue = uniqueQueue('priority');
    const order = [];
    for (const priority of [1, 10, 5, 3, 8]) {
      await client.enqueue('prio.job', { priority }, { queue, priority });
    }
    await afterIndexLag(); // all waiting together when the worker starts
    const worker = newWorker({ queues: [queue], concurrency: 1 });
    worker.register('prio.job', async (ctx) => { order.push(ctx.job.args[0].priority); });
    await worker.start();
    await waitFor(() => order.length >= 5, { timeout: 30_000, what: '5 jobs to run' });
    await worker.stop();
    assert.deepEqual(order, [10, 8, 5, 3, 1]);
  });
});

describe('worker: lease expiry and redelivery', () => {
  const queue = uniqueQueue('lease');
  let job;
  let hungAt;
  let redelivered; // { attempt, at }
  let done;

  before(async () => {
    // Worker A takes the job with a 1 s visibility timeout and hangs (no heartbeat
    // within the test, concurrency 1 so it fetches nothing else): a crashed worker.
    const hung = newWorker({
      queues: [queue], concurrency: 1, visibilityTimeout: 1_000, heartbeatInterval: 60_000, shutdownTimeout: 200,
    });
    hung.register('lease.job', () => {
      hungAt = Date.now();
      return new Promise(() => {}); // never settles, so worker A never acks or nacks
    });
    await hung.start();
    job = await client.enqueue('lease.job', { n: 1 }, { queue });
    await waitFor(() => hungAt, { timeout: 30_000, what: 'worker A to take the job' });

    const healthy = newWorker({ queues: [queue], concurrency: 1 });
    healthy.register('lease.job', async (ctx) => {
      redelivered = { attempt: ctx.attempt, at: Date.now() };
      return { by: 'B' };
    });
    await healthy.start();
    done = await waitForState(client, job.id, ['completed', 'discarded'], 30_000).catch((e) => e);
    await Promise.all([healthy.stop(), hung.stop()]);
  });

  it('the job is delivered again after the lease expires, as attempt 2', () => {
    assert.ok(redelivered, 'the job was never redelivered');
    assert.ok(redelivered.at - hungAt >= 900, `redelivered ${redelivered.at - hungAt} ms after the first fetch`);
    assert.equal(redelivered.attempt, 2);
  });

  it('the second delivery completes the job', () => {
    assert.equal(done.state, 'completed', String(done));
    assert.deepEqual(done.result, { by: 'B' });
  });

  it("a late ACK for the first delivery (SDK HttpTransport) is refused with 409; the result stays", async () => {
    const transport = new HttpTransport({ url: OJS_URL });
    await assert.rejects(
      transport.request({ method: 'POST', path: '/workers/ack', body: { job_id: job.id, result: { by: 'A' } } }),
      (err) => {
        assert.ok(err instanceof OJSConflictError, `got ${err?.name}: ${err?.message}`);
        return true;
      },
    );
    assert.deepEqual((await client.getJob(job.id)).result, { by: 'B' });
  });
});

describe('worker: heartbeat keeps the lease of a long job', () => {
  const queue = uniqueQueue('beat');
  const transport = new RecordingTransport();
  let invocations = 0;
  let done;

  before(async () => {
    // Visibility 10 s, heartbeat every 0.4 s, handler 12 s: without working heartbeats
    // the lease expires and the second worker below gets the job. Only a stall of 10 s
    // between two heartbeats that land lets it lapse (1.5 s was too little for a CI
    // machine running every SDK suite at once, where one request took 6 s).
    const slow = newWorker({
      queues: [queue], concurrency: 1, visibilityTimeout: 10_000, heartbeatInterval: 400, transport,
    });
    slow.register('long.job', async () => {
      invocations++;
      await sleep(12_000);
      return { done: true };
    });
    await slow.start();
    const job = await client.enqueue('long.job', [], { queue });
    await waitFor(() => invocations > 0, { timeout: 30_000, what: 'the slow worker to take the job' });
    const other = newWorker({ queues: [queue], concurrency: 1 });
    other.register('long.job', async () => { invocations++; return { done: 'twice' }; });
    await other.start();
    done = await waitForState(client, job.id, ['completed', 'discarded'], 40_000).catch((e) => e);
    await Promise.all([slow.stop(), other.stop()]);
  });

  it("the SDK's heartbeats are accepted and answered with state running", () => {
    // Only answered exchanges: stop() can leave the last heartbeat in flight.
    const beats = transport.on('/workers/heartbeat').filter((e) => e.status !== undefined || e.error);
    assert.ok(beats.length >= 3, `only ${beats.length} heartbeats answered`);
    assert.deepEqual(transport.failures('/workers/heartbeat'), []);
    for (const beat of beats) assert.equal(beat.response?.state, 'running', `response: ${JSON.stringify(beat.response)}`);
  });

  it('the job is not redelivered while heartbeats continue, and completes once', () => {
    assert.equal(invocations, 1);
    assert.equal(done.state, 'completed', String(done));
    assert.equal(done.attempt, 1);
    assert.deepEqual(done.result, { done: true });
  });
});

describe('worker: handlers that honour ctx.signal (README example)', () => {
  // README "Process Jobs"/examples/worker-processing.ts: a long handler checks
  // ctx.signal.aborted. The worker arms that signal from the fetched job's `timeout`
  // field, read as milliseconds (worker.ts processJob).
  const queue = uniqueQueue('signal');
  const seen = new Map(); // job id -> { aborted, timeout }
  let worker;

  before(async () => {
    worker = newWorker({ queues: [queue], concurrency: 2 });
    worker.register('report.generate', async (ctx) => {
      await sleep(300);
      seen.set(ctx.job.id, { aborted: ctx.signal.aborted, timeout: ctx.job.timeout, timeout_ms: ctx.job.timeout_ms });
      if (ctx.signal.aborted) throw new Error('Job was cancelled');
      return { ok: true };
    });
    await worker.start();
  });

  after(() => worker.stop());

  for (const [label, options] of [
    ['no timeout option', {}],
    ['timeout: 5000 (ms)', { timeout: 5_000 }],
  ]) {
    it(`a 300 ms job with ${label} is not aborted and completes on attempt 1`, async () => {
      const job = await client.enqueue('report.generate', { id: 1 }, { queue, ...options });
      const done = await waitForState(client, job.id, ['completed', 'retryable', 'discarded'], 30_000);
      assert.equal(done.state, 'completed', `seen by handler: ${JSON.stringify(seen.get(job.id))}`);
      assert.equal(done.attempt, 1);
    });
  }
});

describe('worker: 120 jobs, two workers at concurrency 5', () => {
  it('every job completes, each handler invoked exactly once per job', async () => {
    const queue = uniqueQueue('many');
    const counts = new Map();
    const handler = async (ctx) => {
      counts.set(ctx.job.id, (counts.get(ctx.job.id) ?? 0) + 1);
      await sleep(Math.floor(Math.random() * 20));
      return { i: ctx.job.args[0] };
    };
    const workers = [0, 1].map(() => newWorker({ queues: [queue], concurrency: 5 }).register('bulk.job', handler));
    const specs = Array.from({ length: 120 }, (_, i) => ({ type: 'bulk.job', args: [i], options: { queue } }));
    const jobs = [];
    for (let i = 0; i < specs.length; i += 40) jobs.push(...(await client.enqueueBatch(specs.slice(i, i + 40))));
    assert.equal(jobs.length, 120);
    await Promise.all(workers.map((w) => w.start()));
    await waitFor(() => counts.size >= 120, { timeout: 60_000, what: `120 jobs to run (${counts.size} so far)` });
    await sleep(1_000); // any redelivery would show up as a second invocation
    await Promise.all(workers.map((w) => w.stop()));

    const twice = [...counts].filter(([, n]) => n > 1);
    assert.deepEqual(twice, [], 'jobs run more than once');
    assert.deepEqual(jobs.filter((j) => !counts.has(j.id)).map((j) => j.id), [], 'jobs never run');
    const infos = await Promise.all(jobs.map((j) => client.getJob(j.id)));
    const notDone = infos.filter((j) => j.state !== 'completed' || j.attempt !== 1);
    assert.deepEqual(notDone.map((j) => `${j.id}:${j.state}:${j.attempt}`), []);
    assert.ok(infos.every((j, i) => j.result?.i === i), 'results do not match the jobs');
  });
});
