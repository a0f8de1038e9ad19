import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { createRelay } from '../src/relay/relay.js';
import { migrate } from '../src/commands/migrate.js';
import { listPartitions } from '../src/relay/partitions.js';
import { maintainPartitions, partitionOutbox, type PartitionMaintenance } from '../src/commands/partitions.js';
import { createTestSchema, type TestSchema } from './helpers/db.js';
import { createTopic, testBrokers } from './helpers/kafka.js';
import { waitFor } from './helpers/wait.js';
import { TEST_PRODUCER } from './helpers/producer.js';
import { assertDeliveredInOrder } from './helpers/workload.js';
import { startWriters } from './helpers/partitionWriters.js';
import { writeCommitted } from './helpers/outbox.js';

// The partitioned outbox under load (docs/partitioning.md): the conversion and the
// retention by partition drop, each with writers and a relay running.

const schemas: TestSchema[] = [];
async function schema(prefix: string): Promise<TestSchema> {
  const s = await createTestSchema(prefix);
  schemas.push(s);
  return s;
}
after(async () => {
  for (const s of schemas) await s.drop();
});

async function unsent(db: TestSchema): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".outbox WHERE sent_at IS NULL`);
  return rows[0]!.n;
}

async function relkind(db: TestSchema): Promise<string> {
  const { rows } = await db.pool.query<{ k: string }>(`SELECT relkind::text AS k FROM pg_class WHERE oid = $1::regclass`, [`"${db.schema}".outbox`]);
  return rows[0]!.k;
}

test('integration: partition-outbox converts a live outbox (writers and a relay running): no row lost, per-key order kept, no writer blocked long; again it does nothing', async (t) => {
  const db = await schema('partconv');
  const topic = await createTopic(4);
  // Partitions of 1,000 ids go fast under four writers, and a writer stops at its first
  // error: the relay keeps ten ahead, every 200 ms.
  const relay = createRelay({ producer: TEST_PRODUCER, databaseUrl: db.databaseUrl, kafkaBrokers: testBrokers(), schema: db.schema, batchSize: 100, partitionMaintenanceIntervalMs: 200, partitionsAhead: 10 });
  await relay.start();
  const writers = startWriters(db.pool, db.schema, topic, 4, 40);
  try {
    await waitFor('rows before the conversion', () => writers.rows >= 1_500);
    const before = writers.rows;
    const result = await partitionOutbox({ pool: db.pool, schema: db.schema, partitionSizeIds: 1_000 });
    await maintainPartitions({ pool: db.pool, schema: db.schema, partitionsAhead: 10, retention: '7d' });
    assert.equal(result.converted, true);
    assert.ok(writers.rows > before, 'writers committed while the conversion ran');
    const afterConversion = writers.rows;
    await waitFor('rows after the conversion', () => {
      if (writers.error) throw writers.error;
      return writers.rows >= afterConversion + 1_500;
    });
    await writers.stop();
    t.diagnostic(`conversion: ${result.lockRetries} lock retries; longest writer transaction ${writers.longestTransactionMs.toFixed(0)} ms; ${writers.rows} rows`);
    assert.ok(writers.longestTransactionMs < 2_000, `longest writer transaction ${writers.longestTransactionMs.toFixed(0)} ms`);

    assert.equal(await relkind(db), 'p');
    const parts = await listPartitions(db.pool, db.schema);
    assert.equal(parts[0]!.name, 'outbox_p0');
    assert.equal(parts[0]!.lower, null);
    assert.equal(parts[0]!.upper, result.firstBoundId);
    assert.ok(parts.length >= 3, 'the old table and partitions from its bound on');

    await assertDeliveredInOrder(topic, writers.committed, new Set());
    await waitFor('every row marked sent', async () => (await unsent(db)) === 0);
    const { rows } = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".outbox WHERE topic = $1`, [topic]);
    assert.equal(rows[0]!.n, writers.committed.size, 'every committed row is in the partitioned outbox');

    const again = await partitionOutbox({ pool: db.pool, schema: db.schema, partitionSizeIds: 1_000 });
    assert.equal(again.converted, false);
    assert.equal(again.firstBoundId, result.firstBoundId);
  } finally {
    await writers.stop().catch(() => undefined);
    await relay.stop();
  }
});

