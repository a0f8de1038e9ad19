import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { createRelay } from '../src/relay/relay.js';
import { enqueue } from '../src/enqueue.js';
import { HEADERS } from '../src/shared/kafka.js';
import { createTestSchema, type TestSchema } from './helpers/db.js';
import { createTopic, readTopic, testBrokers } from './helpers/kafka.js';
import { partitionOf } from './helpers/partition.js';
import { waitFor } from './helpers/wait.js';
import { TEST_PRODUCER } from './helpers/producer.js';
import { createLogger } from '../src/shared/logger.js';

let db: TestSchema;
before(async () => {
  db = await createTestSchema('relay');
});
after(async () => {
  await db.drop();
});

test('integration: 10,000 rows over 200 keys from concurrent transactions arrive on their key partition, in id order, with message ids', async () => {
  const partitions = 6;
  const topic = await createTopic(partitions);
  const keys = Array.from({ length: 200 }, (_, i) => `entity-${i}`);
  const writers = 8;
  const perWriter = 10_000 / writers;
  // The matrix checks itself: the relay says which adapter it publishes through.
  const lines: Array<{ msg?: string; producer?: string }> = [];
  const logger = createLogger('info', { write: (line: string) => void lines.push(JSON.parse(line) as { msg?: string; producer?: string }) });
  const relay = createRelay({ producer: TEST_PRODUCER, databaseUrl: db.databaseUrl, kafkaBrokers: testBrokers(), schema: db.schema, batchSize: 500, batchesInFlight: 2, logger });
  const log: string[] = [];
  relay.on('batch', (b) => log.push(JSON.stringify(b)));
  relay.on('batchError', (b) => log.push('ERR ' + b.error.message));
  relay.on('horizon', (h) => log.push('H ' + h.watermark));
  await relay.start();
  assert.equal(lines.find((l) => l.msg === 'relay started')?.producer, TEST_PRODUCER, 'the relay runs on the adapter under test');
  try {
    // Writers run while the relay runs; each transaction enqueues a few rows of random
    // keys and several writers share keys without locking anything, so transactions of
    // one key commit out of id order.
    await Promise.all(
      Array.from({ length: writers }, async (_, w) => {
        const client = await db.pool.connect();
        try {
          for (let done = 0; done < perWriter; ) {
            const n = Math.min(1 + ((done + w) % 7), perWriter - done);
            await client.query('BEGIN');
            await enqueue(
              client,
              Array.from({ length: n }, (_, j) => ({ topic, key: keys[(w * 31 + done + j * 17) % keys.length]!, payload: { writer: w, seq: done + j } })),
              { schema: db.schema },
            );
            if ((done + w) % 5 === 0) await new Promise((r) => setTimeout(r, 2)); // hold some transactions open
            await client.query('COMMIT');
            done += n;
          }
        } finally {
          client.release();
        }
      }),
    );
    const { rows: expected } = await db.pool.query<{ id: number; key: string; message_id: string }>(`SELECT id, key, message_id FROM "${db.schema}".outbox ORDER BY id`);
    assert.equal(expected.length, 10_000);
    const messages = await readTopic(topic, (m) => new Set(m.map((x) => x.headers[HEADERS.messageId])).size >= 10_000);

    const byMessageId = new Map(expected.map((r) => [r.message_id, r]));
    const lastIdOfKey = new Map<string, number>();
    const seen = new Set<string>();
    for (const m of messages.sort((a, b) => a.partition - b.partition || Number(a.offset) - Number(b.offset))) {
      const id = m.headers[HEADERS.messageId]!;
      const row = byMessageId.get(id);
      assert.ok(row, `message ${id} matches an outbox row`);
      assert.equal(m.key, row.key);
      assert.equal(Number(m.headers[HEADERS.outboxId]), row.id);
      assert.equal(m.partition, partitionOf(row.key, partitions), `key ${row.key} on its murmur2 partition`);
      if (seen.has(id)) continue; // a wire duplicate (at least once) does not reorder
      seen.add(id);
      const last = lastIdOfKey.get(row.key) ?? 0;
      if (!(row.id > last)) {
        const rel = log.filter((l) => { try { const b = JSON.parse(l); return (b.firstId <= row.id && b.lastId >= row.id) || (b.firstId <= last && b.lastId >= last); } catch { return true; } });
        const { rows: info } = await db.pool.query(`SELECT id, key, shard, created_at, sent_at FROM "${db.schema}".outbox WHERE id IN (${row.id}, ${last})`);
        assert.fail(`key ${row.key}: id ${row.id} after ${last}\n${rel.join('\n')}\n${JSON.stringify(info)}`);
      }
      lastIdOfKey.set(row.key, row.id);
    }
    assert.equal(seen.size, 10_000);
    const { rows: unsent } = await db.pool.query(`SELECT count(*)::int AS n FROM "${db.schema}".outbox WHERE sent_at IS NULL`);
    assert.equal(unsent[0].n, 0);
  } finally {
    await relay.stop();
  }
});

