import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { createRelay } from '../src/relay/relay.js';
import type { RelayEvents } from '../src/relay/relayEvents.js';
import { HEADERS } from '../src/shared/kafka.js';
import { createTestSchema, type TestSchema } from './helpers/db.js';
import { createTopic, readTopic, testBrokers, type ReadMessage } from './helpers/kafka.js';
import { waitFor } from './helpers/wait.js';
import { TEST_PRODUCER } from './helpers/producer.js';
import { sentCount, writeCommitted } from './helpers/outbox.js';

// A worker claims its next batch while the previous one is being published
// (src/relay/workerLoop.ts). These tests show it happens on a backlog, that a key's rows
// still go out in id order, and that a batch claimed ahead is rolled back unpublished when
// the batch before it did not send everything: here, a row dead-lettered that parks its
// key, whose later rows sit in the batch claimed ahead.

let db: TestSchema;
before(async () => {
  db = await createTestSchema('ahead');
});
after(async () => {
  await db.drop();
});

/** First deliveries' outbox ids of each key, in the order the partition holds them. */
function idsByKey(messages: ReadMessage[]): Map<string, number[]> {
  const seen = new Set<number>();
  const byKey = new Map<string, number[]>();
  for (const m of [...messages].sort((a, b) => a.partition - b.partition || Number(a.offset) - Number(b.offset))) {
    const id = Number(m.headers[HEADERS.outboxId]);
    if (seen.has(id)) continue;
    seen.add(id);
    byKey.set(m.key!, [...(byKey.get(m.key!) ?? []), id]);
  }
  return byKey;
}

test('integration: on a backlog each next batch is claimed while the previous one is published; every row goes out, each key in id order', async () => {
  const topic = await createTopic(3);
  const rows = 3_000;
  const ids = await writeCommitted(db, Array.from({ length: rows }, (_, i) => ({ topic, key: `k${i % 40}`, payload: { i } })));
  const batches: Array<RelayEvents['batch']> = [];
  const relay = createRelay({ producer: TEST_PRODUCER, databaseUrl: db.databaseUrl, kafkaBrokers: testBrokers(), schema: db.schema, batchSize: 100, batchesInFlight: 1 });
  relay.on('batch', (e) => batches.push(e));
  await relay.start();
  try {
    await waitFor('the backlog sent', async () => (await sentCount(db, topic)) === rows);
  } finally {
    await relay.stop();
  }
  const ahead = batches.filter((b) => b.claimedAhead);
  // The first batch has nothing before it; every later full batch of the drain is claimed ahead
  // unless a claim ahead lost a race with the horizon. Most must be.
  assert.ok(ahead.length >= batches.length / 2, `batches claimed ahead: ${ahead.length} of ${batches.length}`);
  // One worker: its batches follow each other in id order, none overlapping.
  for (let i = 1; i < batches.length; i++) assert.ok(batches[i]!.firstId > batches[i - 1]!.lastId, `batch ${i} starts after batch ${i - 1}`);
  assert.equal(batches.reduce((n, b) => n + b.count, 0), rows, 'every row in exactly one committed batch');
  const messages = await readTopic(topic, (m) => new Set(m.map((x) => x.headers[HEADERS.outboxId])).size >= rows);
  const byKey = idsByKey(messages);
  for (const [key, keyIds] of byKey) assert.deepEqual(keyIds, [...keyIds].sort((a, b) => a - b), `key ${key} in id order`);
  assert.deepEqual([...byKey.values()].flat().sort((a, b) => a - b), ids, 'every row delivered');
});

test('integration: a batch claimed ahead is rolled back when the batch before it parked a key; the key\'s later rows in it are not published', async () => {
  const topic = await createTopic(2);
  // Batch 1 (20 rows, full): 19 rows of other keys, then p's oversized row, dead-lettered and parking p.
  // Batch 2, claimed while batch 1 is published: p's next rows and more of the others.
  const fill = (from: number, n: number): Array<{ topic: string; key: string; payload: unknown }> =>
    Array.from({ length: n }, (_, i) => ({ topic, key: `o${(from + i) % 7}`, payload: { i: from + i } }));
  const [first] = await writeCommitted(db, fill(0, 19));
  const [poison] = await writeCommitted(db, [{ topic, key: 'p', payload: { pad: 'x'.repeat(3_000) } }]);
  const heldIds = await writeCommitted(db, [
    { topic, key: 'p', payload: { n: 2 } },
    { topic, key: 'p', payload: { n: 3 } },
  ]);
  const later = await writeCommitted(db, fill(19, 30));
  assert.equal(poison! - first!, 19, 'the oversized row is the 20th of the backlog, the last of the first batch');

  const batches: Array<RelayEvents['batch']> = [];
  const deadLetters: Array<RelayEvents['deadLetter']> = [];
  const relay = createRelay({
    producer: TEST_PRODUCER,
    databaseUrl: db.databaseUrl,
    kafkaBrokers: testBrokers(),
    schema: db.schema,
    batchSize: 20,
    batchesInFlight: 1,
    maxMessageBytes: 2_048,
  });
  relay.on('batch', (e) => batches.push(e));
  relay.on('deadLetter', (e) => deadLetters.push(e));
  await relay.start();
  try {
    // At least: were p's rows published (the batch claimed ahead kept), they would count too.
    await waitFor('every row of the other keys sent', async () => (await sentCount(db, topic)) >= 19 + later.length);
  } finally {
    await relay.stop();
  }
  assert.deepEqual(deadLetters.map((d) => [d.id, d.policy]), [[poison, 'park']]);
  const { rows: unsent } = await db.pool.query<{ id: string }>(`SELECT id FROM "${db.schema}".outbox WHERE sent_at IS NULL ORDER BY id`);
  assert.deepEqual(unsent.map((r) => Number(r.id)), heldIds, "p's later rows wait behind its dead letter, unsent");
  // The situation: a batch claimed ahead held p's later rows and was rolled back. Only a
  // claim locks them (FOR UPDATE; batch 1 stops at the oversized row, and claims after the
  // park skip p), a row lock leaves the locker's xid in xmax, and a rollback leaves it there.
  const { rows: lockers } = await db.pool.query<{ id: string; xmax: string; status: string | null }>(
    `SELECT id, xmax::text AS xmax, txid_status(((txid_current() >> 32) << 32) + xmax::text::bigint) AS status
       FROM "${db.schema}".outbox WHERE id = ANY($1::bigint[]) ORDER BY id`,
    [heldIds],
  );
  assert.ok(lockers.every((r) => r.xmax !== '0' && r.status === 'aborted'), `p's later rows were locked by a claim that rolled back: ${JSON.stringify(lockers)}`);
  assert.ok(batches.some((b) => b.firstId > poison!), 'the rows after the dead letter were claimed afresh and published');
  const messages = await readTopic(topic, (m) => new Set(m.map((x) => x.headers[HEADERS.outboxId])).size >= 19 + later.length);
  assert.deepEqual(messages.filter((m) => m.key === 'p'), [], 'nothing of p reached Kafka');
  const byKey = idsByKey(messages);
  for (const [key, keyIds] of byKey) assert.deepEqual(keyIds, [...keyIds].sort((a, b) => a - b), `key ${key} in id order`);
});