test('integration: writers are never refused while the conversion cannot get its lock: its bound stays ahead of them, and a conversion that gives up removes its check', async () => {
  const db = await schema('partahead');
  const topic = await createTopic(1);
  const writers = startWriters(db.pool, db.schema, topic, 4, 40);
  const holder = await db.pool.connect();
  const boundCheck = async (): Promise<string | undefined> => {
    const { rows } = await db.pool.query<{ def: string }>(
      `SELECT pg_get_constraintdef(oid) AS def FROM pg_constraint WHERE conname = 'outbox_partition_bound' AND conrelid = $1::regclass`,
      [`"${db.schema}".outbox`],
    );
    return rows[0]?.def;
  };
  try {
    await waitFor('rows before the conversion', () => writers.rows >= 500);
    // Partitions of 1,000 ids, and once the check is in place a transaction holds the
    // outbox while the writers take three partitions' worth of ids: a bound one partition
    // above the sequence would refuse them (check violation). The conversion gives up
    // 10 s after it started, then tries to remove its check.
    // The holder's snapshot is taken before the conversion starts, so the conversion's
    // concurrent index build (after the check) waits for it: the conversion cannot finish
    // before the holder locks the outbox (it did, under load, and the test then failed).
    await holder.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
    await holder.query('SELECT 1');
    const conversion = partitionOutbox({ pool: db.pool, schema: db.schema, partitionSizeIds: 1_000, maxWaitMs: 10_000 }).then(
      () => assert.fail('converted while the outbox was held'),
      (error: Error & { retriable?: boolean }) => error,
    );
    await waitFor('the bound check in place', async () => (await boundCheck()) !== undefined, { intervalMs: 5 });
    await holder.query(`LOCK TABLE "${db.schema}".outbox IN ROW EXCLUSIVE MODE`);
    const held = writers.rows;
    await waitFor('writers taking three partitions of ids', () => {
      if (writers.error) throw writers.error;
      return writers.rows >= held + 3_000;
    });
    // Given up, it tries to remove its check: the holder commits, and a try gets the lock.
    await waitFor('the conversion trying to remove its check', async () => {
      const { rowCount } = await db.pool.query(
        `SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1 AND query NOT LIKE '%ADD CONSTRAINT%'`,
        [`ALTER TABLE "${db.schema}".outbox DROP CONSTRAINT IF EXISTS outbox_partition_bound%`],
      );
      return rowCount === 1;
    }, { intervalMs: 5 });
    await holder.query('COMMIT');
    const failure = await conversion;
    assert.match(failure.message, /its deadline: a long transaction holds/);
    assert.doesNotMatch(failure.message, /could not be removed/);
    assert.equal(failure.retriable, true);
    assert.equal(await boundCheck(), undefined, 'the check is removed');
    const converted = await partitionOutbox({ pool: db.pool, schema: db.schema, partitionSizeIds: 1_000, maxWaitMs: 60_000 });
    assert.equal(converted.converted, true);
    const after = writers.rows;
    await waitFor('rows after the conversion', () => {
      if (writers.error) throw writers.error;
      return writers.rows >= after + 500;
    });
    await writers.stop();
    const { rows } = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".outbox`);
    assert.equal(rows[0]!.n, writers.committed.size, 'every committed row is in the outbox');
  } finally {
    await holder.query('ROLLBACK').catch(() => undefined);
    holder.release();
    await writers.stop().catch(() => undefined);
  }
});

test('integration: the converted outbox keeps its sequence, defaults, generated shard, checks and the relay role grants; migrate stays a no-op on it', async () => {
  const db = await schema('partshape');
  await db.pool.query(`DO $$ BEGIN IF to_regrole('outbox_part_probe') IS NULL THEN CREATE ROLE outbox_part_probe NOLOGIN; END IF; END $$`);
  await db.pool.query(`GRANT SELECT, DELETE ON "${db.schema}".outbox TO outbox_part_probe`);
  await db.pool.query(`GRANT UPDATE (sent_at, attempts, last_error) ON "${db.schema}".outbox TO outbox_part_probe`);
  const started = performance.now();
  const result = await partitionOutbox({ pool: db.pool, schema: db.schema, partitionSizeIds: 1_000 });
  assert.ok(performance.now() - started < 5_000, 'an empty outbox converts at once');
  assert.deepEqual([result.converted, result.firstBoundId], [true, 1_000]);
  // migrate stays a no-op, and its schema check accepts the partitioned table.
  const again = await migrate({ databaseUrl: db.databaseUrl, schema: db.schema });
  assert.deepEqual(again.applied, []);
  const [id] = await writeCommitted(db, [{ topic: 't', key: 'k', payload: { a: 1 } }]);
  const { rows } = await db.pool.query(`SELECT shard, attempts, message_id IS NOT NULL AS has_message_id FROM "${db.schema}".outbox WHERE id = $1`, [id]);
  assert.deepEqual(rows, [{ shard: (await db.pool.query(`SELECT (hashtext('k') & 255)::smallint AS s`)).rows[0].s, attempts: 0, has_message_id: true }]);
  await assert.rejects(
    db.pool.query(`INSERT INTO "${db.schema}".outbox (topic, key, payload, payload_bytes) VALUES ('t', 'k', '{}', '\\x00')`),
    /outbox_one_payload/,
  );
  const owned = await db.pool.query(
    `SELECT c.relname FROM pg_depend d JOIN pg_class c ON c.oid = d.refobjid WHERE d.objid = $1::regclass AND d.deptype = 'a'`,
    [`"${db.schema}".outbox_id_seq`],
  );
  assert.deepEqual(owned.rows, [{ relname: 'outbox' }], 'the sequence belongs to the partitioned table, not to a partition retention may drop');
  const grants = await db.pool.query(
    `SELECT has_table_privilege('outbox_part_probe', $1, 'SELECT') AS sel, has_table_privilege('outbox_part_probe', $1, 'DELETE') AS del,
            has_column_privilege('outbox_part_probe', $1, 'sent_at', 'UPDATE') AS upd, has_column_privilege('outbox_part_probe', $1, 'topic', 'UPDATE') AS upd_topic`,
    [`"${db.schema}".outbox`],
  );
  assert.deepEqual(grants.rows, [{ sel: true, del: true, upd: true, upd_topic: false }]);
  await db.pool.query(`REVOKE ALL ON "${db.schema}".outbox FROM outbox_part_probe`);
  // Producer-side dedup needs a unique index on dedup_key alone, which a partitioned table
  // cannot have: refused with the reason, not Postgres's ON CONFLICT error.
  await assert.rejects(writeCommitted(db, [{ topic: 't', key: 'k', payload: {}, dedupKey: 'd1' }]), {
    name: 'OutboxError',
    message: /dedupKey needs the outbox's unique dedup index, which a partitioned outbox cannot have \(docs\/partitioning\.md\)/,
  });
});

