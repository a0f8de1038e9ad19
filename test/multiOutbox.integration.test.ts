import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { performance } from 'node:perf_hooks';
import { createRelayGroup, type RelayGroup } from '../src/relay/relayGroup.js';
import { instrumentRelayGroup } from '../src/metrics/relayGroupMetrics.js';
import { migrate } from '../src/commands/migrate.js';
import { attachDebeziumOutbox } from '../src/commands/debeziumOutbox.js';
import { ConfigError } from '../src/shared/errors.js';
import { HEADERS } from '../src/shared/kafka.js';
import { createTestSchema, DATABASE_URL, uniqueName, type TestSchema } from './helpers/db.js';
import { createTopic, readTopic, testBrokers } from './helpers/kafka.js';
import { waitFor } from './helpers/wait.js';
import { TEST_PRODUCER } from './helpers/producer.js';
import { assertDeliveredInOrder, runWriters } from './helpers/workload.js';

// Three outboxes in one process: two schemas of the test database and one schema in a
// database of its own, which the test makes unreachable (ALLOW_CONNECTIONS false and its
// backends terminated: what a failover or a dropped network looks like to the relay).
// The second is Debezium-shaped: its writers know only Debezium's outbox table.

/**
 * Writers that insert into a Debezium-shaped table (id, aggregatetype, aggregateid, type,
 * payload), some inserting and deleting in the same transaction (as Debezium users do),
 * some rolling back. Returns the event ids, which travel as the message-id.
 */
async function runDebeziumWriters(pool: pg.Pool, table: string, topic: string, writers: number, transactionsPerWriter: number) {
  const committed = new Set<string>();
  const rolledBack = new Set<string>();
  await Promise.all(
    Array.from({ length: writers }, async (_, w) => {
      const client = await pool.connect();
      try {
        for (let t = 0; t < transactionsPerWriter; t++) {
          await client.query('BEGIN');
          const { rows } = await client.query<{ id: string }>(
            `INSERT INTO ${table} (id, aggregatetype, aggregateid, type, payload)
             SELECT gen_random_uuid(), $1, 'order-' || (($2::int * 7 + $3::int + i) % 20), 'OrderChanged', jsonb_build_object('w', $2::int, 't', $3::int, 'i', i)
               FROM generate_series(1, 2) i RETURNING id`,
            [topic, w, t],
          );
          if (t % 4 === 1) await client.query(`DELETE FROM ${table} WHERE id = ANY($1::uuid[])`, [rows.map((r) => r.id)]);
          if (t % 9 === 8) {
            await client.query('ROLLBACK');
            for (const r of rows) rolledBack.add(r.id);
          } else {
            await client.query('COMMIT');
            for (const r of rows) committed.add(r.id);
          }
        }
      } finally {
        client.release();
      }
    }),
  );
  return { committed, rolledBack };
}

let a: TestSchema;
let b: TestSchema;
let admin: pg.Pool;
let otherDatabase: string;
let otherUrl: string;
let c: { schema: string; pool: pg.Pool };

before(async () => {
  a = await createTestSchema('multi_a');
  b = await createTestSchema('multi_b');
  admin = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
  otherDatabase = uniqueName('outbox_multi');
  await admin.query(`CREATE DATABASE "${otherDatabase}"`);
  const url = new URL(DATABASE_URL);
  url.pathname = `/${otherDatabase}`;
  otherUrl = url.toString();
  const schema = 'outbox_c';
  await migrate({ databaseUrl: otherUrl, schema });
  const pool = new pg.Pool({ connectionString: otherUrl, max: 10 });
  pool.on('error', () => undefined);
  c = { schema, pool };
});

after(async () => {
  await c.pool.end().catch(() => undefined);
  await admin.query(`ALTER DATABASE "${otherDatabase}" ALLOW_CONNECTIONS true`).catch(() => undefined);
  await admin.query(`DROP DATABASE IF EXISTS "${otherDatabase}" WITH (FORCE)`).catch(() => undefined);
  await admin.end();
  await a.drop();
  await b.drop();
});

async function cutOff(database: string): Promise<void> {
  await admin.query(`ALTER DATABASE "${database}" ALLOW_CONNECTIONS false`);
  await admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()', [database]);
}

async function messageIds(topic: string, atLeast: number): Promise<Set<string>> {
  const messages = await readTopic(topic, (m) => new Set(m.map((x) => x.headers[HEADERS.messageId])).size >= atLeast);
  return new Set(messages.map((m) => m.headers[HEADERS.messageId]!));
}

