import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { type Consumer } from '../src/consumer/consumer.js';
import type { ConsumerOptions } from '../src/consumer/options.js';
import type { ConsumedMessage, ConsumerEvents } from '../src/consumer/types.js';
import { DEAD_LETTER_HEADERS } from '../src/consumer/deadLetterTopic.js';
import { OutboxError } from '../src/shared/errors.js';
import { createTestSchema, uniqueName, type TestSchema } from './helpers/db.js';
import { createTopic, readTopic, testBrokers, testKafka } from './helpers/kafka.js';
import { waitFor } from './helpers/wait.js';
import { explainedBy, startChildConsumer, type ChildConsumer } from './helpers/childConsumer.js';
import { instrumentConsumer } from '../src/metrics/consumerMetrics.js';
import { metricValue } from './helpers/metrics.js';
import { applyBatchEffect, collect, committedOffset, committedToEnd, countRows, createEffectTables, effectCounts, produce, testConsumerOptions, testConsumers } from './helpers/consumer.js';

// handleBatch(messages, ctx): one call per transaction with the group's new messages, set-
// based effects, the same exactly-once guarantees as handler; a failed batch is redone one
// message at a time so the poison one is retried or dead-lettered alone.


let db: TestSchema;
before(async () => {
  db = await createTestSchema('batchhandler');
  await createEffectTables(db.pool, db.schema);
});
after(async () => {
  await db.drop();
});

type Value = { amount: number; poison?: 'permanent' | 'transient'; stale?: boolean };

const make = testConsumers(() => db);
const consumer = (options: Partial<ConsumerOptions<Value>> & Pick<ConsumerOptions<Value>, 'topics' | 'handleBatch'>): Consumer<Value> => make<Value>(options);

async function assertOnce(topic: string, ids: string[]): Promise<void> {
  const counts = await effectCounts(db.pool, db.schema, topic);
  const wrong = ids.filter((id) => counts.get(id) !== 1).map((id) => `${id}: ${counts.get(id) ?? 0}`);
  assert.deepEqual(wrong, [], 'every message has exactly one effect');
  assert.equal([...counts.values()].reduce((a, b) => a + b, 0), ids.length, 'no other effect');
}

const offsetsOf = (messages: ReadonlyArray<ConsumedMessage<unknown>>): string[] => messages.map((m) => m.offset);
const range = (from: number, to: number): string[] => Array.from({ length: to - from }, (_, i) => String(from + i));

test('integration: the new messages of a transaction reach handleBatch in one call, in offset order; effects land once', async () => {
  const topic = await createTopic(1);
  const sent = await produce(topic, Array.from({ length: 30 }, (_, i) => ({ key: `e${i % 3}`, value: { amount: i + 1, stale: i === 7 } })));
  const calls: string[][] = [];
  const c = consumer({
    topics: topic,
    messagesPerTransaction: 10,
    handleBatch: async (messages, ctx) => {
      calls.push(offsetsOf(messages));
      await applyBatchEffect(db.schema, messages, ctx);
      for (const m of messages) if (m.value.stale) ctx.markStale(m);
    },
  });
  const committed = collect(c, 'committed');
  const stale = collect(c, 'stale');
  await c.start();
  await waitFor('offset at the end', async () => (await committedOffset(c.options.groupId, topic)) === '30');
  assert.deepEqual(calls.flat(), range(0, 30), 'every message once, in offset order');
  assert.ok(calls.every((call) => call.length >= 1 && call.length <= 10), `calls of 1-10 messages: ${calls.map((call) => call.length)}`);
  // One call per transaction: each call is exactly one committed transaction's messages.
  assert.deepEqual(
    committed.map((e) => [e.firstOffset, e.lastOffset, e.count, e.processed]),
    calls.map((call) => [call[0], call.at(-1), call.length, call.length]),
  );
  assert.equal(c.stats().transactions, calls.length);
  assert.equal(c.stats().processed, 30);
  assert.equal(c.stats().batchFallbacks, 0);
  assert.deepEqual(stale.map((e) => e.offset), ['7'], 'markStale(message) counts that message');
  assert.equal(c.stats().stale, 1);
  await assertOnce(topic, sent.map((e) => e.messageId as string));
  const total = await db.pool.query<{ total: string }>(`SELECT sum(total)::text AS total FROM "${db.schema}".balances WHERE entity IN ('e0', 'e1', 'e2')`);
  assert.equal(total.rows[0]?.total, String((30 * 31) / 2));
});

