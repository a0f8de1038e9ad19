import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { createRelay } from '../src/relay/relay.js';
import type { RelayEvents } from '../src/relay/relayEvents.js';
import { SMALL_BATCHES_BEFORE_HANDOVER } from '../src/relay/workerShards.js';
import { shardsOf } from '../src/relay/shards.js';
import { createTestSchema, type TestSchema } from './helpers/db.js';
import { createTopic, testBrokers } from './helpers/kafka.js';
import { waitFor } from './helpers/wait.js';
import { TEST_PRODUCER } from './helpers/producer.js';
import { writeCommitted } from './helpers/outbox.js';
import { assertDeliveredInOrder } from './helpers/workload.js';

// At a trickle a relay's second worker hands its shards to worker 0, and worker 0 hands
// them back at its first full batch (src/relay/workerShards.ts); each key's rows stay in
// id order throughout.

let db: TestSchema;
before(async () => {
  db = await createTestSchema('workershards');
});
after(async () => {
  await db.drop();
});

/** `n` keys on the shards (sql/001_outbox.sql: hashtext(key) & 255) worker `index` of 2 handles. */
async function keysOfWorker(index: number, n: number): Promise<string[]> {
  const { rows } = await db.pool.query<{ k: string }>(
    `SELECT k FROM (SELECT 'key-' || i AS k FROM generate_series(1, 5000) AS i) AS x WHERE (hashtext(k) & 255) = ANY($1::int[]) LIMIT $2`,
    [shardsOf(index, 2), n],
  );
  return rows.map((r) => r.k);
}

test('integration: at a trickle the second worker hands its shards to worker 0; a backlog hands them back; each key stays in id order', async () => {
  const topic = await createTopic(3);
  const [second, first] = await Promise.all([keysOfWorker(1, 40), keysOfWorker(0, 40)]);
  const relay = createRelay({ producer: TEST_PRODUCER, databaseUrl: db.databaseUrl, kafkaBrokers: testBrokers(), schema: db.schema, batchSize: 100, batchesInFlight: 2 });
  const batches: Array<RelayEvents['batch']> = [];
  relay.on('batch', (b) => batches.push(b));
  const publishedBy = (id: number): number | undefined => batches.find((b) => b.firstId <= id && id <= b.lastId)?.worker;
  await relay.start();
  try {
    // One row at a time on the second worker's shards, each published before the next.
    const trickle: number[] = [];
    for (let i = 0; i < SMALL_BATCHES_BEFORE_HANDOVER + 30; i++) {
      const [id] = await writeCommitted(db, [{ topic, key: second[i % second.length]!, payload: { i } }]);
      trickle.push(id!);
      await waitFor(`row ${id} published`, () => publishedBy(id!) !== undefined, { intervalMs: 2 });
    }
    assert.equal(publishedBy(trickle[0]!), 1, 'at first the second worker publishes its own shards');
    const last = trickle.slice(-10).map(publishedBy);
    assert.deepEqual(last, Array(10).fill(0), `after ${SMALL_BATCHES_BEFORE_HANDOVER} small batches worker 0 publishes them (workers: ${trickle.map(publishedBy).join('')})`);

    // A backlog on both workers' shards: worker 0's first full batch hands the shards back.
    const from = batches.length;
    const backlog = Array.from({ length: 2_000 }, (_, i) => ({ topic, key: (i % 2 ? second : first)[i % 40]!, payload: { i } }));
    const ids = await writeCommitted(db, backlog);
    await waitFor('the backlog published', () => ids.every((id) => publishedBy(id) !== undefined));
    const workers = new Set(batches.slice(from).map((b) => b.worker));
    assert.deepEqual([...workers].sort(), [0, 1], 'both workers publish the backlog');
    assert.ok(batches.slice(from).some((b) => b.worker === 1 && b.count > 0));
  } finally {
    await relay.stop();
  }
  const { rows } = await db.pool.query<{ message_id: string }>(`SELECT message_id FROM "${db.schema}".outbox WHERE topic = $1`, [topic]);
  await assertDeliveredInOrder(topic, new Set(rows.map((r) => r.message_id)), new Set());
});
