// The consumer runtime with its database reached through a real PgBouncer 1.18 in
// transaction pooling (a pool of 4 server connections for 4 partitions at once): 520
// messages, many delivered twice, one poison message, entity locks; then SIGKILLs of a
// consumer process and restarts. Every effect exactly once.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { OutboxError } from '../src/shared/errors.js';
import { lockEntity } from '../src/consumer/entityLock.js';
import { DEAD_LETTER_HEADERS } from '../src/consumer/deadLetterTopic.js';
import type { ConsumedMessage, HandlerContext } from '../src/consumer/types.js';
import { createTestSchema, uniqueName, type TestSchema } from './helpers/db.js';
import { createTopic, readTopic, testBrokers } from './helpers/kafka.js';
import { applyEffect, committedOffset, committedOffsets, countRows, createEffectTables, effectCounts, produce, testConsumers, type TestEvent } from './helpers/consumer.js';
import { startChildConsumer, type ChildConsumer } from './helpers/childConsumer.js';
import { startPgBouncer, type PgBouncer } from './helpers/pgbouncer.js';
import { waitFor } from './helpers/wait.js';

let db: TestSchema;
let bouncer: PgBouncer;
let pooled: pg.Pool;
const children: ChildConsumer[] = [];

before(async () => {
  db = await createTestSchema('pgb_consumer');
  await createEffectTables(db.pool, db.schema);
  bouncer = await startPgBouncer({ mode: 'transaction', poolSize: 4 });
  pooled = new pg.Pool({ connectionString: bouncer.url(), max: 12 });
  pooled.on('error', () => undefined);
});

after(async () => {
  for (const c of children) c.process.kill('SIGKILL');
  try {
    await pooled?.end();
  } finally {
    await bouncer?.stop();
    await db?.drop();
  }
});

// The consumers' pool is the one through PgBouncer; db.pool (direct) is for the checks only.
const consumer = testConsumers(() => ({ pool: pooled, schema: db.schema }));

class InvalidOrder extends OutboxError {
  constructor() {
    super('order has no lines', { retriable: false });
  }
}

async function assertExactlyOnce(topic: string, ids: string[]): Promise<void> {
  const counts = await effectCounts(db.pool, db.schema, topic);
  const wrong = ids.filter((id) => counts.get(id) !== 1).map((id) => `${id}: ${counts.get(id) ?? 0}`);
  assert.deepEqual(wrong, [], 'every message has exactly one effect');
}

test('integration (PgBouncer, transaction pooling): 520 messages, 200 of them twice, one poison: every effect once, the poison dead-lettered', async () => {
  const topic = await createTopic(4);
  const deadLetterTopic = await createTopic(1, undefined, 'dlt');
  const events: TestEvent[] = Array.from({ length: 520 }, (_, i) => ({ key: `e${i % 26}`, value: { amount: i + 1 } }));
  events.splice(300, 0, { key: 'e3', value: { invalid: true } });
  const sent = await produce(topic, events);
  // A relay's redelivery: 200 of them published again, some before the consumer starts.
  await produce(topic, sent.slice(0, 120));
  const c = consumer<{ amount?: number; invalid?: boolean }>({
    topics: topic,
    deadLetterTopic,
    maxAttempts: 2,
    messagesPerTransaction: 10,
    partitionsConcurrency: 4,
    handler: async (message: ConsumedMessage<{ amount?: number; invalid?: boolean }>, context: HandlerContext) => {
      // A transaction-scoped lock (with its SET LOCAL lock_timeout): nothing of it may
      // outlive the transaction on a pooled server connection.
      await lockEntity(context.client, `entity:${message.key}`, { timeoutMs: 5_000 });
      await applyEffect(db.schema, message, context);
      if (message.value?.invalid) throw new InvalidOrder();
    },
  });
  await c.start();
  await waitFor('the first 641 deliveries (521 and 120 again)', () => c.stats().processed + c.stats().duplicates + c.stats().deadLettered === 641, { timeoutMs: 90_000 });
  await produce(topic, sent.slice(400, 480));
  await waitFor('all 721 deliveries', () => c.stats().processed + c.stats().duplicates + c.stats().deadLettered === 721, { timeoutMs: 60_000 });

  const poison = sent[300]!;
  const good = sent.filter((e) => e !== poison);
  await assertExactlyOnce(topic, good.map((e) => e.messageId as string));
  assert.equal((await effectCounts(db.pool, db.schema, topic)).get(poison.messageId as string), undefined, 'the poison message left no effect');
  const stats = c.stats();
  assert.equal(stats.processed, 520);
  assert.equal(stats.duplicates, 200);
  assert.equal(stats.deadLettered, 1);
  assert.equal(await countRows(db.pool, `SELECT 1 FROM "${db.schema}".processed_messages WHERE consumer_group = $1`, [c.options.groupId]), 520);
  const { rows } = await db.pool.query<{ total: string }>(`SELECT sum(total)::text AS total FROM "${db.schema}".balances WHERE entity LIKE 'e%'`);
  assert.equal(rows[0]?.total, String((520 * 521) / 2), 'balances count every message once');

  const dead = await readTopic(deadLetterTopic, (m) => m.length >= 1);
  assert.equal(dead.length, 1);
  assert.equal(dead[0]!.headers[DEAD_LETTER_HEADERS.reason], 'permanent-error');
  assert.equal(dead[0]!.headers[DEAD_LETTER_HEADERS.errorName], 'InvalidOrder');
  await c.stop();
  const offsets = await committedOffsets(c.options.groupId, topic);
  assert.equal([...offsets.values()].reduce((sum, o) => sum + Number(o), 0), 721, 'every delivery committed');

  // No entity lock outlived its transaction on the shared server connections.
  const leftovers = await db.pool.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM pg_locks l JOIN pg_stat_activity a USING (pid) WHERE l.locktype = 'advisory' AND position($1 in a.query) > 0",
    [db.schema],
  );
  assert.equal(leftovers.rows[0]!.n, 0);
});

