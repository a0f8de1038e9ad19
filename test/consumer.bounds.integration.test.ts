import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { performance } from 'node:perf_hooks';
import { STOP_GRACE_MS, type Consumer } from '../src/consumer/consumer.js';
import type { ConsumerEvents } from '../src/consumer/types.js';
import { AfterCommitTimeout } from '../src/consumer/afterCommitHooks.js';
import { createTestSchema, type TestSchema } from './helpers/db.js';
import { createTopic } from './helpers/kafka.js';
import { waitFor } from './helpers/wait.js';
import { applyEffect, committedOffset, createEffectTables, effectCounts, produce, testConsumerOptions, testConsumers } from './helpers/consumer.js';

// The documented bounds hold when what the consumer waits for hangs: an afterCommit hook
// is given up after afterCommitTimeoutMs (the partition goes on, the offset is committed);
// stop() resolves within shutdownTimeoutMs plus STOP_GRACE_MS whatever a hook or a
// handler does (README, docs/consumer.md).

let db: TestSchema;
before(async () => {
  db = await createTestSchema('bounds');
  await createEffectTables(db.pool, db.schema);
});
after(async () => {
  await db.drop();
});

const consumer = testConsumers(() => db);

const never = (): Promise<never> => new Promise<never>(() => undefined);
/** Scheduling slack on a shared 2-core machine, on top of the documented bound. */
const MARGIN_MS = 750;

/** How long `c.stop()` takes, measured. */
async function timedStop(c: Consumer<unknown>): Promise<{ ms: number; hard: boolean }> {
  const started = performance.now();
  const { hard } = await c.stop();
  return { ms: performance.now() - started, hard };
}

test('integration: an afterCommit hook that never resolves is given up after afterCommitTimeoutMs: reported as AfterCommitTimeout, the offset is committed, the partition goes on', async () => {
  const topic = await createTopic(1);
  const reported: Array<ConsumerEvents['afterCommitError']> = [];
  const c = consumer({
    topics: topic,
    messagesPerTransaction: 1,
    afterCommitTimeoutMs: 300,
    handler: async (message, context) => {
      await applyEffect(db.schema, message, context);
      if (message.offset === '0') context.afterCommit(never);
    },
  });
  c.on('afterCommitError', (e) => void reported.push(e));
  const sent = await produce(topic, [{ key: 'h', value: { amount: 1 } }, { key: 'h', value: { amount: 2 } }]);
  await c.start();
  await waitFor('both offsets committed', async () => (await committedOffset(c.options.groupId, topic)) === '2');
  assert.equal(reported.length, 1);
  assert.ok(reported[0]?.error instanceof AfterCommitTimeout, `an AfterCommitTimeout: ${String(reported[0]?.error)}`);
  assert.equal(reported[0]?.offset, '0');
  assert.match((reported[0]?.error as Error).message, /afterCommitTimeoutMs/);
  assert.equal(c.stats().afterCommitErrors, 1);
  assert.equal(c.stats().processed, 2);
  const counts = await effectCounts(db.pool, db.schema, topic);
  assert.deepEqual(sent.map((e) => counts.get(e.messageId as string)), [1, 1]);
});

test('integration: stop() while an afterCommit hook never resolves takes at most shutdownTimeoutMs + STOP_GRACE_MS', async () => {
  const topic = await createTopic(1);
  const shutdownTimeoutMs = 2_000;
  let hookStarted!: () => void;
  const started = new Promise<void>((resolve) => (hookStarted = resolve));
  const c = consumer({
    topics: topic,
    shutdownTimeoutMs,
    afterCommitTimeoutMs: 600_000,
    handler: async (message, context) => {
      await applyEffect(db.schema, message, context);
      context.afterCommit(() => {
        hookStarted();
        return never();
      });
    },
  });
  await produce(topic, [{ key: 's', value: { amount: 1 } }]);
  await c.start();
  await started;
  const { ms, hard } = await timedStop(c);
  assert.equal(hard, true, 'the hook cut the stop short');
  assert.ok(ms >= shutdownTimeoutMs - 50, `waited the soft budget first: ${ms.toFixed(0)} ms`);
  assert.ok(ms <= shutdownTimeoutMs + STOP_GRACE_MS + MARGIN_MS, `stop took ${ms.toFixed(0)} ms, bound ${shutdownTimeoutMs} + ${STOP_GRACE_MS}`);
});

test('integration: stop() while a handler waits for ever on something other than Postgres takes at most shutdownTimeoutMs + STOP_GRACE_MS, and the message is handled once by the next consumer', async () => {
  const topic = await createTopic(1);
  const shutdownTimeoutMs = 2_000;
  let handlerStarted!: () => void;
  const started = new Promise<void>((resolve) => (handlerStarted = resolve));
  const options = testConsumerOptions(db);
  const c = consumer({
    ...options,
    topics: topic,
    shutdownTimeoutMs,
    handler: async (message, context) => {
      await applyEffect(db.schema, message, context);
      handlerStarted();
      await never();
    },
  });
  const sent = await produce(topic, [{ key: 'w', value: { amount: 1 } }]);
  await c.start();
  await started;
  const { ms, hard } = await timedStop(c);
  assert.equal(hard, true);
  assert.ok(ms <= shutdownTimeoutMs + STOP_GRACE_MS + MARGIN_MS, `stop took ${ms.toFixed(0)} ms, bound ${shutdownTimeoutMs} + ${STOP_GRACE_MS}`);
  // Rolled back: the group's next member handles it, once.
  const next = consumer({ ...options, topics: topic, handler: (message, context) => applyEffect(db.schema, message, context) });
  await next.start();
  await waitFor('offset committed by the next member', async () => (await committedOffset(options.groupId, topic)) === '1');
  assert.equal((await effectCounts(db.pool, db.schema, topic)).get(sent[0]?.messageId as string), 1);
});

test('integration: stop() while a handler waits on a Postgres lock takes at most shutdownTimeoutMs + STOP_GRACE_MS', async () => {
  const topic = await createTopic(1);
  const shutdownTimeoutMs = 1_500;
  await db.pool.query(`CREATE TABLE "${db.schema}".locked (id int PRIMARY KEY); INSERT INTO "${db.schema}".locked VALUES (1)`);
  const holder = await db.pool.connect();
  await holder.query(`BEGIN; SELECT * FROM "${db.schema}".locked FOR UPDATE`);
  let handlerStarted!: () => void;
  const started = new Promise<void>((resolve) => (handlerStarted = resolve));
  const c = consumer({
    topics: topic,
    shutdownTimeoutMs,
    handler: async (_message, { client }) => {
      handlerStarted();
      await client.query(`SELECT * FROM "${db.schema}".locked FOR UPDATE`);
    },
  });
  try {
    await produce(topic, [{ key: 'l', value: { amount: 1 } }]);
    await c.start();
    await started;
    const { ms, hard } = await timedStop(c);
    assert.equal(hard, true);
    assert.ok(ms <= shutdownTimeoutMs + STOP_GRACE_MS + MARGIN_MS, `stop took ${ms.toFixed(0)} ms, bound ${shutdownTimeoutMs} + ${STOP_GRACE_MS}`);
  } finally {
    await holder.query('ROLLBACK');
    holder.release();
  }
});
