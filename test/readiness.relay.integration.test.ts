import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { createRelay } from '../src/relay/relay.js';
import { instrumentRelay } from '../src/metrics/relayMetrics.js';
import { waitFor } from './helpers/wait.js';
import { relayReadiness } from '../src/metrics/readiness.js';
import type { RelayStatusSource } from '../src/metrics/relayStatusSource.js';
import { migrate } from '../src/commands/migrate.js';
import { SchemaError } from '../src/shared/errors.js';
import { RELAY_COLUMNS, schemaDrift } from '../src/shared/schema.js';
import { createTestSchema, uniqueName, type TestSchema } from './helpers/db.js';
import { testBrokers } from './helpers/kafka.js';
import { TEST_PRODUCER } from './helpers/producer.js';

// /readyz means "can claim and mark", not "can connect": a SELECT-only role, a read-only
// database and a table altered after migrate are not ready, and migrate says so too.

let db: TestSchema;
const roles: string[] = [];
before(async () => {
  db = await createTestSchema('ready');
});
after(async () => {
  for (const role of roles) await db.pool.query(`DROP OWNED BY "${role}"; DROP ROLE "${role}"`).catch(() => undefined);
  await db.drop();
});

/** The readiness of a relay on `databaseUrl` (a running relay's status: no shards yet). */
async function readiness(databaseUrl: string, schema = db.schema) {
  const source: RelayStatusSource = {
    options: { schema, databaseUrl, clientId: 'readiness-test', kafka: undefined, kafkaBrokers: testBrokers(), kafkaSecurity: {} },
    ownedShards: [],
    on: () => undefined,
    off: () => undefined,
  };
  const r = relayReadiness(source, { pingDatabase: async () => undefined, stopped: false, lastSample: undefined, lastPublishAtMs: Date.now() }, { kafkaCacheMs: 0 });
  try {
    return await r.check();
  } finally {
    await r.close();
  }
}

/** A login role with only `grants` on the test schema; its connection string. */
async function role(grants: string): Promise<string> {
  const name = uniqueName('role');
  roles.push(name);
  await db.pool.query(`CREATE ROLE "${name}" LOGIN; GRANT USAGE ON SCHEMA "${db.schema}" TO "${name}"; ${grants.replaceAll('$role', `"${name}"`).replaceAll('$s', `"${db.schema}"`)}`);
  const url = new URL(db.databaseUrl);
  url.username = name;
  return url.toString();
}

test('integration: readiness of a relay that can claim and mark: every check ok', async () => {
  const report = await readiness(db.databaseUrl);
  assert.equal(report.checks.claim?.ok, true, JSON.stringify(report.checks));
  assert.deepEqual(report.checks.schema, { ok: true, detail: 'as migrated' });
  assert.equal(report.ready, true, JSON.stringify(report.checks));
});

test('integration: a SELECT-only role is not ready: the claim check names what it cannot do', async () => {
  const url = await role('GRANT SELECT ON ALL TABLES IN SCHEMA $s TO $role; GRANT SELECT ON ALL SEQUENCES IN SCHEMA $s TO $role;');
  const report = await readiness(url);
  assert.equal(report.ready, false);
  assert.equal(report.checks.claim?.ok, false);
  assert.match(report.checks.claim!.detail, /^cannot lock outbox rows for a claim: permission denied \(42501\)/);
});

test("integration: the least-privilege relay role of sql/roles.sql is ready (column-level UPDATE is enough)", async () => {
  const url = await role(`GRANT SELECT ON $s.outbox_migrations TO $role;
    GRANT SELECT, DELETE ON $s.outbox TO $role; GRANT UPDATE (sent_at, attempts, last_error) ON $s.outbox TO $role;
    GRANT SELECT ON SEQUENCE $s.outbox_id_seq TO $role;
    GRANT SELECT, INSERT, UPDATE, DELETE ON $s.outbox_relays TO $role; GRANT SELECT, UPDATE ON $s.outbox_shard_leases TO $role;
    GRANT SELECT, INSERT, DELETE ON $s.outbox_dead_letters TO $role; GRANT SELECT, INSERT, DELETE ON $s.outbox_parked_keys TO $role;`);
  const report = await readiness(url);
  assert.equal(report.checks.claim?.ok, true, report.checks.claim?.detail);
});

