import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { Registry } from 'prom-client';
import { createRelay } from '../src/relay/relay.js';
import { listPartitions } from '../src/relay/partitions.js';
import { instrumentRelay } from '../src/metrics/relayMetrics.js';
import { roleScript } from '../src/commands/roles.js';
import { createLogger } from '../src/shared/logger.js';
import { HEADERS } from '../src/shared/kafka.js';
import { maintainPartitions, partitionOutbox } from '../src/commands/partitions.js';
import { createTestSchema, uniqueName, type TestSchema } from './helpers/db.js';
import { createTopic, readTopic, testBrokers } from './helpers/kafka.js';
import { waitFor } from './helpers/wait.js';
import { TEST_PRODUCER } from './helpers/producer.js';
import { assertDeliveredInOrder } from './helpers/workload.js';
import { startWriters } from './helpers/partitionWriters.js';
import { metricValue } from './helpers/metrics.js';
import { writeCommitted } from './helpers/outbox.js';
import { spawnCli } from './helpers/processes.js';

// The relay on a partitioned outbox (docs/partitioning.md): its own maintenance, its
// headroom gauge, a role that may not maintain, a row committed during a detach, and the
// commands' errors.

const schemas: TestSchema[] = [];
const cleanups: Array<() => Promise<unknown>> = [];
async function partitioned(prefix: string): Promise<TestSchema> {
  const s = await createTestSchema(prefix);
  schemas.push(s);
  await partitionOutbox({ pool: s.pool, schema: s.schema, partitionSizeIds: 1_000 });
  return s;
}
after(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => undefined);
  for (const s of schemas) await s.drop();
});

test('integration: the relay maintains its partitioned outbox itself (created ahead, fully sent ones dropped) and reports the headroom, with writers running', async () => {
  const db = await partitioned('partloop');
  const topic = await createTopic(4);
  const relay = createRelay({
    producer: TEST_PRODUCER, databaseUrl: db.databaseUrl, kafkaBrokers: testBrokers(), schema: db.schema,
    batchSize: 100, partitionMaintenanceIntervalMs: 200, partitionRetention: '0s', partitionsAhead: 4,
  });
  const registry = new Registry();
  const metrics = instrumentRelay(relay, { registry, sampleIntervalMs: 100, processMetrics: false });
  await relay.start();
  const writers = startWriters(db.pool, db.schema, topic, 3, 30);
  try {
    await waitFor('the relay to drop the first two partitions', async () => {
      const names = (await listPartitions(db.pool, db.schema)).map((p) => p.name);
      return writers.rows >= 3_000 && !names.includes('outbox_p0') && !names.includes('outbox_p1000');
    }, { timeoutMs: 120_000 });
    await writers.stop();
    await assertDeliveredInOrder(topic, writers.committed, new Set());
    // The loop may still be creating a partition the writers' last ids call for: wait
    // until a sample and the catalog agree.
    const headroom = await waitFor('the gauge to show the headroom the catalog has', async () => {
      const sample = await metrics.sample();
      const parts = await listPartitions(db.pool, db.schema);
      const value = await metricValue(registry, 'outbox_relay_partition_headroom_ids');
      return value === parts[parts.length - 1]!.upper - 1 - sample.lastId ? value : undefined;
    });
    assert.ok(headroom >= 1_000, `at least one whole partition ahead (${headroom})`);
  } finally {
    await writers.stop().catch(() => undefined);
    await relay.stop();
    await metrics.close();
  }
});

