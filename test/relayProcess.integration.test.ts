import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { enqueue } from '../src/enqueue.js';
import { HEADERS } from '../src/shared/kafka.js';
import { createTestSchema, type TestSchema } from './helpers/db.js';
import { createTopic, readTopic, testBrokers, type ReadMessage } from './helpers/kafka.js';
import { spawnCli } from './helpers/processes.js';
import { waitFor } from './helpers/wait.js';
import { TEST_PRODUCER } from './helpers/producer.js';
import { sentCount } from './helpers/outbox.js';

let db: TestSchema;
before(async () => {
  db = await createTestSchema('relayproc');
});
after(async () => {
  await db.drop();
});

async function enqueueRows(topic: string, total: number, keys: number): Promise<void> {
  const client = await db.pool.connect();
  try {
    for (let i = 0; i < total; i += 100) {
      await client.query('BEGIN');
      await enqueue(
        client,
        Array.from({ length: Math.min(100, total - i) }, (_, j) => ({ topic, key: `k${(i + j) % keys}`, payload: { n: i + j } })),
        { schema: db.schema },
      );
      await client.query('COMMIT');
    }
  } finally {
    client.release();
  }
}

const countSent = (): Promise<number> => sentCount(db);

/** Every row arrived, and each key's first deliveries are in outbox id order. */
function assertCompleteAndOrdered(messages: ReadMessage[], expectedIds: Set<string>): void {
  const firstSeen = new Set<string>();
  const lastOfKey = new Map<string, number>();
  for (const m of [...messages].sort((a, b) => a.partition - b.partition || Number(a.offset) - Number(b.offset))) {
    const id = m.headers[HEADERS.messageId]!;
    if (firstSeen.has(id)) continue;
    firstSeen.add(id);
    const outboxId = Number(m.headers[HEADERS.outboxId]);
    const last = lastOfKey.get(m.key!) ?? 0;
    assert.ok(outboxId > last, `key ${m.key}: outbox id ${outboxId} first delivered after ${last}`);
    lastOfKey.set(m.key!, outboxId);
  }
  const missing = [...expectedIds].filter((id) => !firstSeen.has(id));
  assert.deepEqual(missing, [], 'every committed row arrives');
}

const env = () => ({
  DATABASE_URL: db.databaseUrl,
  KAFKA_BROKERS: testBrokers().join(','),
  OUTBOX_SCHEMA: db.schema,
  OUTBOX_LOG_LEVEL: 'warn',
  OUTBOX_PRODUCER: TEST_PRODUCER,
});

test('integration: a relay killed with SIGKILL mid-stream and started again delivers every row', async () => {
  const topic = await createTopic(4);
  const total = 20_000;
  await enqueueRows(topic, total, 50);
  const first = spawnCli(['run', '--batch-size', '200'], env());
  // Kill it once it is well into the backlog, with batches in flight.
  await waitFor('the first relay to publish part of the backlog', async () => (await countSent()) >= 2_000, { timeoutMs: 60_000, intervalMs: 10 });
  first.child.kill('SIGKILL');
  assert.equal(await first.exited, 'SIGKILL');
  const sentAtKill = await countSent();
  assert.ok(sentAtKill < total, `killed mid-stream (${sentAtKill} of ${total} sent)`);

  const second = spawnCli(['run', '--batch-size', '200'], env());
  try {
    await waitFor('the second relay to finish the backlog', async () => (await countSent()) === total, { timeoutMs: 120_000 });
  } finally {
    second.child.kill('SIGTERM');
  }
  assert.equal(await second.exited, 0, `soft stop exits 0\n${second.output()}`);

  const { rows } = await db.pool.query<{ message_id: string }>(`SELECT message_id FROM "${db.schema}".outbox`);
  const expected = new Set(rows.map((r) => r.message_id));
  const messages = await readTopic(topic, (m) => new Set(m.map((x) => x.headers[HEADERS.messageId])).size >= total);
  assertCompleteAndOrdered(messages, expected);
});

test('integration: SIGTERM stops cleanly with exit 0; every row marked sent is on the topic, the rest follow after a restart', async () => {
  const topic = await createTopic(2);
  const total = 5_000;
  await enqueueRows(topic, total, 10);
  const relay = spawnCli(['run', '--batch-size', '100'], { ...env(), OUTBOX_LOG_LEVEL: 'info' });
  await waitFor('some rows sent', async () => (await countSentOf(topic)) > 0, { intervalMs: 5 });
  relay.child.kill('SIGTERM');
  assert.equal(await relay.exited, 0, relay.output());
  assert.match(relay.output(), /relay stopped/);

  const { rows: sent } = await db.pool.query<{ message_id: string }>(`SELECT message_id FROM "${db.schema}".outbox WHERE topic = $1 AND sent_at IS NOT NULL`, [topic]);
  const published = await readTopic(topic, (m) => new Set(m.map((x) => x.headers[HEADERS.messageId])).size >= sent.length);
  const publishedIds = new Set(published.map((m) => m.headers[HEADERS.messageId]));
  assert.deepEqual(sent.filter((r) => !publishedIds.has(r.message_id)), [], 'marked sent implies published');

  const again = spawnCli(['run'], env());
  try {
    await waitFor('the rest to be sent', async () => (await countSentOf(topic)) === total);
  } finally {
    again.child.kill('SIGTERM');
  }
  assert.equal(await again.exited, 0);
});

async function countSentOf(topic: string): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".outbox WHERE topic = $1 AND sent_at IS NOT NULL`, [topic]);
  return rows[0]!.n;
}

test('integration: secrets never reach the logs, even at debug level', async () => {
  const url = new URL(db.databaseUrl);
  url.password = 'pw-that-must-not-leak'; // trust authentication ignores it
  const topic = await createTopic(1);
  await enqueueRows(topic, 1, 1); // so that the producer connects and kafkajs logs too
  const relay = spawnCli(['run', '--log-level', 'debug'], { ...env(), DATABASE_URL: url.toString(), OUTBOX_LOG_LEVEL: 'debug' });
  await waitFor('the row to be sent', async () => (await countSentOf(topic)) === 1);
  relay.child.kill('SIGTERM');
  assert.equal(await relay.exited, 0, relay.output());
  // The adapter under test's client: kafkajs' own logs, or platformatic's connection events.
  assert.match(relay.output(), TEST_PRODUCER === 'kafkajs' ? /"component":"kafkajs"/ : /"component":"platformatic-kafka"/, 'the Kafka client logged through pino');
  assert.match(relay.output(), /relay started[\s\S]*relay stopped/);
  assert.doesNotMatch(relay.output(), /pw-that-must-not-leak/);
});