function groupOptions(outboxes: Array<{ name: string; databaseUrl: string; schema: string }>) {
  return { outboxes, kafkaBrokers: testBrokers(), producer: TEST_PRODUCER, batchSize: 50, leaseTtlMs: 2_000, retryMaxDelayMs: 1_000 };
}

test('integration: three outboxes in one process, one database cut off mid-run: the others flow, nothing lost or reordered, the cut one catches up', async () => {
  const [topicA, topicB, topicC] = [await createTopic(3), await createTopic(3), await createTopic(3)];
  // billing: Debezium's table, routed by aggregatetype (the topic's name here) with the pattern ${routedByValue}.
  const debeziumTable = `"${b.schema}".outboxevent`;
  await b.pool.query(`CREATE TABLE ${debeziumTable} (id uuid PRIMARY KEY, aggregatetype text NOT NULL, aggregateid text NOT NULL, type text, payload jsonb)`);
  await attachDebeziumOutbox({ databaseUrl: b.databaseUrl, schema: b.schema, table: `${b.schema}.outboxevent`, topicPattern: '${routedByValue}' });
  const group: RelayGroup = createRelayGroup(
    groupOptions([
      { name: 'orders', databaseUrl: a.databaseUrl, schema: a.schema },
      { name: 'billing', databaseUrl: b.databaseUrl, schema: b.schema },
      { name: 'tenant_c', databaseUrl: otherUrl, schema: c.schema },
    ]),
  );
  const metrics = instrumentRelayGroup(group, { processMetrics: false, sampleIntervalMs: 200 });
  await group.start();
  try {
    assert.deepEqual(group.outboxes.map((o) => [o.name, o.state]), [['orders', 'running'], ['billing', 'running'], ['tenant_c', 'running']]);
    const write = (db: { pool: pg.Pool; schema: string }, topic: string, transactionsPerWriter: number) =>
      runWriters({ pool: db.pool, schema: db.schema, topic, writers: 3, transactionsPerWriter, keys: 20, rollbackEvery: 9, holdEvery: 5, holdMs: 10 });

    // 1. Writers on all three.
    const [wa, wb, wc] = await Promise.all([write(a, topicA, 60), runDebeziumWriters(b.pool, debeziumTable, topicB, 3, 60), write(c, topicC, 60)]);

    // Its relay publishes before the cut (a loaded Node 24 run cut it off before its first
    // batch, and then nothing of it was on the topic during the outage).
    await messageIds(topicC, 1);

    // 2. A burst on the third outbox, cut off right after its commit: its relay has rows
    //    left to publish when its database goes away.
    const burst = await c.pool.query<{ message_id: string }>(
      `INSERT INTO "${c.schema}".outbox (topic, key, payload) SELECT $1, 'burst-' || (i % 10), jsonb_build_object('i', i) FROM generate_series(1, 3000) i RETURNING message_id`,
      [topicC],
    );
    for (const r of burst.rows) wc.committed.add(r.message_id);
    await c.pool.end();
    await cutOff(otherDatabase);

    // 3. While it is away the others go on: new rows on both are published.
    const [wa2, wb2] = await Promise.all([write(a, topicA, 40), runDebeziumWriters(b.pool, debeziumTable, topicB, 3, 40)]);
    for (const id of wa2.committed) wa.committed.add(id);
    for (const id of wa2.rolledBack) wa.rolledBack.add(id);
    for (const id of wb2.committed) wb.committed.add(id);
    for (const id of wb2.rolledBack) wb.rolledBack.add(id);
    await assertDeliveredInOrder(topicA, wa.committed, wa.rolledBack);
    await assertDeliveredInOrder(topicB, wb.committed, wb.rolledBack);
    // What Debezium's router would have published: key aggregateid, the event id as header id, type as a header.
    for (const m of await readTopic(topicB, (all) => all.length >= wb.committed.size)) {
      assert.match(m.key ?? '', /^order-\d+$/);
      assert.equal(m.headers.id, m.headers[HEADERS.messageId]);
      assert.equal(m.headers.type, 'OrderChanged');
    }
    const seenDuringOutage = await messageIds(topicC, 1);
    assert.ok(seenDuringOutage.size < wc.committed.size, `the cut-off outbox still had rows to publish (${seenDuringOutage.size} of ${wc.committed.size} out)`);
    await waitFor('/readyz to report the cut-off outbox and only it', async () => {
      const r = await metrics.readiness();
      return !r.ready && r.checks['tenant_c.database']?.ok === false && r.checks['orders.database']?.ok === true && r.checks['billing.claim']?.ok === true;
    });

    // 4. Back: it catches up, in order, with nothing lost.
    await admin.query(`ALTER DATABASE "${otherDatabase}" ALLOW_CONNECTIONS true`);
    c.pool = new pg.Pool({ connectionString: otherUrl, max: 10 });
    c.pool.on('error', () => undefined);
    const wc2 = await write(c, topicC, 20);
    for (const id of wc2.committed) wc.committed.add(id);
    for (const id of wc2.rolledBack) wc.rolledBack.add(id);
    await assertDeliveredInOrder(topicC, wc.committed, wc.rolledBack);
    await waitFor('every outbox ready again', async () => (await metrics.readiness()).ready);

    // Each outbox's metrics under its own label.
    const published = await metrics.registry.getSingleMetric('outbox_relay_published_rows_total')!.get();
    const byOutbox = new Map<string, number>();
    for (const v of published.values) byOutbox.set(String(v.labels.outbox), (byOutbox.get(String(v.labels.outbox)) ?? 0) + v.value);
    assert.ok((byOutbox.get('orders') ?? 0) >= wa.committed.size && (byOutbox.get('billing') ?? 0) >= wb.committed.size, JSON.stringify([...byOutbox]));
    assert.ok((byOutbox.get('tenant_c') ?? 0) >= wc.committed.size - seenDuringOutage.size, JSON.stringify([...byOutbox]));
  } finally {
    const stopped = await group.stop();
    assert.equal(stopped.hard, false);
    await metrics.close();
  }
  assert.deepEqual(group.outboxes.map((o) => o.state), ['stopped', 'stopped', 'stopped']);
});

