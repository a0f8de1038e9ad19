import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { Partitioners } from 'kafkajs';
import { createRelay } from '../src/relay/relay.js';
import type { RelayOptions } from '../src/relay/options.js';
import type { OutboxMessage } from '../src/enqueue.js';
import { HEADERS } from '../src/shared/kafka.js';
import { classifyPublishError } from '../src/relay/publishErrors.js';
import { createTestSchema, uniqueName, type TestSchema } from './helpers/db.js';
import { createTopic, readTopic, testBrokers, testKafka } from './helpers/kafka.js';
import { waitFor } from './helpers/wait.js';
import { TEST_PRODUCER } from './helpers/producer.js';
import { writeCommitted } from './helpers/outbox.js';

let db: TestSchema;
before(async () => {
  db = await createTestSchema('deadletter');
});
after(async () => {
  await db.drop();
});

const write = (messages: OutboxMessage[]): Promise<number[]> => writeCommitted(db, messages);

/** A topic whose broker-side max.message.bytes is small: bigger records are refused by Kafka itself. */
async function smallTopic(): Promise<string> {
  const topic = uniqueName('small');
  const admin = testKafka().admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic, numPartitions: 2, configEntries: [{ name: 'max.message.bytes', value: '2000' }] }], waitForLeaders: true });
  await admin.disconnect();
  return topic;
}

const relayOptions = (extra: Partial<RelayOptions> = {}): RelayOptions => ({
  producer: TEST_PRODUCER,
  databaseUrl: db.databaseUrl,
  kafkaBrokers: testBrokers(),
  schema: db.schema,
  ...extra,
});

async function deadLetters(): Promise<Array<{ id: number; error_name: string; reason: string; policy: string; attempts: number; key: string }>> {
  return (await db.pool.query(`SELECT id, error_name, reason, policy, attempts, key FROM "${db.schema}".outbox_dead_letters ORDER BY id`)).rows;
}

test('integration: Kafka refusing a record (MESSAGE_TOO_LARGE) dead-letters that row only; its key waits (park) while other keys flow, in order', async () => {
  const topic = await smallTopic();
  const big = { pad: 'x'.repeat(5_000) };
  const ids = await write([
    { topic, key: 'a', payload: { n: 1 } },
    { topic, key: 'a', payload: big },
    { topic, key: 'b', payload: { n: 1 } },
    { topic, key: 'a', payload: { n: 3 } },
    { topic, key: 'b', payload: { n: 2 } },
  ]);
  const relay = createRelay(relayOptions());
  await relay.start();
  try {
    const messages = await readTopic(topic, (m) => m.length >= 3);
    assert.deepEqual(
      messages.map((m) => `${m.key}:${m.headers[HEADERS.outboxId]}`).sort(),
      [`a:${ids[0]}`, `b:${ids[2]}`, `b:${ids[4]}`].sort(),
    );
    const dead = await waitFor('the dead letter', async () => ((await deadLetters()).length === 1 ? deadLetters() : undefined));
    assert.equal(dead[0]!.id, ids[1]);
    assert.equal(dead[0]!.error_name, 'MESSAGE_TOO_LARGE');
    assert.match(dead[0]!.reason, /MESSAGE_TOO_LARGE/);
    assert.equal(dead[0]!.policy, 'park');
    const { rows: parked } = await db.pool.query(`SELECT key, dead_letter_id FROM "${db.schema}".outbox_parked_keys WHERE topic = $1`, [topic]);
    assert.deepEqual(parked, [{ key: 'a', dead_letter_id: ids[1] }]);
    const { rows: waiting } = await db.pool.query(`SELECT id FROM "${db.schema}".outbox WHERE topic = $1 AND sent_at IS NULL`, [topic]);
    assert.deepEqual(waiting.map((r) => Number(r.id)), [ids[3]], "a's later row waits behind its parked row");

    // New rows of the parked key keep waiting; other keys keep flowing.
    const more = await write([{ topic, key: 'a', payload: { n: 4 } }, { topic, key: 'b', payload: { n: 3 } }]);
    await waitFor('b to flow past the parked key', async () => {
      const { rows } = await db.pool.query(`SELECT sent_at FROM "${db.schema}".outbox WHERE id = $1`, [more[1]]);
      return rows[0]?.sent_at;
    });
    const { rows: still } = await db.pool.query(`SELECT id FROM "${db.schema}".outbox WHERE topic = $1 AND sent_at IS NULL ORDER BY id`, [topic]);
    assert.deepEqual(still.map((r) => Number(r.id)), [ids[3], more[0]]);
  } finally {
    await relay.stop();
  }
});

