import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { createRelay } from '../src/relay/relay.js';
import { enqueue } from '../src/enqueue.js';
import { createLogger } from '../src/shared/logger.js';
import { HEADERS } from '../src/shared/kafka.js';
import { createTestSchema, type TestSchema } from './helpers/db.js';
import { createTopic, readTopic, testBrokers } from './helpers/kafka.js';
import { waitFor } from './helpers/wait.js';
import { TEST_PRODUCER } from './helpers/producer.js';

// Listeners observe; they never change an outcome. A `batch` or `deadLetter` listener
// that throws (or rejects) after COMMIT must not turn the committed batch into a failed
// one: no batchError, no retry, no second copy on the topic, and the other listeners run.
let db: TestSchema;
before(async () => {
  db = await createTestSchema('relaylisteners');
});
after(async () => {
  await db.drop();
});

test('integration: throwing and rejecting relay listeners are logged and change nothing', async () => {
  const topic = await createTopic(2);
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(...chunk.toString().split('\n').filter(Boolean));
      done();
    },
  });
  const relay = createRelay({ producer: TEST_PRODUCER, databaseUrl: db.databaseUrl, kafkaBrokers: testBrokers(), schema: db.schema, logger: createLogger('info', sink) });
  const batchErrors: string[] = [];
  let published = 0;
  let deadLetters = 0;
  relay.on('batch', () => {
    throw new Error('a broken metrics hook');
  });
  relay.on('batch', async () => {
    throw new Error('a broken async hook');
  });
  relay.on('deadLetter', () => {
    throw new Error('a broken alert hook');
  });
  relay.on('batch', (b) => (published += b.count));
  relay.on('deadLetter', () => deadLetters++);
  relay.on('batchError', (e) => batchErrors.push(e.error.message));
  await relay.start();
  try {
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      // 20 good rows and one that can never be published (empty key): a dead letter.
      await enqueue(client, Array.from({ length: 20 }, (_, i) => ({ topic, key: `k${i % 4}`, payload: { i } })), { schema: db.schema });
      await client.query(`INSERT INTO "${db.schema}".outbox (topic, key, payload) VALUES ($1, '', '{}')`, [topic]);
      await client.query('COMMIT');
    } finally {
      client.release();
    }
    await waitFor('every row sent and the dead letter moved', () => published === 20 && deadLetters === 1);
    const messages = await readTopic(topic, (m) => m.length >= 20);
    const ids = messages.map((m) => m.headers[HEADERS.messageId]);
    assert.equal(new Set(ids).size, ids.length, 'no message twice');
    assert.equal(messages.length, 20);
    const { rows } = await db.pool.query<{ unsent: number; dead: number }>(
      `SELECT (SELECT count(*)::int FROM "${db.schema}".outbox WHERE sent_at IS NULL) AS unsent, (SELECT count(*)::int FROM "${db.schema}".outbox_dead_letters) AS dead`,
    );
    assert.deepEqual(rows[0], { unsent: 0, dead: 1 });
    assert.deepEqual(batchErrors, [], 'no batch was reported failed');
    await waitFor('the listener errors to be logged', () => lines.filter((l) => /event listener threw/.test(l)).length >= 3);
  } finally {
    await relay.stop();
  }
});
