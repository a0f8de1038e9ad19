import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { createRelay } from '../src/relay/relay.js';
import { instrumentRelay } from '../src/metrics/relayMetrics.js';
import { formatStatus, getStatus } from '../src/commands/status.js';
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

test('integration: rows above the sequence show where operators look (status, outbox_relay_rows_above_sequence), and the runbook\'s setval publishes them', async () => {
  // A schema of its own: the first test leaves its row above the sequence behind.
  const own = await createTestSchema('idabove_fix');
  const topic = await createTopic(1);
  const { rows } = await own.pool.query<{ id: number }>(`INSERT INTO "${own.schema}".outbox (topic, key, payload) VALUES ($1, 'normal', '{}') RETURNING id`, [topic]);
  const byHandId = rows[0]!.id + 5_000_000;
  await own.pool.query(`INSERT INTO "${own.schema}".outbox (id, topic, key, payload) VALUES ($1, $2, 'by-hand', '{}'), ($1 + 1, $2, 'by-hand', '{}')`, [byHandId, topic]);
  const relay = createRelay({ producer: TEST_PRODUCER, databaseUrl: own.databaseUrl, kafkaBrokers: testBrokers(), schema: own.schema });
  const instrumentation = instrumentRelay(relay, { processMetrics: false, sampleIntervalMs: 100 });
  const gauge = async () => (await instrumentation.registry.getSingleMetric('outbox_relay_rows_above_sequence')!.get()).values[0]?.value;
  await relay.start();
  try {
    assert.equal((await instrumentation.sample()).rowsAboveSequence, 2);
    assert.equal(await gauge(), 2);
    const status = await getStatus({ databaseUrl: own.databaseUrl, schema: own.schema });
    assert.ok(status.idsAboveSequence && status.idsAboveSequence.rows === 2 && status.idsAboveSequence.maxUnsentId === byHandId + 1, JSON.stringify(status.idsAboveSequence));
    assert.match(formatStatus(status), new RegExp(`^rows above the sequence: 2 unsent \\(ids up to ${byHandId + 1}, outbox_id_seq at \\d+\\): not published until the sequence passes them.*setval`, 'm'));

    // docs/runbook.md, "Rows above the sequence".
    await own.pool.query(`SELECT setval('"${own.schema}".outbox_id_seq', (SELECT max(id) FROM "${own.schema}".outbox))`);
    await waitFor('the rows set by hand to be published', async () => {
      const r = await own.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${own.schema}".outbox WHERE id >= $1 AND sent_at IS NOT NULL`, [byHandId]);
      return r.rows[0]!.n === 2;
    });
    assert.equal((await instrumentation.sample()).rowsAboveSequence, 0);
    assert.equal(await gauge(), 0);
    const after = await getStatus({ databaseUrl: own.databaseUrl, schema: own.schema });
    assert.equal(after.idsAboveSequence, null);
    assert.doesNotMatch(formatStatus(after), /rows above the sequence/);
  } finally {
    await relay.stop();
    await instrumentation.close();
    await own.drop();
  }
});
