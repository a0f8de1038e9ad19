import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { BatchContext, ConsumerEvents } from '../src/consumer/types.js';
import { HandlerClientClosed } from '../src/consumer/clientGuard.js';
import { HandlerTimeout } from '../src/consumer/handlerTimeout.js';
import { createTestSchema, type TestSchema } from './helpers/db.js';
import { createTopic } from './helpers/kafka.js';
import { waitFor } from './helpers/wait.js';
import { applyBatchEffect, applyEffect, collect, committedOffset, countRows, createEffectTables, effectCounts, produce, testConsumers } from './helpers/consumer.js';

// A handler or batch handler call that never settles is given up after handlerTimeoutMs:
// the handlerTimeout event, its transaction rolled back (its server process ended, so its
// locks go), the message retried; before, the partition stalled for good, with no event,
// no error and the offset never committed (issue 33, item 12).

let db: TestSchema;
before(async () => {
  db = await createTestSchema('handlertimeout');
  await createEffectTables(db.pool, db.schema);
});
after(async () => {
  await db.drop();
});

const consumer = testConsumers(() => db);

const never = (): Promise<never> => new Promise<never>(() => undefined);
/** The bound under test; short so the test takes a few seconds. */
const TIMEOUT = { handlerTimeoutMs: 400 };
/** How long the tests wait for the partition to go on: far above the bound, far below a stall. */
const WITHIN = { timeoutMs: 30_000 };

for (const savepoints of ['on-failure', 'always'] as const) {
  test(`integration: a handler that never settles is given up after handlerTimeoutMs: handlerTimeout event, rolled back, retried, every message's effect once (savepoints ${savepoints})`, async () => {
    const topic = await createTopic(1);
    const runs: string[] = [];
    const c = consumer({
      topics: topic,
      savepoints,
      messagesPerTransaction: 10,
      ...TIMEOUT,
      handler: async (message, context) => {
        runs.push(`${message.offset}#${context.attempt}`);
        await applyEffect(db.schema, message, context);
        if (message.offset === '1' && context.attempt === 1) await never();
      },
    });
    const timeouts = collect(c, 'handlerTimeout');
    const retries = collect(c, 'retry');
    const sent = await produce(topic, [{ key: 'a' }, { key: 'b' }, { key: 'c' }]);
    await c.start();
    await waitFor('all three offsets committed', async () => (await committedOffset(c.options.groupId, topic)) === '3', WITHIN);
    assert.ok(runs.includes('1#1'), 'precondition: the first attempt at offset 1 ran (and never settled)');
    assert.equal(runs.filter((r) => r === '0#1').length, 2, `precondition: offset 0 ran in the timed-out transaction, then again in a fresh one (${runs.join(' ')})`);
    assert.equal(timeouts.length, 1, 'one handlerTimeout event');
    const t = timeouts[0] as ConsumerEvents['handlerTimeout'];
    assert.deepEqual({ firstOffset: t.firstOffset, lastOffset: t.lastOffset, count: t.count, attempt: t.attempt, timeoutMs: t.timeoutMs }, { firstOffset: '1', lastOffset: '1', count: 1, attempt: 1, timeoutMs: 400 });
    assert.ok(t.error instanceof HandlerTimeout, `a HandlerTimeout: ${String(t.error)}`);
    assert.equal((t.error as HandlerTimeout).retriable, true);
    assert.match((t.error as Error).message, /handlerTimeoutMs.*rolled back.*retried with backoff, then dead-lettered/);
    assert.deepEqual(retries.map((r) => [r.offset, r.attempt, r.error instanceof HandlerTimeout]), [['1', 1, true]], 'the message is retried as a retriable failure');
    const counts = await effectCounts(db.pool, db.schema, topic);
    for (const e of sent) assert.equal(counts.get(e.messageId as string), 1, `effect of ${e.key} once (the timed-out run's rolled back)`);
    assert.equal(c.stats().deadLettered, 0);
  });
}

test('integration: a handler stuck in a Postgres statement is given up after handlerTimeoutMs and its server process ended, so the retry is not blocked by its locks', async () => {
  const topic = await createTopic(1);
  // A tag in the statement's text, to find its server process in pg_stat_activity.
  const tag = `stuck_${topic.replace(/[^a-z0-9_]/gi, '_')}`;
  const stuck = `SELECT pg_sleep(3600) /* ${tag} */`;
  const c = consumer({
    topics: topic,
    ...TIMEOUT,
    handler: async (message, context) => {
      await applyEffect(db.schema, message, context);
      // Holds the uncommitted key row the retry's claim needs, and ignores the closed socket.
      if (context.attempt === 1) await context.client.query(stuck);
    },
  });
  const timeouts = collect(c, 'handlerTimeout');
  const sent = await produce(topic, [{ key: 'a' }]);
  await c.start();
  await waitFor('offset committed', async () => (await committedOffset(c.options.groupId, topic)) === '1', WITHIN);
  assert.equal(timeouts.length, 1, 'precondition: the stuck run timed out');
  assert.equal((await effectCounts(db.pool, db.schema, topic)).get(sent[0]?.messageId as string), 1, 'effect once');
  const left = await countRows(db.pool, `SELECT 1 FROM pg_stat_activity WHERE query LIKE $1 AND pid <> pg_backend_pid()`, [`%${tag}%`]);
  assert.equal(left, 0, 'the stuck statement\'s server process is gone');
});

test('integration: a batch handler that never settles is given up after handlerTimeoutMs: handlerTimeout for the batch, then the batch is redone and every effect committed once', async () => {
  const topic = await createTopic(1);
  let calls = 0;
  let timedOutContext: BatchContext | undefined;
  const c = consumer({
    topics: topic,
    ...TIMEOUT,
    handleBatch: async (messages, context) => {
      calls++;
      await applyBatchEffect(db.schema, messages, context);
      if (calls === 1) {
        timedOutContext = context;
        await never();
      }
    },
  });
  const timeouts = collect(c, 'handlerTimeout');
  const fallbacks = collect(c, 'batchFallback');
  const sent = await produce(topic, [{ key: 'a' }, { key: 'b' }, { key: 'c' }]);
  await c.start();
  await waitFor('all offsets committed', async () => (await committedOffset(c.options.groupId, topic)) === '3', WITHIN);
  assert.equal(timeouts.length, 1, 'one handlerTimeout event');
  assert.deepEqual({ first: timeouts[0]?.firstOffset, last: timeouts[0]?.lastOffset, count: timeouts[0]?.count }, { first: '0', last: '2', count: 3 }, 'precondition: the first call had the whole batch');
  assert.equal(fallbacks.length, 1, 'the batch is redone as after any failure');
  assert.ok(fallbacks[0]?.error instanceof HandlerTimeout);
  const counts = await effectCounts(db.pool, db.schema, topic);
  for (const e of sent) assert.equal(counts.get(e.messageId as string), 1, `effect of ${e.key} once`);
  // The given-up call may still be running: its client no longer reaches Postgres.
  await assert.rejects((timedOutContext as BatchContext).client.query('SELECT 1'), HandlerClientClosed);
});