test('integration: an outbox whose schema is not migrated is unavailable at start and retried; the other runs, and it starts once migrated', async () => {
  const topic = await createTopic(2);
  const missing = uniqueName('multi_missing');
  const group = createRelayGroup(
    groupOptions([
      { name: 'ready', databaseUrl: a.databaseUrl, schema: a.schema },
      { name: 'late', databaseUrl: DATABASE_URL, schema: missing },
    ]),
  );
  const metrics = instrumentRelayGroup(group, { processMetrics: false });
  const changes: string[] = [];
  group.on('outbox', (e) => changes.push(`${e.name}:${e.state}`));
  await group.start();
  try {
    assert.deepEqual(group.outboxes.map((o) => o.state), ['running', 'unavailable']);
    assert.match(group.outboxes[1]!.error ?? '', /migrat/i);
    const up = async (name: string) => (await metrics.registry.getSingleMetric('outbox_relay_outbox_up')!.get()).values.find((v) => v.labels.outbox === name)?.value;
    assert.equal(await up('ready'), 1);
    assert.equal(await up('late'), 0);
    const r = await metrics.readiness();
    assert.equal(r.ready, false);
    assert.equal(r.checks['late.running']?.ok, false);
    assert.equal(r.checks['ready.database']?.ok, true);

    const w = await runWriters({ pool: a.pool, schema: a.schema, topic, writers: 2, transactionsPerWriter: 30, keys: 10 });
    await assertDeliveredInOrder(topic, w.committed, w.rolledBack);

    await migrate({ databaseUrl: DATABASE_URL, schema: missing });
    await waitFor('the late outbox to start', async () => group.outboxes[1]!.state === 'running');
    const { rows } = await admin.query<{ message_id: string }>(
      `INSERT INTO "${missing}".outbox (topic, key, payload) SELECT $1, 'late-' || (i % 3), '{}' FROM generate_series(1, 30) i RETURNING message_id`,
      [topic],
    );
    await assertDeliveredInOrder(topic, new Set([...w.committed, ...rows.map((x) => x.message_id)]), w.rolledBack);
    assert.equal(await up('late'), 1);
  } finally {
    await group.stop();
    await metrics.close();
    await admin.query(`DROP SCHEMA IF EXISTS "${missing}" CASCADE`);
  }
  assert.ok(changes.includes('late:unavailable') && changes.includes('late:running'), changes.join(' '));
});