test('integration: a relay role that may not create partitions warns once, naming maintain-partitions, and keeps relaying', async () => {
  const db = await partitioned('partpriv');
  const group = uniqueName('pp_relay');
  const login = uniqueName('pp_relay_login');
  await db.pool.query(await roleScript(db.schema, { relayRole: group, consumerRole: uniqueName('pp_consumer') }));
  await db.pool.query(`CREATE ROLE "${login}" LOGIN IN ROLE "${group}"`);
  cleanups.push(async () => {
    await db.pool.query(`DROP OWNED BY "${login}", "${group}"`);
    await db.pool.query(`DROP ROLE "${login}"`);
    await db.pool.query(`DROP ROLE "${group}"`);
  });
  // Writers took ids up to the last partition but one: a partition must be created.
  await db.pool.query(`SELECT setval($1, 1500)`, [`"${db.schema}".outbox_id_seq`]);
  const url = new URL(db.databaseUrl);
  url.username = login;
  const warnings: string[] = [];
  const logger = createLogger('warn', { write: (line: string) => void warnings.push((JSON.parse(line) as { msg: string }).msg) });
  const topic = await createTopic(1);
  const relay = createRelay({
    producer: TEST_PRODUCER, databaseUrl: url.toString(), kafkaBrokers: testBrokers(), schema: db.schema,
    partitionMaintenanceIntervalMs: 50, logger,
  });
  await relay.start();
  try {
    await waitFor('the warning', () => warnings.some((m) => m.includes('maintain-partitions')));
    // Rows in separate transactions, published one after the other: the loop ran many
    // more times meanwhile.
    for (let i = 0; i < 10; i++) await writeCommitted(db, [{ topic, key: `k${i}`, payload: { i } }]);
    await readTopic(topic, (m) => m.length >= 10);
    assert.deepEqual(warnings.filter((m) => m.includes('maintain-partitions')).length, 1, warnings.join('\n'));
  } finally {
    await relay.stop();
  }
});

test('integration: a row committed while its partition is being detached is kept: the partition is attached again, the floors generation bumped, the row published', async () => {
  const db = await partitioned('partlate');
  const topic = await createTopic(1);
  const relay = createRelay({ producer: TEST_PRODUCER, databaseUrl: db.databaseUrl, kafkaBrokers: testBrokers(), schema: db.schema, partitionMaintenanceIntervalMs: 0 });
  const batchErrors: string[] = [];
  relay.on('batchError', (e) => batchErrors.push(e.error.message));
  await relay.start();
  const writer = await db.pool.connect();
  try {
    // The writer takes an id in the first partition and does not commit yet.
    await writer.query('BEGIN');
    const { rows } = await writer.query<{ id: string; message_id: string }>(
      `INSERT INTO "${db.schema}".outbox (topic, key, payload) VALUES ($1, 'late', '{}') RETURNING id, message_id`,
      [topic],
    );
    assert.ok(Number(rows[0]!.id) < 1_000);
    // Other writers move the sequence past the partition (setval stands in for them).
    await db.pool.query(`SELECT setval($1, 1500)`, [`"${db.schema}".outbox_id_seq`]);
    const generation = async (): Promise<string> =>
      (await db.pool.query<{ g: string }>(`SELECT generation::text AS g FROM "${db.schema}".outbox_claim_floors`)).rows[0]!.g;
    const before = await generation();
    const pass = maintainPartitions({ pool: db.pool, schema: db.schema, retention: '0s' });
    // The partition looks empty of unsent rows to the pass, so it detaches it: the detach
    // waits for the writer's transaction.
    // This schema's detach: other test files detach partitions of their own meanwhile, and
    // a match on theirs let the writer commit before this pass looked (CI: kept nothing).
    await waitFor('the detach waiting for the writer', async () => {
      const r = await db.pool.query(
        `SELECT 1 FROM pg_stat_activity WHERE query LIKE '%DETACH PARTITION%CONCURRENTLY%' AND position($1 in query) > 0 AND wait_event = 'virtualxid'`,
        [`"${db.schema}".`],
      );
      return r.rowCount === 1;
    });
    await writer.query('COMMIT');
    const result = await pass;
    assert.deepEqual(result.kept, [{ partition: 'outbox_p0', reason: 'late commit' }]);
    assert.deepEqual(result.dropped, []);
    assert.equal(BigInt(await generation()), BigInt(before) + 2n, 'bumped with the ATTACH and again after it');
    assert.equal((await listPartitions(db.pool, db.schema))[0]!.name, 'outbox_p0');
    const messages = await readTopic(topic, (m) => m.length >= 1).catch(async (error: unknown) => {
      // A CI run (Node 22, kafkajs) waited 120 s here once; say what the relay saw.
      const internals = relay as unknown as { floors: Map<unknown, { floor: number; generation: string }>; horizon: { watermark: number; settled: number; resets: number } };
      const row = await db.pool.query(`SELECT id, sent_at FROM "${db.schema}".outbox WHERE message_id = $1`, [rows[0]!.message_id]);
      const dead = await db.pool.query(`SELECT id, reason FROM "${db.schema}".outbox_dead_letters`);
      const seen = {
        row: row.rows,
        deadLetters: dead.rows,
        generation: await generation(),
        floors: [...internals.floors.values()].map((f) => ({ floor: f.floor, generation: f.generation })),
        horizon: { watermark: internals.horizon.watermark, settled: internals.horizon.settled, resets: internals.horizon.resets },
        batchErrors,
      };
      throw new Error(`${(error as Error).message}; the relay saw ${JSON.stringify(seen)}`);
    });
    assert.equal(messages[0]!.headers[HEADERS.messageId], rows[0]!.message_id);
  } finally {
    await writer.query('ROLLBACK').catch(() => undefined);
    writer.release();
    await relay.stop();
  }
});