test('integration: messages delivered again (offsets rewound as after a crash before the offset commit, and the same message ids produced twice) never reach handleBatch again', async () => {
  const topic = await createTopic(1);
  const sent = await produce(topic, Array.from({ length: 20 }, (_, i) => ({ key: `r${i % 4}`, value: { amount: 1 } })));
  const options = testConsumerOptions(db);
  const first = consumer({ ...options, topics: topic, messagesPerTransaction: 8, handleBatch: (messages, ctx) => applyBatchEffect(db.schema, messages, ctx) });
  await first.start();
  await waitFor('first consumer at the end', async () => (await committedOffset(options.groupId, topic)) === '20');
  await first.stop();

  // Back to offset 0: Kafka delivers everything again, as to a member that committed in
  // Postgres and died before committing the offset.
  const admin = testKafka().admin();
  await admin.connect();
  try {
    await admin.resetOffsets({ groupId: options.groupId, topic, earliest: true });
  } finally {
    await admin.disconnect();
  }
  // The same five events published again (same message ids) and three new ones, mixed.
  const again = await produce(topic, [
    ...sent.slice(0, 3).map((e) => ({ key: e.key, value: e.value, messageId: e.messageId })),
    { key: 'r9', value: { amount: 1 } },
    ...sent.slice(10, 12).map((e) => ({ key: e.key, value: e.value, messageId: e.messageId })),
    { key: 'r9', value: { amount: 1 } },
    { key: 'r9', value: { amount: 1 } },
  ]);
  const fresh = [again[3], again[6], again[7]].map((e) => e?.messageId as string);

  const seen: string[] = [];
  const second = consumer({
    ...options,
    topics: topic,
    messagesPerTransaction: 8,
    handleBatch: async (messages, ctx) => {
      seen.push(...messages.map((m) => m.messageId as string));
      await applyBatchEffect(db.schema, messages, ctx);
    },
  });
  await second.start();
  await waitFor('second consumer at the end', async () => (await committedOffset(options.groupId, topic)) === '28');
  assert.deepEqual(seen, fresh, 'only the new messages reached the batch handler');
  assert.equal(second.stats().duplicates, 25);
  assert.equal(second.stats().processed, 3);
  await assertOnce(topic, [...sent.map((e) => e.messageId as string), ...fresh]);
});

test('integration: a permanent poison message in the middle of a batch is dead-lettered alone; the others are applied once', async () => {
  const topic = await createTopic(1);
  const deadLetterTopic = await createTopic(1, undefined, 'dlt');
  const sent = await produce(topic, Array.from({ length: 10 }, (_, i) => ({ key: `p${i}`, value: { amount: 1, ...(i === 4 && { poison: 'permanent' as const }) } })));
  const calls: string[][] = [];
  const c = consumer({
    topics: topic,
    deadLetterTopic,
    messagesPerTransaction: 10,
    handleBatch: async (messages, ctx) => {
      calls.push(offsetsOf(messages));
      await applyBatchEffect(db.schema, messages, ctx);
      if (messages.some((m) => m.value.poison)) {
        const error = new Error('amount out of range');
        error.name = 'ValidationError';
        throw error;
      }
    },
  });
  const fallbacks = collect(c, 'batchFallback');
  const metrics = instrumentConsumer(c, { processMetrics: false });
  await c.start();
  await waitFor('offset at the end', async () => (await committedOffset(c.options.groupId, topic)) === '10');
  assert.equal(await metricValue(metrics.registry, 'outbox_consumer_batch_fallbacks_total', { topic }), fallbacks.length, 'each redone batch counted');
  await metrics.close();
  const dead = await readTopic(deadLetterTopic, (m) => m.length >= 1);
  assert.equal(dead.length, 1);
  assert.equal(dead[0]?.headers[DEAD_LETTER_HEADERS.reason], 'permanent-error');
  assert.equal(dead[0]?.headers[DEAD_LETTER_HEADERS.offset], '4');
  assert.equal(c.stats().deadLettered, 1);
  assert.equal(c.stats().retries, 0);
  assert.equal(c.stats().processed, 9);
  assert.ok(fallbacks.length >= 1 && fallbacks[0]?.firstOffset === calls[0]?.[0], 'the failed batch was announced');
  assert.equal(c.stats().batchFallbacks, fallbacks.length);
  // After a failed batch, its messages come one per call, up to the poison one.
  const single = calls.filter((call) => call.length === 1).flat();
  assert.ok(single.includes('4'), `the poison message was handled alone: ${JSON.stringify(calls)}`);
  const ids = sent.map((e) => e.messageId as string);
  await assertOnce(topic, [...ids.slice(0, 4), ...ids.slice(5)]);
  assert.equal(await countRows(db.pool, `SELECT 1 FROM "${db.schema}".processed_messages WHERE consumer_group = $1 AND key = $2`, [c.options.groupId, ids[4]]), 0, 'the dead letter is not recorded as processed');
});