test('integration: a relay group refuses bad lists before connecting anywhere', () => {
  const base = (outboxes: Array<{ name: string; databaseUrl: string; schema: string }>, extra = {}) => () => createRelayGroup({ ...groupOptions(outboxes), ...extra });
  const one = { name: 'one', databaseUrl: DATABASE_URL, schema: 'public' };
  assert.throws(base([]), ConfigError);
  assert.throws(base([one, { ...one, name: 'one', schema: 'other' }]), /given twice/);
  assert.throws(base([one, { ...one, name: 'two' }]), /same database and schema as outbox one/);
  assert.throws(base([{ ...one, name: 'Bad-Name' }]), /not an outbox name/);
  assert.throws(base([{ ...one, schema: 'no"quote' }]), /not a valid name/);
  assert.throws(base([{ ...one, databaseUrl: 'postgres://u:s3cret@h:5432/d@x' }]), (e: Error) => e instanceof ConfigError && !e.message.includes('s3cret'));
  assert.throws(base([one, { ...one, name: 'two', schema: 'x' }], { maxDatabaseConnections: 9 }), /need up to 18 connections/);
});

// Documented in docs/outboxes.md: an outbox publishes again within this long of its
// database answering, however long the outage grew the retry backoff.
const RECOVERY_BOUND_MS = 1_000;
const OUTAGE_MS = 10_000;

test('integration: a cut-off outbox publishes again within a second of its database answering, after an outage long enough to grow the retry backoff (default retry-max-delay-ms)', async (t) => {
  const database = uniqueName('outbox_recover');
  await admin.query(`CREATE DATABASE "${database}"`);
  const url = new URL(DATABASE_URL);
  url.pathname = `/${database}`;
  const schema = 'outbox_r';
  await migrate({ databaseUrl: url.toString(), schema });
  const pool = new pg.Pool({ connectionString: url.toString(), max: 2 });
  pool.on('error', () => undefined);
  const topic = await createTopic(2);
  // The retry settings left at their defaults (retry-max-delay-ms 30 s): what the backoff
  // grows to is what the recovery must not wait for. A short lease so that the outage
  // outlasts it and the shards have to be taken again.
  const { retryMaxDelayMs: _, ...options } = groupOptions([{ name: 'recovering', databaseUrl: url.toString(), schema }]);
  const group = createRelayGroup({ ...options, batchesInFlight: 2 });
  const metrics = instrumentRelayGroup(group, { processMetrics: false, sampleIntervalMs: 200 });
  await group.start();
  const relay = group.outboxes[0]!.relay!;
  const batchesUpTo: Array<{ lastId: number; at: number }> = [];
  relay.on('batch', (e) => {
    batchesUpTo.push({ lastId: e.lastId, at: performance.now() });
  });
  try {
    const insert = (db: pg.Pool, n: number) => db.query(`INSERT INTO "${schema}".outbox (topic, key, payload) SELECT $1, 'k' || (i % 5), '{}' FROM generate_series(1, $2::int) i`, [topic, n]);
    await insert(pool, 10);
    await waitFor('the first rows published', () => batchesUpTo.length > 0);
    await pool.end();
    await cutOff(database);
    // The outage itself, not a wait for something: 10 s, long enough for a retry backoff
    // doubling from 100 ms to reach 12.8 s and more, five times the 2 s lease.
    await new Promise((resolve) => setTimeout(resolve, OUTAGE_MS));

    // Back, and the writers with it: their new rows need the horizon probe to see them.
    await admin.query(`ALTER DATABASE "${database}" ALLOW_CONNECTIONS true`);
    const restoredAt = performance.now();
    const writer = new pg.Client({ connectionString: url.toString() });
    await writer.connect();
    const { rows } = await writer.query<{ id: number }>(`INSERT INTO "${schema}".outbox (topic, key, payload) VALUES ($1, 'after', '{}') RETURNING id`, [topic]);
    await writer.end();
    const afterId = rows[0]!.id;
    const published = await waitFor('the row written after the restore to be published', () => batchesUpTo.find((b) => b.lastId >= afterId), { timeoutMs: 60_000, intervalMs: 5 });
    const recoveryMs = published.at - restoredAt;
    t.diagnostic(`the row written after the restore published ${Math.round(recoveryMs)} ms after it`);
    assert.ok(recoveryMs < RECOVERY_BOUND_MS, `the row written after the restore published ${Math.round(recoveryMs)} ms after the database answered again (bound ${RECOVERY_BOUND_MS} ms)`);
    await waitFor('every outbox ready again', async () => (await metrics.readiness()).ready);
    const check = (await metrics.readiness()).checks['recovering.publishing'];
    assert.equal(check?.ok, true, JSON.stringify(check));
  } finally {
    await group.stop();
    await metrics.close();
    await admin.query(`ALTER DATABASE "${database}" ALLOW_CONNECTIONS true`).catch(() => undefined);
    await admin.query(`DROP DATABASE IF EXISTS "${database}" WITH (FORCE)`).catch(() => undefined);
  }
});
