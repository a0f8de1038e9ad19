import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import type pg from 'pg';
import { createRelay } from '../src/relay/relay.js';
import { Horizon, openProbeConnection } from '../src/relay/horizon.js';
import { enqueue } from '../src/enqueue.js';
import { createTestSchema, type TestSchema } from './helpers/db.js';
import { createTopic, readTopic, testBrokers } from './helpers/kafka.js';
import { waitFor } from './helpers/wait.js';
import { pausableBroker } from './helpers/pausableBroker.js';
import { TEST_PRODUCER } from './helpers/producer.js';
import { batchMarker } from '../src/relay/sql/claim.js';

// The horizon ignores the relay's own batches (they never insert outbox rows), and only
// those: src/relay/horizon.ts has the argument.

let db: TestSchema;
before(async () => {
  db = await createTestSchema('horizonrelay');
});
after(async () => {
  await db.drop();
});

async function insertRow(key: string, topic = 'horizon-relay'): Promise<number> {
  const client = await db.pool.connect();
  try {
    await client.query('BEGIN');
    const [row] = await enqueue(client, [{ topic, key, payload: { key } }], { schema: db.schema });
    await client.query('COMMIT');
    return row!.id as number;
  } finally {
    client.release();
  }
}

async function relayBatchXid(relayId: string): Promise<string | null> {
  const { rows } = await db.pool.query<{ xid: string | null }>(
    `SELECT backend_xid::text AS xid FROM pg_stat_activity WHERE starts_with(query, $1) AND backend_xid IS NOT NULL AND state = 'idle in transaction'`,
    [batchMarker(relayId)],
  );
  return rows[0]?.xid ?? null;
}

test('integration: a relay batch held open (its Kafka send stalled) does not hold the horizon back: rows other writers commit meanwhile are released', async () => {
  const topic = await createTopic(2);
  const sockets = pausableBroker();
  const relay = createRelay({ databaseUrl: db.databaseUrl, kafkaBrokers: testBrokers(), producer: TEST_PRODUCER, schema: db.schema, batchesInFlight: 1 });
  await sockets.own(() => relay.start());
  try {
    const first = await insertRow('warm-up', topic);
    await readTopic(topic, (m) => m.length >= 1);
    assert.ok(relay.watermark >= first);

    sockets.pause();
    const stalled = await insertRow('stalled', topic);
    // The relay claimed it (FOR UPDATE: its transaction has an xid) and waits for Kafka.
    const xid = await waitFor('the relay batch holding a transaction id', () => relayBatchXid(relay.instanceId));
    const later = await insertRow('later', topic);
    assert.ok(later > stalled);
    await waitFor(`the watermark passes ${later} while the relay batch is open`, () => relay.watermark >= later);
    assert.equal(await relayBatchXid(relay.instanceId), xid, 'the batch was still open when the horizon passed it');
    sockets.resume();
    const messages = await readTopic(topic, (m) => new Set(m.map((x) => x.key)).size >= 3);
    assert.deepEqual([...new Set(messages.map((m) => m.key))].sort(), ['later', 'stalled', 'warm-up']);
  } finally {
    sockets.restore();
    await relay.stop();
  }
});

test("integration: an open transaction that is not a relay batch still holds the horizon back, even under a relay's application_name (what a transaction pooler hands the next client) or a name that starts like one (outbox-relay:dead-letters-replay)", async () => {
  // A relay of this outbox registered under the default client id.
  const relayName = 'outbox-relay:0123456789ab';
  await db.pool.query(`INSERT INTO "${db.schema}".outbox_relays (relay_id, application_name, lease_ttl_ms) VALUES ('0123456789ab', $1, 10000)`, [relayName]);
  const probe = await openProbeConnection(db.databaseUrl, 'test:horizon');
  /**
   * An open transaction holding an xid and a write lock on the outbox (only a writer of the
   * outbox can hold the horizon back: src/relay/horizon.ts), whose last statement is `statement`.
   */
  const open = async (applicationName: string, statement: string): Promise<pg.Client> => {
    const c = await openProbeConnection(db.databaseUrl, applicationName);
    await c.query('BEGIN');
    await c.query(`UPDATE "${db.schema}".outbox SET attempts = attempts WHERE false`);
    await c.query(statement);
    return c;
  };
  const h = new Horizon(`"${db.schema}"`, 60_000);
  const held = async (tx: pg.Client, key: string, what: string): Promise<void> => {
    const id = await insertRow(key);
    for (let i = 0; i < 5; i++) await h.probe(probe);
    assert.ok(h.watermark < id, `watermark ${h.watermark} stays below ${id} while ${what} is open`);
    await tx.query('COMMIT');
    await tx.end();
    await waitFor(`released past ${id} once ${what} committed`, async () => {
      await h.probe(probe);
      return h.watermark >= id;
    });
  };
  try {
    // A transaction running that relay's batch (its statement carries the batch marker) is ignored...
    const relayTx = await open('anything', `${batchMarker('0123456789ab')} SELECT pg_current_xact_id()`);
    const a = await insertRow('a');
    await waitFor(`released past ${a} with the relay's batch open`, async () => {
      await h.probe(probe);
      return h.watermark >= a;
    });
    // ...one under the relay's application_name without the marker is not (behind PgBouncer
    // 1.18 an application's insert may run under the name a relay set last)...
    await held(await open(relayName, 'SELECT pg_current_xact_id()'), 'b', "a transaction under the relay's name");
    // ...nor one under the replay command's name (it inserts outbox rows), nor another relay's marker.
    await held(await open('outbox-relay:dead-letters-replay', 'SELECT pg_current_xact_id()'), 'c', "the replay's transaction");
    await held(await open('x', `${batchMarker('ffffffffffff')} SELECT pg_current_xact_id()`), 'd', 'a batch of a relay not registered here');
    await relayTx.query('COMMIT');
    await relayTx.end();
  } finally {
    await probe.end();
  }
});
