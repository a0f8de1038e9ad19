import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createConsumer, type Consumer } from '../src/consumer/consumer.js';
import { createTestSchema, uniqueName, type TestSchema } from './helpers/db.js';
import { createTopic, testKafka } from './helpers/kafka.js';
import { waitFor } from './helpers/wait.js';
import { applyEffect, createEffectTables, effectCounts, produce } from './helpers/consumer.js';

let db: TestSchema;
before(async () => {
  db = await createTestSchema('rebalance');
  await createEffectTables(db.pool, db.schema);
});
after(async () => {
  await db.drop();
});

test('integration: two consumers in one group, one leaving and one joining mid-stream: every message handled, each effect once', async () => {
  const topic = await createTopic(4);
  const groupId = uniqueName('group');
  const members: Consumer<{ amount: number }>[] = [];
  const assignments: string[] = [];
  const member = (name: string): Consumer<{ amount: number }> => {
    const c = createConsumer<{ amount: number }>({
      kafka: testKafka(),
      groupId,
      topics: topic,
      pool: db.pool,
      schema: db.schema,
      messagesPerTransaction: 5,
      partitionsConcurrency: 4,
      sessionTimeoutMs: 10_000,
      heartbeatIntervalMs: 300,
      maxWaitTimeMs: 100,
      handler: async (message, context) => {
        // A little work per message, so that rebalances land in the middle of batches.
        await new Promise((r) => setTimeout(r, 10));
        await applyEffect(db.schema, message, context);
      },
    });
    c.on('assigned', (a) => assignments.push(`${name}: ${a.partitions.map((p) => p.partition).join(',')}`));
    members.push(c);
    return c;
  };
  const handled = async (): Promise<number> => (await effectCounts(db.pool, db.schema, topic)).size;
  const ids: string[] = [];
  const publish = async (n: number, from: number): Promise<void> => {
    const sent = await produce(topic, Array.from({ length: n }, (_, i) => ({ key: `e${(from + i) % 40}`, value: { amount: 1 } })));
    ids.push(...sent.map((e) => e.messageId as string));
  };

  try {
    // A first backlog large enough that both members still have work once a joins.
    await publish(600, 0);
    const a = member('a');
    const b = member('b');
    await Promise.all([a.start(), b.start()]);
    // Both members hold partitions and have each handled messages: a leaves after it did some of the work.
    await waitFor('a and b both handling messages', () => a.stats().processed > 0 && b.stats().processed > 0);

    // a leaves mid-stream while more messages arrive.
    assert.ok((await handled()) < 600, 'a leaves while messages are still waiting');
    const leaving = a.stop();
    await publish(300, 600);
    await leaving;
    await waitFor('b working alone', async () => (await handled()) >= 660);

    // c joins mid-stream.
    const c = member('c');
    assert.ok((await handled()) < 900, 'c joins while messages are still waiting');
    await c.start();
    await publish(300, 900);
    await waitFor('c took partitions', () => assignments.some((x) => x.startsWith('c') && x.length > 3));
    await waitFor('all 1200 messages handled', async () => (await handled()) === 1200, { timeoutMs: 60_000 });
    // Every delivery is accounted for: processed or skipped as a duplicate, never lost.
    const stats = members.map((m) => m.stats());
    process.stdout.write(`# member stats ${JSON.stringify(stats)} assignments ${JSON.stringify(assignments)}\n`);
    await Promise.all(members.map((m) => m.stop()));

    const counts = await effectCounts(db.pool, db.schema, topic);
    const wrong = ids.filter((id) => counts.get(id) !== 1);
    assert.deepEqual(wrong, [], 'each message handled exactly once');
    assert.equal(stats.reduce((s, x) => s + x.processed, 0), 1200, `processed across members (${JSON.stringify(stats)})`);
    assert.ok(stats.every((s) => s.processed > 0), 'every member did some of the work');
    const { rows } = await db.pool.query<{ total: string }>(`SELECT sum(total)::text AS total FROM "${db.schema}".balances WHERE entity LIKE 'e%'`);
    assert.equal(rows[0]?.total, '1200');

    const admin = testKafka().admin();
    await admin.connect();
    try {
      const [offsets] = await admin.fetchOffsets({ groupId, topics: [topic] });
      const committed = (offsets?.partitions ?? []).reduce((s, p) => s + Number(p.offset), 0);
      assert.equal(committed, 1200, 'offsets committed to the end of every partition');
    } finally {
      await admin.disconnect();
    }
  } finally {
    await Promise.all(members.map((m) => m.stop()));
  }
});