test('integration: a tombstone, a binary payload and user headers arrive intact', async () => {
  const topic = await createTopic(1);
  const binary = Buffer.from([0, 1, 2, 250, 251, 252, 255, 0, 10]);
  const client = await db.pool.connect();
  try {
    await client.query('BEGIN');
    await enqueue(
      client,
      [
        { topic, key: 'a', payload: { hello: 'world', n: 1 }, headers: { traceparent: '00-abc-def-01' } },
        { topic, key: 'a', payload: binary },
        { topic, key: 'a' },
      ],
      { schema: db.schema },
    );
    await client.query('COMMIT');
  } finally {
    client.release();
  }
  const relay = createRelay({ producer: TEST_PRODUCER, databaseUrl: db.databaseUrl, kafkaBrokers: testBrokers(), schema: db.schema });
  await relay.start();
  try {
    const messages = await readTopic(topic, (m) => m.length >= 3);
    assert.equal(messages.length, 3);
    const [json, bytes, tombstone] = messages;
    assert.deepEqual(JSON.parse(json!.value!.toString()), { hello: 'world', n: 1 });
    assert.equal(json!.headers[HEADERS.contentType], 'application/json');
    assert.equal(json!.headers.traceparent, '00-abc-def-01');
    assert.deepEqual(bytes!.value, binary);
    assert.equal(bytes!.headers[HEADERS.contentType], undefined);
    assert.equal(tombstone!.value, null);
    assert.ok(tombstone!.headers[HEADERS.messageId]);
  } finally {
    await relay.stop();
  }
});

test('integration: Postgres connections dropped mid-stream (backends terminated): the relay reconnects and every row arrives', async () => {
  const topic = await createTopic(2);
  const client = await db.pool.connect();
  try {
    await client.query('BEGIN');
    await enqueue(client, Array.from({ length: 5_000 }, (_, i) => ({ topic, key: `k${i % 25}`, payload: { i } })), { schema: db.schema });
    await client.query('COMMIT');
  } finally {
    client.release();
  }
  const relay = createRelay({ producer: TEST_PRODUCER, databaseUrl: db.databaseUrl, kafkaBrokers: testBrokers(), schema: db.schema, batchSize: 50, retryMaxDelayMs: 200, clientId: 'conndrop' });
  let errors = 0;
  relay.on('batchError', () => errors++);
  await relay.start();
  const sent = async (): Promise<number> =>
    (await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".outbox WHERE topic = $1 AND sent_at IS NOT NULL`, [topic])).rows[0]!.n;
  try {
    // Drop every connection of this relay a few times while it works: what a Postgres
    // restart or a network cut does to it, without disturbing other tests' servers.
    for (let round = 0; round < 3; round++) {
      const target = (round + 1) * 1_000;
      await waitFor(`${target} rows sent`, async () => (await sent()) >= target, { intervalMs: 5 });
      const { rows } = await db.pool.query<{ n: number }>(
        `SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity WHERE application_name LIKE $1`,
        [`conndrop:${relay.instanceId}%`],
      );
      assert.ok(rows[0]!.n > 0, 'terminated some relay connections');
    }
    await waitFor('every row sent', async () => (await sent()) === 5_000);
  } finally {
    await relay.stop();
  }
  const messages = await readTopic(topic, (m) => new Set(m.map((x) => x.headers[HEADERS.messageId])).size >= 5_000);
  assert.equal(new Set(messages.map((m) => m.headers[HEADERS.messageId])).size, 5_000);
  assert.ok(errors > 0, 'the drops were felt (and survived)');
});

test('integration: --on-publish delete removes rows once Kafka acknowledged them, and every row still arrives', async () => {
  const topic = await createTopic(2);
  const client = await db.pool.connect();
  try {
    await client.query('BEGIN');
    await enqueue(client, Array.from({ length: 1_000 }, (_, i) => ({ topic, key: `k${i % 10}`, payload: { i } })), { schema: db.schema });
    await client.query('COMMIT');
  } finally {
    client.release();
  }
  const { rows: before } = await db.pool.query<{ message_id: string }>(`SELECT message_id FROM "${db.schema}".outbox WHERE topic = $1`, [topic]);
  const relay = createRelay({ producer: TEST_PRODUCER, databaseUrl: db.databaseUrl, kafkaBrokers: testBrokers(), schema: db.schema, onPublish: 'delete' });
  await relay.start();
  try {
    await waitFor('every row deleted', async () => {
      const { rows } = await db.pool.query(`SELECT count(*)::int AS n FROM "${db.schema}".outbox WHERE topic = $1`, [topic]);
      return rows[0].n === 0;
    });
  } finally {
    await relay.stop();
  }
  const messages = await readTopic(topic, (m) => new Set(m.map((x) => x.headers[HEADERS.messageId])).size >= 1_000);
  const delivered = new Set(messages.map((m) => m.headers[HEADERS.messageId]));
  assert.deepEqual(before.filter((r) => !delivered.has(r.message_id)), []);
});
