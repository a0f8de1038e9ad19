import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { Registry } from 'prom-client';
import { createRelay } from '../src/relay/relay.js';
import { instrumentRelay } from '../src/metrics/relayMetrics.js';
import { relayReadiness } from '../src/metrics/readiness.js';
import { createTestSchema, type TestSchema } from './helpers/db.js';
import { createTopic, testBrokers } from './helpers/kafka.js';
import { waitFor } from './helpers/wait.js';
import { TEST_PRODUCER } from './helpers/producer.js';

// A statement Postgres refuses on every batch must not look like a relay that merely
// retries: /readyz says so within seconds (`batches`), long before `publishing` would,
// and with the error's label; it is ready again once a batch goes through.

let db: TestSchema;
before(async () => {
  db = await createTestSchema('readybatch');
});
after(async () => {
  await db.drop();
});

test('integration: batches refused on every attempt make /readyz fail `batches` within seconds, naming the error; ready again once one succeeds', async () => {
  const topic = await createTopic(1);
  // Refuses the mark (an UPDATE of the claimed rows), not the readiness probe's
  // statements (UPDATE ... WHERE false fires no row trigger): only the batches fail.
  await db.pool.query(`
    CREATE FUNCTION "${db.schema}".refuse_mark() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN RAISE EXCEPTION 'refused by the test'; END $$;
    CREATE TRIGGER refuse_mark BEFORE UPDATE ON "${db.schema}".outbox FOR EACH ROW EXECUTE FUNCTION "${db.schema}".refuse_mark();`);
  // The defaults of the retry backoff: "within seconds" must hold as shipped.
  const relay = createRelay({ producer: TEST_PRODUCER, databaseUrl: db.databaseUrl, kafkaBrokers: testBrokers(), schema: db.schema, horizonMaxWaitMs: 1_000, batchesInFlight: 1 });
  const inst = instrumentRelay(relay, { registry: new Registry(), sampleIntervalMs: 100, processMetrics: false });
  const readiness = relayReadiness(relay, inst, { timeoutMs: 1_000, kafkaCacheMs: 0 });
  try {
    await relay.start();
    const ready = await waitFor('ready before any batch failed', async () => ((await readiness.check()).ready ? true : undefined), { timeoutMs: 30_000 });
    assert.equal(ready, true);
    const insertedAt = Date.now();
    await db.pool.query(`INSERT INTO "${db.schema}".outbox (topic, key, payload) SELECT $1, 'k' || g, '{}' FROM generate_series(1, 10) g`, [topic]);
    const failing = await waitFor(
      'readiness failing `batches`',
      async () => {
        const r = await readiness.check();
        return r.checks.batches?.ok === false ? r : undefined;
      },
      { timeoutMs: 30_000, intervalMs: 100 },
    );
    const tookMs = Date.now() - insertedAt;
    assert.equal(failing.ready, false);
    assert.match(failing.checks.batches!.detail, /^\d+ batches in a row failed: postgres_p0001$/);
    // Within seconds (five failures under the default backoff: 0.1 + 0.2 + 0.4 + 0.8 s plus
    // the batches themselves), where `publishing` waits horizonMaxWaitMs + 30 s.
    assert.ok(tookMs < 15_000, `took ${tookMs} ms`);
    assert.equal(failing.checks.publishing?.ok, true, 'publishing has not noticed yet');
    // The gauge the OutboxRelayBatchesFailing alert watches (deploy/prometheus/alerts.yml).
    const gauge = await inst.registry.getSingleMetric('outbox_relay_consecutive_failures')!.get();
    assert.ok(Number(gauge.values[0]?.value) >= 5, JSON.stringify(gauge.values));

    await db.pool.query(`DROP TRIGGER refuse_mark ON "${db.schema}".outbox`);
    await waitFor(
      'every row sent and the relay ready again',
      async () => {
        const { rows } = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".outbox WHERE sent_at IS NULL`);
        if (rows[0]!.n !== 0) return undefined;
        const r = await readiness.check();
        return r.checks.batches?.ok === true && r.ready ? r : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 200 },
    );
  } finally {
    await relay.stop();
    await readiness.close();
    await inst.close();
  }
});
