import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { advanceEntityVersion } from '../src/consumer/versionGate.js';
import { lockEntity } from '../src/consumer/entityLock.js';
import { purgeProcessedMessages, resolvePurgeRetention } from '../src/commands/purgeProcessed.js';
import { ConfigError } from '../src/shared/errors.js';
import { createTestSchema, type TestSchema } from './helpers/db.js';
import { waitFor } from './helpers/wait.js';
import { cliBundle } from './helpers/processes.js';

let db: TestSchema;
before(async () => {
  db = await createTestSchema('gate');
});
after(async () => {
  await db.drop();
});

test('version gate (Postgres): newer versions pass, equal and older ones are stale, a rollback takes the version back', async () => {
  const client = await db.pool.connect();
  const gate = (version: number | string) => advanceEntityVersion(client, { schema: db.schema, scope: 's', entity: 'order:1', version });
  try {
    await client.query('BEGIN');
    assert.equal(await gate(5), true);
    assert.equal(await gate(5), false);
    assert.equal(await gate(4), false);
    assert.equal(await gate('9007199254740993'), true, 'beyond 2^53, as text');
    await client.query('COMMIT');
    await client.query('BEGIN');
    assert.equal(await gate('9007199254740994'), true);
    await client.query('ROLLBACK');
    const { rows } = await client.query(`SELECT version::text FROM "${db.schema}".entity_versions WHERE scope = 's' AND entity = 'order:1'`);
    assert.deepEqual(rows, [{ version: '9007199254740993' }]);
    assert.equal(await advanceEntityVersion(client, { schema: db.schema, scope: 'other', entity: 'order:1', version: 1 }), true, 'scopes are separate');
    await assert.rejects(gate(1.5), /not a 64-bit integer/);
    await assert.rejects(gate('99999999999999999999'), /not a 64-bit integer/);
  } finally {
    client.release();
  }
});

test('version gate (Postgres): two transactions gating one entity are serialized', async () => {
  const a = await db.pool.connect();
  const b = await db.pool.connect();
  try {
    await a.query('BEGIN');
    await b.query('BEGIN');
    assert.equal(await advanceEntityVersion(a, { schema: db.schema, scope: 's', entity: 'race', version: 2 }), true);
    let bDone = false;
    const bGate = advanceEntityVersion(b, { schema: db.schema, scope: 's', entity: 'race', version: 2 }).then((r) => {
      bDone = true;
      return r;
    });
    await waitFor('b waiting on a', async () => {
      const { rows } = await db.pool.query(`SELECT 1 FROM pg_locks WHERE NOT granted AND pid = $1`, [(b as unknown as { processID: number }).processID]);
      return rows.length > 0;
    });
    assert.equal(bDone, false);
    await a.query('COMMIT');
    assert.equal(await bGate, false, 'b sees a\'s version once a commits: stale');
    await b.query('COMMIT');
  } finally {
    a.release();
    b.release();
  }
});

test('entity lock (Postgres): held until the transaction ends, released on rollback and when the connection dies', async () => {
  const a = await db.pool.connect();
  const b = await db.pool.connect();
  try {
    await a.query('BEGIN');
    await lockEntity(a, 'account:1');
    await b.query('BEGIN');
    await assert.rejects(lockEntity(b, 'account:1', { timeoutMs: 50 }), (e: { code?: string }) => e.code === '55P03');
    await b.query('ROLLBACK');
    await b.query('BEGIN');
    await lockEntity(b, 'account:2', { timeoutMs: 50 });
    await lockEntity(b, 'account:1', { namespace: 'other', timeoutMs: 50 });
    await b.query('ROLLBACK');
    await a.query('ROLLBACK');
    await b.query('BEGIN');
    await lockEntity(b, 'account:1', { timeoutMs: 50 });
    const { rows } = await b.query<{ lock_timeout: string }>("SELECT current_setting('lock_timeout') AS lock_timeout");
    assert.equal(rows[0]?.lock_timeout, '0', 'lock_timeout restored after the lock');
    // The holder's connection dies (a crashed consumer): the lock goes with it.
    const pid = (b as unknown as { processID: number }).processID;
    b.on('error', () => undefined);
    await db.pool.query('SELECT pg_terminate_backend($1)', [pid]);
    await a.query('BEGIN');
    await lockEntity(a, 'account:1', { timeoutMs: 5_000 });
    await a.query('ROLLBACK');
  } finally {
    a.release();
    b.release(true);
  }
});