test('integration: poison messages at given offsets: one fallback each, the failed batch narrowed by halves, then one message per call up to and including the culprit only, then batches again', async () => {
  const total = 1_200;
  const poison = [130, 700, 1_010];
  const topic = await createTopic(1);
  const deadLetterTopic = await createTopic(1, undefined, 'dlt');
  const sent = await produce(topic, Array.from({ length: total }, (_, i) => ({ key: `g${i % 7}`, value: { amount: 1, ...(poison.includes(i) && { poison: 'permanent' as const }) } })));
  // What the partition did, in order: handler calls (their offsets) and fallbacks.
  const timeline: Array<{ call: string[] } | { fallback: ConsumerEvents['batchFallback'] }> = [];
  const c = consumer({
    topics: topic,
    deadLetterTopic,
    handleBatch: async (messages, ctx) => {
      timeline.push({ call: offsetsOf(messages) });
      await applyBatchEffect(db.schema, messages, ctx);
      if (messages.some((m) => m.value.poison)) throw Object.assign(new Error('amount out of range'), { name: 'ValidationError' });
    },
  });
  c.on('batchFallback', (e) => void timeline.push({ fallback: e }));
  await c.start();
  await waitFor('offset at the end', async () => (await committedOffset(c.options.groupId, topic)) === String(total));
  const shown = JSON.stringify(timeline.map((t) => ('call' in t ? `${t.call[0]}+${t.call.length}` : `fallback ${t.fallback.firstOffset}`)));
  assert.equal(c.stats().batchFallbacks, poison.length, `one fallback per poison message: ${shown}`);
  assert.equal(c.stats().deadLettered, poison.length);
  assert.equal(c.stats().processed, total - poison.length);
  const fallbackAt = timeline.flatMap((t, i) => ('fallback' in t ? [i] : []));
  for (const [n, at] of fallbackAt.entries()) {
    const { firstOffset, lastOffset } = (timeline[at] as { fallback: ConsumerEvents['batchFallback'] }).fallback;
    const culprit = poison.find((o) => o >= Number(firstOffset)) as number;
    assert.ok(culprit <= Number(lastOffset), 'the failed batch holds a poison message');
    const after = timeline.slice(at + 1, fallbackAt[n + 1] ?? timeline.length).map((t) => (t as { call: string[] }).call);
    const found = after.findIndex((call) => call.length === 1 && call[0] === String(culprit));
    assert.ok(found >= 0, `fallback ${n}: the culprit ${culprit} was handled alone: ${shown}`);
    // Halving 500 messages down to 16 takes 5 failed parts and at most 5 that pass, then at most 16 single calls.
    assert.ok(found < 5 + 5 + 16, `fallback ${n}: the culprit found in ${found + 1} calls: ${shown}`);
    const singles = after.slice(0, found + 1).filter((call) => call.length === 1).flat();
    assert.ok(singles.length <= 16, `fallback ${n}: at most 16 messages one at a time: ${shown}`);
    assert.deepEqual(singles, range(culprit - singles.length + 1, culprit + 1), `fallback ${n}: one at a time up to and including the culprit, no further`);
    // Before the culprit, each message's effect committed once; after it, batches again.
    const next = after[found + 1];
    if (next !== undefined) assert.ok(next.length > 1 && next[0] === String(culprit + 1), `fallback ${n}: a full batch after the culprit: ${shown}`);
  }
  const dead = await readTopic(deadLetterTopic, (m) => m.length >= poison.length);
  assert.deepEqual(dead.map((m) => m.headers[DEAD_LETTER_HEADERS.offset]), poison.map(String));
  const ids = sent.map((e) => e.messageId as string);
  await assertOnce(topic, ids.filter((_, i) => !poison.includes(i)));
});

