import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { createTestSchema, type TestSchema } from './helpers/db.js';
import { spawnCli, type Spawned } from './helpers/processes.js';
import { screenLines, spawnCliOnTty } from './helpers/tty.js';

// The progress line of the CLI's long runs (src/cli/progress.ts), from the real CLI on a
// real Postgres: on a terminal (a pseudo-terminal made by util-linux's `script`) the
// replay, cleanup and purge-processed draw `done / total` on one line and clear it; off a
// terminal their stdout and stderr are what they always were: JSON logs and the summary.

let db: TestSchema;
const T = (table: string): string => `"${db.schema}".${table}`;

before(async () => {
  db = await createTestSchema('cli_progress');
});
after(async () => {
  await db.drop();
});

const env = (): Record<string, string> => ({ DATABASE_URL: db.databaseUrl, OUTBOX_SCHEMA: db.schema });

/** The CLI off a terminal: stdout and stderr apart. */
async function plain(args: string[]): Promise<{ code: number | string; stdout: string; stderr: string }> {
  const p: Spawned = spawnCli(args, env());
  let stdout = '';
  let stderr = '';
  p.child.stdout?.on('data', (d: Buffer) => (stdout += d.toString()));
  p.child.stderr?.on('data', (d: Buffer) => (stderr += d.toString()));
  const code = await p.exited;
  return { code, stdout, stderr };
}

async function onTty(args: string[], extra: Record<string, string> = {}): Promise<{ code: number | string; output: string }> {
  const p = spawnCliOnTty(args, { ...env(), ...extra });
  const code = await p.exited;
  return { code, output: p.output() };
}

/** The JSON log lines of an output, each without what differs from run to run. */
function logs(lines: string[]): Array<Record<string, unknown>> {
  return lines
    .filter((l) => l.startsWith('{'))
    .map((l) => {
      const { time, pid, ratePerSecond, ...rest } = JSON.parse(l) as Record<string, unknown>;
      assert.equal(typeof time, 'number');
      assert.equal(typeof pid, 'number');
      return { ...rest, ratePerSecond: typeof ratePerSecond };
    });
}

async function deadLetters(n: number): Promise<void> {
  await db.pool.query(
    `INSERT INTO ${T('outbox_dead_letters')} (id, message_id, topic, key, created_at, attempts, reason, error_name, policy)
     SELECT nextval('${db.schema}.outbox_id_seq'), gen_random_uuid(), 'orders', 'k' || (g % 7), now(), 1, 'broker said no', 'UNKNOWN', 'skip'
       FROM generate_series(1, $1) AS g`,
    [n],
  );
}

test('integration: dead-letters replay shows queued n / total on a terminal and clears it; off a terminal, the same JSON logs and nothing else', async () => {
  const args = ['dead-letters', 'replay', '--all', '--rate', '20'];
  await deadLetters(40);
  const off = await plain(args);
  assert.equal(off.code, 0, off.stdout + off.stderr);
  assert.equal(off.stderr, '', 'nothing on stderr');
  assert.ok(!off.stdout.includes('\r'), 'no carriage return');
  const offLines = off.stdout.split('\n').filter((l) => l !== '');
  // The summary, and JSON log lines (which the asynchronous log destination may write after it).
  const [summary, ...others] = offLines.filter((l) => !l.startsWith('{'));
  assert.match(summary ?? '', /^queued 40 of 40 dead letters back into the outbox in /);
  assert.deepEqual(others, [], 'every other line is a JSON log line');
  assert.ok(!/queued \d+ \/ /.test(off.stdout));

  await deadLetters(40);
  const on = await onTty(args);
  assert.equal(on.code, 0, on.output);
  const drawn = [...on.output.matchAll(/\rqueued (\d+) \/ 40 \((\d+\.\d) %\)([^\r\n]*)/g)];
  assert.ok(drawn.length >= 3, `the line was drawn and redrawn: ${JSON.stringify(on.output)}`);
  for (const [, done, percent] of drawn) assert.equal(percent, ((Number(done) * 100) / 40).toFixed(1));
  const counts = drawn.map((m) => Number(m[1]));
  assert.deepEqual([...counts].sort((a, b) => a - b), counts, 'done only grows');
  // Two seconds at 20/s: once a second of it is measured, the rate and the ETA show.
  assert.ok(drawn.some((m) => /^ \d+\.\d\/s ETA \d+s$/.test(m[3]!)), JSON.stringify(drawn.map((m) => m[0])));

  const shown = screenLines(on.output);
  assert.ok(!shown.some((l) => /^queued \d+ \/ 40/.test(l)), `the line is cleared at the end: ${JSON.stringify(shown)}`);
  assert.match(shown.at(-1)!, /^queued 40 of 40 dead letters back into the outbox in /);
  assert.deepEqual(logs(shown), logs(offLines), 'the same JSON logs as off a terminal');
  assert.equal((await db.pool.query(`SELECT count(*)::int AS n FROM ${T('outbox_dead_letters')}`)).rows[0].n, 0);
});