test('purge (Postgres): deletes only rows older than the retention, in bounded batches, per group when asked', async () => {
  await db.pool.query(
    `INSERT INTO "${db.schema}".processed_messages (consumer_group, key, processed_at)
     SELECT CASE WHEN i % 2 = 0 THEN 'g1' ELSE 'g2' END, 'old-' || i, now() - interval '20 days' FROM generate_series(1, 25) AS i
     UNION ALL
     SELECT 'g1', 'new-' || i, now() - interval '13 days' FROM generate_series(1, 5) AS i`,
  );
  const g1 = await purgeProcessedMessages({ pool: db.pool, schema: db.schema, batchSize: 5, consumerGroup: 'g1' });
  assert.deepEqual(g1, { deleted: 12, batches: 3 });
  const all = await purgeProcessedMessages({ pool: db.pool, schema: db.schema, batchSize: 5 });
  assert.deepEqual(all, { deleted: 13, batches: 3 });
  const { rows } = await db.pool.query(`SELECT count(*)::int AS n FROM "${db.schema}".processed_messages`);
  assert.equal(rows[0].n, 5, 'rows younger than 14 days stay');
  await assert.rejects(purgeProcessedMessages({ pool: db.pool, schema: db.schema, retention: '12h' }), /retention: "12h" is not a duration from 1d/);
  await assert.rejects(purgeProcessedMessages({ pool: db.pool, schema: db.schema, retention: '14' }), /retention/);
  await assert.rejects(purgeProcessedMessages({ pool: db.pool, schema: db.schema, retentionDays: 0 }), /retentionDays/);
});

test('purge retention: a duration (default 14d); retentionDays is its deprecated whole-days form', () => {
  assert.equal(resolvePurgeRetention({}), '14d');
  assert.equal(resolvePurgeRetention({ retention: '36h' }), '36h');
  assert.equal(resolvePurgeRetention({ retentionDays: 30 }), '30d');
  // Both, meaning the same time: fine, whichever way it is written.
  assert.equal(resolvePurgeRetention({ retention: '2w', retentionDays: 14 }), '2w');
  assert.throws(
    () => resolvePurgeRetention({ retention: '7d', retentionDays: 14 }),
    (e: unknown) => e instanceof ConfigError && e.setting === 'retentionDays' && /give only retention/.test(e.message),
  );
  assert.throws(() => resolvePurgeRetention({ retentionDays: 3_651 }), (e: unknown) => e instanceof ConfigError && e.setting === 'retentionDays');
  assert.throws(() => resolvePurgeRetention({ retention: '3651d' }), (e: unknown) => e instanceof ConfigError && e.setting === 'retention');
});

test('purge (Postgres): the deprecated retentionDays still purges by days', async () => {
  await db.pool.query(
    `INSERT INTO "${db.schema}".processed_messages (consumer_group, key, processed_at)
     VALUES ('days', 'days-old', now() - interval '4 days'), ('days', 'days-new', now() - interval '2 days')`,
  );
  const result = await purgeProcessedMessages({ pool: db.pool, schema: db.schema, retentionDays: 3, consumerGroup: 'days' });
  assert.deepEqual(result, { deleted: 1, batches: 1 });
  const { rows } = await db.pool.query(`SELECT key FROM "${db.schema}".processed_messages WHERE consumer_group = 'days'`);
  assert.deepEqual(rows, [{ key: 'days-new' }]);
});

test('purge (CLI): outbox-relay purge-processed --retention, and the deprecated --retention-days', async (t) => {
  const db = await createTestSchema('purgecli');
  t.after(() => db.drop());
  const env = { ...process.env, DATABASE_URL: db.databaseUrl, NODE_TEST_CONTEXT: '' };
  const cli = (...args: string[]) => spawnSync(process.execPath, [cliBundle(), 'purge-processed', ...args], { env, encoding: 'utf8' });
  const keys = async () => (await db.pool.query(`SELECT key FROM "${db.schema}".processed_messages WHERE consumer_group = 'g' ORDER BY key`)).rows.map((r) => r.key);
  await db.pool.query(
    `INSERT INTO "${db.schema}".processed_messages (consumer_group, key, processed_at)
     VALUES ('g', 'cli-old', now() - interval '5 days'), ('g', 'cli-mid', now() - interval '3 days'), ('g', 'cli-new', now())`,
  );

  const run = cli('--schema', db.schema, '--retention', '4d', '--log-level', 'silent');
  assert.equal(run.status, 0, run.stderr);
  assert.match(run.stdout, /deleted 1 processed_messages rows older than 4d/);
  assert.deepEqual(await keys(), ['cli-mid', 'cli-new']);

  const old = cli('--schema', db.schema, '--retention-days', '2', '--log-level', 'silent');
  assert.equal(old.status, 0, old.stderr);
  assert.match(old.stdout, /deleted 1 processed_messages rows older than 2d/);
  assert.deepEqual(await keys(), ['cli-new']);

  for (const [args, flag] of [
    [['--retention-days', '0'], /--retention-days/],
    [['--retention', '1h'], /--retention: "1h" is not a duration/],
    [['--retention', '7d', '--retention-days', '14'], /--retention-days: 14 days differs from --retention 7d/],
  ] as const) {
    const bad = cli('--schema', db.schema, ...args);
    assert.equal(bad.status, 2, `${args.join(' ')}: ${bad.stderr}`);
    assert.match(bad.stderr, flag);
  }
  assert.deepEqual(await keys(), ['cli-new'], 'a refused command deletes nothing');
});
