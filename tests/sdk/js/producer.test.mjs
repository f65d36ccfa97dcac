// Producer-side scenarios, each written the way the SDK's README shows a user doing it:
// health + manifest, push with options, unique jobs, scheduled push, batch push, INFO,
// cancel, cron, queues (list/stats/pause/resume).
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import {
  sdk, newClient, newWorker, stopAllWorkers, uniqueQueue, rand, sleep, waitFor, ts, RecordingTransport,
} from './lib.mjs';

const {
  OJSDuplicateError, OJSNotFoundError, OJSConflictError, OJSValidationError, parseDurationToMs,
} = sdk;
const client = newClient();

after(stopAllWorkers);

describe('health and manifest', () => {
  it('health() reports status ok and a version', async () => {
    const health = await client.health();
    assert.equal(health.status, 'ok');
    assert.equal(typeof health.version, 'string');
  });

  it('manifest() returns the conformance manifest (ojs-conformance.md §4.2 fields)', async () => {
    const m = await client.manifest();
    assert.equal(m.specversion, '1.0');
    assert.equal(typeof m.implementation?.name, 'string');
    assert.equal(typeof m.conformance_level, 'number');
    assert.ok(Array.isArray(m.protocols) && m.protocols.includes('http'), `protocols: ${JSON.stringify(m.protocols)}`);
  });
});

describe('push with options', () => {
  const queue = uniqueQueue('push');
  const expiresAt = new Date(Date.now() + 3_600_000).toISOString();
  let job;
  let info;

  before(async () => {
    // README "Enqueue with options", with every EnqueueOptions field the SDK documents.
    job = await client.enqueue('report.generate', { id: 42, format: 'pdf' }, {
      queue,
      priority: 7,
      tags: ['reports', 'sdk-js'],
      meta: { source: 'sdk-js', trace_id: 'trace-1' },
      retry: {
        maxAttempts: 5,
        initialInterval: 'PT2S',
        backoffCoefficient: 3,
        maxInterval: 'PT1M',
        jitter: false,
        nonRetryableErrors: ['validation.*'],
        onExhaustion: 'dead_letter',
      },
      expiresAt,
      visibilityTimeout: 45_000,
    });
    info = await client.getJob(job.id);
  });

  it('enqueue() returns the created job', () => {
    assert.ok(sdk.validateUUIDv7(job.id) === null, `id ${job.id} is not a UUIDv7`);
    assert.equal(job.type, 'report.generate');
    assert.equal(job.queue, queue);
    assert.equal(job.state, 'available');
    assert.deepEqual(job.args, [{ id: 42, format: 'pdf' }]);
  });

  it('getJob() returns queue, priority, tags, meta and args as sent', () => {
    assert.equal(info.id, job.id);
    assert.equal(info.queue, queue);
    assert.equal(info.priority, 7);
    assert.deepEqual(info.tags, ['reports', 'sdk-js']);
    assert.equal(info.meta?.source, 'sdk-js');
    assert.equal(info.meta?.trace_id, 'trace-1');
    assert.deepEqual(info.args, [{ id: 42, format: 'pdf' }]);
    assert.equal(ts(info.expires_at), ts(expiresAt));
  });

  it('getJob() returns the retry policy as sent', () => {
    assert.equal(info.max_attempts, 5);
    const r = info.retry;
    assert.ok(r, 'job has no retry policy');
    assert.equal(r.max_attempts, 5);
    assert.equal(parseDurationToMs(r.initial_interval), 2_000);
    assert.equal(r.backoff_coefficient, 3);
    assert.equal(parseDurationToMs(r.max_interval), 60_000);
    assert.equal(r.jitter, false);
    assert.deepEqual(r.non_retryable_errors, ['validation.*']);
    assert.equal(r.on_exhaustion, 'dead_letter');
  });
});

describe('scheduled push (delay)', () => {
  it("enqueue({delay: '30s'}) creates a scheduled job due in 30 s", async () => {
    const before = Date.now();
    const job = await client.enqueue('report.later', { n: 1 }, { queue: uniqueQueue('delay'), delay: '30s' });
    assert.equal(job.state, 'scheduled');
    const due = ts(job.scheduled_at);
    assert.ok(Math.abs(due - (before + 30_000)) < 2_000, `scheduled_at ${job.scheduled_at}`);
    await client.cancelJob(job.id);
  });

  // The README documents delay as "'5m', '30s', '1h', or ISO 8601"; job.ts parseDuration
  // passes a string it does not recognise (such as an ISO 8601 duration) through as
  // delay_until unchanged.
  it("enqueue({delay: 'PT30S'}) (ISO 8601 duration) creates a job due in 30 s", async () => {
    const before = Date.now();
    const job = await client.enqueue('report.later', { n: 2 }, { queue: uniqueQueue('delay'), delay: 'PT30S' });
    assert.equal(job.state, 'scheduled');
    const due = ts(job.scheduled_at);
    assert.ok(Math.abs(due - (before + 30_000)) < 2_000, `scheduled_at ${job.scheduled_at}`);
    await client.cancelJob(job.id);
  });
});

