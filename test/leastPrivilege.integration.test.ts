import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { Registry } from 'prom-client';
import { createRelay, type Relay } from '../src/relay/relay.js';
import { createConsumer } from '../src/consumer/consumer.js';
import { enqueue } from '../src/enqueue.js';
import { getStatus } from '../src/commands/status.js';
import { instrumentRelay, type RelayInstrumentation } from '../src/metrics/relayMetrics.js';
import { roleScript } from '../src/commands/roles.js';
import { createEffectGuard } from '../src/effects/guard.js';
import { postgresEffectStore } from '../src/effects/postgresStore.js';
import { createTestSchema, uniqueName, type TestSchema } from './helpers/db.js';
import { createTopic, readTopic, testBrokers, testKafka } from './helpers/kafka.js';
import { produce } from './helpers/consumer.js';
import { metricValue } from './helpers/metrics.js';
import { waitFor } from './helpers/wait.js';
import { TEST_PRODUCER } from './helpers/producer.js';

// Roles are cluster-wide: every name is unique to this run, and all are dropped at the end.
const relayGroup = uniqueName('lp_relay');
const consumerGroup = uniqueName('lp_consumer');
const relayLogin = uniqueName('lp_relay_login');
const consumerLogin = uniqueName('lp_consumer_login');

let db: TestSchema;
const cleanups: Array<() => Promise<unknown>> = [];

function urlFor(role: string): string {
  const url = new URL(db.databaseUrl);
  url.username = role;
  url.password = '';
  return url.toString();
}

before(async () => {
  db = await createTestSchema('lp');
  const script = await roleScript(db.schema, { relayRole: relayGroup, consumerRole: consumerGroup });
  await db.pool.query(script);
  await db.pool.query(script); // idempotent: applying it again changes nothing and fails nothing
  await db.pool.query(`CREATE ROLE "${relayLogin}" LOGIN IN ROLE "${relayGroup}"`);
  await db.pool.query(`CREATE ROLE "${consumerLogin}" LOGIN IN ROLE "${consumerGroup}"`);
});

after(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => undefined);
  const roles = [relayLogin, consumerLogin, relayGroup, consumerGroup];
  await db.pool.query(`DROP OWNED BY ${roles.map((r) => `"${r}"`).join(', ')}`).catch(() => undefined);
  for (const r of roles) await db.pool.query(`DROP ROLE IF EXISTS "${r}"`);
  await db.drop();
});

async function enqueueRows(topic: string, from: number, count: number): Promise<void> {
  const client = await db.pool.connect(); // the application: the tables' owner here
  try {
    await enqueue(client, Array.from({ length: count }, (_, i) => ({ topic, key: `k${(from + i) % 9}`, payload: { n: from + i } })), { schema: db.schema });
  } finally {
    client.release();
  }
}

async function unsent(): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".outbox WHERE sent_at IS NULL`);
  return rows[0]?.n ?? -1;
}

function relayAsRole(): { relay: Relay; metrics: RelayInstrumentation } {
  const relay = createRelay({
    producer: TEST_PRODUCER,
    databaseUrl: urlFor(relayLogin),
    kafkaBrokers: testBrokers(),
    kafka: testKafka(),
    schema: db.schema,
    leaseTtlMs: 1_000,
    retryMaxDelayMs: 100,
    horizonMaxWaitMs: 1_000,
  });
  const metrics = instrumentRelay(relay, { registry: new Registry(), sampleIntervalMs: 50, processMetrics: false });
  cleanups.push(() => relay.abort(), () => metrics.close());
  return { relay, metrics };
}

/** Run `sql` as `role` and return the SQLSTATE it fails with, or 'ok'. */
async function asRole(role: string, sql: string): Promise<string> {
  const client = new pg.Client({ connectionString: urlFor(role) });
  await client.connect();
  try {
    await client.query(sql);
    return 'ok';
  } catch (error) {
    return (error as { code?: string }).code ?? String(error);
  } finally {
    await client.end();
  }
}