test('integration: a transient poison message in the middle of a batch is retried until it passes; every effect once', async () => {
  const topic = await createTopic(1);
  const deadLetterTopic = await createTopic(1, undefined, 'dlt');
  const sent = await produce(topic, Array.from({ length: 10 }, (_, i) => ({ key: `t${i}`, value: { amount: 1, ...(i === 4 && { poison: 'transient' as const }) } })));
  const attemptsSeen: number[] = [];
  const c = consumer({
    topics: topic,
    deadLetterTopic,
    messagesPerTransaction: 10,
    maxAttempts: 5,
    handleBatch: async (messages, ctx) => {
      await applyBatchEffect(db.schema, messages, ctx);
      if (messages.some((m) => m.value.poison) ) {
        attemptsSeen.push(ctx.attempt);
        if (ctx.attempt < 3) throw new OutboxError('downstream busy', { retriable: true });
      }
    },
  });
  const retries = collect(c, 'retry');
  await c.start();
  await waitFor('offset at the end', async () => (await committedOffset(c.options.groupId, topic)) === '10');
  assert.deepEqual(retries.map((r) => [r.offset, r.attempt]), [['4', 1], ['4', 2]]);
  assert.equal(c.stats().deadLettered, 0);
  assert.equal(c.stats().processed, 10);
  assert.ok(attemptsSeen.includes(3), `passed on the third attempt: ${attemptsSeen}`);
  await assertOnce(topic, sent.map((e) => e.messageId as string));
});

test('integration: a batch handler that fails for the whole batch once (transient) then succeeds: every effect once, nothing retried or dead-lettered', async () => {
  const topic = await createTopic(1);
  const sent = await produce(topic, Array.from({ length: 12 }, (_, i) => ({ key: `w${i % 2}`, value: { amount: 1 } })));
  const calls: string[][] = [];
  let failed = false;
  const c = consumer({
    topics: topic,
    messagesPerTransaction: 12,
    handleBatch: async (messages, ctx) => {
      calls.push(offsetsOf(messages));
      await applyBatchEffect(db.schema, messages, ctx);
      if (!failed && messages.length > 1) {
        failed = true;
        throw Object.assign(new Error('deadlock detected'), { code: '40P01' });
      }
    },
  });
  await c.start();
  await waitFor('offset at the end', async () => (await committedOffset(c.options.groupId, topic)) === '12');
  assert.equal(c.stats().batchFallbacks, 1);
  assert.equal(c.stats().retries, 0);
  assert.equal(c.stats().deadLettered, 0);
  assert.equal(c.stats().processed, 12);
  const failedCall = calls[0] as string[];
  assert.ok(failedCall.length > 1);
  // The failed batch's messages then came one at a time, in order.
  assert.deepEqual(calls.slice(1, 1 + failedCall.length), failedCall.map((o) => [o]));
  await assertOnce(topic, sent.map((e) => e.messageId as string));
});

test('integration: afterCommit of a batch runs after its COMMIT only, not for the run that was rolled back', async () => {
  const topic = await createTopic(1);
  const sent = await produce(topic, Array.from({ length: 6 }, (_, i) => ({ key: 'h', value: { amount: 1 } })));
  const ids = sent.map((e) => e.messageId as string);
  let groupId = '';
  let failed = false;
  const hooks: Array<{ offsets: string[]; effects: number; processed: number }> = [];
  const c = consumer({
    topics: topic,
    messagesPerTransaction: 6,
    handleBatch: async (messages, ctx) => {
      await applyBatchEffect(db.schema, messages, ctx);
      const offsets = offsetsOf(messages);
      const keys = messages.map((m) => m.idempotencyKey);
      ctx.afterCommit(async () => {
        // db.pool is another connection: it sees only committed rows.
        const effects = await countRows(db.pool, `SELECT 1 FROM "${db.schema}".effects WHERE topic = $1 AND kafka_offset = ANY($2::bigint[])`, [topic, offsets]);
        const processed = await countRows(db.pool, `SELECT 1 FROM "${db.schema}".processed_messages WHERE consumer_group = $1 AND key = ANY($2::text[])`, [groupId, keys]);
        hooks.push({ offsets, effects, processed });
      });
      if (!failed && messages.length > 1) {
        failed = true;
        throw new Error('first run of the batch fails');
      }
    },
  });
  groupId = c.options.groupId;
  await c.start();
  await waitFor('offset at the end', async () => (await committedOffset(groupId, topic)) === '6');
  assert.ok(failed);
  // The failed batch's hook never ran; the single-message runs' hooks ran after their COMMIT.
  assert.ok(hooks.every((h) => h.offsets.length === 1), `only hooks of committed runs: ${JSON.stringify(hooks)}`);
  assert.deepEqual(hooks.map((h) => h.offsets[0]), range(0, 6), 'in offset order');
  for (const h of hooks) assert.deepEqual([h.effects, h.processed], [1, 1], `effect and dedup row committed when the hook of ${h.offsets[0]} ran`);
  await assertOnce(topic, ids);

  // A batch that commits at once: one hook, after its COMMIT.
  hooks.length = 0;
  const more = await produce(topic, Array.from({ length: 4 }, () => ({ key: 'h', value: { amount: 1 } })));
  await waitFor('offset at the end', async () => (await committedOffset(groupId, topic)) === '10');
  assert.deepEqual(hooks.map((h) => h.offsets).flat(), range(6, 10));
  for (const h of hooks) assert.equal(h.effects, h.offsets.length);
  for (const h of hooks) assert.equal(h.processed, h.offsets.length);
  await assertOnce(topic, [...ids, ...more.map((e) => e.messageId as string)]);
});

