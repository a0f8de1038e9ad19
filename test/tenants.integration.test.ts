import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { createTenantRelay, type TenantRelay, type TenantRelayEvents } from '../src/tenants/tenantRelay.js';
import { migrate } from '../src/commands/migrate.js';
import { ConfigError } from '../src/shared/errors.js';
import { HEADERS } from '../src/shared/kafka.js';
import { DATABASE_URL, uniqueName } from './helpers/db.js';
import { readTopic, testBrokers, testKafka, type ReadMessage } from './helpers/kafka.js';
import { waitFor } from './helpers/wait.js';
import { TEST_PRODUCER } from './helpers/producer.js';
import { judge, runWriters } from './helpers/workload.js';

// Tenants as schemas of one database, found by a pattern, against the real Postgres and
// Kafka: each tenant's rows reach its own topic ({tenant}.{topic}) in order per key, a
// tenant added or dropped while running is served or released without a restart, the
// connection budget holds at every sample, and idle tenants hold no connection.

let admin: pg.Pool;
let base: string;
const created: string[] = [];

before(async () => {
  admin = new pg.Pool({ connectionString: DATABASE_URL, max: 12 });
  admin.on('error', () => undefined);
  base = uniqueName('tn');
});

after(async () => {
  for (const s of created) await admin.query(`DROP SCHEMA IF EXISTS "${s}" CASCADE`).catch(() => undefined);
  await admin.end();
});

/** A tenant schema, migrated with the insert trigger unless `notify` is false, and its topic `orders`. */
async function addTenant(suffix: string, { notify = true } = {}): Promise<string> {
  const schema = `${base}_${suffix}`;
  created.push(schema);
  await migrate({ databaseUrl: DATABASE_URL, schema, notifyOnInsert: notify });
  const kafka = testKafka().admin();
  await kafka.connect();
  try {
    await kafka.createTopics({ topics: [{ topic: `${schema}.orders`, numPartitions: 3, replicationFactor: 1 }], waitForLeaders: true });
  } finally {
    await kafka.disconnect();
  }
  return schema;
}

/** The Postgres connections the relay holds now: every connection whose application_name starts with its client id. */
async function connectionsOf(clientId: string): Promise<number> {
  const { rows } = await admin.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name LIKE $1 || ':%'", [clientId]);
  return rows[0]!.n;
}

/** Samples the relay's connections every few ms until stopped; returns the most seen. */
function sampleConnections(clientId: string): { stop(): Promise<number> } {
  let most = 0;
  let running = true;
  const loop = (async () => {
    while (running) {
      most = Math.max(most, await connectionsOf(clientId));
      await new Promise((r) => setImmediate(r));
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
      return most;
    },
  };
}

function tenantRelay(clientId: string, extra: Record<string, unknown> = {}): TenantRelay {
  return createTenantRelay({
    tenants: { kind: 'schemas', databaseUrl: DATABASE_URL, pattern: `^${base}_` },
    kafkaBrokers: testBrokers(),
    producer: TEST_PRODUCER,
    clientId,
    batchSize: 100,
    leaseTtlMs: 2_000,
    retryMaxDelayMs: 1_000,
    discoveryIntervalMs: 3_600_000,
    tenantIdleMs: 400,
    tenantTurnMs: 300,
    ...extra,
  });
}

async function delivered(schema: string, committed: Set<string>): Promise<ReadMessage[]> {
  return readTopic(`${schema}.orders`, (m) => committed.size > 0 && [...committed].every((id) => m.some((x) => x.headers[HEADERS.messageId] === id)));
}

test('integration: schema tenants found by a pattern; each tenant’s rows on its own topic in key order, with its name in a header; one added and one dropped while running; the budget holds; idle tenants hold no connection', async () => {
  const [a, b, c] = [await addTenant('a'), await addTenant('b'), await addTenant('c', { notify: false })];
  const clientId = uniqueName('tenants');
  // Room for one tenant at a time (2 of the relay's own + 5 for a tenant at one batch in
  // flight): three busy tenants must take turns.
  const relay = tenantRelay(clientId, { maxDatabaseConnections: 7 });
  const states: Array<TenantRelayEvents['tenant']> = [];
  relay.on('tenant', (s) => states.push(s));
  const samples = sampleConnections(clientId);
  await relay.start().catch(async (error: unknown) => {
    await samples.stop();
    throw error;
  });
  let most = 0;
  try {
    assert.deepEqual(relay.tenants().map((t) => t.name).sort(), [a, b, c].sort());
    const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 9 });
    const write = (schema: string) => runWriters({ pool, schema, topic: 'orders', writers: 3, transactionsPerWriter: 40, keys: 10, rollbackEvery: 7, holdEvery: 5, holdMs: 10 });
    const [wa, wb, wc] = await Promise.all([write(a), write(b), write(c)]);
    for (const [schema, w] of [[a, wa], [b, wb], [c, wc]] as const) {
      const messages = await delivered(schema, w.committed);
      const verdict = judge(messages, w.committed, w.rolledBack);
      assert.deepEqual({ lost: verdict.lost, rolledBack: verdict.rolledBackDelivered, reorderings: verdict.reorderings }, { lost: [], rolledBack: [], reorderings: [] }, schema);
      // Only this tenant's rows, each saying whose it is.
      assert.ok(messages.every((m) => m.headers['outbox-tenant'] === schema && w.committed.has(m.headers[HEADERS.messageId]!)), `${schema}: a message of another tenant`);
    }
    assert.ok(states.filter((s) => s.state === 'serving').length > 3, 'the tenants took turns');

    // Added while running: found by the next evaluation, served without a restart.
    const d = await addTenant('d');
    await relay.discover();
    const { rows } = await pool.query<{ message_id: string }>(`INSERT INTO "${d}".outbox (topic, key, payload) VALUES ('orders', 'k', '{}') RETURNING message_id`);
    await delivered(d, new Set(rows.map((r) => r.message_id)));

    // Dropped while running: released with the next evaluation, the others untouched.
    const released = new Promise<TenantRelayEvents['discovery']>((resolve) => relay.once('discovery', resolve));
    await admin.query(`DROP SCHEMA "${b}" CASCADE`);
    await relay.discover();
    assert.deepEqual((await released).removed, [b]);
    assert.deepEqual(relay.tenants().map((t) => t.name).sort(), [a, c, d].sort());

    // Idle: every tenant released, only the control connection left.
    await waitFor('every tenant idle', () => relay.tenants().every((t) => t.state === 'idle'), { timeoutMs: 30_000 });
    await waitFor('only the control connection open', async () => (await connectionsOf(clientId)) === 1, { timeoutMs: 30_000 });
    await pool.end();
  } finally {
    await relay.stop();
    most = await samples.stop();
  }
  assert.ok(most <= 7 && most >= 3, `connections held at most ${most}, budget 7`);
  assert.equal(await connectionsOf(clientId), 0, 'stop closed every connection');
});