test('integration: the relay role does the relay\'s whole job: start, leases, publish, take over a dead relay\'s shards, metrics, status', async () => {
  const topic = await createTopic(3);
  await enqueueRows(topic, 0, 60);
  const first = relayAsRole();
  const errors: string[] = [];
  first.relay.on('batchError', (e) => errors.push(e.error.message));
  await first.relay.start();
  await waitFor('60 rows sent by the relay role', async () => (await unsent()) === 0, { timeoutMs: 60_000 });

  // Hard stop: its leases are left to expire, and the next relay takes the shards over
  // (reading pg_stat_activity and terminating the dead owner's backends, as the same role).
  await first.relay.abort();
  await enqueueRows(topic, 60, 40);
  const second = relayAsRole();
  second.relay.on('batchError', (e) => errors.push(e.error.message));
  const takenOver = new Promise<number>((resolve) =>
    (second.relay as unknown as { on(e: 'shards', l: (p: { takenOver: unknown[] }) => void): void }).on('shards', (p) => {
      if (p.takenOver.length > 0) resolve(p.takenOver.length);
    }),
  );
  await second.relay.start();
  assert.ok((await takenOver) > 0, 'took shards over from the dead relay');
  await waitFor('all 100 rows sent', async () => (await unsent()) === 0, { timeoutMs: 60_000 });
  await waitFor('the sampler, as the relay role, sees an empty backlog', async () => (await metricValue(second.metrics.registry, 'outbox_relay_pending_rows')) === 0 && (second.metrics.lastSample?.lastId ?? 0) >= 100);
  assert.equal(await metricValue(second.metrics.registry, 'outbox_relay_sampler_errors_total'), 0);
  assert.equal(await metricValue(first.metrics.registry, 'outbox_relay_sampler_errors_total'), 0);

  const status = await getStatus({ databaseUrl: urlFor(relayLogin), schema: db.schema });
  assert.ok(status, 'status works as the relay role');
  await second.relay.stop();
  assert.deepEqual(errors.filter((e) => /permission denied/i.test(e)), [], 'no permission errors');

  const messages = await readTopic(topic, (m) => new Set(m.map((x) => x.headers['message-id'])).size >= 100);
  assert.equal(new Set(messages.map((x) => x.headers['message-id'])).size, 100);
});

test('integration: the relay role cannot create, drop, alter or truncate, nor enqueue or rewrite rows', async () => {
  const s = `"${db.schema}"`;
  const denied = '42501'; // insufficient_privilege
  assert.equal(await asRole(relayLogin, `CREATE TABLE ${s}.intruder (id int)`), denied);
  assert.equal(await asRole(relayLogin, `DROP TABLE ${s}.outbox`), denied);
  assert.equal(await asRole(relayLogin, `DROP TABLE ${s}.outbox_shard_leases`), denied);
  assert.equal(await asRole(relayLogin, `ALTER TABLE ${s}.outbox ADD COLUMN x int`), denied);
  assert.equal(await asRole(relayLogin, `TRUNCATE ${s}.outbox`), denied);
  assert.equal(await asRole(relayLogin, `CREATE SCHEMA ${uniqueName('lp_intruder')}`), denied);
  assert.equal(await asRole(relayLogin, `INSERT INTO ${s}.outbox (topic, key) VALUES ('t', 'k')`), denied);
  assert.equal(await asRole(relayLogin, `UPDATE ${s}.outbox SET payload = '{}'`), denied);
  assert.equal(await asRole(relayLogin, `DELETE FROM ${s}.outbox_migrations`), denied);
  assert.equal(await asRole(relayLogin, `SELECT * FROM ${s}.processed_messages`), denied);
  // What it may do, it may: sanity check that the denials are not a broken login.
  assert.equal(await asRole(relayLogin, `SELECT count(*) FROM ${s}.outbox`), 'ok');
  assert.equal(await asRole(relayLogin, `SELECT last_value FROM ${s}.outbox_id_seq`), 'ok');
  const { rows } = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_tables WHERE schemaname = $1 AND tablename = 'outbox'`, [db.schema]);
  assert.equal(rows[0]?.n, 1, 'outbox still there');
});

test('integration: the consumer role records processed messages and can do nothing else', async () => {
  const topic = await createTopic(1);
  const pool = new pg.Pool({ connectionString: urlFor(consumerLogin), max: 4 });
  cleanups.push(() => pool.end());
  let handled = 0;
  const consumer = createConsumer({
    kafka: testKafka(),
    groupId: uniqueName('group'),
    topics: topic,
    pool,
    schema: db.schema,
    handler: async (message, context) => {
      await context.advanceVersion(message.key ?? '', Number((message.value as { v: number }).v));
      handled++;
    },
    sessionTimeoutMs: 10_000,
    heartbeatIntervalMs: 500,
    maxWaitTimeMs: 100,
  });
  cleanups.push(() => consumer.stop());
  const sent = await produce(topic, Array.from({ length: 12 }, (_, i) => ({ key: `e${i % 3}`, value: { v: i } })));
  await consumer.start();
  await waitFor('12 handled', () => consumer.stats().processed === 12);
  await produce(topic, sent.slice(0, 4)); // redelivered: duplicates, found as the consumer role
  await waitFor('4 duplicates', () => consumer.stats().duplicates === 4);
  assert.equal(handled, 12);
  assert.equal(consumer.stats().infrastructureErrors, 0);
  await consumer.stop();
  const { rows } = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".processed_messages WHERE consumer_group = $1`, [consumer.options.groupId]);
  assert.equal(rows[0]?.n, 12);

  const s = `"${db.schema}"`;
  assert.equal(await asRole(consumerLogin, `CREATE TABLE ${s}.intruder (id int)`), '42501');
  assert.equal(await asRole(consumerLogin, `DROP TABLE ${s}.processed_messages`), '42501');
  assert.equal(await asRole(consumerLogin, `TRUNCATE ${s}.processed_messages`), '42501');
  assert.equal(await asRole(consumerLogin, `SELECT * FROM ${s}.outbox`), '42501');
  assert.equal(await asRole(consumerLogin, `DELETE FROM ${s}.outbox_shard_leases`), '42501');
});