for (const [total, poisonAt] of [[6, 2], [200, 137]] as const) {
test(`integration: the batch handler cannot end the transaction: a batch sending COMMIT is refused, redone (${total} messages), and only the message that sends it is dead-lettered`, async () => {
  const topic = await createTopic(1);
  const deadLetterTopic = await createTopic(1, undefined, 'dlt');
  const sent = await produce(topic, Array.from({ length: total }, (_, i) => ({ key: `c${i}`, value: { amount: 1, ...(i === poisonAt && { poison: 'permanent' as const }) } })));
  const c = consumer({
    topics: topic,
    deadLetterTopic,
    messagesPerTransaction: total,
    // Retriable by the classifier's standard: the refusal alone makes it permanent.
    classifyError: () => 'transient',
    handleBatch: async (messages, ctx) => {
      await applyBatchEffect(db.schema, messages, ctx);
      if (messages.some((m) => m.value.poison)) await ctx.client.query('COMMIT').catch(() => undefined);
    },
  });
  await c.start();
  await waitFor('offset at the end', async () => (await committedOffset(c.options.groupId, topic)) === String(total));
  const dead = await readTopic(deadLetterTopic, (m) => m.length >= 1);
  assert.deepEqual(dead.map((m) => [m.headers[DEAD_LETTER_HEADERS.offset], m.headers[DEAD_LETTER_HEADERS.reason], m.headers[DEAD_LETTER_HEADERS.errorName]]), [[String(poisonAt), 'permanent-error', 'TransactionControlRefused']]);
  const ids = sent.map((e) => e.messageId as string);
  await assertOnce(topic, [...ids.slice(0, poisonAt), ...ids.slice(poisonAt + 1)]);
});
}

for (const [total, poisonAt] of [[8, 5], [200, 137]] as const) {
test(`integration: a batch handler that swallows a database error (the COMMIT rolls back) is redone (${total} messages); only the culprit fails`, async () => {
  const topic = await createTopic(1);
  const deadLetterTopic = await createTopic(1, undefined, 'dlt');
  const sent = await produce(topic, Array.from({ length: total }, (_, i) => ({ key: `s${i}`, value: { amount: 1, ...(i === poisonAt && { poison: 'permanent' as const }) } })));
  const c = consumer({
    topics: topic,
    deadLetterTopic,
    maxAttempts: 1,
    messagesPerTransaction: total,
    handleBatch: async (messages, ctx) => {
      await applyBatchEffect(db.schema, messages, ctx);
      // Caught and ignored: the transaction is aborted, and the batch handler returns normally.
      if (messages.some((m) => m.value.poison)) await ctx.client.query('SELECT 1/0').catch(() => undefined);
    },
  });
  const fallbacks = collect(c, 'batchFallback');
  await c.start();
  await waitFor('offset at the end', async () => (await committedOffset(c.options.groupId, topic)) === String(total));
  const dead = await readTopic(deadLetterTopic, (m) => m.length >= 1);
  assert.deepEqual(dead.map((m) => [m.headers[DEAD_LETTER_HEADERS.offset], m.headers[DEAD_LETTER_HEADERS.errorName]]), [[String(poisonAt), 'HandlerLeftTransactionAborted']]);
  assert.equal(fallbacks.length, 1, 'one fallback for the one culprit');
  assert.equal(c.stats().processed, total - 1);
  const ids = sent.map((e) => e.messageId as string);
  await assertOnce(topic, [...ids.slice(0, poisonAt), ...ids.slice(poisonAt + 1)]);
});
}

