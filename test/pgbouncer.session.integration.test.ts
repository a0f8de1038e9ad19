// The relay through a real PgBouncer 1.18 in session pooling (pool_mode = session: each
// client connection keeps its server connection, so sessions behave as on a direct
// connection): two relays left at the default `auto` drain concurrent writers' rows, one
// SIGKILLed mid-stream; and `pooler: 'none'` is accepted there.
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { createRelay } from '../src/relay/relay.js';
import { getStatus } from '../src/commands/status.js';
import type { TestSchema } from './helpers/db.js';
import { HEADERS } from '../src/shared/kafka.js';
import { createTopic, readTopic, testBrokers } from './helpers/kafka.js';
import { spawnCli, type Spawned } from './helpers/processes.js';
import { waitFor } from './helpers/wait.js';
import { TEST_PRODUCER } from './helpers/producer.js';
import { assertDeliveredInOrder, runWriters } from './helpers/workload.js';
import { sentCount } from './helpers/outbox.js';
import { pgBouncerFixture, type PgBouncer, type PgBouncerFixture } from './helpers/pgbouncer.js';

const LEASE_TTL_MS = 2_000;
let db: TestSchema;
let bouncer: PgBouncer;
let pooled: pg.Pool;

let fixture: PgBouncerFixture | undefined;
before(async () => {
  // Session pooling holds a server connection per client connection: room for all of them.
  fixture = await pgBouncerFixture('pgb_session', { mode: 'session', poolSize: 40, clients: 6 });
  ({ db, bouncer, pooled } = fixture);
});
after(async () => {
  await fixture?.close();
});

async function ownersByShardCount(): Promise<number[]> {
  const status = await getStatus({ client: db.pool as never, schema: db.schema });
  return status.relays.filter((r) => r.live && r.shardCount > 0).map((r) => r.shardCount).sort((a, b) => a - b);
}

function relayProcess(): Spawned {
  return spawnCli(['run', '--batch-size', '50'], {
    DATABASE_URL: bouncer.url(),
    KAFKA_BROKERS: testBrokers().join(','),
    OUTBOX_SCHEMA: db.schema,
    OUTBOX_LEASE_TTL_MS: String(LEASE_TTL_MS),
    OUTBOX_LOG_LEVEL: 'warn',
  });
}

test('integration (PgBouncer, session pooling): two default relays drain concurrent writers; one SIGKILLed mid-stream, the survivor finishes: nothing lost or reordered', async () => {
  const topic = await createTopic(4);
  const a = relayProcess();
  const b = relayProcess();
  try {
    await waitFor('two live relays with 128 shards each', async () => (await ownersByShardCount()).join() === '128,128', { timeoutMs: 40_000 });
    let takeover: Promise<unknown> | undefined;
    const { committed, rolledBack } = await runWriters({
      pool: pooled,
      schema: db.schema,
      topic,
      writers: 5,
      transactionsPerWriter: 240,
      keys: 30,
      rollbackEvery: 10,
      holdEvery: 6,
      holdMs: 10,
      onCommit: (n) => {
        if (n === 300) {
          a.child.kill('SIGKILL');
          takeover = waitFor('the survivor to own every shard', async () => (await ownersByShardCount()).join() === '256', { timeoutMs: 30_000, intervalMs: 20 });
        }
      },
    });
    assert.ok(committed.size >= 2_000, `${committed.size} rows committed`);
    // The situation: the relay died by the SIGKILL mid-stream, its shards then taken over.
    assert.ok(takeover, 'the relay was killed at the 300th commit');
    assert.equal(await a.exited, 'SIGKILL', a.output());
    await takeover;
    await waitFor('every committed row marked sent', async () => (await sentCount(db, topic)) === committed.size, { timeoutMs: 60_000 });
    await assertDeliveredInOrder(topic, committed, rolledBack);
  } finally {
    a.child.kill('SIGKILL');
    b.child.kill('SIGTERM');
    await a.exited;
    assert.equal(await b.exited, 0, b.output());
  }
});

test('integration (PgBouncer, session pooling): a relay told `pooler: none` starts and publishes (session pooling keeps sessions)', async () => {
  const topic = await createTopic(1);
  const relay = createRelay({ producer: TEST_PRODUCER, databaseUrl: bouncer.url(), kafkaBrokers: testBrokers(), schema: db.schema, pooler: 'none', leaseTtlMs: LEASE_TTL_MS });
  await relay.start();
  let sessionClients: number;
  try {
    await pooled.query(`INSERT INTO "${db.schema}".outbox (topic, key, payload) SELECT $1, 'k' || (g % 5), '{}' FROM generate_series(1, 100) AS g`, [topic]);
    await waitFor('the 100 rows sent', async () => (await sentCount(db, topic)) === 100, { timeoutMs: 30_000 });
    // The situation: the relay's connections are PgBouncer's clients, in a session pool.
    const sessionPools = new Set((await bouncer.admin('SHOW POOLS')).filter((p) => p.pool_mode === 'session').map((p) => `${p.database}/${p.user}`));
    const clients = await bouncer.admin('SHOW CLIENTS');
    sessionClients = clients.filter((c) => (c.application_name ?? '').startsWith(relay.applicationName) && sessionPools.has(`${c.database}/${c.user}`)).length;
  } finally {
    await relay.stop();
  }
  assert.ok(sessionClients > 0, 'the relay was a client of PgBouncer in a session pool');
  // Marked sent is not on the topic: read Kafka.
  const { rows } = await db.pool.query<{ message_id: string }>(`SELECT message_id FROM "${db.schema}".outbox WHERE topic = $1`, [topic]);
  const messages = await readTopic(topic, (m) => new Set(m.map((x) => x.headers[HEADERS.messageId])).size >= 100);
  assert.deepEqual(new Set(messages.map((m) => m.headers[HEADERS.messageId])), new Set(rows.map((r) => r.message_id)), 'every row on the topic');
  assert.equal(messages.length, 100, 'each once');
});
