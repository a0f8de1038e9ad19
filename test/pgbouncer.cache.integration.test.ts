// The cache helper (outbox-relay/cache) with its Postgres side behind a real PgBouncer
// 1.18 in transaction pooling: a consumer updates rows in its transactions and writes
// (setIfNewer) or invalidates the cache after the commit, while readers fill the cache
// with getOrLoad from loaders that query Postgres through the same pooler. At the end
// the cache holds each row's newest version; a stampede on cold keys loads each once.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { createCache, type Cache } from '../src/cache/cache.js';
import { createConsumer } from '../src/consumer/consumer.js';
import { createTestSchema, uniqueName, type TestSchema } from './helpers/db.js';
import { createTopic, testKafka } from './helpers/kafka.js';
import { produce, type TestEvent } from './helpers/consumer.js';
import { startPgBouncer, type PgBouncer } from './helpers/pgbouncer.js';
import { useRedis, type TestRedis } from './helpers/redis.js';
import { mulberry32 } from './faults/schedule.js';
import { waitFor } from './helpers/wait.js';

let db: TestSchema;
let redis: TestRedis;
let bouncer: PgBouncer;
let pooled: pg.Pool;
before(async () => {
  db = await createTestSchema('pgb_cache');
  redis = await useRedis();
  bouncer = await startPgBouncer({ mode: 'transaction', poolSize: 3 });
  pooled = new pg.Pool({ connectionString: bouncer.url(), max: 20 });
  pooled.on('error', () => undefined);
});
after(async () => {
  try {
    await pooled?.end();
  } finally {
    await bouncer?.stop();
    await redis?.stop();
    await db?.drop();
  }
});

const LAST = 12;

interface Row {
  version: number;
  value: string;
}

test('integration (PgBouncer, transaction pooling): consumer writes after commit, getOrLoad readers through the pooler: the cache ends at every row\'s newest version', async () => {
  const table = `"${db.schema}".profiles`;
  await db.pool.query(`CREATE TABLE ${table} (id text PRIMARY KEY, version bigint NOT NULL, value text NOT NULL)`);
  const cache: Cache = createCache({ client: redis.client, prefix: redis.prefix('pgbcache'), defaults: { ttlMs: 600_000, lockTtlMs: 2_000 } });
  const rnd = mulberry32(20);
  const entities = Array.from({ length: 12 }, (_, i) => (i % 2 === 0 ? `w-${i}` : `i-${i}`));
  const events: TestEvent[] = [];
  for (const entity of entities) {
    for (let version = 1; version <= LAST; version++) {
      const e: TestEvent = { key: entity, value: { entity, version, value: `${entity}@${version}` }, messageId: randomUUID(), partition: Math.floor(rnd() * 3) };
      events.push(e);
      if (rnd() < 0.25) events.push({ ...e, partition: Math.floor(rnd() * 3) }); // redelivered: same message id
      if (rnd() < 0.2) events.push({ ...e, messageId: randomUUID(), partition: Math.floor(rnd() * 3) }); // late: an old version again
    }
  }
  for (let i = events.length - 1; i > 0; i--) {
    const j = Math.floor(rnd() * (i + 1));
    [events[i], events[j]] = [events[j]!, events[i]!];
  }
  const topic = await createTopic(3);
  let hooksRun = 0;
  const consumer = createConsumer<{ entity: string; version: number; value: string }>({
    kafka: testKafka(),
    groupId: uniqueName('pgbcache'),
    topics: topic,
    pool: pooled,
    schema: db.schema,
    messagesPerTransaction: 5,
    sessionTimeoutMs: 10_000,
    heartbeatIntervalMs: 500,
    maxWaitTimeMs: 100,
    handler: async (message, ctx) => {
      const e = message.value;
      await ctx.client.query(
        `INSERT INTO ${table} (id, version, value) VALUES ($1, $2, $3)
         ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version, value = EXCLUDED.value WHERE ${table}.version < EXCLUDED.version`,
        [e.entity, e.version, e.value],
      );
      ctx.afterCommit(async () => {
        if (e.entity.startsWith('w-')) await cache.setIfNewer(e.entity, { version: e.version, value: e.value }, e.version);
        else await cache.invalidate(e.entity, e.version);
        hooksRun++;
      });
    },
  });
  let loads = 0;
  // The Postgres-side loader, through PgBouncer: a read in a transaction of its own.
  const load = async (entity: string): Promise<Row> => {
    loads++;
    const client = await pooled.connect();
    try {
      await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
      const { rows } = await client.query<{ version: string; value: string }>(`SELECT version, value FROM ${table} WHERE id = $1`, [entity]);
      await client.query('COMMIT');
      return rows[0] ? { version: Number(rows[0].version), value: rows[0].value } : { version: 0, value: '' };
    } finally {
      client.release();
    }
  };
  let reading = true;
  const readers = [...entities, ...entities].map(async (entity) => {
    while (reading) await cache.getOrLoad(entity, () => load(entity), { versionOf: (x) => x.version, ttlMs: 600_000 });
  });
  try {
    await consumer.start();
    for (let i = 0; i < events.length; i += 15) await produce(topic, events.slice(i, i + 15));
    const distinct = new Set(events.map((e) => e.messageId)).size;
    await waitFor('every message handled and its hook run', () => consumer.stats().processed === distinct && hooksRun === distinct && consumer.stats().duplicates === events.length - distinct, {
      timeoutMs: 90_000,
    });
    assert.equal(consumer.stats().afterCommitErrors, 0);
  } finally {
    reading = false;
    await Promise.all(readers);
    await consumer.stop();
  }
  await cache.whenIdle();
  assert.ok(loads > 0, 'readers loaded from Postgres through the pooler');

  const { rows } = await db.pool.query<{ id: string; version: string; value: string }>(`SELECT id, version, value FROM ${table} ORDER BY id`);
  assert.equal(rows.length, entities.length);
  for (const row of rows) {
    assert.equal(Number(row.version), LAST, `${row.id} at its last version in Postgres`);
    const read = await cache.getOrLoad(row.id, () => load(row.id), { versionOf: (x) => x.version });
    assert.deepEqual(read, { version: LAST, value: row.value }, `${row.id} through the cache`);
    if (row.id.startsWith('w-')) assert.deepEqual((await cache.peek(row.id))?.value, { version: LAST, value: row.value }, `${row.id} written by the last hook`);
  }

  // A stampede on cold keys: 30 readers per key at once, one load per key.
  const cold = createCache({ client: redis.client, prefix: redis.prefix('pgbcold'), defaults: { ttlMs: 600_000, lockTtlMs: 5_000, waitMs: 10_000 } });
  loads = 0;
  const reads = await Promise.all(entities.flatMap((entity) => Array.from({ length: 30 }, () => cold.getOrLoad(entity, () => load(entity), { versionOf: (x) => x.version }))));
  assert.ok(reads.every((r) => r.version === LAST));
  assert.equal(loads, entities.length, 'single flight: one Postgres load per key');
  await cold.whenIdle();
});