test('integration: partition-outbox and maintain-partitions refuse bad input with one clear line', async () => {
  const plain = await createTestSchema('partcli');
  schemas.push(plain);
  const run = async (args: string[], schema = plain.schema): Promise<{ code: number | string; out: string }> => {
    const p = spawnCli(args, { DATABASE_URL: plain.databaseUrl, OUTBOX_SCHEMA: schema, OUTBOX_LOG_LEVEL: 'silent' });
    return { code: await p.exited, out: p.output().trim() };
  };
  const cases: Array<{ args: string[]; schema?: string; code: number; pattern: RegExp }> = [
    { args: ['maintain-partitions', '--retention', '14x'], code: 2, pattern: /^outbox-relay: --retention: "14x" is not a duration/ },
    { args: ['maintain-partitions', '--partitions-ahead', '0'], code: 2, pattern: /^outbox-relay: --partitions-ahead: 0 is not a whole number from 1/ },
    { args: ['partition-outbox', '--partition-size-ids', '10'], code: 2, pattern: /^outbox-relay: --partition-size-ids: 10 is not a whole number from 1000/ },
    { args: ['partition-outbox'], schema: 'no_such_schema_x', code: 1, pattern: /^outbox-relay: schema "no_such_schema_x" has no outbox tables: run `outbox-relay migrate` first$/ },
    { args: ['maintain-partitions'], schema: 'no_such_schema_x', code: 1, pattern: /^outbox-relay: schema "no_such_schema_x" has no outbox tables: run `outbox-relay migrate` first$/ },
    { args: ['maintain-partitions'], code: 1, pattern: /^outbox-relay: the outbox of schema "[^"]+" is not partitioned: run `outbox-relay partition-outbox` first$/ },
  ];
  for (const c of cases) {
    const r = await run(c.args, c.schema);
    assert.equal(r.code, c.code, `${c.args.join(' ')}: ${r.out}`);
    assert.match(r.out, c.pattern);
    assert.equal(r.out.split('\n').length, 1, r.out);
  }
  const { rows } = await plain.pool.query(`SELECT relkind::text AS k FROM pg_class WHERE oid = $1::regclass`, [`"${plain.schema}".outbox`]);
  assert.deepEqual(rows, [{ k: 'r' }], 'nothing was converted');
  const ok = await run(['partition-outbox', '--partition-size-ids', '5000']);
  assert.deepEqual([ok.code, ok.out], [0, 'outbox partitioned: ids below 5000 in outbox_p0, then 5000 ids per partition (lock retries: 0)']);
  const again = await run(['partition-outbox']);
  assert.deepEqual([again.code, again.out], [0, 'outbox already partitioned (5000 ids per partition): nothing to do']);
  const maintained = await run(['maintain-partitions', '--retention', '0s']);
  assert.deepEqual([maintained.code, maintained.out], [0, 'created none; dropped none; kept none; headroom 14999 ids']);
});

