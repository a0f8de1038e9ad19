import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { createRelay, type Relay } from '../src/relay/relay.js';
import type { ClaimFloor } from '../src/relay/floor.js';
import { replayDeadLetters, discardDeadLetters } from '../src/commands/deadLetters.js';
import { enqueue, type OutboxMessage } from '../src/enqueue.js';
import { HEADERS } from '../src/shared/kafka.js';
import { createTestSchema, type TestSchema } from './helpers/db.js';
import { createTopic, readTopic, testBrokers, type ReadMessage } from './helpers/kafka.js';
import { waitFor } from './helpers/wait.js';
import { TEST_PRODUCER } from './helpers/producer.js';
import { writeCommitted } from './helpers/outbox.js';

// Claims start past what a worker has dealt with (src/relay/floor.ts). These are the
// ways rows come back below that floor; each must still go out, in order per key.

let db: TestSchema;
before(async () => {
  db = await createTestSchema('floors');
});
after(async () => {
  await db.drop();
});

const write = (messages: OutboxMessage[]): Promise<number[]> => writeCommitted(db, messages);

const floorsOf = (relay: Relay): number[] => [...(relay as unknown as { floors: Map<unknown, ClaimFloor> }).floors.values()].map((f) => f.floor);

function idsOfKey(messages: ReadMessage[], key: string): number[] {
  const ids = messages.filter((m) => m.key === key).map((m) => Number(m.headers[HEADERS.outboxId]));
  return ids.filter((id, i) => ids.indexOf(id) === i); // first deliveries
}

/** Park key `p` behind an oversized row, then publish enough other rows that every worker's floor passes it. */
async function parkThenPass(topic: string, relay: Relay): Promise<{ poison: number; held: number[] }> {
  const [before, poison, ...held] = await write([
    { topic, key: 'p', payload: { n: 0 } },
    { topic, key: 'p', payload: { pad: 'x'.repeat(3_000) } },
    { topic, key: 'p', payload: { n: 2 } },
    { topic, key: 'p', payload: { n: 3 } },
  ]);
  await waitFor('p parked', async () => (await db.pool.query(`SELECT 1 FROM "${db.schema}".outbox_parked_keys WHERE key = 'p'`)).rowCount);
  const others = await write(Array.from({ length: 300 }, (_, i) => ({ topic, key: `o${i % 50}`, payload: { i } })));
  await waitFor('the other keys published', async () => {
    const { rows } = await db.pool.query(`SELECT count(*)::int AS n FROM "${db.schema}".outbox WHERE id = ANY($1) AND sent_at IS NULL`, [others]);
    return rows[0]!.n === 0;
  });
  await waitFor('every floor past the parked rows', () => floorsOf(relay).every((f) => f > held[held.length - 1]!));
  assert.ok(before! < poison!);
  return { poison: poison!, held };
}

test('integration: a replayed dead letter comes back under its old id, below every floor, and goes out before its key\'s waiting rows', async () => {
  const topic = await createTopic(2);
  const relay = createRelay({ producer: TEST_PRODUCER, databaseUrl: db.databaseUrl, kafkaBrokers: testBrokers(), schema: db.schema, batchSize: 20, maxMessageBytes: 2_048 });
  await relay.start();
  try {
    const { poison, held } = await parkThenPass(topic, relay);
    // The operator shrinks the row and replays it.
    await db.pool.query(`UPDATE "${db.schema}".outbox_dead_letters SET payload = '{"n":1}' WHERE id = $1`, [poison]);
    const replay = await replayDeadLetters({ databaseUrl: db.databaseUrl, schema: db.schema, ids: [poison], rate: 1000 });
    assert.equal(replay.replayed, 1);
    const [after] = await write([{ topic, key: 'p', payload: { n: 4 } }]);
    const messages = await readTopic(topic, (m) => idsOfKey(m, 'p').length >= 5);
    assert.deepEqual(idsOfKey(messages, 'p').slice(1), [poison, ...held, after], "p's rows in id order, the replayed one first");
  } finally {
    await relay.stop();
  }
});

test('integration: a discarded dead letter releases its key; the held rows, below every floor, go out before the key\'s new rows', async () => {
  const topic = await createTopic(2);
  const relay = createRelay({ producer: TEST_PRODUCER, databaseUrl: db.databaseUrl, kafkaBrokers: testBrokers(), schema: db.schema, batchSize: 20, maxMessageBytes: 2_048 });
  await relay.start();
  try {
    const { poison, held } = await parkThenPass(topic, relay);
    const discarded = await discardDeadLetters({ databaseUrl: db.databaseUrl, schema: db.schema, ids: [poison], yes: true });
    assert.equal(discarded.discarded, 1);
    const [after] = await write([{ topic, key: 'p', payload: { n: 4 } }]);
    const messages = await readTopic(topic, (m) => idsOfKey(m, 'p').length >= 4);
    assert.deepEqual(idsOfKey(messages, 'p').slice(1), [...held, after]);
  } finally {
    await relay.stop();
  }
});

test('integration: after a forced horizon release, a row whose transaction commits late below the watermark is still found (the floor waits for it)', async () => {
  const topic = await createTopic(2);
  const relay = createRelay({ producer: TEST_PRODUCER, databaseUrl: db.databaseUrl, kafkaBrokers: testBrokers(), schema: db.schema, batchSize: 20, horizonMaxWaitMs: 300 });
  let forced = 0;
  relay.on('horizon', (h) => {
    if (h.forced) forced++;
  });
  await relay.start();
  const late = await db.pool.connect();
  try {
    await late.query('BEGIN');
    const [lateId] = await enqueue(late, [{ topic, key: 'late', payload: { n: 1 } }], { schema: db.schema });
    const others = await write(Array.from({ length: 100 }, (_, i) => ({ topic, key: `o${i % 10}`, payload: { i } })));
    await readTopic(topic, (m) => m.length >= others.length);
    assert.ok(forced > 0, 'the horizon was released by force past the open transaction');
    assert.ok(relay.watermark >= others[others.length - 1]!);
    assert.ok(floorsOf(relay).every((f) => f < (lateId!.id as number)), `floors ${floorsOf(relay)} stay below the open row ${lateId!.id}`);
    await late.query('COMMIT');
    const messages = await readTopic(topic, (m) => m.some((x) => x.key === 'late'));
    assert.deepEqual(idsOfKey(messages, 'late'), [lateId!.id]);
  } finally {
    late.release();
    await relay.stop();
  }
});
