import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { DEAD_LETTER_HEADERS } from '../src/consumer/deadLetterTopic.js';
import { OutboxError } from '../src/shared/errors.js';
import { HEADERS } from '../src/shared/kafka.js';
import { createTestSchema, uniqueName, type TestSchema } from './helpers/db.js';
import { createTopic, readTopic, topicRecordCount } from './helpers/kafka.js';
import type { ConsumedMessage, HandlerContext } from '../src/consumer/types.js';
import { waitFor } from './helpers/wait.js';
import { applyEffect, committedOffsets, countRows, createEffectTables, effectCounts, produce, testConsumers, type TestEvent } from './helpers/consumer.js';

let db: TestSchema;
before(async () => {
  db = await createTestSchema('consumer');
  await createEffectTables(db.pool, db.schema);
});
after(async () => {
  await db.drop();
});

const consumer = testConsumers(() => db, () => ({ handler: (message: ConsumedMessage<unknown>, context: HandlerContext) => applyEffect(db.schema, message, context) }));


test('integration: the same messages published twice have their effects once, and the duplicates are counted', async () => {
  const topic = await createTopic(3);
  const events: TestEvent[] = Array.from({ length: 60 }, (_, i) => ({ key: `dup-${i % 10}`, value: { amount: i + 1 } }));
  // Published twice before the consumer starts: in each partition a copy may share a
  // transaction (messagesPerTransaction 7) with its original or come in a later one.
  const sent = await produce(topic, events);
  await produce(topic, sent);
  // Every record of the log, however many the producer wrote, is handled or counted as a
  // duplicate: the count comes from the log, not from what the test meant to send.
  assert.equal(await topicRecordCount(topic), 120, 'the test producer wrote each copy once');
  const c = consumer({ topics: topic, messagesPerTransaction: 7 });
  await c.start();
  await waitFor('first 120 deliveries', () => c.stats().processed + c.stats().duplicates >= 120);
  assert.equal(c.stats().processed + c.stats().duplicates, 120, 'no delivery counted twice');
  // Second publish, after everything was handled: a relay that published a batch again.
  await produce(topic, sent);
  assert.equal(await topicRecordCount(topic), 180);
  await waitFor('all 180 deliveries', () => c.stats().processed + c.stats().duplicates >= 180);

  const counts = await effectCounts(db.pool, db.schema);
  for (const e of sent) assert.equal(counts.get(e.messageId as string), 1, `effect of ${e.messageId} once`);
  assert.equal(c.stats().processed, 60);
  assert.equal(c.stats().duplicates, 120);
  assert.equal(await countRows(db.pool, `SELECT 1 FROM "${db.schema}".processed_messages WHERE consumer_group = $1`, [c.options.groupId]), 60);
  const { rows } = await db.pool.query<{ total: string }>(`SELECT sum(total)::text AS total FROM "${db.schema}".balances WHERE entity LIKE 'dup-%'`);
  assert.equal(rows[0]?.total, String((60 * 61) / 2));
  await c.stop();
  const offsets = await committedOffsets(c.options.groupId, topic);
  const total = [...offsets.values()].reduce((sum, o) => sum + Number(o), 0);
  assert.equal(total, 180, 'every delivery committed');
});