test('integration: a tenant with a backlog does not hold back the fresh rows of another', async () => {
  const [big, small] = [await addTenant('big'), await addTenant('small')];
  await admin.query(`INSERT INTO "${big}".outbox (topic, key, payload) SELECT 'orders', 'k' || (i % 50), jsonb_build_object('i', i) FROM generate_series(1, 30000) i`);
  const clientId = uniqueName('tenants');
  const relay = tenantRelay(clientId, { maxDatabaseConnections: 7, tenants: { kind: 'schemas', databaseUrl: DATABASE_URL, pattern: `^(${big}|${small})$` } });
  let bigPublished = 0;
  let bigAtSmall = -1;
  relay.on('batch', (b) => {
    if (b.tenant === big) bigPublished += b.count;
    else if (bigAtSmall < 0) bigAtSmall = bigPublished;
  });
  await relay.start();
  try {
    await waitFor('the backlog being published', () => bigPublished > 0);
    const { rows } = await admin.query<{ message_id: string }>(`INSERT INTO "${small}".outbox (topic, key, payload) VALUES ('orders', 'fresh', '{}') RETURNING message_id`);
    await delivered(small, new Set(rows.map((r) => r.message_id)));
    // The small tenant's row went out while the backlog still had most of its rows left.
    assert.ok(bigAtSmall >= 0 && bigAtSmall < 25_000, `the fresh row waited until ${bigAtSmall} of the backlog's 30000 rows were out`);
    await waitFor('the whole backlog out', () => bigPublished >= 30_000, { timeoutMs: 120_000 });
  } finally {
    await relay.stop();
  }
});

test('tenant relay options are checked before anything connects', () => {
  const tenants = { kind: 'schemas', databaseUrl: DATABASE_URL, pattern: '^x' } as const;
  assert.throws(() => createTenantRelay({ tenants, kafkaBrokers: testBrokers(), maxDatabaseConnections: 6 }), (e: unknown) => e instanceof ConfigError && /cannot serve one tenant.*at least 7/.test(e.message));
  assert.throws(() => createTenantRelay({ tenants, kafkaBrokers: testBrokers(), topicTemplate: 'all-orders' }), /keyTemplate: with a topic shared by every tenant, the key must carry the tenant/);
  assert.throws(() => createTenantRelay({ tenants, kafkaBrokers: testBrokers(), topicTemplate: '{tenant}/{topic}' }), /topicTemplate: .* is not a legal Kafka topic name/);
  assert.throws(() => createTenantRelay({ tenants: { kind: 'tables', databaseUrl: DATABASE_URL } as never, kafkaBrokers: testBrokers() }), /tenants.kind: "tables" is not one of schemas, databases, query/);
});

test('integration: a pattern or a query Postgres refuses fails the start with a ConfigError naming the setting', async () => {
  for (const [tenants, setting] of [
    [{ kind: 'schemas', databaseUrl: DATABASE_URL, pattern: '(' }, 'tenants.pattern'],
    [{ kind: 'query', databaseUrl: DATABASE_URL, sql: 'SELECT tenant, schema, database FROM no_such_tenant_table' }, 'tenants.sql'],
  ] as const) {
    const relay = createTenantRelay({ tenants, kafkaBrokers: testBrokers(), producer: TEST_PRODUCER });
    await assert.rejects(relay.start(), (e: unknown) => e instanceof ConfigError && e.setting === setting);
    await relay.stop();
  }
});
