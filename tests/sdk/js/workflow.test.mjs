// Workflow scenarios built with the SDK's workflow module (chain, group, batch) and run
// by the SDK's OJSWorker; status is read back with client.getWorkflow().
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import {
  sdk, newClient, newWorker, stopAllWorkers, uniqueQueue, sleep, waitFor, waitForState,
} from './lib.mjs';

const { chain, group, batch } = sdk;
const client = newClient();

after(stopAllWorkers);

/** Polls getWorkflow(id) until its state is one of `states`. */
async function waitForWorkflow(id, states, timeout = 15_000) {
  if (typeof id !== 'string') throw new Error(`no workflow id to poll (got ${id})`);
  return waitFor(
    async () => {
      const wf = await client.getWorkflow(id);
      return states.includes(wf?.state) ? wf : false;
    },
    { timeout, what: `workflow ${id} in state ${states.join('|')}` },
  );
}

describe('workflow: chain', () => {
  const queue = uniqueQueue('chain');
  const runs = []; // { n, start, end } per handler invocation
  let created;

  before(async () => {
    // Concurrency 4: if the server enqueued all steps at once they would overlap.
    const worker = newWorker({ queues: [queue], concurrency: 4 });
    worker.register('etl.step', async (ctx) => {
      const run = { n: ctx.job.args[0].n, start: Date.now() };
      runs.push(run);
      await sleep(200);
      run.end = Date.now();
      return { n: run.n };
    });
    await worker.start();
    created = await client.workflow(
      chain(
        { type: 'etl.step', args: { n: 1 }, options: { queue } },
        { type: 'etl.step', args: { n: 2 }, options: { queue } },
        { type: 'etl.step', args: { n: 3 }, options: { queue } },
      ),
    );
  });

  it('workflow(chain(...)) returns its id, type and state', () => {
    assert.equal(typeof created?.id, 'string', `response: ${JSON.stringify(created)}`);
    assert.equal(created.type, 'chain');
    assert.ok(['pending', 'running'].includes(created.state), `state ${created.state}`);
  });

  it('steps run one at a time, in order', async () => {
    await waitFor(() => runs.length >= 3 && runs.every((r) => r.end), { timeout: 30_000, what: '3 steps to run' });
    await sleep(300); // a 4th invocation would be a redelivery
    assert.deepEqual(runs.map((r) => r.n), [1, 2, 3]);
    assert.ok(runs[1].start >= runs[0].end && runs[2].start >= runs[1].end, `overlap: ${JSON.stringify(runs)}`);
  });

  it('getWorkflow() reports completed with 3 of 3 jobs done', async () => {
    const wf = await waitForWorkflow(created?.id, ['completed', 'failed', 'cancelled']);
    assert.equal(wf.state, 'completed');
    assert.equal(wf.metadata?.job_count, 3, `metadata: ${JSON.stringify(wf.metadata)}`);
    assert.equal(wf.metadata.completed_count, 3);
    assert.equal(wf.metadata.failed_count, 0);
  });
});

describe('workflow: chain with a failing step', () => {
  const queue = uniqueQueue('chainfail');
  const ran = [];
  let brokenJobId;
  let created;

  before(async () => {
    const worker = newWorker({ queues: [queue], concurrency: 2 });
    worker.register('chain.ok', async (ctx) => { ran.push(ctx.job.args[0]); });
    worker.register('chain.broken', async (ctx) => {
      ran.push(ctx.job.args[0]);
      brokenJobId = ctx.job.id;
      throw new Error('always fails');
    });
    await worker.start();
    // The failing step has the server's default retry policy (the SDK forwards a step's
    // retry option unconverted, see the batch scenario), so this takes a few seconds.
    created = await client.workflow(
      chain(
        { type: 'chain.ok', args: 'first', options: { queue } },
        { type: 'chain.broken', args: 'second', options: { queue } },
        { type: 'chain.ok', args: 'third', options: { queue } },
      ),
    );
  });

  it('the step after the failed step never runs', async () => {
    await waitFor(() => brokenJobId, { timeout: 30_000, what: 'the failing step to run' });
    await waitForState(client, brokenJobId, 'discarded', 30_000);
    await sleep(1_000);
    assert.equal(ran[0], 'first');
    assert.ok(!ran.includes('third'), `ran: ${JSON.stringify(ran)}`);
  });

  it('getWorkflow() reports failed, 1 failed job', async () => {
    const wf = await waitForWorkflow(created?.id, ['completed', 'failed', 'cancelled'], 30_000);
    assert.equal(wf.state, 'failed');
    assert.equal(wf.metadata?.failed_count, 1, `metadata: ${JSON.stringify(wf.metadata)}`);
  });
});

describe('workflow: group', () => {
  const queue = uniqueQueue('group');
  const ran = [];
  let created;

  before(async () => {
    const worker = newWorker({ queues: [queue], concurrency: 4 });
    worker.register('export.file', async (ctx) => {
      ran.push(ctx.job.args[0].format);
      await sleep(300);
      return { ok: true };
    });
    await worker.start();
    created = await client.workflow(
      group(
        { type: 'export.file', args: { format: 'csv' }, options: { queue } },
        { type: 'export.file', args: { format: 'pdf' }, options: { queue } },
        { type: 'export.file', args: { format: 'xlsx' }, options: { queue } },
      ),
    );
  });

  it('workflow(group(...)) returns its id and type', () => {
    assert.equal(typeof created?.id, 'string', `response: ${JSON.stringify(created)}`);
    assert.equal(created.type, 'group');
  });

  it('all three jobs run', async () => {
    await waitFor(() => ran.length >= 3, { timeout: 30_000, what: 'the 3 group jobs to run' });
    await sleep(300);
    assert.deepEqual([...ran].sort(), ['csv', 'pdf', 'xlsx']);
  });

  it('getWorkflow() reports completed, 3 of 3', async () => {
    const wf = await waitForWorkflow(created?.id, ['completed', 'failed', 'cancelled']);
    assert.equal(wf.state, 'completed');
    assert.equal(wf.metadata?.job_count, 3, `metadata: ${JSON.stringify(wf.metadata)}`);
    assert.equal(wf.metadata.completed_count, 3);
  });
});

