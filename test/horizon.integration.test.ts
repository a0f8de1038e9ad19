import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { Horizon } from '../src/relay/horizon.js';
import { createTestSchema, type TestSchema } from './helpers/db.js';
import { waitFor } from './helpers/wait.js';
import { TEST_PRODUCER } from './helpers/producer.js';

let db: TestSchema;
before(async () => {
  db = await createTestSchema('horizon');
  await db.pool.query(`CREATE TABLE "${db.schema}".entity (id int PRIMARY KEY, v int)`);
});
after(async () => {
  await db.drop();
});

async function probeClient(): Promise<pg.Client> {
  const { openProbeConnection } = await import('../src/relay/horizon.js');
  return openProbeConnection(db.databaseUrl, 'test:horizon');
}

async function insertRow(client: pg.ClientBase, key: string): Promise<number> {
  const { rows } = await client.query<{ id: number }>(`INSERT INTO "${db.schema}".outbox (topic, key) VALUES ('t', $1) RETURNING id`, [key]);
  return Number(rows[0]!.id);
}

test('integration: a row is not released while a transaction holding a lower id is open, even when that transaction is younger', async () => {
  const probe = await probeClient();
  const early = await db.pool.connect(); // takes its transaction id first, inserts last
  const late = await db.pool.connect(); // takes a lower outbox id, commits last
  try {
    const h = new Horizon(`"${db.schema}"`, 60_000);
    await early.query('BEGIN');
    await early.query(`INSERT INTO "${db.schema}".entity VALUES (1, 1)`); // transaction id assigned here
    await late.query('BEGIN');
    const lowId = await insertRow(late, 'k');
    const highId = await insertRow(early, 'k');
    assert.ok(lowId < highId);
    await early.query('COMMIT');
    // The row with the higher id is committed and visible, but the lower id's
    // transaction is still open: releasing highId now would publish k out of order.
    for (let i = 0; i < 5; i++) await h.probe(probe);
    assert.ok(h.watermark < lowId, `watermark ${h.watermark} stays below ${lowId} while it is uncommitted`);
    await late.query('COMMIT');
    // Other transactions in the database (other tests) may hold xmin back for a moment.
    await waitFor('both released once the open transaction committed', async () => {
      await h.probe(probe);
      return h.watermark >= highId;
    });
  } finally {
    early.release();
    late.release();
    await probe.end();
  }
});

test('integration: a long-running transaction elsewhere holds rows back only up to maxWaitMs, and the release is counted', async () => {
  const probe = await probeClient();
  const longTx = await db.pool.connect();
  try {
    const h = new Horizon(`"${db.schema}"`, 300);
    await longTx.query('BEGIN');
    await longTx.query(`UPDATE "${db.schema}".entity SET v = v + 1`); // holds xmin back
    const id = await insertRow(db.pool as unknown as pg.ClientBase, 'other');
    const started = Date.now();
    while (h.watermark < id) {
      await h.probe(probe);
      await new Promise((r) => setTimeout(r, 20)); // the relay's poll interval
      assert.ok(Date.now() - started < 10_000, 'released within the bound');
    }
    assert.ok(Date.now() - started >= 300, 'not released before the wait');
    assert.equal(h.forcedAdvances, 1);
  } finally {
    await longTx.query('ROLLBACK');
    longTx.release();
    await probe.end();
  }
});

test('integration: a relay behind a write transaction held open elsewhere publishes after the configured wait, not never', async () => {
  const { createRelay } = await import('../src/relay/relay.js');
  const { createTopic, testBrokers } = await import('./helpers/kafka.js');
  const topic = await createTopic(1);
  const longTx = await db.pool.connect();
  const relay = createRelay({ producer: TEST_PRODUCER, databaseUrl: db.databaseUrl, kafkaBrokers: testBrokers(), schema: db.schema, horizonMaxWaitMs: 1_000 });
  let forced = 0;
  relay.on('horizon', (h) => {
    if (h.forced) forced++;
  });
  await relay.start();
  try {
    await longTx.query('BEGIN');
    await longTx.query(`UPDATE "${db.schema}".entity SET v = v + 1`); // a write transaction that stays open
    const { rows } = await db.pool.query<{ id: number }>(`INSERT INTO "${db.schema}".outbox (topic, key) VALUES ($1, 'k') RETURNING id`, [topic]);
    const insertedAt = Date.now();
    const published = new Promise<number>((resolve) =>
      relay.on('batch', (b) => {
        if (b.firstId <= rows[0]!.id && rows[0]!.id <= b.lastId) resolve(Date.now());
      }),
    );
    const delayMs = (await published) - insertedAt;
    assert.ok(delayMs >= 1_000, `held back by the open transaction (${delayMs} ms)`);
    assert.ok(delayMs < 1_000 + 5_000, `published within the wait plus a few polls (${delayMs} ms)`);
    assert.ok(forced >= 1, 'the forced release is reported');
  } finally {
    await longTx.query('ROLLBACK');
    longTx.release();
    await relay.stop();
  }
});