test("integration: the consumer role runs the effect guard's Postgres store (reserve, confirm, skip, release, purge) and cannot drop or truncate effect_keys", async () => {
  const pool = new pg.Pool({ connectionString: urlFor(consumerLogin), max: 2 });
  cleanups.push(() => pool.end());
  const store = postgresEffectStore(pool, { schema: db.schema });
  const guard = createEffectGuard({ store, replayHorizonMs: 1_000 });
  const key = uniqueName('lp:notif');
  assert.equal((await guard.once(key, () => 1)).status, 'ran');
  assert.deepEqual(await guard.once(key, () => 2), { status: 'skipped', reason: 'done' });
  await assert.rejects(guard.once(uniqueName('lp:fails'), () => Promise.reject(new Error('downstream down'))), /downstream down/);
  const short = uniqueName('lp:short');
  await guard.once(short, () => 1, { ttlMs: 1_000, reservationMs: 100 });
  await waitFor('the short key forgotten', async () => (await guard.inspect(short)) === undefined, { intervalMs: 100, timeoutMs: 5_000 });
  assert.ok((await store.purgeExpired()) >= 1);
  assert.equal(await guard.forget(key), true);
  const s = `"${db.schema}"`;
  assert.equal(await asRole(consumerLogin, `DROP TABLE ${s}.effect_keys`), '42501');
  assert.equal(await asRole(consumerLogin, `TRUNCATE ${s}.effect_keys`), '42501');
  assert.equal(await asRole(relayLogin, `SELECT * FROM ${s}.effect_keys`), '42501');
});

test('roleScript: names are validated and quoted', async () => {
  const script = await roleScript('app', { relayRole: 'r1', consumerRole: 'c1' });
  assert.match(script, /GRANT SELECT, DELETE ON "app"\.outbox TO "r1";/);
  assert.match(script, /CREATE ROLE "c1" NOLOGIN;/);
  assert.ok(!script.includes(':"'), 'every placeholder filled in');
  await assert.rejects(roleScript('app', { relayRole: 'x"; DROP TABLE outbox; --' }), /relayRole/);
  assert.match(await roleScript(), /TO "outbox_relay";/);
});
