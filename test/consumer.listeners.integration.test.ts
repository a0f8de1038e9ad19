import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createConsumer, type Consumer } from '../src/consumer/consumer.js';
import { createLogger } from '../src/shared/logger.js';
import { createTestSchema, uniqueName, type TestSchema } from './helpers/db.js';
import { createTopic, testKafka } from './helpers/kafka.js';
import { waitFor } from './helpers/wait.js';
import { applyEffect, committedOffset, createEffectTables, effectCounts, produce } from './helpers/consumer.js';

// Listeners observe; they never change an outcome (issue 11): a listener of `committed`
// or `duplicate` that throws or rejects is logged, and the messages are neither
// redelivered nor counted differently.

let db: TestSchema;
before(async () => {
  db = await createTestSchema('listeners');
  await createEffectTables(db.pool, db.schema);
});
after(async () => {
  await db.drop();
});

let consumer: Consumer<{ amount: number }> | undefined;
after(async () => {
  await consumer?.stop();
});


test('integration: throwing and rejecting committed and duplicate listeners change nothing: no redelivery, stats right, each failure logged', async () => {
  const topic = await createTopic(1);
  const logs: Array<{ level: number; msg: string; event?: string; err?: string }> = [];
  const calls = new Map<string, number>();
  const c = createConsumer<{ amount: number }>({
    kafka: testKafka(),
    groupId: uniqueName('group'),
    topics: topic,
    pool: db.pool,
    schema: db.schema,
    sessionTimeoutMs: 10_000,
    heartbeatIntervalMs: 500,
    maxWaitTimeMs: 100,
    retryBaseDelayMs: 20,
    retryMaxDelayMs: 200,
    messagesPerTransaction: 3,
    logger: createLogger('warn', { write: (line: string) => void logs.push(JSON.parse(line)) }),
    handler: async (message, context) => {
      calls.set(message.offset, (calls.get(message.offset) ?? 0) + 1);
      await applyEffect(db.schema, message, context);
    },
  });
  consumer = c;
  let committedCount = 0;
  let duplicatesSeen = 0;
  c.on('committed', () => {
    throw new Error('metrics backend down');
  });
  c.on('committed', async () => {
    throw new Error('async listener failed');
  });
  c.on('duplicate', () => {
    throw new Error('duplicate listener failed');
  });
  // Listeners after the failing ones still run.
  c.on('committed', (e) => {
    committedCount += e.count;
  });
  c.on('duplicate', () => {
    duplicatesSeen++;
  });
  const sent = await produce(topic, Array.from({ length: 4 }, (_, i) => ({ key: 'l', value: { amount: i + 1 } })));
  await produce(topic, sent.slice(0, 2)); // two duplicates
  await c.start();
  await waitFor('all six offsets committed', async () => (await committedOffset(c.options.groupId, topic)) === '6');
  await waitFor('the async listener failures logged', () => logs.filter((l) => l.err === 'async listener failed').length >= 2);

  const stats = c.stats();
  assert.equal(stats.processed, 4);
  assert.equal(stats.duplicates, 2);
  assert.equal(stats.retries, 0);
  assert.equal(stats.infrastructureErrors, 0);
  assert.equal(stats.deadLettered, 0);
  assert.deepEqual([...calls.values()], [1, 1, 1, 1], 'each handler ran once: nothing redelivered');
  assert.equal(committedCount, 6, 'the committed events cover all six deliveries');
  assert.equal(duplicatesSeen, 2);
  const counts = await effectCounts(db.pool, db.schema, topic);
  for (const e of sent) assert.equal(counts.get(e.messageId as string), 1);

  const failed = logs.filter((l) => /listener/.test(l.msg));
  assert.ok(failed.some((l) => l.event === 'committed' && l.err === 'metrics backend down'), 'the committed listener failure is logged with its event');
  assert.ok(failed.some((l) => l.event === 'duplicate' && l.err === 'duplicate listener failed'), 'the duplicate listener failure is logged');
  assert.ok(failed.every((l) => l.level >= 40), 'logged at warn or above');
});