async function sentRows(n: number): Promise<void> {
  await db.pool.query(
    `INSERT INTO ${T('outbox')} (topic, key, payload, sent_at) SELECT 'orders', 'k' || (g % 50), '{}', now() - interval '8 days' FROM generate_series(1, $1) AS g`,
    [n],
  );
  await db.pool.query(`ANALYZE ${T('outbox')}`);
}

async function processedRows(n: number): Promise<void> {
  await db.pool.query(
    `INSERT INTO ${T('processed_messages')} (consumer_group, key, processed_at) SELECT 'g1', gen_random_uuid()::text, now() - interval '2 days' FROM generate_series(1, $1) AS g`,
    [n],
  );
  await db.pool.query(`ANALYZE ${T('processed_messages')}`);
}

for (const { name, args, fill, summary } of [
  { name: 'cleanup', args: ['cleanup', '--batch-size', '100'], fill: sentRows, summary: /^deleted 3000 sent rows older than 7d \(31 batches\)$/ },
  { name: 'purge-processed', args: ['purge-processed', '--retention', '1d', '--batch-size', '100'], fill: processedRows, summary: /^deleted 3000 processed_messages rows older than 1d \(31 batches\)$/ },
]) {
  test(`integration: ${name} shows deleted n / ~estimate on a terminal; nothing of it off a terminal or with TERM=dumb`, async () => {
    await fill(3000);
    const on = await onTty(args);
    assert.equal(on.code, 0, on.output);
    const drawn = [...on.output.matchAll(/\rdeleted ([\d,]+) \/ ~([\d,]+) \(\d+\.\d %\)/g)];
    assert.ok(drawn.length >= 1, JSON.stringify(on.output));
    assert.equal(drawn[0]![1], '0', 'drawn before the first batch');
    // The planner's estimate from fresh statistics (ANALYZE above): near the 3,000 rows.
    const estimate = Number(drawn[0]![2]!.replaceAll(',', ''));
    assert.ok(estimate >= 2_000 && estimate <= 4_500, `estimate ${estimate}`);
    const shown = screenLines(on.output);
    assert.match(shown.at(-1)!, summary);
    assert.ok(!shown.some((l) => l.startsWith('deleted ') && l.includes(' / ~')), `the line is cleared at the end: ${JSON.stringify(shown)}`);

    await fill(3000);
    const off = await plain(args);
    assert.equal(off.code, 0, off.stdout + off.stderr);
    assert.equal(off.stderr, '');
    assert.ok(!off.stdout.includes('\r'));
    const offLines = off.stdout.split('\n').filter((l) => l !== '');
    assert.deepEqual(offLines.filter((l) => !l.startsWith('{')).length, 1, 'the summary; every other line is a JSON log line');
    assert.match(offLines.find((l) => !l.startsWith('{'))!, summary);
    assert.deepEqual(logs(shown), logs(offLines), 'the same JSON logs as on a terminal');

    await fill(3000);
    const dumb = await onTty(args, { TERM: 'dumb' });
    assert.equal(dumb.code, 0, dumb.output);
    assert.ok(!dumb.output.replaceAll('\r\n', '\n').includes('\r'), `no redrawn line on a dumb terminal: ${JSON.stringify(dumb.output)}`);
    assert.deepEqual(
      screenLines(dumb.output).filter((l) => !l.startsWith('{')).map((l) => summary.test(l)),
      [true],
      'the summary; every other line is a JSON log line (its asynchronous destination may write it after the summary)',
    );
  });
}