// --- SIGKILL of a batch consumer (test/fixtures/consumerProcess.ts, HANDLER_KIND=batch) -----------------

const children: ChildConsumer[] = [];
after(() => {
  for (const child of children) child.process.kill('SIGKILL');
});

/** The crash fixture (test/fixtures/consumerProcess.ts) with a batch handler. */
function startBatchChild(env: Record<string, string>): ChildConsumer {
  const child = startChildConsumer({ DATABASE_URL: db.databaseUrl, KAFKA_BROKERS: testBrokers().join(','), OUTBOX_SCHEMA: db.schema, HANDLER_KIND: 'batch', ...env });
  children.push(child);
  return child;
}

for (const kill of ['after-db-commit', 'batch'] as const) {
  test(`integration: SIGKILL of a batch consumer ${kill === 'batch' ? 'inside the batch handler' : 'after the Postgres COMMIT, before the offset commit'}, then restart: every effect exactly once`, async () => {
    const topic = await createTopic(2);
    const groupId = uniqueName(`batch-crash-${kill}`);
    const sent = await produce(topic, Array.from({ length: 60 }, (_, i) => ({ key: `k${i % 6}`, value: { amount: 1 } })));
    const ids = sent.map((e) => e.messageId as string);
    const first = startBatchChild({ GROUP_ID: groupId, TOPICS: topic, MESSAGES_PER_TRANSACTION: '5', ...(kill === 'batch' ? { KILL_IN_BATCH: '3' } : { KILL_AFTER_DB_COMMIT: '3' }) });
    const killed = await waitFor('the kill', () => first.events.find((e) => e.event === 'killing'), { timeoutMs: 60_000 });
    assert.deepEqual(await first.exited, { code: null, signal: 'SIGKILL' });
    assert.equal(killed.in, kill);
    if (kill === 'after-db-commit') {
      // The window was hit: the killed transaction's effects are in Postgres, its offset is not in Kafka.
      const inKilled = await countRows(db.pool, `SELECT 1 FROM "${db.schema}".effects WHERE topic = $1 AND kafka_partition = $2 AND kafka_offset BETWEEN $3 AND $4`, [topic, killed.partition, killed.firstOffset, killed.lastOffset]);
      assert.equal(inKilled, killed.count, 'the killed transaction committed');
      const offset = await committedOffset(groupId, topic, killed.partition);
      assert.ok(offset === undefined || offset === '-1' || BigInt(offset) <= BigInt(killed.firstOffset), `offset ${offset} not past ${killed.firstOffset}`);
    } else {
      const written = await countRows(db.pool, `SELECT 1 FROM "${db.schema}".effects WHERE topic = $1 AND kafka_partition = $2 AND kafka_offset = ANY($3::bigint[])`, [topic, killed.partition, killed.offsets]);
      assert.equal(written, 0, "the killed batch's effects were rolled back with the connection");
    }
    const second = startBatchChild({ GROUP_ID: groupId, TOPICS: topic, MESSAGES_PER_TRANSACTION: '5' });
    await explainedBy(waitFor('every message handled after the restart', async () => (await effectCounts(db.pool, db.schema, topic)).size === ids.length, { timeoutMs: 60_000 }), { first, second });
    let offsets = { committed: new Map<number, string>(), ends: new Map<number, string>() };
    await explainedBy(
      waitFor('offsets committed to the end', async () => {
        const now = await committedToEnd(groupId, topic);
        offsets = now;
        return now.done;
      }).catch((error: Error) => {
        error.message += `\ncommitted offsets: ${JSON.stringify([...offsets.committed])}, ends: ${JSON.stringify([...offsets.ends])}`;
        throw error;
      }),
      { first, second },
    );
    const stopped = await second.stop();
    await assertOnce(topic, ids);
    if (kill === 'after-db-commit') assert.ok(stopped.stats.duplicates >= killed.count, `the redelivered transaction was skipped as duplicates (${stopped.stats.duplicates})`);
  });
}