test('integration: default_transaction_read_only=on is not ready: the database is read-only', async () => {
  const url = new URL(db.databaseUrl);
  url.searchParams.set('options', '-c default_transaction_read_only=on');
  const report = await readiness(url.toString());
  assert.equal(report.ready, false);
  assert.match(report.checks.claim!.detail, /read-only \(transaction_read_only is on/);
});

test('integration: an outbox altered after migrate: readiness, the relay and migrate all refuse it, naming the column', async () => {
  const altered = await createTestSchema('altered');
  try {
    await altered.pool.query(`ALTER TABLE "${altered.schema}".outbox ALTER COLUMN created_at TYPE text`);
    const report = await readiness(altered.databaseUrl, altered.schema);
    assert.equal(report.ready, false);
    assert.equal(report.checks.schema?.detail, 'changed after migrate: column outbox.created_at is text, the migrations create it as timestamp with time zone');
    await assert.rejects(migrate({ databaseUrl: altered.databaseUrl, schema: altered.schema }), (e: Error) => e instanceof SchemaError && /outbox\.created_at is text/.test(e.message));
    const relay = createRelay({ producer: TEST_PRODUCER, databaseUrl: altered.databaseUrl, kafkaBrokers: testBrokers(), schema: altered.schema });
    await assert.rejects(relay.start(), (e: Error) => e instanceof SchemaError && /changed after it was migrated: column outbox\.created_at/.test(e.message));
    await altered.pool.query(`ALTER TABLE "${altered.schema}".outbox DROP COLUMN payload_bytes`);
    assert.ok((await schemaDrift(altered.pool as unknown as pg.ClientBase, altered.schema)).includes('column outbox.payload_bytes is missing (the migrations create it as bytea)'));
  } finally {
    await altered.drop();
  }
});

test("integration: the relay's column list matches what the migrations create", async () => {
  const { rows } = await db.pool.query<{ table: string; column: string; type: string }>(
    `SELECT c.table_name AS table, c.column_name AS column, format_type(a.atttypid, a.atttypmod) AS type
       FROM information_schema.columns AS c
       JOIN pg_attribute AS a ON a.attrelid = format('%I.%I', c.table_schema, c.table_name)::regclass AND a.attname = c.column_name
      WHERE c.table_schema = $1`,
    [db.schema],
  );
  const fresh = new Map(rows.map((r) => [`${r.table}.${r.column}`, r.type]));
  for (const [table, columns] of Object.entries(RELAY_COLUMNS)) {
    for (const [column, type] of Object.entries(columns)) assert.equal(fresh.get(`${table}.${column}`), type, `${table}.${column}`);
  }
  assert.deepEqual(await schemaDrift(db.pool as unknown as pg.ClientBase, db.schema), []);
});

test('integration: a relay that publishes nothing while rows wait is not ready, and the publishing check says so', async () => {
  // A broker that accepts and never answers: the relay runs, claims, and cannot publish.
  const sockets = new Set<Socket>();
  const broker = createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => undefined);
  });
  await new Promise<void>((resolve) => broker.listen(0, '127.0.0.1', resolve));
  const schema = await createTestSchema('ready_stall');
  const relay = createRelay({
    databaseUrl: schema.databaseUrl,
    schema: schema.schema,
    kafkaBrokers: [`127.0.0.1:${(broker.address() as AddressInfo).port}`],
    producer: TEST_PRODUCER,
    shutdownTimeoutMs: 0,
  });
  const instrumentation = instrumentRelay(relay, { processMetrics: false, sampleIntervalMs: 100 });
  const readiness = relayReadiness(relay, instrumentation, { notPublishingAfterMs: 1_000, timeoutMs: 300, kafkaCacheMs: 0 });
  await relay.start();
  try {
    const askedAt = Date.now();
    const before = await readiness.check();
    // Bounded by timeoutMs although the broker never answers: the Kafka check is the
    // deadline's, not an error of the client. The wall-clock bound is loose on purpose (a
    // loaded box delays the deadline's timer); what it guards against is kafkajs'
    // disconnect of the failed admin client, which waits out its 30 s request timeout.
    assert.deepEqual(before.checks.kafka, { ok: false, detail: 'deadline_error' });
    assert.ok(Date.now() - askedAt < 10_000, `readiness answered in ${Date.now() - askedAt} ms with a hung broker`);
    assert.deepEqual(before.checks.publishing, { ok: true, detail: 'nothing pending' });
    await schema.pool.query(`INSERT INTO "${schema.schema}".outbox (topic, key, payload) SELECT 'stalled', 'k' || i, '{}' FROM generate_series(1, 5) i`);
    const report = await waitFor('the publishing check to fail', async () => {
      const r = await readiness.check();
      return r.checks.publishing?.ok === false ? r : undefined;
    });
    assert.equal(report.ready, false);
    assert.match(report.checks.publishing!.detail, /^not publishing although rows are pending: 5 rows pending, the oldest for \d+ s; last published \d+ s ago$/);
    const metric = (await instrumentation.registry.getSingleMetric('outbox_relay_last_publish_timestamp_seconds')!.get()).values[0]!.value;
    assert.ok(Date.now() / 1000 - metric > 1, 'the last-publish gauge stands still while nothing is published');
  } finally {
    await relay.abort();
    await readiness.close();
    await instrumentation.close();
    for (const s of sockets) s.destroy();
    await new Promise<void>((resolve) => broker.close(() => resolve()));
    await schema.drop();
  }
});
