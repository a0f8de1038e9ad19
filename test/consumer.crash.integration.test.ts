import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createTestSchema, uniqueName, type TestSchema } from './helpers/db.js';
import { createTopic, testBrokers } from './helpers/kafka.js';
import { waitFor } from './helpers/wait.js';
import { committedOffset, committedToEnd, createEffectTables, effectCounts, produce } from './helpers/consumer.js';
import { startChildConsumer, type ChildConsumer } from './helpers/childConsumer.js';

// Each test runs the consumer in a child process (test/fixtures/consumerProcess.ts), kills
// it with SIGKILL at an exact step through the fixture's documented hooks, restarts it in
// the same group, and checks every message's effect is in the effects table exactly once.

let db: TestSchema;
before(async () => {
  db = await createTestSchema('crash');
  await createEffectTables(db.pool, db.schema);
});
after(async () => {
  await db.drop();
});

const children: ChildConsumer[] = [];
after(() => {
  for (const c of children) c.process.kill('SIGKILL');
});

function start(env: Record<string, string>): ChildConsumer {
  const child = startChildConsumer({ DATABASE_URL: db.databaseUrl, KAFKA_BROKERS: testBrokers().join(','), OUTBOX_SCHEMA: db.schema, ...env });
  children.push(child);
  return child;
}


async function assertExactlyOnce(topic: string, ids: string[]): Promise<void> {
  const counts = await effectCounts(db.pool, db.schema, topic);
  const wrong = ids.filter((id) => counts.get(id) !== 1).map((id) => `${id}: ${counts.get(id) ?? 0}`);
  assert.deepEqual(wrong, [], 'every message has exactly one effect');
}

test('integration: SIGKILL after the Postgres commit and before the offset commit, then restart: every effect exactly once', async () => {
  const topic = await createTopic(2);
  const groupId = uniqueName('crash-commit');
  const sent = await produce(topic, Array.from({ length: 60 }, (_, i) => ({ key: `k${i % 6}`, value: { amount: 1 } })));
  const ids = sent.map((e) => e.messageId as string);

  const first = start({ GROUP_ID: groupId, TOPICS: topic, MESSAGES_PER_TRANSACTION: '5', KILL_AFTER_DB_COMMIT: '3' });
  const killed = await first.waitForEvent('the kill after the third DB commit', (e) => e.event === 'killing');
  assert.deepEqual(await first.exited, { code: null, signal: 'SIGKILL' });
  assert.equal(killed.in, 'after-db-commit');

  // The window really was hit: the killed transaction's effects are in Postgres, and its
  // offset never reached Kafka (the group's offset is at or before its first message).
  const counts = await effectCounts(db.pool, db.schema, topic);
  const inKilled = await db.pool.query<{ message_id: string }>(
    `SELECT message_id FROM "${db.schema}".effects WHERE topic = $1 AND kafka_partition = $2 AND kafka_offset BETWEEN $3 AND $4`,
    [topic, killed.partition, killed.firstOffset, killed.lastOffset],
  );
  assert.equal(inKilled.rowCount, killed.count, 'the killed transaction committed');
  const offset = await committedOffset(groupId, topic, killed.partition);
  assert.ok(offset === '-1' || BigInt(offset as string) <= BigInt(killed.firstOffset), `offset ${offset} not past ${killed.firstOffset}`);
  assert.ok(counts.size > 0);

  const second = start({ GROUP_ID: groupId, TOPICS: topic, MESSAGES_PER_TRANSACTION: '5' });
  await waitFor('every message handled after the restart', async () => (await effectCounts(db.pool, db.schema, topic)).size === ids.length, { timeoutMs: 45_000 });
  await waitFor('offsets committed to the end', async () => (await committedToEnd(groupId, topic)).done);
  const stopped = await second.stop();
  await assertExactlyOnce(topic, ids);
  assert.ok(stopped.stats.duplicates >= killed.count, `the redelivered transaction was skipped as duplicates (${stopped.stats.duplicates})`);
});

test('integration: SIGKILL in the middle of a handler, then restart: the effect once after redelivery', async () => {
  const topic = await createTopic(2);
  const groupId = uniqueName('crash-handler');
  const sent = await produce(topic, Array.from({ length: 40 }, (_, i) => ({ key: `h${i % 5}`, value: { amount: 2 } })));
  const ids = sent.map((e) => e.messageId as string);

  const first = start({ GROUP_ID: groupId, TOPICS: topic, MESSAGES_PER_TRANSACTION: '4', KILL_IN_HANDLER: '11' });
  const killed = await first.waitForEvent('the kill inside the 11th handler call', (e) => e.event === 'killing');
  assert.deepEqual(await first.exited, { code: null, signal: 'SIGKILL' });
  assert.equal(killed.in, 'handler');
  // The handler wrote its effect before dying; the transaction never committed.
  const before = await db.pool.query(`SELECT 1 FROM "${db.schema}".effects WHERE topic = $1 AND kafka_partition = $2 AND kafka_offset = $3`, [
    topic,
    killed.partition,
    killed.offset,
  ]);
  assert.equal(before.rowCount, 0, 'the half-done effect was rolled back with the connection');

  const second = start({ GROUP_ID: groupId, TOPICS: topic, MESSAGES_PER_TRANSACTION: '4' });
  await waitFor('every message handled after the restart', async () => (await effectCounts(db.pool, db.schema, topic)).size === ids.length, { timeoutMs: 45_000 });
  await second.stop();
  await assertExactlyOnce(topic, ids);
  const total = await db.pool.query<{ total: string }>(`SELECT sum(total)::text AS total FROM "${db.schema}".balances WHERE entity LIKE 'h%'`);
  assert.equal(total.rows[0]?.total, String(2 * ids.length), 'balances count every message once');
});