for (const savepoints of ['on-failure', 'always'] as const) {
  test(`integration: poison messages go to the dead-letter topic with their metadata while the rest of the partition keeps flowing (savepoints ${savepoints})`, async () => {
    const topic = await createTopic(2);
    const deadLetterTopic = await createTopic(1, undefined, 'dlt');
    class InvalidOrder extends OutboxError {
      constructor() {
        super('order has no lines', { retriable: false });
      }
    }
    const c = consumer<{ amount?: number; invalid?: boolean; flaky?: boolean } | null>({
      topics: topic,
      deadLetterTopic,
      maxAttempts: 3,
      messagesPerTransaction: 4,
      savepoints,
      handler: async (message, context) => {
        // The effect first, then the failure: the rollback must take it back.
        await applyEffect(db.schema, message, context);
        if (message.value?.invalid) throw new InvalidOrder();
        if (message.value?.flaky) throw Object.assign(new Error('downstream timed out'), { retriable: true });
      },
    });
    const p0: TestEvent[] = [
      { key: 'a', value: { amount: 1 }, partition: 0 },
      { key: 'a', raw: '{not json', headers: { [HEADERS.contentType]: 'application/json', traceparent: '00-abc-01' }, partition: 0 },
      { key: 'a', value: { amount: 2 }, partition: 0 },
      { key: 'a', value: { invalid: true }, partition: 0 },
      { key: 'a', value: { amount: 3 }, partition: 0 },
      { key: 'a', value: { amount: 4 }, messageId: null, partition: 0 },
      { key: 'a', value: { flaky: true }, partition: 0 },
      ...Array.from({ length: 10 }, (_, i) => ({ key: 'a', value: { amount: 10 + i }, partition: 0 })),
    ];
    const p1: TestEvent[] = Array.from({ length: 20 }, (_, i) => ({ key: 'b', value: { amount: i }, partition: 1 }));
    const sent = await produce(topic, [...p0, ...p1]);
    await c.start();

    const dead = await readTopic(deadLetterTopic, (m) => m.length >= 4);
    const good = sent.filter((e) => !(e.raw || (e.value as { invalid?: boolean; flaky?: boolean }).invalid || (e.value as { flaky?: boolean }).flaky || e.messageId === null));
    await waitFor('good messages handled', () => c.stats().processed === good.length);
    const counts = await effectCounts(db.pool, db.schema);
    for (const e of good) assert.equal(counts.get(e.messageId as string), 1);
    const failedIds = sent.filter((e) => !good.includes(e) && e.messageId).map((e) => e.messageId as string);
    for (const id of failedIds) assert.equal(counts.get(id), undefined, `no effect of dead-lettered ${id}`);
    // Its rollback took the dedup row too: a replay after a fix is handled, not skipped.
    assert.equal(await countRows(db.pool, `SELECT 1 FROM "${db.schema}".processed_messages WHERE key = ANY($1)`, [failedIds]), 0);

    assert.equal(dead.length, 4);
    const byReason = new Map(dead.map((m) => [m.headers[DEAD_LETTER_HEADERS.reason], m]));
    const undecodable = byReason.get('undecodable');
    assert.ok(undecodable, 'undecodable value dead-lettered');
    assert.equal(undecodable.value?.toString(), '{not json');
    assert.equal(undecodable.key, 'a');
    assert.equal(undecodable.headers.traceparent, '00-abc-01');
    assert.equal(undecodable.headers[HEADERS.messageId], sent[1]?.messageId);
    assert.equal(undecodable.headers[DEAD_LETTER_HEADERS.errorName], 'DecodeError');
    assert.match(undecodable.headers[DEAD_LETTER_HEADERS.error] ?? '', /not JSON/);
    assert.equal(undecodable.headers[DEAD_LETTER_HEADERS.topic], topic);
    assert.equal(undecodable.headers[DEAD_LETTER_HEADERS.partition], '0');
    assert.equal(undecodable.headers[DEAD_LETTER_HEADERS.offset], '1');
    assert.match(undecodable.headers[DEAD_LETTER_HEADERS.timestamp] ?? '', /^\d{13}$/);
    assert.equal(undecodable.headers[DEAD_LETTER_HEADERS.consumerGroup], c.options.groupId);
    assert.equal(undecodable.headers[DEAD_LETTER_HEADERS.attempts], '1');

    const permanent = byReason.get('permanent-error');
    assert.equal(permanent?.headers[DEAD_LETTER_HEADERS.errorName], 'InvalidOrder');
    assert.equal(permanent?.headers[DEAD_LETTER_HEADERS.error], 'order has no lines');
    assert.equal(permanent?.headers[DEAD_LETTER_HEADERS.offset], '3');
    assert.deepEqual(JSON.parse(permanent?.value?.toString() ?? ''), { invalid: true });

    const missing = byReason.get('missing-key');
    assert.equal(missing?.headers[DEAD_LETTER_HEADERS.offset], '5');
    assert.equal(missing?.headers[HEADERS.messageId], undefined);

    const exhausted = byReason.get('retries-exhausted');
    assert.equal(exhausted?.headers[DEAD_LETTER_HEADERS.attempts], '3');
    assert.equal(exhausted?.headers[DEAD_LETTER_HEADERS.offset], '6');
    assert.equal(exhausted?.headers[DEAD_LETTER_HEADERS.error], 'downstream timed out');

    const stats = c.stats();
    assert.equal(stats.deadLettered, 4);
    assert.equal(stats.missingKey, 1);
    assert.equal(stats.retries, 2);
    await c.stop();
    const offsets = await committedOffsets(c.options.groupId, topic);
    assert.equal(offsets.get(0), String(p0.length), 'partition 0 committed past its poison messages');
    assert.equal(offsets.get(1), String(p1.length));
  });
}

