// A node:test reporter that counts checks (leaf tests; describe() suites are not
// counted) and writes "<passed> <failed>" once the run ends. run.sh turns it into the
// suite's last line. A check cancelled because its setup (before hook) failed counts as
// failed, and so does a test file that fails to load.
export default async function* countReporter(source) {
  let passed = 0;
  let failed = 0;
  for await (const event of source) {
    if (event.type !== 'test:pass' && event.type !== 'test:fail') continue;
    if (event.data.details?.type === 'suite') continue;
    if (event.type === 'test:pass' && !event.data.skip && !event.data.todo) passed++;
    else failed++; // a skipped or todo check is not a pass
  }
  yield `${passed} ${failed}\n`;
}
