import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

// The producer-adapter matrix checks itself (test/helpers/adapterGuard.mjs): a relay test
// that ignores OUTBOX_TEST_PRODUCER fails its run, whether the relay runs in the test's
// process or in a process the test starts; an honest run passes.
const ROOT = fileURLToPath(new URL('..', import.meta.url));
const GUARD = fileURLToPath(new URL('./helpers/adapterGuard.mjs', import.meta.url));
const FIXTURE = 'test/fixtures/relayIgnoringAdapter.ts';

async function runFixture(producer: string, relay: 'in-process' | 'process', extra: Record<string, string> = {}): Promise<{ code: number | null; output: string }> {
  // A fresh root of the harness: not this test's NODE_OPTIONS or report directory, or the
  // fixture's failure would (rightly) fail this test's own process; not a
  // test file of this run either.
  const { NODE_OPTIONS: _options, OUTBOX_TEST_ADAPTER_REPORTS: _reports, NODE_TEST_CONTEXT: _context, OUTBOX_TEST_FILE: _file, OUTBOX_TEST_RELAY_LOG: _log, ...env } = process.env;
  const child = spawn(process.execPath, ['--import', 'tsx', '--import', GUARD, '--test', '--test-reporter=tap', FIXTURE], {
    cwd: ROOT,
    env: { ...env, OUTBOX_TEST_PRODUCER: producer, FIXTURE_RELAY: relay, ...extra },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr.on('data', (d: Buffer) => (output += d.toString()));
  const code = await new Promise<number | null>((resolve) => child.on('exit', (c) => resolve(c)));
  return { code, output };
}

const blame = /adapter guard: a relay on schema guard_\S+ started on producer adapter kafkajs in pid \d+ .*but OUTBOX_TEST_PRODUCER is platformatic/;

test('integration: the adapter guard fails a test whose in-process relay ignores OUTBOX_TEST_PRODUCER, and passes it when the adapter is the one under test', async () => {
  const ignored = await runFixture('platformatic', 'in-process');
  assert.notEqual(ignored.code, 0, ignored.output);
  assert.match(ignored.output, blame);
  const honest = await runFixture('kafkajs', 'in-process');
  assert.equal(honest.code, 0, honest.output);
  assert.doesNotMatch(honest.output, /adapter guard/);
});

test('integration: the adapter guard fails a test whose relay process ignores OUTBOX_TEST_PRODUCER, even when the test itself passes and SIGKILLs it', async () => {
  const ignored = await runFixture('platformatic', 'process');
  assert.notEqual(ignored.code, 0, ignored.output);
  assert.match(ignored.output, blame);
  assert.match(ignored.output, /a process started from pid \d+/);
  assert.match(ignored.output, /# pass 1/, 'the fixture test itself passed: the harness, not the test, failed the run');
  const honest = await runFixture('kafkajs', 'process');
  assert.equal(honest.code, 0, honest.output);
});

test('integration: with OUTBOX_TEST_RELAY_LOG, every relay start is logged with the test file it started for, in the test process or one it started (what CI\'s second pass runs again)', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'relay-log-'));
  try {
    for (const relay of ['in-process', 'process'] as const) {
      const log = join(dir, `${relay}.txt`);
      const run = await runFixture('kafkajs', relay, { OUTBOX_TEST_RELAY_LOG: log });
      assert.equal(run.code, 0, run.output);
      const lines = existsSync(log) ? readFileSync(log, 'utf8').trim().split('\n') : [];
      assert.ok(lines.length >= 1, `${relay}: a relay start was logged`);
      assert.deepEqual([...new Set(lines)], [FIXTURE], `${relay}: ${lines.join(', ')}`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('the harness refuses a test process on another Node major than OUTBOX_TEST_NODE_MAJOR (what .ci/run claims for each pass)', async () => {
  const major = process.versions.node.split('.')[0]!;
  const probe = (wanted: string) =>
    new Promise<{ code: number | null; stderr: string }>((resolve) => {
      const child = spawn(process.execPath, ['--import', GUARD, '-e', ''], { env: { PATH: process.env.PATH, OUTBOX_TEST_NODE_MAJOR: wanted }, stdio: ['ignore', 'ignore', 'pipe'] });
      let stderr = '';
      child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
      child.on('exit', (code) => resolve({ code, stderr }));
    });
  const other = String(Number(major) + 4);
  const wrong = await probe(other);
  assert.equal(wrong.code, 2);
  assert.equal(wrong.stderr, `test harness: OUTBOX_TEST_NODE_MAJOR=${other}, but this process (${process.execPath}) is Node ${process.versions.node}\n`);
  assert.deepEqual(await probe(major), { code: 0, stderr: '' });
});