test('integration: a transient failure is retried with backoff until it succeeds, effect once, while other partitions flow and the member stays in the group', async () => {
  const topic = await createTopic(2);
  let healthy = false;
  const attemptsSeen: number[] = [];
  const c = consumer<{ amount: number; flaky?: boolean }>({
    topics: topic,
    maxAttempts: 1_000,
    retryBaseDelayMs: 20,
    retryMaxDelayMs: 100,
    handler: async (message, context) => {
      await applyEffect(db.schema, message, context);
      if (message.value.flaky) {
        attemptsSeen.push(context.attempt);
        if (!healthy) throw Object.assign(new Error('connection refused'), { code: 'ECONNREFUSED' });
      }
    },
  });
  let assignments = 0;
  c.on('assigned', () => assignments++);
  const firstRetry = new Promise((resolve) => c.once('retry', resolve));
  const p0 = await produce(topic, [
    { key: 'x', value: { amount: 1 }, partition: 0 },
    { key: 'x', value: { amount: 2, flaky: true }, partition: 0 },
    ...Array.from({ length: 5 }, (_, i) => ({ key: 'x', value: { amount: 3 + i }, partition: 0 })),
  ]);
  await c.start();
  await firstRetry;

  // Published while partition 0 is failing: partition 1 must not wait for it.
  const p1 = await produce(topic, Array.from({ length: 30 }, (_, i) => ({ key: 'y', value: { amount: i }, partition: 1 })));
  await waitFor('partition 1 handled', async () => {
    const counts = await effectCounts(db.pool, db.schema);
    return p1.every((e) => counts.get(e.messageId as string) === 1);
  });
  let counts = await effectCounts(db.pool, db.schema);
  assert.equal(counts.get(p0[1]?.messageId as string), undefined, 'the failing message has no effect yet');
  assert.equal(counts.get(p0[2]?.messageId as string), undefined, 'partition 0 keeps its order: nothing after the failing message ran');
  assert.ok(c.stats().retries >= 1);

  healthy = true;
  await waitFor('partition 0 handled', async () => {
    counts = await effectCounts(db.pool, db.schema);
    return p0.every((e) => counts.get(e.messageId as string) === 1);
  });
  for (const e of [...p0, ...p1]) assert.equal(counts.get(e.messageId as string), 1);
  assert.ok(attemptsSeen.length >= 2, 'retried');
  assert.deepEqual(attemptsSeen, attemptsSeen.map((_, i) => i + 1), 'attempt counts up by one per retry');
  const { rows } = await db.pool.query<{ kafka_offset: number }>(
    `SELECT kafka_offset FROM "${db.schema}".effects WHERE topic = $1 AND kafka_partition = 0 ORDER BY seq`,
    [topic],
  );
  assert.deepEqual(rows.map((r) => Number(r.kafka_offset)), [0, 1, 2, 3, 4, 5, 6], 'partition 0 handled in offset order');
  assert.equal(assignments, 1, 'no rebalance: the member stayed in the group through the retries');
  assert.equal(c.stats().deadLettered, 0);
});

test('integration: the version gate drops a stale event delivered after a newer one', async () => {
  const topic = await createTopic(1);
  await db.pool.query(`CREATE TABLE "${db.schema}".accounts (id text PRIMARY KEY, name text NOT NULL, version bigint NOT NULL)`);
  const c = consumer<{ id: string; name: string; version: number }>({
    topics: topic,
    handler: async (message, context) => {
      const { id, name, version } = message.value;
      if (!(await context.advanceVersion(`account:${id}`, version))) return;
      await context.client.query(
        `INSERT INTO "${db.schema}".accounts (id, name, version) VALUES ($1, $2, $3)
         ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name, version = EXCLUDED.version`,
        [id, name, version],
      );
    },
  });
  const stale: string[] = [];
  c.on('stale', (s) => stale.push(s.offset));
  await produce(topic, [
    { key: 'acc-1', value: { id: '1', name: 'v1', version: 1 } },
    { key: 'acc-1', value: { id: '1', name: 'v3', version: 3 } },
    { key: 'acc-1', value: { id: '1', name: 'v2', version: 2 } },
    { key: 'acc-2', value: { id: '2', name: 'other', version: 7 } },
    { key: 'acc-1', value: { id: '1', name: 'v3 again', version: 3 } },
  ]);
  await c.start();
  await waitFor('all handled', () => c.stats().processed === 5);
  const { rows } = await db.pool.query(`SELECT id, name, version::int FROM "${db.schema}".accounts ORDER BY id`);
  assert.deepEqual(rows, [
    { id: '1', name: 'v3', version: 3 },
    { id: '2', name: 'other', version: 7 },
  ]);
  assert.equal(c.stats().stale, 2);
  assert.deepEqual(stale, ['2', '4']);
  const versions = await db.pool.query(`SELECT entity, version::int FROM "${db.schema}".entity_versions WHERE scope = $1 ORDER BY entity`, [c.options.groupId]);
  assert.deepEqual(versions.rows, [
    { entity: 'account:1', version: 3 },
    { entity: 'account:2', version: 7 },
  ]);
});

