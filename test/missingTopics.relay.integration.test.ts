import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { createRelay, type RelayEvents } from '../src/relay/relay.js';
import type { RelayOptions } from '../src/relay/options.js';
import type { OutboxMessage } from '../src/enqueue.js';
import { HEADERS } from '../src/shared/kafka.js';
import { startLocalKafka, type LocalKafka } from '../scripts/localKafka.js';
import { createTestSchema, uniqueName, type TestSchema } from './helpers/db.js';
import { createTopic, readTopic, testKafka } from './helpers/kafka.js';
import { waitFor } from './helpers/wait.js';
import { TEST_PRODUCER } from './helpers/producer.js';
import { writeCommitted } from './helpers/outbox.js';

// A broker of its own with auto.create.topics.enable=false: a topic nobody created stays
// missing, as on most production clusters.
let db: TestSchema;
let kafka: LocalKafka;
before(async () => {
  [db, kafka] = await Promise.all([createTestSchema('missingtopic'), startLocalKafka({ properties: { 'auto.create.topics.enable': 'false' } })]);
});
after(async () => {
  await db?.drop();
  await kafka?.destroy();
});

const brokers = (): string[] => [kafka.brokers];

const write = (messages: OutboxMessage[]): Promise<number[]> => writeCommitted(db, messages);

/** The next payload of a relay event (a promise, set up before the relay starts); rejects after `timeoutMs`. */
function next<K extends 'batch' | 'batchError'>(relay: ReturnType<typeof createRelay>, event: K, timeoutMs = 60_000): Promise<RelayEvents[K]> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      relay.off(event, listener);
      reject(new Error(`no ${event} event within ${timeoutMs} ms`));
    }, timeoutMs);
    const listener = (payload: RelayEvents[K]): void => {
      clearTimeout(timer);
      relay.off(event, listener);
      resolve(payload);
    };
    relay.on(event, listener);
  });
}

const relayOptions = (extra: Partial<RelayOptions>): RelayOptions => ({ producer: TEST_PRODUCER, databaseUrl: db.databaseUrl, kafkaBrokers: brokers(), schema: db.schema, ...extra });

async function unsentIds(topic: string): Promise<number[]> {
  const { rows } = await db.pool.query(`SELECT id FROM "${db.schema}".outbox WHERE topic = $1 AND sent_at IS NULL ORDER BY id`, [topic]);
  return rows.map((r) => Number(r.id));
}

async function deadLetters(topic: string): Promise<Array<{ id: number; key: string; error_name: string; reason: string; policy: string }>> {
  const { rows } = await db.pool.query(`SELECT id, key, error_name, reason, policy FROM "${db.schema}".outbox_dead_letters WHERE topic = $1 ORDER BY id`, [topic]);
  return rows.map((r) => ({ ...r, id: Number(r.id) }));
}

test('integration (auto-create off): a missing topic holds only its own rows, unsent, while the batch\'s other topics publish; after --missing-topic-timeout-ms they are dead-lettered (park: the key\'s later rows wait), and the breaker never opens', async () => {
  const present = await createTopic(2, brokers());
  const missing = uniqueName('missing');
  const ids = await write([
    { topic: missing, key: 'k1', payload: { n: 1 } },
    { topic: present, key: 'k1', payload: { n: 1 } },
    { topic: missing, key: 'k2', payload: { n: 2 } },
    { topic: present, key: 'k2', payload: { n: 2 } },
    { topic: missing, key: 'k1', payload: { n: 3 } },
  ]);
  const relay = createRelay(relayOptions({ missingTopicTimeoutMs: 8_000, deadLetterPolicy: 'park' }));
  const breaker: string[] = [];
  relay.on('breaker', (b) => breaker.push(b.state));
  const published = next(relay, 'batch');
  await relay.start();
  try {
    const batch = await published;
    assert.deepEqual(batch.topics, { [present]: 2 }, "the present topic's rows go out in the first batch");
    assert.deepEqual(await unsentIds(missing), [ids[0], ids[2], ids[4]], "the missing topic's rows wait, unsent");
    assert.deepEqual(await deadLetters(missing), [], 'not dead-lettered before the timeout');

    const dead = await waitFor('the missing topic dead-lettered', async () => {
      const d = await deadLetters(missing);
      return d.length === 2 ? d : undefined;
    });
    assert.deepEqual(dead.map((d) => [d.id, d.key, d.error_name, d.policy]), [
      [ids[0], 'k1', 'UNKNOWN_TOPIC_OR_PARTITION', 'park'],
      [ids[2], 'k2', 'UNKNOWN_TOPIC_OR_PARTITION', 'park'],
    ]);
    assert.match(dead[0]!.reason, /does not exist and Kafka did not create it within 8000 ms \(--missing-topic-timeout-ms\)/);
    assert.deepEqual(await unsentIds(missing), [ids[4]], "k1's later row waits behind its parked dead letter");
    const messages = await readTopic(present, (m) => m.length >= 2, { brokers: brokers() });
    assert.deepEqual(messages.map((m) => Number(m.headers[HEADERS.outboxId])).sort(), [ids[1], ids[3]]);
    assert.deepEqual(breaker, [], 'a missing topic is not a broker failure');
  } finally {
    await relay.stop();
  }
});

test('integration (auto-create off): a topic created while its rows wait is published to, in order, and nothing is dead-lettered', async () => {
  const late = uniqueName('late');
  const ids = await write([
    { topic: late, key: 'a', payload: { n: 1 } },
    { topic: late, key: 'a', payload: { n: 2 } },
  ]);
  const relay = createRelay(relayOptions({ missingTopicTimeoutMs: 600_000 }));
  const failed = next(relay, 'batchError');
  await relay.start();
  try {
    const { error } = await failed;
    assert.match(error.message, /does not exist.*at most 600000 ms/, 'the wait is logged with its reason');
    assert.deepEqual(await unsentIds(late), ids);
    const admin = testKafka(brokers()).admin();
    await admin.connect();
    await admin.createTopics({ topics: [{ topic: late, numPartitions: 1 }], waitForLeaders: true });
    await admin.disconnect();
    const messages = await readTopic(late, (m) => m.length >= 2, { brokers: brokers() });
    assert.deepEqual(messages.map((m) => Number(m.headers[HEADERS.outboxId])), ids);
    assert.deepEqual(await deadLetters(late), []);
  } finally {
    await relay.stop();
  }
});
