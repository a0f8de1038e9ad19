import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { performance } from 'node:perf_hooks';
import type { ConsumerEvents } from '../src/consumer/types.js';
import { MissingTopicError } from '../src/consumer/topicWait.js';
import { createTestSchema, uniqueName, type TestSchema } from './helpers/db.js';
import { testKafka } from './helpers/kafka.js';
import type { ConsumedMessage, HandlerContext } from '../src/consumer/types.js';
import { waitFor } from './helpers/wait.js';
import { applyEffect, committedOffset, createEffectTables, effectCounts, produce, testConsumers } from './helpers/consumer.js';

// A consumer started before its topic exists waits for it (missingTopicTimeoutMs) instead
// of failing at once with "This server does not host this topic-partition".

let db: TestSchema;
before(async () => {
  db = await createTestSchema('missingtopic');
  await createEffectTables(db.pool, db.schema);
});
after(async () => {
  await db.drop();
});

const consumer = testConsumers(() => db, () => ({ handler: (message: ConsumedMessage<unknown>, context: HandlerContext) => applyEffect(db.schema, message, context) }));

test('integration: start() before the topic exists waits for it (waitingForTopics), and once it is created the messages are handled', async () => {
  const topic = uniqueName('later');
  const c = consumer({ topics: topic, missingTopicTimeoutMs: 120_000 });
  const waits: Array<ConsumerEvents['waitingForTopics']> = [];
  c.on('waitingForTopics', (e) => void waits.push(e));
  const starting = c.start();
  await waitFor('the consumer waits for the topic', () => waits.length > 0);
  assert.deepEqual(waits[0]?.missing, [topic]);
  assert.equal(waits[0]?.timeoutMs, 120_000);
  const admin = testKafka().admin();
  await admin.connect();
  try {
    await admin.createTopics({ topics: [{ topic, numPartitions: 2, replicationFactor: 1 }], waitForLeaders: true });
  } finally {
    await admin.disconnect();
  }
  await starting;
  const sent = await produce(topic, [{ key: 'a', value: { amount: 1 } }, { key: 'b', value: { amount: 2 } }, { key: 'c', value: { amount: 3 } }]);
  await waitFor('all handled', () => c.stats().processed === 3);
  const counts = await effectCounts(db.pool, db.schema, topic);
  assert.deepEqual(sent.map((e) => counts.get(e.messageId as string)), [1, 1, 1]);
  await waitFor('offsets committed', async () => {
    const offsets = await Promise.all([committedOffset(c.options.groupId, topic, 0), committedOffset(c.options.groupId, topic, 1)]);
    return offsets.reduce((n, o) => n + Math.max(0, Number(o ?? -1)), 0) === 3;
  });
});

test('integration: a topic that never appears: start() rejects after missingTopicTimeoutMs with a MissingTopicError naming the topic and the setting', async () => {
  const topic = uniqueName('never');
  const missingTopicTimeoutMs = 1_500;
  const c = consumer({ topics: topic, missingTopicTimeoutMs });
  const started = performance.now();
  const error = await c.start().then(() => undefined, (e: unknown) => e);
  const ms = performance.now() - started;
  assert.ok(error instanceof MissingTopicError, `a MissingTopicError: ${String(error)}`);
  assert.ok(error.message.includes(JSON.stringify(topic)), error.message);
  assert.match(error.message, /missingTopicTimeoutMs/);
  assert.equal(error.retriable, true);
  assert.ok(ms >= missingTopicTimeoutMs - 50 && ms <= missingTopicTimeoutMs + 3_000, `rejected after ${ms.toFixed(0)} ms`);
});
