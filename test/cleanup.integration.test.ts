import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { cleanupOutbox } from '../src/commands/cleanup.js';
import { ConfigError, SchemaError } from '../src/shared/errors.js';
import { createTestSchema, type TestSchema } from './helpers/db.js';
import { spawnCli } from './helpers/processes.js';

let db: TestSchema;
before(async () => {
  db = await createTestSchema('cleanup');
});
after(async () => {
  await db.drop();
});

/**
 * Rows of every kind: pending (some very old, never sent), sent long ago, sent recently.
 * Returns the ids of each kind.
 */
async function seed(): Promise<{ pendingOld: number[]; pendingNew: number[]; sentOld: number[]; sentNew: number[] }> {
  await db.pool.query(`TRUNCATE "${db.schema}".outbox`);
  const insert = async (n: number, createdAgo: string, sentAgo: string | null): Promise<number[]> =>
    (
      await db.pool.query<{ id: number }>(
        `INSERT INTO "${db.schema}".outbox (topic, key, payload, created_at, sent_at)
         SELECT 't', 'k' || (g % 4), jsonb_build_object('g', g), now() - $2::interval, now() - $3::interval
           FROM generate_series(1, $1) AS g
         RETURNING id`,
        [n, createdAgo, sentAgo],
      )
    ).rows.map((r) => Number(r.id));
  // Interleaved, so sent and pending rows share id ranges and batches.
  const pendingOld = await insert(5, '30 days', null);
  const sentOld = await insert(7, '10 days', '8 days');
  const sentNew = await insert(4, '2 days', '1 hour');
  const pendingNew = await insert(3, '1 minute', null);
  sentOld.push(...(await insert(6, '9 days', '7 days 1 hour')));
  pendingOld.push(...(await insert(2, '20 days', null)));
  return { pendingOld, pendingNew, sentOld, sentNew };
}

async function ids(): Promise<number[]> {
  return (await db.pool.query<{ id: number }>(`SELECT id FROM "${db.schema}".outbox ORDER BY id`)).rows.map((r) => Number(r.id));
}

async function snapshot(): Promise<unknown[]> {
  return (await db.pool.query(`SELECT * FROM "${db.schema}".outbox ORDER BY id`)).rows;
}

const sorted = (a: number[]): number[] => [...a].sort((x, y) => x - y);

test('integration: cleanup deletes only sent rows past the retention, in bounded batches; pending rows stay, however old', async () => {
  const s = await seed();
  const result = await cleanupOutbox({ pool: db.pool, schema: db.schema, retention: '7d', batchSize: 4 });
  assert.equal(result.deleted, s.sentOld.length);
  assert.equal(result.batches, Math.floor(s.sentOld.length / 4) + 1, '13 rows in batches of 4: 4 batches, the last short');
  assert.deepEqual(await ids(), sorted([...s.pendingOld, ...s.pendingNew, ...s.sentNew]));
  // Again: nothing left to do.
  assert.deepEqual(await cleanupOutbox({ pool: db.pool, schema: db.schema, retention: '7d' }), { deleted: 0, batches: 1 });
  // A shorter retention takes the recently sent rows too, and still no pending row.
  const short = await cleanupOutbox({ pool: db.pool, schema: db.schema, retention: '30m' });
  assert.equal(short.deleted, s.sentNew.length);
  assert.deepEqual(await ids(), sorted([...s.pendingOld, ...s.pendingNew]));
});

test('integration: cleanup skips rows another transaction holds instead of waiting, and gets them next time', async () => {
  const s = await seed();
  const holder = await db.pool.connect();
  try {
    await holder.query('BEGIN');
    const held = s.sentOld[2]!;
    await holder.query(`SELECT 1 FROM "${db.schema}".outbox WHERE id = $1 FOR UPDATE`, [held]);
    // A lock_timeout makes waiting fail loudly instead of hanging the test.
    const client = await db.pool.connect();
    try {
      await client.query(`SET lock_timeout = '2s'`);
      const result = await cleanupOutbox({ client, schema: db.schema, retention: '7d', batchSize: 100 });
      assert.equal(result.deleted, s.sentOld.length - 1);
    } finally {
      client.release();
    }
    assert.ok((await ids()).includes(held), 'the held row is left');
    await holder.query('COMMIT');
    assert.equal((await cleanupOutbox({ pool: db.pool, schema: db.schema, retention: '7d' })).deleted, 1);
    assert.ok(!(await ids()).includes(held));
  } finally {
    holder.release();
  }
});