function startChild(env: Record<string, string>): ChildConsumer {
  const child = startChildConsumer({ DATABASE_URL: bouncer.url(), KAFKA_BROKERS: testBrokers().join(','), OUTBOX_SCHEMA: db.schema, ...env });
  children.push(child);
  return child;
}

test('integration (PgBouncer, transaction pooling): a consumer process SIGKILLed after its Postgres commit, then in a handler, restarted each time: every effect once', async () => {
  const topic = await createTopic(2);
  const groupId = uniqueName('pgb-crash');
  const sent = await produce(topic, Array.from({ length: 80 }, (_, i) => ({ key: `k${i % 8}`, value: { amount: 1 } })));
  const ids = sent.map((e) => e.messageId as string);

  const first = startChild({ GROUP_ID: groupId, TOPICS: topic, MESSAGES_PER_TRANSACTION: '5', KILL_AFTER_DB_COMMIT: '3' });
  const killed = await first.waitForEvent('the kill after the third DB commit', (e) => e.event === 'killing');
  assert.deepEqual(await first.exited, { code: null, signal: 'SIGKILL' });
  const inKilled = await db.pool.query(`SELECT 1 FROM "${db.schema}".effects WHERE topic = $1 AND kafka_partition = $2 AND kafka_offset BETWEEN $3 AND $4`, [
    topic,
    killed.partition,
    killed.firstOffset,
    killed.lastOffset,
  ]);
  assert.equal(inKilled.rowCount, killed.count, 'the killed transaction committed through PgBouncer');
  const offset = await committedOffset(groupId, topic, killed.partition);
  assert.ok(offset === undefined || offset === '-1' || BigInt(offset) <= BigInt(killed.firstOffset), `offset ${offset} not past ${killed.firstOffset}: its messages come again`);

  const second = startChild({ GROUP_ID: groupId, TOPICS: topic, MESSAGES_PER_TRANSACTION: '4', KILL_IN_HANDLER: '9' });
  const killedInHandler = await second.waitForEvent('the kill inside the 9th handler call', (e) => e.event === 'killing');
  assert.deepEqual(await second.exited, { code: null, signal: 'SIGKILL' });
  // PgBouncer saw the client go away mid-transaction and closed that server connection:
  // no backend is left idle in the killed transaction, holding its locks for the pool's
  // next client.
  await waitFor('no backend idle in the killed transaction', async () => {
    const { rows } = await db.pool.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM pg_stat_activity WHERE state LIKE 'idle in transaction%' AND position($1 in query) > 0",
      [db.schema],
    );
    return rows[0]!.n === 0;
  });
  assert.equal(killedInHandler.in, 'handler');

  const third = startChild({ GROUP_ID: groupId, TOPICS: topic, MESSAGES_PER_TRANSACTION: '5' });
  await waitFor('every message handled after the restarts', async () => (await effectCounts(db.pool, db.schema, topic)).size === ids.length, { timeoutMs: 45_000 });
  await third.stop();
  await assertExactlyOnce(topic, ids);
});

test('integration (PgBouncer, transaction pooling): a handler stuck in pg_sleep is given up after handlerTimeoutMs; its server process (read behind the bouncer) is ended, the retry commits', async () => {
  const topic = await createTopic(1);
  const tag = `stuck_${topic.replace(/[^a-z0-9_]/gi, '_')}`;
  const timeouts: unknown[] = [];
  const c = consumer({
    topics: topic,
    handlerTimeoutMs: 400,
    handler: async (message, context) => {
      await applyEffect(db.schema, message, context);
      // Holds the key row the retry's claim needs; the server does not notice a closed socket while it sleeps.
      if (context.attempt === 1) await context.client.query(`SELECT pg_sleep(3600) /* ${tag} */`);
    },
  });
  c.on('handlerTimeout', (e) => void timeouts.push(e));
  const sent = await produce(topic, [{ key: 'a' }]);
  await c.start();
  await waitFor('offset committed', async () => (await committedOffset(c.options.groupId, topic)) === '1', { timeoutMs: 30_000 });
  assert.equal(timeouts.length, 1, 'precondition: the stuck run timed out');
  await assertExactlyOnce(topic, [sent[0]?.messageId as string]);
  assert.equal(await countRows(db.pool, 'SELECT 1 FROM pg_stat_activity WHERE query LIKE $1 AND pid <> pg_backend_pid()', [`%${tag}%`]), 0, 'the stuck server process is gone');
});