test('integration: maintain-partitions with writers and a relay running: partitions created ahead, fully sent ones dropped, a parked key\'s partition and its dead letter kept, per-key order across boundaries and detaches', async () => {
  const db = await schema('partret');
  await partitionOutbox({ pool: db.pool, schema: db.schema, partitionSizeIds: 1_000 });
  const topic = await createTopic(4);
  const parkedTopic = await createTopic(1);
  // A row the relay refuses (over its size limit) parks its key; the key's next row stays
  // unsent in the first partition, which must therefore stay.
  const [deadId, waitingId] = await writeCommitted(db, [
    { topic: parkedTopic, key: 'parked', payload: { pad: 'x'.repeat(3_000) } },
    { topic: parkedTopic, key: 'parked', payload: { n: 2 } },
  ]);
  const relay = createRelay({
    producer: TEST_PRODUCER, databaseUrl: db.databaseUrl, kafkaBrokers: testBrokers(), schema: db.schema,
    batchSize: 100, maxMessageBytes: 2_048, deadLetterPolicy: 'park',
  });
  await relay.start();
  const writers = startWriters(db.pool, db.schema, topic, 4, 40);
  const passes: PartitionMaintenance[] = [];
  let maintaining = true;
  const maintainer = (async () => {
    while (maintaining) {
      passes.push(await maintainPartitions({ pool: db.pool, schema: db.schema, retention: '0s', partitionsAhead: 4 }));
      await new Promise((r) => setTimeout(r, 100)); // the cadence of a maintenance loop
    }
  })();
  try {
    await waitFor('partitions dropped while writers write', () => passes.flatMap((p) => p.dropped).length >= 2 && writers.rows >= 4_000, { timeoutMs: 120_000 });
    maintaining = false;
    await maintainer;
    await writers.stop();
    await assertDeliveredInOrder(topic, writers.committed, new Set());
    assert.ok(passes.every((p) => p.headroomIds >= 0), 'the writers never ran out of partitions');
    assert.ok(passes.flatMap((p) => p.created).length >= 2);

    const final = await maintainPartitions({ pool: db.pool, schema: db.schema, retention: '0s' });
    assert.deepEqual(final.kept.find((k) => k.partition === 'outbox_p0'), { partition: 'outbox_p0', reason: 'unsent rows' });
    const parts = await listPartitions(db.pool, db.schema);
    assert.equal(parts[0]!.name, 'outbox_p0');
    const { rows: dead } = await db.pool.query(`SELECT id FROM "${db.schema}".outbox_dead_letters`);
    assert.deepEqual(dead.map((r) => Number(r.id)), [deadId]);
    const { rows: waiting } = await db.pool.query(`SELECT id FROM "${db.schema}".outbox WHERE sent_at IS NULL`);
    assert.deepEqual(waiting.map((r) => Number(r.id)), [waitingId]);
    // Dropped partitions' rows are gone, every other committed row is still there, sent.
    const dropped = new Set(passes.flatMap((p) => p.dropped).concat(final.dropped));
    assert.ok(!parts.some((p) => dropped.has(p.name)));
  } finally {
    maintaining = false;
    await maintainer.catch(() => undefined);
    await writers.stop().catch(() => undefined);
    await relay.stop();
  }
});
