// docs/outboxes.md (Limits): `run` holds at most `2 × batchesInFlight + 5` Postgres
// connections per outbox. Counted on the server itself: the relay process' backends in
// pg_stat_activity, by its application_name prefix (--client-id), sampled while it drains
// a backlog with every worker claiming ahead.
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { createTestSchema, type TestSchema } from './helpers/db.js';
import { createTopic, testBrokers } from './helpers/kafka.js';
import { spawnCli } from './helpers/processes.js';
import { waitFor } from './helpers/wait.js';
import { TEST_PRODUCER } from './helpers/producer.js';
import { sentCount } from './helpers/outbox.js';

let db: TestSchema;
before(async () => {
  db = await createTestSchema('connbound');
});
after(async () => {
  await db.drop();
});

test('integration: run holds at most 2 × batchesInFlight + 5 Postgres connections while it drains a backlog with its workers claiming ahead', async () => {
  const batchesInFlight = 3;
  const bound = 2 * batchesInFlight + 5;
  const topic = await createTopic(4);
  const total = 20_000;
  await db.pool.query(`INSERT INTO "${db.schema}".outbox (topic, key, payload) SELECT $1, 'k' || (g % 97), '{}' FROM generate_series(1, $2::int) AS g`, [topic, total]);
  const clientId = `connbound-${process.pid}-${Date.now().toString(36)}`;
  const relay = spawnCli(['run', '--batch-size', '50', '--batches-in-flight', String(batchesInFlight)], {
    DATABASE_URL: db.databaseUrl,
    KAFKA_BROKERS: testBrokers().join(','),
    OUTBOX_SCHEMA: db.schema,
    OUTBOX_PRODUCER: TEST_PRODUCER,
    OUTBOX_CLIENT_ID: clientId,
    OUTBOX_METRICS_ADDRESS: '127.0.0.1:0',
    OUTBOX_LOG_LEVEL: 'info',
  });
  let peak = 0;
  let samples = 0;
  try {
    await waitFor(
      'the backlog drained',
      async () => {
        const { rows } = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name LIKE $1 || '%'`, [clientId]);
        peak = Math.max(peak, rows[0]!.n);
        samples++;
        return (await sentCount(db, topic)) === total;
      },
      { timeoutMs: 240_000, intervalMs: 5 },
    );
  } finally {
    relay.child.kill('SIGTERM');
  }
  assert.equal(await relay.exited, 0, relay.output());
  // The situation: the workers claimed ahead (each holding its second connection) while sampled.
  assert.match(relay.output(), /"msg":"claiming ahead/, 'the workers claimed batches ahead');
  assert.ok(peak > 2 * batchesInFlight, `the relay's connections were counted at their busiest: peak ${peak} in ${samples} samples`);
  assert.ok(peak <= bound, `peak ${peak} Postgres connections, bound 2 × ${batchesInFlight} + 5 = ${bound}`);
});