test('integration: under the skip policy (per topic) the key goes on without its dead letter', async () => {
  const topic = await smallTopic();
  const ids = await write([
    { topic, key: 'a', payload: { pad: 'x'.repeat(5_000) } },
    { topic, key: 'a', payload: { n: 2 } },
  ]);
  const relay = createRelay(relayOptions({ deadLetterPolicy: 'park', deadLetterPolicyByTopic: { [topic]: 'skip' } }));
  await relay.start();
  try {
    const messages = await readTopic(topic, (m) => m.length >= 1);
    assert.equal(Number(messages[0]!.headers[HEADERS.outboxId]), ids[1]);
    const dead = await waitFor('the dead letter', async () => (await deadLetters()).find((d) => d.id === ids[0]));
    assert.equal(dead.policy, 'skip');
    const { rows } = await db.pool.query(`SELECT count(*)::int AS n FROM "${db.schema}".outbox_parked_keys WHERE topic = $1`, [topic]);
    assert.equal(rows[0].n, 0);
  } finally {
    await relay.stop();
  }
});

test('integration: rows that fail validation (empty key, illegal topic name, over --max-message-bytes) are dead-lettered at once with a clear reason, never retried', async () => {
  const topic = await createTopic(1);
  const ids = await write([
    { topic, key: '', payload: { n: 1 } },
    { topic: 'not a topic!', key: 'k', payload: { n: 2 } },
    { topic, key: 'huge', payload: { pad: 'x'.repeat(3_000) } },
    { topic, key: 'ok', payload: { n: 4 } },
  ]);
  const relay = createRelay(relayOptions({ maxMessageBytes: 2_048, deadLetterPolicy: 'skip' }));
  let batchErrors = 0;
  relay.on('batchError', () => batchErrors++);
  await relay.start();
  try {
    const messages = await readTopic(topic, (m) => m.length >= 1);
    assert.deepEqual(messages.map((m) => m.key), ['ok']);
    const dead = await waitFor('three dead letters', async () => {
      const d = (await deadLetters()).filter((x) => ids.includes(x.id));
      return d.length === 3 ? d : undefined;
    });
    assert.deepEqual(dead.map((d) => d.error_name), ['validation:empty_key', 'validation:invalid_topic', 'validation:too_large']);
    assert.match(dead[0]!.reason, /key is empty/);
    assert.match(dead[1]!.reason, /"not a topic!" is not a legal Kafka topic name/);
    assert.match(dead[2]!.reason, /over the relay's limit of 2048/);
    assert.ok(dead.every((d) => d.attempts === 1), 'dead-lettered on the first attempt');
    assert.equal(batchErrors, 0, 'never retried');
  } finally {
    await relay.stop();
  }
});

test('integration: errors from the real broker are classified: record too large and illegal topic permanent, broker unreachable transient', async () => {
  const kafka = testKafka();
  const producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner, allowAutoTopicCreation: true, retry: { retries: 0 } });
  await producer.connect();
  try {
    const topic = await smallTopic();
    const tooLarge = await producer.send({ topic, acks: -1, messages: [{ key: 'k', value: 'x'.repeat(5_000) }] }).catch((e: unknown) => e);
    assert.deepEqual([classifyPublishError(tooLarge).class, classifyPublishError(tooLarge).name], ['permanent', 'MESSAGE_TOO_LARGE']);
    const illegal = await producer.send({ topic: 'not a topic!', acks: -1, messages: [{ key: 'k', value: 'v' }] }).catch((e: unknown) => e);
    assert.equal(classifyPublishError(illegal).class, 'permanent', String(illegal));
  } finally {
    await producer.disconnect();
  }
  const nowhere = testKafka(['127.0.0.1:1']).producer({ retry: { retries: 0 } });
  const unreachable = await nowhere.connect().catch((e: unknown) => e);
  assert.equal(classifyPublishError(unreachable).class, 'transient', String(unreachable));
});

async function recordsOn(topic: string): Promise<number> {
  const admin = testKafka().admin();
  await admin.connect();
  try {
    const offsets = await admin.fetchTopicOffsets(topic);
    return offsets.reduce((n, p) => n + Number(p.high) - Number(p.low), 0);
  } finally {
    await admin.disconnect();
  }
}