describe('workflow: batch, all jobs succeed', () => {
  const queue = uniqueQueue('batchok');
  const ran = [];
  let created;

  before(async () => {
    const worker = newWorker({ queues: [queue], concurrency: 4 });
    for (const type of ['email.send', 'batch.report', 'batch.celebrate', 'batch.alert']) {
      worker.register(type, async (ctx) => { ran.push(type === 'email.send' ? ctx.job.args[0] : type); });
    }
    await worker.start();
    created = await client.workflow(
      batch(
        [
          { type: 'email.send', args: ['user1@example.com'], options: { queue } },
          { type: 'email.send', args: ['user2@example.com'], options: { queue } },
        ],
        {
          on_complete: { type: 'batch.report', options: { queue } },
          on_success: { type: 'batch.celebrate', options: { queue } },
          on_failure: { type: 'batch.alert', options: { queue } },
        },
      ),
    );
  });

  it('workflow(batch(...)) returns its id and type', () => {
    assert.equal(typeof created?.id, 'string', `response: ${JSON.stringify(created)}`);
    assert.equal(created.type, 'batch');
  });

  it('the jobs, on_complete and on_success run; on_failure does not', async () => {
    await waitFor(() => ran.includes('batch.report') && ran.includes('batch.celebrate'), {
      timeout: 30_000, what: 'on_complete and on_success callbacks',
    });
    await sleep(500);
    assert.deepEqual([...ran].sort(), ['batch.celebrate', 'batch.report', 'user1@example.com', 'user2@example.com']);
  });

  it('getWorkflow() reports completed', async () => {
    const wf = await waitForWorkflow(created?.id, ['completed', 'failed', 'cancelled']);
    assert.equal(wf.state, 'completed');
    assert.equal(wf.metadata?.job_count, 2, `metadata: ${JSON.stringify(wf.metadata)}`);
  });
});

describe('workflow: batch with a failing job', () => {
  const queue = uniqueQueue('batchfail');
  const ran = [];
  let failedAttempts = 0;
  let created;

  before(async () => {
    const worker = newWorker({ queues: [queue], concurrency: 4 });
    worker.register('email.send', async () => { ran.push('email.send'); });
    worker.register('email.bounce', async () => {
      failedAttempts++;
      throw new Error('mailbox unavailable');
    });
    for (const type of ['batch.report', 'batch.celebrate', 'batch.alert']) {
      worker.register(type, async () => { ran.push(type); });
    }
    await worker.start();
    created = await client.workflow(
      batch(
        [
          { type: 'email.send', args: ['ok@example.com'], options: { queue } },
          // JobSpec.options is EnqueueOptions, so retry takes the SDK's camelCase
          // RetryOptions; workflow.ts copies it to the wire unconverted.
          { type: 'email.bounce', args: ['bad@example.com'], options: { queue, retry: { maxAttempts: 1 } } },
        ],
        {
          on_complete: { type: 'batch.report', options: { queue } },
          on_success: { type: 'batch.celebrate', options: { queue } },
          on_failure: { type: 'batch.alert', options: { queue } },
        },
      ),
    );
  });

  it('on_complete and on_failure run, on_success does not', async () => {
    await waitFor(() => ran.includes('batch.report') && ran.includes('batch.alert'), {
      timeout: 30_000, what: 'on_complete and on_failure callbacks',
    });
    await sleep(500);
    assert.ok(!ran.includes('batch.celebrate'), `ran: ${JSON.stringify(ran)}`);
    assert.equal(ran.filter((t) => t === 'email.send').length, 1);
  });

  it('getWorkflow() counts 1 failed job of 2', async () => {
    assert.equal(typeof created?.id, 'string', `workflow() response: ${JSON.stringify(created)}`);
    const wf = await client.getWorkflow(created.id);
    assert.equal(wf.metadata?.job_count, 2, `workflow: ${JSON.stringify(wf)}`);
    assert.equal(wf.metadata.failed_count, 1);
  });

  it("the step's retry option {maxAttempts: 1} allows a single attempt", () => {
    assert.equal(failedAttempts, 1);
  });
});

describe('workflow: cancel', () => {
  it('cancelWorkflow() of a waiting chain leaves it cancelled', async () => {
    const queue = uniqueQueue('wfcancel'); // no worker: nothing runs
    const created = await client.workflow(
      chain({ type: 'noop.a', options: { queue } }, { type: 'noop.b', options: { queue } }),
    );
    assert.equal(typeof created?.id, 'string', `workflow() response: ${JSON.stringify(created)}`);
    await client.cancelWorkflow(created.id);
    const wf = await client.getWorkflow(created.id);
    assert.equal(wf.state, 'cancelled');
  });
});
