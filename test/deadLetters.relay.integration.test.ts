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

test('integration: a created_at no Kafka timestamp can hold (before 1970, BC, past year 275760, ±infinity) is published in its key\'s order with its neighbours, stamped at send time, the original in outbox-created-at (UTC whatever the session time zone)', async () => {
  const topic = await createTopic(1);
  const createdAt = [
    ['now', undefined],
    ['1969-07-20 20:17:40.5+00', '1969-07-20 20:17:40.5+00'],
    ['0044-03-15 12:00:00+00 BC', '0044-03-15 12:00:00+00 BC'],
    ['now', undefined],
    ['280000-01-01 00:00:00+00', '280000-01-01 00:00:00+00'],
    ['infinity', 'infinity'],
    ['-infinity', '-infinity'],
    ['1970-01-01 00:00:00+00', undefined],
    ['now', undefined],
  ] as const;
  const { rows } = await db.pool.query<{ id: string; ms: string }>(
    `INSERT INTO "${db.schema}".outbox (topic, key, payload, created_at)
     SELECT $1, 'k', '{"n":1}', t::timestamptz FROM unnest($2::text[]) WITH ORDINALITY AS u(t, n) ORDER BY n
     RETURNING id, floor(extract(epoch FROM created_at) * 1000)::text AS ms`,
    [topic, createdAt.map(([t]) => t)],
  );
  const ids = rows.map((r) => Number(r.id));
  // The relay's sessions in another time zone: the header is UTC all the same.
  const relay = createRelay(relayOptions({ deadLetterPolicy: 'park', databaseUrl: `${db.databaseUrl}?options=${encodeURIComponent('-c TimeZone=America/New_York')}` }));
  let batchErrors = 0;
  const createdAtMs: number[] = [];
  relay.on('batchError', () => batchErrors++);
  relay.on('batch', (b) => createdAtMs.push(...b.createdAtMs));
  const startedMs = Date.now();
  await relay.start();
  try {
    const messages = await readTopic(topic, (m) => m.length >= ids.length);
    const readMs = Date.now();
    assert.deepEqual(messages.map((m) => Number(m.headers[HEADERS.outboxId])), ids, 'every row, in id order, on its one partition');
    assert.deepEqual(messages.map((m) => m.headers['outbox-created-at']), createdAt.map(([, header]) => header));
    messages.forEach((m, i) => {
      const original = Number(rows[i]!.ms);
      if (createdAt[i]![1] === undefined) assert.equal(Number(m.timestamp), original, 'created_at is the Kafka timestamp');
      else assert.ok(Number(m.timestamp) >= startedMs && Number(m.timestamp) <= readMs, `stamped when sent: ${m.timestamp}`);
    });
    assert.deepEqual((await deadLetters()).filter((d) => ids.includes(d.id)), [], 'nothing dead-lettered');
    assert.equal(batchErrors, 0, 'never retried');
    await waitFor('the batch events', () => createdAtMs.length === 4);
    assert.deepEqual(
      createdAtMs,
      rows.filter((_, i) => createdAt[i]![1] === undefined).map((r) => Number(r.ms)),
      'batch events carry the timestamps Kafka could hold, no NaN',
    );
  } finally {
    await relay.stop();
  }
});

test("integration: a created_at outside what the topic accepts (message.timestamp.after.max.ms / before.max.ms: INVALID_TIMESTAMP) is sent again stamped at send time, the original in outbox-created-at, in its key's order", async () => {
  const topic = uniqueName('bounded');
  const admin = testKafka().admin();
  await admin.connect();
  await admin.createTopics({
    topics: [
      {
        topic,
        numPartitions: 1,
        configEntries: [
          { name: 'message.timestamp.after.max.ms', value: String(3_600_000) },
          { name: 'message.timestamp.before.max.ms', value: String(30 * 86_400_000) },
        ],
      },
    ],
    waitForLeaders: true,
  });
  await admin.disconnect();
  const offsets = ['0', '2 days', '0', '-400 days', '0'];
  // To the millisecond: all a JavaScript Date (and so the header) holds.
  const { rows } = await db.pool.query<{ id: string; ms: string; text: string }>(
    `INSERT INTO "${db.schema}".outbox (topic, key, payload, created_at)
     SELECT $1, 'k', '{"n":1}', date_trunc('milliseconds', now() + o::interval) FROM unnest($2::text[]) WITH ORDINALITY AS u(o, n) ORDER BY n
     RETURNING id, floor(extract(epoch FROM created_at) * 1000)::text AS ms, timezone('UTC', created_at)::text || '+00' AS text`,
    [topic, offsets],
  );
  const ids = rows.map((r) => Number(r.id));
  const relay = createRelay(relayOptions({ deadLetterPolicy: 'park' }));
  const startedMs = Date.now();
  await relay.start();
  try {
    const messages = await readTopic(topic, (m) => m.length >= ids.length);
    const readMs = Date.now();
    assert.deepEqual(messages.map((m) => Number(m.headers[HEADERS.outboxId])), ids, 'every row, once, in id order');
    messages.forEach((m, i) => {
      if (offsets[i] === '0') {
        assert.equal(Number(m.timestamp), Number(rows[i]!.ms));
        assert.equal(m.headers['outbox-created-at'], undefined);
      } else {
        assert.equal(m.headers['outbox-created-at'], rows[i]!.text);
        assert.ok(Number(m.timestamp) >= startedMs && Number(m.timestamp) <= readMs, `stamped when sent: ${m.timestamp}`);
      }
    });
    assert.deepEqual((await deadLetters()).filter((d) => ids.includes(d.id)), []);
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
