import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { EventEmitter, once } from 'node:events';
import pg from 'pg';
import { partitionOutbox } from '../src/commands/partitions.js';
import { listPartitions, maintain, type PartitionMaintenance } from '../src/relay/partitions.js';
import { DETACH_MAX_WAIT_MS } from '../src/relay/partitionDetach.js';
import { createTestSchema, type TestSchema } from './helpers/db.js';

// A detach that cannot finish holds nothing up (issue 36): a report reading the outbox for
// minutes kept DETACH ... CONCURRENTLY waiting, no partition was created behind it, and the
// writers' headroom ran down. Each detach (and FINALIZE) now gives up after a bounded wait,
// creation runs first in every pass, and the pass names the transaction it waited for.

let db: TestSchema | undefined;
after(async () => {
  await db?.drop();
});

/**
 * A maintenance pass, failed rather than hung when it does not return (the bug: it waited
 * as long as the reader). Its detaches give up after `detachMaxWaitMs`: 1 s where the
 * reader blocks them; where nothing should, the default 30 s, as a detach on a loaded
 * machine (or behind an autovacuum, which yields only after deadlock_timeout, 1 s) can
 * take longer than 1 s without being blocked.
 */
async function pass(pool: pg.Pool, schema: string, what: string, detachMaxWaitMs = DETACH_MAX_WAIT_MS): Promise<PartitionMaintenance> {
  let timer: NodeJS.Timeout | undefined;
  const hung = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: the maintenance pass did not return within 60 s`)), 60_000);
  });
  try {
    return await Promise.race([maintain(pool, schema, { partitionsAhead: 2, retentionMs: 0, detachMaxWaitMs }), hung]);
  } finally {
    clearTimeout(timer);
  }
}

test('integration (partitioned outbox): behind a reader holding the outbox, a detach gives up after its wait and names the reader; the next pass still creates partitions; once the reader ends, the old partitions go', async () => {
  db = await createTestSchema('partblock');
  const { schema } = db;
  await partitionOutbox({ databaseUrl: db.databaseUrl, schema, partitionSizeIds: 1_000 });
  const pool = new pg.Pool({ connectionString: db.databaseUrl, max: 2 });
  const reader = new pg.Client({ connectionString: db.databaseUrl, application_name: 'test:report' });
  await reader.connect();
  const write = async (n: number): Promise<void> => {
    await db!.pool.query(`INSERT INTO "${schema}".outbox (topic, key) SELECT 't', 'k' || i FROM generate_series(1, $1) AS i`, [n]);
    await db!.pool.query(`UPDATE "${schema}".outbox SET sent_at = now() - interval '1 day' WHERE sent_at IS NULL`);
  };
  try {
    await pass(pool, schema, 'first pass'); // partitions ahead of the sequence
    await write(1_500); // ids 1-1500, all sent: outbox_p0 ([MINVALUE, 1000)) may go
    const { rows: me } = await reader.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    await reader.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
    await reader.query(`SELECT count(*) FROM "${schema}".outbox`); // holds the outbox until it ends

    const blocked = await pass(pool, schema, 'pass behind the reader', 1_000);
    assert.deepEqual(blocked.kept.filter((k) => k.reason === 'blocked').map((k) => k.partition), ['outbox_p0']);
    assert.equal(blocked.blocker?.pid, me[0]!.pid, JSON.stringify(blocked.blocker));
    assert.equal(blocked.blocker?.applicationName, 'test:report');
    assert.ok(Number(blocked.blocker?.transactionAgeSeconds) > 0);
    assert.deepEqual(blocked.dropped, []);
    assert.equal(await detachPendingGauge(db.databaseUrl, schema), 1, 'outbox_relay_partitions_detach_pending');

    // Writers move on meanwhile; the next pass creates what they need, the reader still open
    // and outbox_p0's detach pending.
    const before = (await listPartitions(pool, schema)).map((p) => p.name);
    await write(1_000); // ids up to 2500
    const next = await pass(pool, schema, 'pass with the detach pending', 1_000);
    assert.ok(next.created.length > 0, `created partitions behind the pending detach: ${JSON.stringify(next)}`);
    for (const name of next.created) assert.ok(!before.includes(name), name);
    assert.ok(next.headroomIds >= 2_000, `headroom ${next.headroomIds}: two whole partitions ahead`);
    assert.deepEqual(next.kept.filter((k) => k.reason === 'blocked').map((k) => k.partition), ['outbox_p0'], 'its FINALIZE gave up too');
    assert.equal(next.blocker?.pid, me[0]!.pid);

    await reader.query('COMMIT');
    const done = await pass(pool, schema, 'pass after the reader ended');
    // outbox_p0 finished, and outbox_p1000 ([1000, 2000), all sent, below the sequence) detached too.
    assert.deepEqual(done.dropped.sort(), ['outbox_p0', 'outbox_p1000'], JSON.stringify(done));
    assert.deepEqual(done.kept.filter((k) => k.reason === 'blocked'), []);
    const left = await listPartitions(pool, schema);
    assert.deepEqual(left.filter((p) => p.detachPending), [], 'no detach left pending');
    assert.equal(await detachPendingGauge(db.databaseUrl, schema), 0);
    const { rows } = await db.pool.query<{ n: number; low: number }>(`SELECT count(*)::int AS n, min(id)::int AS low FROM "${schema}".outbox`);
    assert.deepEqual(rows[0], { n: 501, low: 2_000 }, 'the rows of the dropped partitions only are gone');
  } finally {
    await reader.query('ROLLBACK').catch(() => undefined);
    await reader.end();
    await pool.end();
  }
});

/** outbox_relay_partitions_detach_pending after one sample of the metrics sampler on `schema`. */
async function detachPendingGauge(databaseUrl: string, schema: string): Promise<number> {
  const { instrumentRelay } = await import('../src/metrics/relayMetrics.js');
  const { Registry } = await import('prom-client');
  const sampled = new EventEmitter();
  const source = {
    options: { schema, databaseUrl, clientId: 'partitions-blocked-test', kafka: undefined, kafkaBrokers: [], kafkaSecurity: {} },
    get ownedShards() {
      sampled.emit('sample'); // read after each sample (afterSample)
      return [];
    },
    on: () => undefined,
    off: () => undefined,
  };
  const inst = instrumentRelay(source, { registry: new Registry(), sampleIntervalMs: 60_000 });
  try {
    await once(sampled, 'sample');
    return (await inst.metrics.partitionsDetachPending.get()).values[0]?.value ?? -1;
  } finally {
    await inst.close();
  }
}
