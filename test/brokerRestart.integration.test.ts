import { test, after, afterEach, before } from 'node:test';
import assert from 'node:assert/strict';
import { createRelay } from '../src/relay/relay.js';
import { enqueue } from '../src/enqueue.js';
import { HEADERS } from '../src/shared/kafka.js';
import { createTestSchema, type TestSchema } from './helpers/db.js';
import { createTopic, readTopic } from './helpers/kafka.js';
import { waitFor } from './helpers/wait.js';
import { TEST_PRODUCER } from './helpers/producer.js';
import { startLocalKafka, type LocalKafka } from '../scripts/localKafka.js';
import { sentCount as sentRows } from './helpers/outbox.js';

// This file runs its own broker: restarting the shared one would disturb other tests.
let db: TestSchema;
let kafka: LocalKafka;
before(async () => {
  [db, kafka] = await Promise.all([createTestSchema('brokerrestart'), startLocalKafka()]);
});
after(async () => {
  await Promise.all([db.drop(), kafka.destroy()]);
});

const sentCount = (): Promise<number> => sentRows(db);

// A test that fails while its broker is stopped must not leave the next test without one.
let brokerStopped = false;
const stopBroker = async (): Promise<void> => {
  brokerStopped = true;
  await kafka.stop();
};
const startBroker = async (): Promise<void> => {
  await kafka.start();
  brokerStopped = false;
};
afterEach(async () => {
  if (brokerStopped) await startBroker();
});

test('integration: the relay rides out a broker restart by itself and every row arrives', async () => {
  const brokers = [kafka.brokers];
  const topic = await createTopic(3, brokers);
  const relay = createRelay({ producer: TEST_PRODUCER, databaseUrl: db.databaseUrl, kafkaBrokers: brokers, schema: db.schema, batchSize: 100, retryMaxDelayMs: 1_000 });
  let failedBatches = 0;
  relay.on('batchError', () => failedBatches++);
  await relay.start();
  let written = 0;
  const write = async (n: number): Promise<void> => {
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      await enqueue(client, Array.from({ length: n }, (_, i) => ({ topic, key: `k${(written + i) % 20}`, payload: { n: written + i } })), { schema: db.schema });
      await client.query('COMMIT');
      written += n;
    } finally {
      client.release();
    }
  };
  try {
    await write(500);
    await waitFor('the first rows to be sent', async () => (await sentCount()) === 500);

    await stopBroker();
    // Rows committed while the broker is down wait; the relay keeps failing and retrying.
    for (let i = 0; i < 10; i++) await write(100);
    await waitFor('a failed batch while the broker is down', () => failedBatches > 0);
    assert.equal(await sentCount(), 500, 'none of the 1,000 rows committed while the broker is down is marked sent');
    await startBroker();
    for (let i = 0; i < 5; i++) await write(100);

    await waitFor('every row to be sent after the restart', async () => (await sentCount()) === written, { timeoutMs: 90_000 });
  } finally {
    await relay.stop();
  }
  const { rows } = await db.pool.query<{ message_id: string }>(`SELECT message_id FROM "${db.schema}".outbox`);
  const messages = await readTopic(topic, (m) => new Set(m.map((x) => x.headers[HEADERS.messageId])).size >= rows.length, { brokers });
  const delivered = new Set(messages.map((m) => m.headers[HEADERS.messageId]));
  assert.deepEqual(rows.filter((r) => !delivered.has(r.message_id)), []);
});

