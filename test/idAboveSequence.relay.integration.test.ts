import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { createRelay } from '../src/relay/relay.js';
import { createLogger } from '../src/shared/logger.js';
import { createTestSchema, type TestSchema } from './helpers/db.js';
import { createTopic, testBrokers } from './helpers/kafka.js';
import { waitFor } from './helpers/wait.js';
import { TEST_PRODUCER } from './helpers/producer.js';

let db: TestSchema;
before(async () => {
  db = await createTestSchema('idabove');
});
after(async () => {
  await db.drop();
});

test('integration: a row inserted with an explicit id above the sequence is reported (logged warning with the ids), not silently left behind; other rows flow', async () => {
  const topic = await createTopic(1);
  const { rows } = await db.pool.query<{ id: string }>(`INSERT INTO "${db.schema}".outbox (topic, key, payload) VALUES ($1, 'normal', '{}') RETURNING id`, [topic]);
  const normal = Number(rows[0]!.id);
  await db.pool.query(`INSERT INTO "${db.schema}".outbox (id, topic, key, payload) VALUES (1000000, $1, 'by-hand', '{}')`, [topic]);
  const lines: Array<Record<string, unknown>> = [];
  const logger = createLogger('warn', { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) });
  const relay = createRelay({ producer: TEST_PRODUCER, databaseUrl: db.databaseUrl, kafkaBrokers: testBrokers(), schema: db.schema, logger });
  await relay.start();
  try {
    await waitFor('the normal row sent', async () => {
      const r = await db.pool.query(`SELECT sent_at FROM "${db.schema}".outbox WHERE id = $1`, [normal]);
      return r.rows[0]?.sent_at;
    });
    const warning = await waitFor('the warning', () => lines.find((l) => /ids above the outbox sequence/.test(String(l.msg))));
    assert.equal(warning.maxUnsentId, 1_000_000);
    assert.equal(warning.sequenceLastValue, normal);
    assert.equal(warning.rows, 1);
    const { rows: byHand } = await db.pool.query(`SELECT sent_at FROM "${db.schema}".outbox WHERE id = 1000000`);
    assert.equal(byHand[0].sent_at, null, 'the horizon does not release it (ordering unchanged)');
  } finally {
    await relay.stop();
  }
  assert.equal(lines.filter((l) => /ids above the outbox sequence/.test(String(l.msg))).length, 1, 'reported once while nothing changes');
});