test('integration: a message without a message id is processed without dedup when configured so, and counted', async () => {
  const topic = await createTopic(1);
  const c = consumer({ topics: topic, onMissingKey: 'process-without-dedup' });
  await produce(topic, [{ key: 'k', value: { amount: 5 }, messageId: null }, { key: 'k', value: { amount: 6 } }]);
  await c.start();
  await waitFor('both handled', () => c.stats().processed === 2);
  assert.equal(c.stats().missingKey, 1);
  assert.equal(await countRows(db.pool, `SELECT 1 FROM "${db.schema}".effects WHERE topic = $1`, [topic]), 2);
  assert.equal(await countRows(db.pool, `SELECT 1 FROM "${db.schema}".processed_messages WHERE consumer_group = $1`, [c.options.groupId]), 1);
});

test('integration: a derived idempotency key deduplicates events that carry different message ids', async () => {
  const topic = await createTopic(1);
  const c = consumer<{ type: string; id: string; version: number; amount: number }>({
    topics: topic,
    idempotencyKey: (m) => `${m.value.type}:${m.value.id}:${m.value.version}`,
  });
  await produce(topic, [
    { key: 'o1', value: { type: 'OrderPlaced', id: 'o1', version: 1, amount: 1 } },
    { key: 'o1', value: { type: 'OrderPlaced', id: 'o1', version: 1, amount: 1 } },
    { key: 'o1', value: { type: 'OrderPlaced', id: 'o1', version: 2, amount: 1 } },
  ]);
  await c.start();
  await waitFor('all handled', () => c.stats().processed + c.stats().duplicates === 3);
  assert.equal(c.stats().processed, 2);
  assert.equal(c.stats().duplicates, 1);
  const { rows } = await db.pool.query(`SELECT key FROM "${db.schema}".processed_messages WHERE consumer_group = $1 ORDER BY key`, [c.options.groupId]);
  assert.deepEqual(rows.map((r) => r.key), ['OrderPlaced:o1:1', 'OrderPlaced:o1:2']);
});

test('integration: when the dead-letter publish fails the offset is not committed, and the message is dead-lettered once it works', async () => {
  const topic = await createTopic(1);
  const deadLetterTopic = await createTopic(1, undefined, 'dlt');
  let deadLetterReachable = false;
  const errors: string[] = [];
  const c = consumer({
    topics: topic,
    // An invalid topic name makes the broker refuse the publish.
    deadLetterTopic: () => (deadLetterReachable ? deadLetterTopic : 'invalid topic name!'),
    handler: async () => {
      throw new OutboxError('rejected', { retriable: false });
    },
  });
  c.on('error', (e) => errors.push(e.during));
  await produce(topic, [{ key: 'k', value: { amount: 1 } }]);
  await c.start();
  await waitFor('dead-letter publish failed twice', () => errors.filter((d) => d === 'dead-letter publish').length >= 2);
  assert.equal((await committedOffsets(c.options.groupId, topic)).get(0), '-1', 'offset not committed');
  deadLetterReachable = true;
  const dead = await readTopic(deadLetterTopic, (m) => m.length >= 1);
  assert.equal(dead[0]?.headers[DEAD_LETTER_HEADERS.reason], 'permanent-error');
  await waitFor('offset committed', async () => (await committedOffsets(c.options.groupId, topic)).get(0) === '1');
});