describe('unique jobs', () => {
  const queue = uniqueQueue('unique');
  // README: unique: { key: ['id'], period: 'PT1H' }; the SDK documents `key` as
  // "fields from args to use as uniqueness key".
  const unique = { key: ['id'], period: 'PT1H', onConflict: 'reject' };
  const id = Date.now();

  it('a duplicate is rejected with OJSDuplicateError naming the existing job', async () => {
    const first = await client.enqueue('report.unique', { id, format: 'pdf' }, { queue, unique });
    await assert.rejects(
      client.enqueue('report.unique', { id, format: 'pdf' }, { queue, unique }),
      (err) => {
        assert.ok(err instanceof OJSDuplicateError, `got ${err?.name}: ${err?.message}`);
        assert.equal(err.existingJobId, first.id);
        return true;
      },
    );
  });

  it('an invalid unique policy is rejected as OJSValidationError (400 invalid_request)', async () => {
    // ojs-unique-jobs.md §2.2: invalid policies are rejected with invalid_request; the SDK
    // maps only status 400 to OJSValidationError (errors.ts parseErrorResponse).
    await assert.rejects(
      client.enqueue('report.unique', { id }, { queue, unique: { onConflict: 'bogus' } }),
      (err) => {
        assert.ok(err instanceof OJSValidationError, `got ${err?.name} (code ${err?.code}): ${err?.message}`);
        return true;
      },
    );
  });

  it('jobs with other values of the unique key are accepted', async () => {
    const a = await client.enqueue('report.unique', { id: id + 1, format: 'pdf' }, { queue, unique });
    const b = await client.enqueue('report.unique', { id: id + 2, format: 'pdf' }, { queue, unique });
    assert.notEqual(a.id, b.id);
  });
});

describe('batch push', () => {
  const q1 = uniqueQueue('batch1');
  const q2 = uniqueQueue('batch2');
  let jobs;

  before(async () => {
    jobs = await client.enqueueBatch([
      { type: 'batch.a', args: { n: 1 }, options: { queue: q1 } },
      { type: 'batch.b', args: ['x', 2], options: { queue: q2, priority: 3, tags: ['t'] } },
      { type: 'batch.c', options: { queue: q1, delay: '1h' } },
    ]);
  });

  it('enqueueBatch() returns the created jobs in order', () => {
    assert.ok(Array.isArray(jobs), `got ${JSON.stringify(jobs)}`);
    assert.deepEqual(jobs.map((j) => j.type), ['batch.a', 'batch.b', 'batch.c']);
    assert.equal(new Set(jobs.map((j) => j.id)).size, 3);
  });

  it('each batch job is stored with its own args and options', async () => {
    const [a, b, c] = await Promise.all(jobs.map((j) => client.getJob(j.id)));
    assert.equal(a.queue, q1);
    assert.deepEqual(a.args, [{ n: 1 }]);
    assert.equal(a.state, 'available');
    assert.equal(b.queue, q2);
    assert.deepEqual(b.args, ['x', 2]);
    assert.equal(b.priority, 3);
    assert.deepEqual(b.tags, ['t']);
    assert.equal(c.queue, q1);
    assert.deepEqual(c.args, []);
    assert.equal(c.state, 'scheduled');
  });
});

describe('INFO', () => {
  it('getJob() of an unknown id throws OJSNotFoundError', async () => {
    const unknown = `01900000-0000-7000-8000-${rand()}${rand().slice(0, 4)}`;
    await assert.rejects(client.getJob(unknown), (err) => {
      assert.ok(err instanceof OJSNotFoundError, `got ${err?.name}: ${err?.message}`);
      return true;
    });
  });
});

describe('cancel', () => {
  let job;
  let cancelled;

  before(async () => {
    job = await client.enqueue('report.cancel', { n: 1 }, { queue: uniqueQueue('cancel') });
    cancelled = await client.cancelJob(job.id);
  });

  it('cancelJob() returns the job in state cancelled', () => {
    assert.equal(cancelled?.id, job.id);
    assert.equal(cancelled?.state, 'cancelled');
  });

  it('getJob() then shows it cancelled', async () => {
    assert.equal((await client.getJob(job.id)).state, 'cancelled');
  });

  it('cancelling it again throws OJSConflictError (409)', async () => {
    await assert.rejects(client.cancelJob(job.id), (err) => {
      assert.ok(err instanceof OJSConflictError, `got ${err?.name}: ${err?.message}`);
      return true;
    });
  });
});