test('integration: broker stopped for 15 seconds while rows arrive: the breaker opens, nothing is dead-lettered, every row arrives after the restart', async () => {
  const brokers = [kafka.brokers];
  const topic = await createTopic(2, brokers);
  const relay = createRelay({ producer: TEST_PRODUCER, databaseUrl: db.databaseUrl, kafkaBrokers: brokers, schema: db.schema, batchSize: 100, retryMaxDelayMs: 2_000 });
  const states: string[] = [];
  let failedBatches = 0;
  relay.on('breaker', (b) => states.push(b.state));
  relay.on('batchError', () => failedBatches++);
  await relay.start();
  const ids: number[] = [];
  const write = async (n: number): Promise<void> => {
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      const r = await enqueue(client, Array.from({ length: n }, (_, i) => ({ topic, key: `k${i % 7}`, payload: { i } })), { schema: db.schema });
      await client.query('COMMIT');
      ids.push(...r.map((x) => x.id as number));
    } finally {
      client.release();
    }
  };
  try {
    await write(50);
    await waitFor('the first rows sent', async () => (await pendingOf(ids)) === 0);
    await stopBroker();
    const stoppedAt = Date.now();
    await write(50);
    await waitFor('the breaker to open', () => states.includes('open'), { timeoutMs: 60_000 });
    const failuresWhenOpened = failedBatches;
    // Rows keep arriving for the whole 15 s outage: with retryMaxDelayMs 2 s, the open
    // breaker probes the broker several times meanwhile, and none of them may claim.
    while (Date.now() - stoppedAt < 15_000) {
      await write(10);
      await new Promise((r) => setTimeout(r, 1_000));
    }
    // While open, nothing is claimed: no more failed batches, no transaction held open. The
    // membership round's transactions (heartbeat, leases) sit idle in transaction for a moment
    // between their statements; what must not exist is a batch's transaction or any one held
    // for seconds, which is what a claim waiting on the dead broker would be.
    assert.ok(failedBatches <= failuresWhenOpened + 1, `no attempts burned while open (${failuresWhenOpened} -> ${failedBatches})`);
    const { rows: open } = await db.pool.query<{ pid: number; query: string; open_ms: number }>(
      `SELECT pid, query, (extract(epoch FROM now() - xact_start) * 1000)::int AS open_ms FROM pg_stat_activity
        WHERE application_name LIKE $1 AND state LIKE 'idle in transaction%'
          AND (starts_with(query, '/* outbox-relay batch ') OR xact_start < now() - interval '3 seconds')`,
      [`${relay.applicationName}%`],
    );
    assert.deepEqual(open, [], 'no transaction held open');
    await startBroker();
    await waitFor('every row sent after the restart', async () => (await pendingOf(ids)) === 0, { timeoutMs: 90_000 });
    assert.deepEqual(states.slice(0, 2), ['open', 'closed']);
  } finally {
    await relay.stop();
  }
  const { rows: dead } = await db.pool.query(`SELECT count(*)::int AS n FROM "${db.schema}".outbox_dead_letters`);
  assert.equal(dead[0].n, 0, 'nothing dead-lettered');
  const { rows } = await db.pool.query<{ message_id: string }>(`SELECT message_id FROM "${db.schema}".outbox WHERE id = ANY($1)`, [ids]);
  const messages = await readTopic(topic, (m) => new Set(m.map((x) => x.headers[HEADERS.messageId])).size >= rows.length, { brokers });
  const delivered = new Set(messages.map((m) => m.headers[HEADERS.messageId]));
  assert.deepEqual(rows.filter((r) => !delivered.has(r.message_id)), []);
});

async function pendingOf(ids: number[]): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".outbox WHERE id = ANY($1) AND sent_at IS NULL`, [ids]);
  return rows[0]!.n;
}

test('integration: Kafka unreachable when the relay starts is not fatal: it starts, waits, and publishes once the broker is up', async () => {
  const brokers = [kafka.brokers];
  const topic = await createTopic(1, brokers);
  const client = await db.pool.connect();
  let id: number;
  try {
    await client.query('BEGIN');
    id = (await enqueue(client, { topic, key: 'k', payload: { n: 1 } }, { schema: db.schema }))[0]!.id as number;
    await client.query('COMMIT');
  } finally {
    client.release();
  }
  await stopBroker();
  const relay = createRelay({ producer: TEST_PRODUCER, databaseUrl: db.databaseUrl, kafkaBrokers: brokers, schema: db.schema, retryMaxDelayMs: 1_000 });
  let failed = 0;
  relay.on('batchError', () => failed++);
  try {
    await relay.start(); // resolves although the broker is down
    await waitFor('a failed attempt', () => failed > 0);
    assert.equal(await pendingOf([id]), 1);
    await startBroker();
    await waitFor('the row sent once the broker is up', async () => (await pendingOf([id])) === 0, { timeoutMs: 60_000 });
  } finally {
    await relay.stop();
  }
});