test('integration: bad cleanup options are refused up front, naming the option; nothing is deleted', async () => {
  await seed();
  const before = await snapshot();
  const bad: Array<[Parameters<typeof cleanupOutbox>[0], string]> = [
    [{ retention: '7' }, 'retention'],
    [{ retention: '-7d' }, 'retention'],
    [{ retention: 'a week' }, 'retention'],
    [{ batchSize: 0 }, 'batchSize'],
    [{ batchSize: 1.5 }, 'batchSize'],
    [{ maxBatches: -1 }, 'maxBatches'],
    [{ schema: 'x"; drop table y; --' }, 'schema'],
  ];
  for (const [options, setting] of bad) {
    await assert.rejects(
      cleanupOutbox({ pool: db.pool, schema: db.schema, ...options }),
      (e: unknown) => e instanceof ConfigError && e.setting === setting,
      JSON.stringify(options),
    );
  }
  await assert.rejects(cleanupOutbox({ pool: db.pool, schema: 'never_migrated_cleanup' }), SchemaError);
  assert.deepEqual(await snapshot(), before);
});

async function cli(args: string[], env: Record<string, string> = {}): Promise<{ code: number | string; lines: string[] }> {
  const p = spawnCli(args, { DATABASE_URL: db.databaseUrl, OUTBOX_SCHEMA: db.schema, OUTBOX_LOG_LEVEL: 'silent', ...env });
  const code = await p.exited;
  return { code, lines: p.output().trim().split('\n').filter((l) => l !== '') };
}

test('integration: outbox-relay cleanup prints what it deleted; bad arguments exit 2 with one line and delete nothing', async () => {
  const s = await seed();
  const before = await snapshot();
  const cases: Array<{ args: string[]; env?: Record<string, string>; code: number; pattern: RegExp }> = [
    { args: ['cleanup', '--retention', '7'], code: 2, pattern: /^outbox-relay: --retention: "7" is not a duration/ },
    { args: ['cleanup', '--retention', '2 days'], code: 2, pattern: /^outbox-relay: --retention: "2 days" is not a duration/ },
    { args: ['cleanup'], env: { OUTBOX_CLEANUP_RETENTION: '-1h' }, code: 2, pattern: /^outbox-relay: OUTBOX_CLEANUP_RETENTION: / },
    { args: ['cleanup', '--batch-size', '-5'], code: 2, pattern: /^outbox-relay: --batch-size: -5 is not a whole number from 1 to 100000$/ },
    { args: ['cleanup', '--retention'], code: 2, pattern: /^outbox-relay: option '--retention <value>' argument missing/ },
    { args: ['cleanup', '--schema', 'never_migrated_cleanup'], code: 1, pattern: /^outbox-relay: schema "never_migrated_cleanup" has no outbox tables/ },
  ];
  for (const c of cases) {
    const { code, lines } = await cli(c.args, c.env);
    assert.equal(code, c.code, `${c.args.join(' ')}: ${lines.join('\n')}`);
    assert.equal(lines.length, 1, lines.join('\n'));
    assert.match(lines[0]!, c.pattern);
  }
  assert.deepEqual(await snapshot(), before, 'nothing changed');
  const ok = await cli(['cleanup', '--retention', '7d', '--batch-size', '5']);
  assert.equal(ok.code, 0, ok.lines.join('\n'));
  assert.deepEqual(ok.lines, [`deleted ${s.sentOld.length} sent rows older than 7d (3 batches)`]);
  assert.deepEqual(await ids(), sorted([...s.pendingOld, ...s.pendingNew, ...s.sentNew]));
});
