import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { createRelay, type RelayEvents } from '../src/relay/relay.js';
import { createTestSchema, type TestSchema } from './helpers/db.js';
import { createTopic, readTopic, testBrokers } from './helpers/kafka.js';
import { waitFor } from './helpers/wait.js';
import { pausableBroker } from './helpers/pausableBroker.js';
import { TEST_PRODUCER } from './helpers/producer.js';
import { leaseShards } from './helpers/leases.js';

// A relay that loses the lease of a shard while Kafka is acknowledging a batch must roll
// the whole batch back: the mark and COMMIT go to Postgres in one message
// (src/relay/batch.ts), and the lease check inside the prepared mark
// (src/relay/sql/markSent.ts) is what keeps that COMMIT from happening. Without it, the
// batch's row on the shard still leased would be marked sent and committed.

let db: TestSchema;
before(async () => {
  db = await createTestSchema('leaselost');
});
after(async () => {
  await db.drop();
});


/** Two keys on different shards (shard = hashtext(key) & 255, sql/001_outbox.sql). */
async function keysOnTwoShards(): Promise<[string, string]> {
  const { rows } = await db.pool.query<{ key: string; shard: number }>(
    `SELECT 'lease-' || g AS key, (hashtext('lease-' || g) & 255) AS shard FROM generate_series(1, 10) AS g`,
  );
  const first = rows[0]!;
  const other = rows.find((r) => r.shard !== first.shard)!;
  return [first.key, other.key];
}

test('integration: a lease lost while Kafka acknowledges a batch rolls the whole batch back (no row of it marked sent), and the error names the lost lease', async () => {
  const topic = await createTopic(2);
  const sockets = pausableBroker();
  // One worker, so one batch claims both rows; a long TTL, so no renewal round runs between the steal and the check.
  const relay = createRelay({ databaseUrl: db.databaseUrl, kafkaBrokers: testBrokers(), producer: TEST_PRODUCER, schema: db.schema, batchesInFlight: 1, leaseTtlMs: 60_000 });
  const errors: Array<RelayEvents['batchError']> = [];
  const batches: Array<RelayEvents['batch']> = [];
  relay.on('batchError', (e) => {
    // Synchronously, before the retry: its send then waits, so it cannot mark the row still leased.
    sockets.pause();
    errors.push(e);
  });
  relay.on('batch', (b) => batches.push(b));
  await sockets.own(() => relay.start());
  const s = `"${db.schema}"`;
  try {
    await waitFor('every shard owned', () => relay.ownedShards.length === 256);
    await db.pool.query(`INSERT INTO ${s}.outbox (topic, key, payload) VALUES ($1, 'warm-up', '{}')`, [topic]);
    await waitFor('the warm-up row published', () => batches.length > 0);

    const [kept, stolen] = await keysOnTwoShards();
    sockets.pause();
    const { rows } = await db.pool.query<{ id: number; key: string; shard: number }>(
      `INSERT INTO ${s}.outbox (topic, key, payload) VALUES ($1, $2, '{}'), ($1, $3, '{}') RETURNING id, key, shard`,
      [topic, kept, stolen],
    );
    const stolenShard = rows.find((r) => r.key === stolen)!.shard;
    // Claimed (FOR UPDATE: the batch's transaction holds an xid) and waiting for Kafka. The
    // batch's statements carry its comment (sql/claim.ts): the membership round's heartbeat
    // transaction also holds an xid between its statements, and was once taken for it.
    await waitFor('the batch claimed and waiting for Kafka', async () => {
      const { rows: open } = await db.pool.query(
        `SELECT 1 FROM pg_stat_activity WHERE application_name = $1 AND backend_xid IS NOT NULL AND state = 'idle in transaction'
            AND starts_with(query, '/* outbox-relay batch ')`,
        [relay.applicationName],
      );
      return open.length > 0;
    });
    assert.equal(batches.length, 1, 'the two rows were not published yet');
    // Another relay takes the shard of one of the two rows (its lease, not a row lock: the batch holds no lock on the lease table).
    await leaseShards(db.pool, db.schema, 'thief', `shard = ${stolenShard}`);
    sockets.resume();

    const ended = await waitFor('the batch to end', () => errors[0] ?? batches[1]);
    assert.ok('error' in ended, `the batch committed: ${JSON.stringify(ended)}`);
    const error = ended;
    assert.match(error.error.message, /lost the lease of a shard while publishing; rolled back/);
    assert.deepEqual((error.error as { context?: unknown }).context, { expected: 2, changed: 1 });
    // Both were published (at least once: the new owner sends them again), neither marked sent.
    await readTopic(topic, (m) => m.some((x) => x.key === kept) && m.some((x) => x.key === stolen));
    const { rows: after } = await db.pool.query<{ key: string; sent: boolean }>(
      `SELECT key, sent_at IS NOT NULL AS sent FROM ${s}.outbox WHERE id = ANY($1::bigint[]) ORDER BY key`,
      [rows.map((r) => r.id)],
    );
    assert.deepEqual(after.map((r) => r.sent), [false, false], 'the batch was rolled back whole');
    assert.equal(batches.length, 1, 'no batch event for the rolled-back batch');
  } finally {
    sockets.restore();
    await relay.stop();
  }
});