describe('cron', () => {
  // list() pages with page/per_page, which the binding does not define (§17: limit,
  // cursor, offset), so it sees the first 50 by name: "0" keeps this one among them.
  const name = `0jsdk-cron-${rand()}`;
  const queue = uniqueQueue('cron');
  // The client goes through a RecordingTransport so that failures can show the raw body.
  const transport = new RecordingTransport();
  const cronClient = newClient({ transport });
  const lastBody = () => JSON.stringify(transport.log.at(-1)?.response ?? transport.log.at(-1)?.error);
  let registered;

  before(async () => {
    // README "Cron Operations"
    registered = await cronClient.cron.register({
      name,
      cron: '0 9 * * *',
      timezone: 'America/New_York',
      type: 'report.generate',
      args: { format: 'pdf' },
      options: { queue },
    });
  });

  it('register() returns the cron job', () => {
    assert.ok(registered, `register() returned ${registered}; body: ${JSON.stringify(transport.on('/cron')[0]?.response)}`);
    assert.equal(registered.name, name);
    assert.equal(registered.cron, '0 9 * * *');
    assert.equal(registered.timezone, 'America/New_York');
    assert.equal(registered.type, 'report.generate');
    assert.deepEqual(registered.args, [{ format: 'pdf' }]);
    assert.equal(registered.options?.queue, queue);
    assert.equal(registered.status, 'active');
  });

  it('list() includes it, with pagination', async () => {
    const { cron_jobs, pagination } = await cronClient.cron.list({ page: 1, per_page: 100 });
    assert.ok(Array.isArray(cron_jobs), `no cron_jobs in ${lastBody().slice(0, 400)}`);
    assert.ok(cron_jobs.some((c) => c.name === name), `${name} not in ${JSON.stringify(cron_jobs.map((c) => c.name))}`);
    assert.equal(typeof pagination, 'object');
  });

  it('unregister() removes it from list()', async () => {
    await cronClient.cron.unregister(name);
    const { cron_jobs } = await cronClient.cron.list({ page: 1, per_page: 100 });
    assert.ok(Array.isArray(cron_jobs), `no cron_jobs in ${lastBody().slice(0, 400)}`);
    assert.ok(!cron_jobs.some((c) => c.name === name));
  });
});

describe('queues: list, stats, pause, resume', () => {
  // QueueOperations.list() sends no paging parameters, so it gets the server's first page
  // (ojs-http-binding §17: limit defaults to 50), in queue name order here. A leading "0"
  // keeps this queue on that page even on a table shared with other suites.
  const queue = `0jsdk-pause-${rand()}`;
  const seen = [];
  let worker;

  before(async () => {
    await client.enqueue('queue.job', { n: 1 }, { queue });
    await client.enqueue('queue.job', { n: 2 }, { queue });
  });

  it('list() includes the queue', async () => {
    const queues = await client.queues.list();
    assert.ok(queues.some((q) => q.name === queue), `${queue} not listed`);
  });

  it('stats() reports the queue in the SDK QueueStats shape (name, available, paused)', async () => {
    const stats = await client.queues.stats(queue);
    assert.equal(stats.name, queue, `stats body: ${JSON.stringify(stats)}`);
    assert.equal(stats.available, 2, `stats body: ${JSON.stringify(stats)}`);
    assert.equal(stats.paused, false, `stats body: ${JSON.stringify(stats)}`);
  });

  it('pause() shows in list() as paused: true', async () => {
    await client.queues.pause(queue);
    const entry = (await client.queues.list()).find((q) => q.name === queue);
    assert.equal(entry?.paused, true, `list entry: ${JSON.stringify(entry)}`);
  });

  it('stats() of the paused queue reports paused: true', async () => {
    const stats = await client.queues.stats(queue);
    assert.equal(stats.paused, true, `stats body: ${JSON.stringify(stats)}`);
  });

  it('a worker gets nothing from the paused queue', async () => {
    worker = newWorker({ queues: [queue], concurrency: 2 });
    worker.register('queue.job', async (ctx) => { seen.push(ctx.job.args[0].n); });
    await worker.start();
    await sleep(1_500);
    assert.deepEqual(seen, []);
  });

  it('after resume() the worker runs both jobs', async () => {
    await client.queues.resume(queue);
    await waitFor(() => seen.length >= 2, { timeout: 30_000, what: 'both jobs to run after resume' });
    await worker.stop();
    assert.deepEqual([...seen].sort(), [1, 2]);
    const entry = (await client.queues.list()).find((q) => q.name === queue);
    assert.equal(entry?.paused, false, `list entry: ${JSON.stringify(entry)}`);
  });
});
