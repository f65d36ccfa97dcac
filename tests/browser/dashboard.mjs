// Drives the built OJS dashboard in headless Chromium (Debian's /usr/bin/chromium) through
// playwright-core, against a server seeded by tests/tests/integration/dashboard.rs, which
// passes what the pages must show in OJS_EXPECT (JSON) and checks the server's state
// afterwards. Exits non-zero with the reason on the first page that shows something else.
//
// Environment: OJS_DASHBOARD_URL (e.g. http://127.0.0.1:8090/ojs/admin), OJS_EXPECT,
// OJS_SCREENSHOTS (directory), OJS_PLAYWRIGHT (path of the playwright-core package),
// OJS_CHROMIUM (default /usr/bin/chromium).

import { createRequire } from 'node:module';
import { mkdtempSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

const require = createRequire(import.meta.url);
const { chromium } = require(process.env.OJS_PLAYWRIGHT);
const base = process.env.OJS_DASHBOARD_URL.replace(/\/$/, '');
const expect = JSON.parse(process.env.OJS_EXPECT);
const shots = process.env.OJS_SCREENSHOTS;
mkdirSync(shots, { recursive: true });
rmSync(path.join(shots, 'failure.png'), { force: true });
const TIMEOUT = 15000;

const profile = mkdtempSync(path.join(tmpdir(), 'ojs-chromium-'));
// A fresh profile per run (playwright names it with --user-data-dir).
const browser = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.OJS_CHROMIUM || '/usr/bin/chromium',
  headless: true,
  viewport: { width: 1400, height: 900 },
  args: [
    '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync',
  ],
});
const page = browser.pages()[0] ?? (await browser.newPage());
const failures = [];
page.on('pageerror', (e) => failures.push(`page error: ${e.message}`));
page.setDefaultTimeout(TIMEOUT);

function check(cond, what) {
  if (!cond) throw new Error(what);
}

/** The text of the value under a stats card label on the overview. */
async function card(label) {
  const c = page.locator('div.rounded-lg', { has: page.locator('div.uppercase', { hasText: new RegExp(`^${label}$`) }) }).first();
  return (await c.locator('div.text-2xl').innerText()).trim();
}

async function waitFor(what, fn) {
  const until = Date.now() + TIMEOUT;
  let last;
  while (Date.now() < until) {
    try {
      last = await fn();
      if (last === true) return;
    } catch (e) {
      last = e.message;
    }
    await page.waitForTimeout(200);
  }
  throw new Error(`${what} (last: ${JSON.stringify(last)})`);
}

try {
  // 1. The overview shows the seeded counts.
  await page.goto(`${base}/`);
  await waitFor('overview cards', async () => {
    const got = {
      active: await card('Active Jobs'),
      completed: await card('Completed'),
      failed: await card('Failed'),
      queues: await card('Queues'),
    };
    return JSON.stringify(got) === JSON.stringify(expect.overview) || got;
  });
  await page.screenshot({ path: path.join(shots, 'overview.png'), fullPage: true });

  // 2. A queue's page lists its jobs (and only them).
  await page.goto(`${base}/jobs?queue=${expect.queue}`);
  await waitFor('queue job list', async () => {
    const rows = await page.locator('table tbody tr').allInnerTexts();
    const types = rows.map((r) => r.split('\t')[1]?.trim()).sort();
    return JSON.stringify(types) === JSON.stringify([...expect.queue_types].sort()) || rows;
  });
  await page.screenshot({ path: path.join(shots, 'queue-jobs.png'), fullPage: true });

  // 3. A job's page shows its envelope and errors.
  await page.locator('table tbody tr', { hasText: expect.failed.type }).first().click();
  const panel = page.locator('div.max-w-xl');
  await panel.getByText(expect.failed.id).waitFor();
  await waitFor('job envelope and error', async () => {
    // innerText follows CSS text-transform (section titles are upper case).
    const text = (await panel.innerText()).toLowerCase();
    const missing = [expect.failed.arg, expect.failed.error, 'error history', 'discarded']
      .filter((s) => !text.includes(s.toLowerCase()));
    return missing.length === 0 || `missing ${missing}`;
  });
  await page.screenshot({ path: path.join(shots, 'job.png'), fullPage: true });

  // 4. The sidebar offers the webhooks, schemas and tenants pages (the manifest's
  // capabilities), which list what the operator registered; the workers page shows a
  // draining worker.
  for (const name of ['Webhooks', 'Schemas', 'Workers', 'Tenants']) {
    await page.getByRole('link', { name: new RegExp(name) }).first().waitFor();
  }
  await page.goto(`${base}/webhooks`);
  await waitFor('webhook listed', async () => {
    const rows = await page.locator('table tbody tr').allInnerTexts();
    return rows.some((r) => r.includes(expect.webhook)) || rows;
  });
  await page.screenshot({ path: path.join(shots, 'webhooks.png'), fullPage: true });
  await page.goto(`${base}/schemas`);
  await waitFor('schema listed', async () => {
    const text = await page.locator('main').innerText();
    return (text.includes(expect.schema.type) && text.includes(expect.schema.version)) || text;
  });
  await page.screenshot({ path: path.join(shots, 'schemas.png'), fullPage: true });
  await page.goto(`${base}/workers`);
  await waitFor('draining worker listed', async () => {
    const rows = await page.locator('table tbody tr').allInnerTexts();
    return rows.some((r) => r.includes(expect.worker.id) && r.includes(expect.worker.state)) || rows;
  });
  await page.screenshot({ path: path.join(shots, 'workers.png'), fullPage: true });
  await page.goto(`${base}/tenants`);
  // Listed with its concurrency limit and when it was created (not "NaNd ago": the
  // dashboard reads `created_at`, `stats` and `limits.max_concurrent_jobs`).
  await waitFor('tenant listed', async () => {
    const rows = await page.locator('table tbody tr').allInnerTexts();
    return rows.some((r) => r.includes(expect.tenant.id) && r.includes(expect.tenant.max_concurrent)
      && /just now|ago/.test(r) && !r.includes('NaN')) || rows;
  });
  await page.screenshot({ path: path.join(shots, 'tenants.png'), fullPage: true });

  // 5. Retrying a dead letter job from its page (the server's state is checked after).
  await page.goto(`${base}/dead-letter`);
  const retry = page.getByRole('button', { name: `Retry job ${expect.failed.id.substring(0, 12)}` });
  await retry.waitFor();
  await page.screenshot({ path: path.join(shots, 'dead-letter.png'), fullPage: true });
  await retry.click();
  await waitFor('dead letter row gone after retry', async () => (await retry.count()) === 0);

  // 6. Pausing the queue from the queues page.
  await page.goto(`${base}/queues`);
  const row = page.locator('table tbody tr', { hasText: expect.queue });
  await row.getByRole('button', { name: 'Pause' }).click();
  await waitFor('queue shown as paused', async () => (await row.innerText()).includes('Paused'));
  await page.screenshot({ path: path.join(shots, 'queues.png'), fullPage: true });
  check(failures.length === 0, failures.join('; '));
  console.log('dashboard: every page showed the expected data');
} catch (e) {
  await page.screenshot({ path: path.join(shots, 'failure.png'), fullPage: true }).catch(() => {});
  console.error(`dashboard test failed: ${e.message}`);
  process.exitCode = 1;
} finally {
  await browser.close();
  rmSync(profile, { recursive: true, force: true });
}
