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
import { spawnCli } from './helpers/processes.js';
import { ConsoleClient } from './helpers/console.js';
import { fileURLToPath } from 'node:url';
import { writeCommitted } from './helpers/outbox.js';
import { readWithJava, registryProxy, schemaRegistryUrl } from './helpers/registry.js';

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

/** Samples the relay's connections every few ms until stopped; returns the most seen, and the connections of a relay's partition maintenance seen. */
function sampleConnections(clientId: string): { stop(): Promise<{ most: number; partitionPools: number }> } {
  let most = 0;
  let partitionPools = 0;
  let running = true;
  const loop = (async () => {
    while (running) {
      most = Math.max(most, await connectionsOf(clientId));
      const { rows } = await admin.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_stat_activity WHERE left(application_name, length($1) + 1) = $1 || ':' AND application_name LIKE '%:partitions'", [clientId]);
      partitionPools += rows[0]!.n;
      await new Promise((r) => setImmediate(r));
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
      return { most, partitionPools };
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
  let seen = { most: 0, partitionPools: 0 };
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
    seen = await samples.stop();
  }
  assert.ok(seen.most <= 7 && seen.most >= 3, `connections held at most ${seen.most}, budget 7`);
  // A relay's partition maintenance has a pool of its own, outside a tenant's share: off for tenants.
  assert.equal(seen.partitionPools, 0, 'no partition-maintenance connection');
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

const pick = (o: { connectionsPerTenant: number; maxDatabaseConnections: number }) => ({ connectionsPerTenant: o.connectionsPerTenant, maxDatabaseConnections: o.maxDatabaseConnections });

test('tenant relay options are checked before anything connects', () => {
  const tenants = { kind: 'schemas', databaseUrl: DATABASE_URL, pattern: '^x' } as const;
  // One batch in flight per tenant unless asked: 2 × 1 + 3 connections each, 30 in all.
  assert.deepEqual(pick(createTenantRelay({ tenants, kafkaBrokers: testBrokers(), batchesInFlight: undefined }).options), { connectionsPerTenant: 5, maxDatabaseConnections: 30 });
  assert.deepEqual(pick(createTenantRelay({ tenants, kafkaBrokers: testBrokers(), batchesInFlight: 3 }).options), { connectionsPerTenant: 9, maxDatabaseConnections: 30 });
  assert.throws(() => createTenantRelay({ tenants, kafkaBrokers: testBrokers(), maxDatabaseConnections: 6 }), (e: unknown) => e instanceof ConfigError && /cannot serve one tenant.*at least 7/.test(e.message));
  assert.throws(() => createTenantRelay({ tenants, kafkaBrokers: testBrokers(), topicTemplate: 'all-orders' }), /keyTemplate: with a topic shared by every tenant, the key must carry the tenant/);
  assert.throws(() => createTenantRelay({ tenants, kafkaBrokers: testBrokers(), topicTemplate: '{tenant}/{topic}' }), /topicTemplate: .* is not a legal Kafka topic name/);
  assert.throws(() => createTenantRelay({ tenants: { kind: 'tables', databaseUrl: DATABASE_URL } as never, kafkaBrokers: testBrokers() }), /tenants.kind: "tables" is not one of schemas, databases, query/);
  const avro = { format: 'avro' as const, schema: { version: 'latest' as const } };
  const encodings = (rule: Record<string, unknown>) => ({ schemaRegistry: { url: 'http://127.0.0.1:1' }, rules: [{ topic: 'orders', value: avro, ...rule }] });
  assert.throws(() => createTenantRelay({ tenants, kafkaBrokers: testBrokers(), encodings: encodings({ outbox: 'acme' }) }), /encodings\.rules\[0\]\.outbox: selects an outbox, but under a tenant rule the outboxes are tenants/);
  assert.throws(
    () => createTenantRelay({ tenants, kafkaBrokers: testBrokers(), topicTemplate: '{topic}', keyTemplate: '{tenant}:{key}', encodings: encodings({ key: avro }) }),
    /keyTemplate: is "\{tenant\}:\{key\}", but encodings\.rules\[0\] encodes keys/,
  );
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

test('integration: `outbox-relay run --tenant-schemas` serves the tenants; /metrics counts them by state, /readyz answers, SIGUSR2 finds a new tenant at once, `status` with the rule shows each tenant, a tenant setting without a rule is refused, SIGTERM exits 0', async () => {
  const [x, y] = [await addTenant('cli_x'), await addTenant('cli_y')];
  const refused = spawnCli(['run', '--topic-template', '{tenant}-{topic}'], { DATABASE_URL, KAFKA_BROKERS: testBrokers().join(',') });
  assert.equal(await refused.exited, 2, refused.output());
  assert.match(refused.output(), /--topic-template: applies to tenants only/);

  const clientId = uniqueName('tenants-cli');
  const relay = spawnCli(['run', '--tenant-schemas', `^${base}_cli_`, '--client-id', clientId, '--tenant-idle-ms', '300', '--metrics-sample-interval-ms', '200', '--discovery-interval-ms', '3600000'], { DATABASE_URL, KAFKA_BROKERS: testBrokers().join(',') });
  try {
    const address = await waitFor('the metrics address', () => /"address":"(http:\/\/[^"]+)"/.exec(relay.output())?.[1]);
    const ids = new Map<string, Set<string>>();
    for (const schema of [x, y]) {
      const { rows } = await admin.query<{ message_id: string }>(`INSERT INTO "${schema}".outbox (topic, key, payload) SELECT 'orders', 'k' || (i % 3), '{}' FROM generate_series(1, 20) i RETURNING message_id`);
      ids.set(schema, new Set(rows.map((r) => r.message_id)));
    }
    for (const schema of [x, y]) {
      const messages = await delivered(schema, ids.get(schema)!);
      assert.ok(messages.every((m) => ids.get(schema)!.has(m.headers[HEADERS.messageId]!)), `${schema}: only its own rows`);
    }
    const metrics = await waitFor('both tenants counted idle again', async () => {
      const text = await (await fetch(`${address}/metrics`)).text();
      return /^outbox_relay_tenants\{state="idle"\} 2$/m.test(text) ? text : undefined;
    });
    assert.match(metrics, /^outbox_relay_tenant_published_rows_total 40$/m);
    assert.match(metrics, /^outbox_relay_tenant_connections_max 30$/m);
    const ready = await fetch(`${address}/readyz`);
    assert.equal(ready.status, 200);
    assert.match(JSON.stringify(await ready.json()), /2 tenants, none unavailable/);

    // On demand: a tenant created now is served after SIGUSR2; the interval (an hour here) cannot be what found it.
    const z = await addTenant('cli_z');
    relay.child.kill('SIGUSR2');
    await waitFor('the new tenant found', () => /"tenants":3,"added":1,"removed":0,"msg":"tenants changed"/.test(relay.output()), { timeoutMs: 15_000 });
    const { rows: zRows } = await admin.query<{ message_id: string }>(`INSERT INTO "${z}".outbox (topic, key, payload) VALUES ('orders', 'k', '{}') RETURNING message_id`);
    await delivered(z, new Set(zRows.map((r) => r.message_id)));

    // status with the same rule: a line per tenant, narrowed by --tenant.
    const status = spawnCli(['status', '--tenant-schemas', `^${base}_cli_`], { DATABASE_URL });
    assert.equal(await status.exited, 0, status.output());
    assert.match(status.output(), new RegExp(`^${x} +test +${x} +0 +- +0 +0$`, 'm'));
    assert.match(status.output(), /^3 tenants$/m);
    const one = spawnCli(['status', '--json', '--tenant-schemas', `^${base}_cli_`, '--tenant', '_cli_y'], { DATABASE_URL });
    assert.equal(await one.exited, 0, one.output());
    assert.deepEqual((JSON.parse(one.output()) as { tenants: Array<{ name: string; status: { pending: number } }> }).tenants.map((t) => [t.name, t.status.pending]), [[y, 0]]);
  } finally {
    relay.child.kill('SIGTERM');
    assert.equal(await relay.exited, 0, relay.output());
  }
  assert.match(relay.output(), /"msg":"tenant relay started"/);
});

test('integration: `outbox-relay console --tenant-schemas … --tenant TEXT` opens the tenants whose name holds the text, each as an outbox of the console', async () => {
  const [p, q, r] = [await addTenant('con_pa'), await addTenant('con_pb'), await addTenant('con_q')];
  const users = { OUTBOX_CONSOLE_USERS: 'olga:viewer:olga passphrase 1\n' };
  const served = spawnCli(['console', '--tenant-schemas', `^${base}_con_`, '--tenant', '_con_p', '--listen', '127.0.0.1:0'], { DATABASE_URL, ...users });
  try {
    const url = await waitFor('the console listening', () => /listening on (http:\/\/127\.0\.0\.1:\d+\/)/.exec(served.output())?.[1], { timeoutMs: 30_000 });
    const browser = new ConsoleClient(url);
    await browser.login('olga', 'olga passphrase 1');
    const start = await browser.get('');
    assert.equal(start.status, 200);
    for (const t of [p, q]) assert.match(start.body, new RegExp(`href="/outboxes/${t}/"`));
    assert.doesNotMatch(start.body, new RegExp(`outboxes/${r}/`));
  } finally {
    served.child.kill('SIGTERM');
    assert.equal(await served.exited, 0, served.output());
  }
  const none = spawnCli(['console', '--tenant-schemas', `^${base}_con_`, '--tenant', 'nobody'], { DATABASE_URL, ...users });
  assert.equal(await none.exited, 2, none.output());
  assert.match(none.output(), /--tenant: no tenant of the rule has "nobody" in its name \(3 found\)/);
  const stray = spawnCli(['console', '--tenant', 'x'], { DATABASE_URL, ...users });
  assert.equal(await stray.exited, 2, stray.output());
  assert.match(stray.output(), /--tenant: applies with a tenant rule only/);
});

test('integration: encodings under a tenant rule: each tenant\'s rows in Avro under its own topic\'s subject, registered once across turns; a row that does not fit is dead-lettered alone', async () => {
  // The relay reaches the registry through a proxy counting its registrations.
  const registryUrl = await schemaRegistryUrl();
  const proxy = await registryProxy(registryUrl);
  const [a, b] = [await addTenant('enc_a'), await addTenant('enc_b')];
  const relay = createTenantRelay({
    tenants: { kind: 'schemas', databaseUrl: DATABASE_URL, pattern: `^${base}_enc_` },
    kafkaBrokers: testBrokers(),
    producer: TEST_PRODUCER,
    clientId: uniqueName('tenants-enc'),
    tenantIdleMs: 400,
    tenantTurnMs: 300,
    encodings: {
      schemaRegistry: { url: proxy.url },
      rules: [{ topic: `/${base}_enc_.*\\.orders/`, value: { format: 'avro', schema: { file: fileURLToPath(new URL('./fixtures/encodings/order.avsc', import.meta.url)) } } }],
    },
  });
  const order = (n: number) => ({ orderId: n, customer: `c${n}`, amount: n + 0.5, express: false, note: null, items: [] });
  const rows = (from: number) => Array.from({ length: 3 }, (_, i) => ({ topic: 'orders', key: `k${i}`, payload: order(from + i) }));
  const sent = async (schema: string) => (await admin.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${schema}".outbox WHERE sent_at IS NOT NULL`)).rows[0]!.n;
  const served: string[] = [];
  relay.on('tenant', (t) => t.state === 'serving' && served.push(t.name));
  await relay.start();
  try {
    await writeCommitted({ pool: admin, schema: a }, [...rows(100), { topic: 'orders', key: 'k-bad', payload: { ...order(0), amount: 'none' } }]);
    await writeCommitted({ pool: admin, schema: b }, rows(200));
    await waitFor('the first rows sent', async () => (await sent(a)) === 3 && (await sent(b)) === 3);
    await waitFor('both tenants idle', () => relay.tenants().every((t) => t.state === 'idle'), { timeoutMs: 30_000 });
    // Each tenant's next rows come through a relay made anew, at another turn.
    await writeCommitted({ pool: admin, schema: a }, rows(110));
    await writeCommitted({ pool: admin, schema: b }, rows(210));
    await waitFor('every good row sent', async () => (await sent(a)) === 6 && (await sent(b)) === 6);
  } finally {
    await relay.stop();
    await proxy.close();
  }
  assert.ok(served.filter((t) => t === a).length >= 2 && served.filter((t) => t === b).length >= 2, `each tenant served in two turns at least: ${served.join(', ')}`);
  assert.deepEqual(proxy.registrations.map((u) => decodeURIComponent(u).replace(/^.*\/subjects\//, '')).sort(), [`${a}.orders-value/versions`, `${b}.orders-value/versions`], 'one registration per tenant topic, none again at later turns');
  const { rows: dead } = await admin.query<{ key: string; error_name: string }>(`SELECT key, error_name FROM "${a}".outbox_dead_letters`);
  assert.deepEqual(dead, [{ key: 'k-bad', error_name: 'encoding:avro' }]);
  for (const [schema, from] of [[a, 100], [b, 200]] as const) {
    const read = await readTopic(`${schema}.orders`, (m) => m.length >= 6);
    const byId = read.sort((x, y) => Number(x.headers[HEADERS.outboxId]) - Number(y.headers[HEADERS.outboxId]));
    const decoded = await readWithJava(registryUrl, byId.map((m) => m.value!));
    assert.deepEqual(decoded.map((d) => d.value), [...rows(from), ...rows(from + 10)].map((r) => r.payload), `${schema}: Avro read back by Apache Avro`);
    const latest = (await (await fetch(`${registryUrl}/subjects/${schema}.orders-value/versions/latest`)).json()) as { id: number };
    assert.deepEqual(new Set(decoded.map((d) => d.schemaId)), new Set([latest.id]), `${schema}: framed with the id of subject ${schema}.orders-value`);
  }
});