// With 2 messages per transaction the swallowing handler is the last of its group (the
// COMMIT finds the transaction aborted); with 100, the next handler's query fails.
for (const [savepoints, messagesPerTransaction] of [['on-failure', 100], ['on-failure', 2], ['always', 100]] as const) {
  test(`integration: a handler that swallows a database error is caught: only its own message is rolled back (savepoints ${savepoints}, ${messagesPerTransaction} per transaction)`, async () => {
    const topic = await createTopic(1);
    const deadLetterTopic = await createTopic(1, undefined, 'dlt');
    const c = consumer<{ amount: number; swallow?: boolean }>({
      topics: topic,
      deadLetterTopic,
      maxAttempts: 1,
      savepoints,
      messagesPerTransaction,
      handler: async (message, context) => {
        await applyEffect(db.schema, message, context);
        if (message.value.swallow) await context.client.query('SELECT 1/0').catch(() => undefined);
      },
    });
    const sent = await produce(topic, [
      { key: 's', value: { amount: 1 } },
      { key: 's', value: { amount: 2, swallow: true } },
      { key: 's', value: { amount: 3 } },
    ]);
    await c.start();
    const dead = await readTopic(deadLetterTopic, (m) => m.length >= 1);
    await waitFor('the others handled', () => c.stats().processed === 2);
    assert.equal(dead[0]?.headers[DEAD_LETTER_HEADERS.errorName], 'HandlerLeftTransactionAborted');
    assert.equal(dead[0]?.headers[DEAD_LETTER_HEADERS.offset], '1');
    const counts = await effectCounts(db.pool, db.schema, topic);
    assert.equal(counts.get(sent[0]?.messageId as string), 1);
    assert.equal(counts.get(sent[1]?.messageId as string), undefined);
    assert.equal(counts.get(sent[2]?.messageId as string), 1);
  });
}

test('integration: savepoints on failure: a failing message rolls back only itself; the handlers before it run again, their effects once', async () => {
  const topic = await createTopic(1);
  const deadLetterTopic = await createTopic(1, undefined, 'dlt');
  const calls = new Map<string, number>();
  const c = consumer<{ amount: number; invalid?: boolean }>({
    topics: topic,
    deadLetterTopic,
    messagesPerTransaction: 10,
    handler: async (message, context) => {
      calls.set(message.offset, (calls.get(message.offset) ?? 0) + 1);
      await applyEffect(db.schema, message, context);
      if (message.value.invalid) throw new OutboxError('invalid', { retriable: false });
    },
  });
  const sent = await produce(topic, Array.from({ length: 10 }, (_, i) => ({ key: 'f', value: { amount: i + 1, invalid: i === 4 } })));
  await c.start();
  await waitFor('the others handled', () => c.stats().processed === 9 && c.stats().deadLettered === 1);
  const counts = await effectCounts(db.pool, db.schema, topic);
  for (const [i, e] of sent.entries()) assert.equal(counts.get(e.messageId as string), i === 4 ? undefined : 1, `effect of message ${i}`);
  assert.deepEqual(
    [...calls.entries()].sort((x, y) => Number(x[0]) - Number(y[0])).map(([, n]) => n),
    [2, 2, 2, 2, 1, 1, 1, 1, 1, 1],
    'the four before the failing one ran twice (the first run rolled back), the failing one once',
  );
  const { rows } = await db.pool.query<{ kafka_offset: number }>(`SELECT kafka_offset FROM "${db.schema}".effects WHERE topic = $1 ORDER BY seq`, [topic]);
  assert.deepEqual(rows.map((r) => Number(r.kafka_offset)), [0, 1, 2, 3, 5, 6, 7, 8, 9], 'in offset order');
  await c.stop();
  assert.equal((await committedOffsets(c.options.groupId, topic)).get(0), '10');
});

test('integration: stop() is idempotent and bounded, and a consumer refuses a schema without processed_messages', async () => {
  const topic = await createTopic(1);
  const c = consumer({ topics: topic });
  await c.start();
  const [a, b] = await Promise.all([c.stop(), c.stop()]);
  assert.deepEqual(a, { hard: false });
  assert.equal(a, b);
  const empty = uniqueName('empty');
  await db.pool.query(`CREATE SCHEMA "${empty}"`);
  try {
    const bad = consumer({ topics: topic, schema: empty });
    await assert.rejects(bad.start(), /outbox-relay migrate/);
  } finally {
    await db.pool.query(`DROP SCHEMA "${empty}" CASCADE`);
  }
});