test('integration: the conversion waits for its lock no longer than its lock timeout per try: a transaction holding the outbox makes it try again, then gives up at maxWaitMs with a retriable error', async () => {
  const plain = await createTestSchema('partlock');
  schemas.push(plain);
  const holder = await plain.pool.connect();
  const waiting = async (): Promise<boolean> => {
    const r = await plain.pool.query(`SELECT 1 FROM pg_stat_activity WHERE application_name = 'outbox-relay:partition-outbox' AND wait_event_type = 'Lock'`);
    return r.rowCount === 1;
  };
  try {
    // A writer's open transaction: its lock on the outbox outlasts every try.
    await holder.query('BEGIN');
    await holder.query(`INSERT INTO "${plain.schema}".outbox (topic, key, payload) VALUES ('t', 'k', '{}')`);
    const started = performance.now();
    await assert.rejects(partitionOutbox({ databaseUrl: plain.databaseUrl, schema: plain.schema, partitionSizeIds: 1_000, maxWaitMs: 1_000 }), (error: Error & { retriable?: boolean }) => {
      assert.match(error.message, /could not lock the outbox for 200 ms in a row before its deadline/);
      assert.equal(error.retriable, true);
      return true;
    });
    assert.ok(performance.now() - started < 5_000);
    // Again, and the writer commits once a try has timed out (seen waiting, then not).
    const conversion = partitionOutbox({ databaseUrl: plain.databaseUrl, schema: plain.schema, partitionSizeIds: 1_000 });
    await waitFor('a try waiting for its lock', waiting, { intervalMs: 5 });
    await waitFor('that try timing out', async () => !(await waiting()), { intervalMs: 5 });
    await holder.query('COMMIT');
    const result = await conversion;
    assert.equal(result.converted, true);
    assert.ok(result.lockRetries >= 1, `${result.lockRetries} retries`);
    const { rows } = await plain.pool.query(`SELECT count(*)::int AS n FROM "${plain.schema}".outbox`);
    assert.equal(rows[0].n, 1, "the writer's row is in the partitioned outbox");
  } finally {
    await holder.query('ROLLBACK').catch(() => undefined);
    holder.release();
  }
});

test('integration: one maintenance pass at a time per outbox: a pass that finds the maintainers\' lock taken does nothing and says so', async () => {
  const db = await partitioned('partturn');
  await db.pool.query(`SELECT setval($1, 1500)`, [`"${db.schema}".outbox_id_seq`]);
  const other = await db.pool.connect();
  try {
    await other.query('BEGIN');
    await other.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`outbox-relay:partitions:${db.schema}`]);
    const skipped = await maintainPartitions({ pool: db.pool, schema: db.schema, retention: '0s' });
    assert.deepEqual(skipped, { created: [], dropped: [], kept: [], headroomIds: 1_499, skipped: true });
    await other.query('COMMIT');
    const pass = await maintainPartitions({ pool: db.pool, schema: db.schema, retention: '0s' });
    assert.deepEqual(pass.created, ['outbox_p3000']);
    assert.equal(pass.skipped, undefined);
    // A pool of one would deadlock (the lock's transaction holds its only connection).
    const one = new pg.Pool({ connectionString: db.databaseUrl, max: 1 });
    try {
      await assert.rejects(maintainPartitions({ pool: one, schema: db.schema }), { name: 'ConfigError', message: /pool of at least 2 connections/ });
    } finally {
      await one.end();
    }
  } finally {
    await other.query('ROLLBACK').catch(() => undefined);
    other.release();
  }
});