test('integration: a row whose created_at is infinity, -infinity or beyond JavaScript dates is dead-lettered alone (validation:invalid_timestamp); the rest publish, nothing is retried', async () => {
  const topic = await createTopic(1);
  const { rows } = await db.pool.query<{ id: string }>(
    `INSERT INTO "${db.schema}".outbox (topic, key, payload, created_at)
     SELECT $1, k, '{"n":1}', t::timestamptz FROM unnest($2::text[], $3::text[]) AS u(k, t) RETURNING id`,
    [topic, ['inf', 'ok1', 'neginf', 'far', 'ok2'], ['infinity', 'now', '-infinity', '280000-01-01', 'now']],
  );
  const ids = rows.map((r) => Number(r.id));
  const relay = createRelay(relayOptions({ deadLetterPolicy: 'park' }));
  let batchErrors = 0;
  const createdAtMs: number[] = [];
  relay.on('batchError', () => batchErrors++);
  relay.on('batch', (b) => createdAtMs.push(...b.createdAtMs));
  await relay.start();
  try {
    const messages = await readTopic(topic, (m) => m.length >= 2);
    // ok1 and ok2 are different keys, on shards that two workers may publish at once:
    // no order between them is promised, only that each is there once.
    assert.deepEqual(messages.map((m) => m.key).sort(), ['ok1', 'ok2']);
    const dead = await waitFor('three dead letters', async () => {
      const d = (await deadLetters()).filter((x) => ids.includes(x.id));
      return d.length === 3 ? d : undefined;
    });
    assert.deepEqual(dead.map((d) => [d.key, d.error_name]), [
      ['inf', 'validation:invalid_timestamp'],
      ['neginf', 'validation:invalid_timestamp'],
      ['far', 'validation:invalid_timestamp'],
    ]);
    assert.match(dead[0]!.reason, /created_at is Infinity/);
    assert.match(dead[2]!.reason, /outside the range/);
    assert.equal(batchErrors, 0, 'never retried');
    assert.ok(createdAtMs.length === 2 && createdAtMs.every(Number.isFinite), 'batch events carry real timestamps');
  } finally {
    await relay.stop();
  }
});

test('integration: when Kafka refuses one partition of a batch, the rows it acknowledged are not sent again: every good row is on the topic once', async () => {
  const topic = await smallTopic(); // 2 partitions, max.message.bytes 2000
  const keys = ['a', 'b', 'c', 'd', 'e', 'f'];
  const ids = await write([
    ...keys.slice(0, 3).map((key) => ({ topic, key, payload: { n: 1 } })),
    { topic, key: 'big', payload: { pad: 'x'.repeat(5_000) } },
    ...keys.slice(3).map((key) => ({ topic, key, payload: { n: 1 } })),
  ]);
  const relay = createRelay(relayOptions({ deadLetterPolicy: 'skip' }));
  let batchErrors = 0;
  relay.on('batchError', () => batchErrors++);
  await relay.start();
  try {
    await waitFor('the good rows sent and the big one dead-lettered', async () => {
      const { rows } = await db.pool.query(`SELECT count(*)::int AS n FROM "${db.schema}".outbox WHERE topic = $1 AND sent_at IS NOT NULL`, [topic]);
      return rows[0].n === 6 && (await deadLetters()).some((d) => d.id === ids[3]);
    });
    // Everything is acknowledged before the batch commits: the log holds all there is.
    assert.equal(await recordsOn(topic), 6, 'six records, no duplicates');
    const messages = await readTopic(topic, (m) => m.length >= 6);
    assert.deepEqual(messages.map((m) => m.key).sort(), keys);
    assert.equal(batchErrors, 0);
  } finally {
    await relay.stop();
  }
});

test("integration: a topic Kafka refuses to create (x_y beside an existing x.y) is dead-lettered after --missing-topic-timeout-ms; other topics' rows flow meanwhile", async () => {
  const base = uniqueName('collide');
  const existing = `${base}.x`;
  const colliding = `${base}_x`;
  const admin = testKafka().admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic: existing, numPartitions: 1 }], waitForLeaders: true });
  await admin.disconnect();
  const other = await createTopic(1);
  const ids = await write([
    { topic: colliding, key: 'k', payload: { n: 1 } },
    { topic: other, key: 'k', payload: { n: 2 } },
  ]);
  const relay = createRelay(relayOptions({ missingTopicTimeoutMs: 1_000, deadLetterPolicy: 'skip' }));
  await relay.start();
  try {
    const messages = await readTopic(other, (m) => m.length >= 1);
    assert.equal(Number(messages[0]!.headers[HEADERS.outboxId]), ids[1]);
    const dead = await waitFor('the dead letter', async () => (await deadLetters()).find((d) => d.id === ids[0]));
    assert.ok(['UNKNOWN_TOPIC_OR_PARTITION', 'INVALID_TOPIC_EXCEPTION'].includes(dead.error_name), dead.error_name);
    assert.match(dead.reason, new RegExp(colliding.replaceAll('.', '\\.')));
  } finally {
    await relay.stop();
  }
});
