// A node:test reporter that prints nothing and, when OUTBOX_TEST_TIMES_FILE names a file,
// writes there each test file's wall time and its tests' outcomes, for CI's time table
// (scripts/ciTimeTable.ts, docs/ci-times.md). The runner reports a file's own completion
// as a top-level test named by the file's path, with the file's duration.
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, relative } from 'node:path';

export default async function* fileTimesReporter(source) {
  const out = process.env.OUTBOX_TEST_TIMES_FILE;
  const files = new Map();
  const startedAt = Date.now();
  for await (const event of source) {
    if (!out || (event.type !== 'test:pass' && event.type !== 'test:fail' && event.type !== 'test:complete')) continue;
    const { file, name, nesting, details } = event.data ?? {};
    if (!file || nesting !== 0) continue;
    const path = relative(process.cwd(), file);
    const entry = files.get(path) ?? { file: path, seconds: null, tests: 0, failed: 0 };
    files.set(path, entry);
    if (name === file || name === path || file.endsWith(`/${name}`)) {
      // The file's own test (test:complete on Node 22+, test:pass or test:fail on 20):
      // its whole run, start of the process to exit.
      entry.seconds = Number(((details?.duration_ms ?? 0) / 1000).toFixed(1));
      continue;
    }
    if (event.type === 'test:pass') entry.tests++;
    if (event.type === 'test:fail') {
      entry.tests++;
      entry.failed++;
    }
  }
  if (!out) return;
  mkdirSync(dirname(out), { recursive: true });
  const result = { wallSeconds: Math.round((Date.now() - startedAt) / 1000), node: process.version, files: [...files.values()] };
  writeFileSync(out, `${JSON.stringify(result, null, 2)}\n`);
}
