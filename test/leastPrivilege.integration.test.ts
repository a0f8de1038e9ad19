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
import { discardDeadLetters, listDeadLetters, replayDeadLetters } from '../src/commands/deadLetters.js';
import { DeadLetterPermissionError } from '../src/commands/deadLetterSelection.js';
import { unparkKey } from '../src/commands/parkedKeys.js';
import { readOverview } from '../src/console/data/overview.js';
import { countDeadLetters, readDeadLetter, searchDeadLetters } from '../src/console/data/deadLetters.js';
import { listParkedKeys } from '../src/console/data/parkedKeys.js';
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
const viewerGroup = uniqueName('lp_viewer');
const operatorGroup = uniqueName('lp_operator');
const viewerLogin = uniqueName('lp_viewer_login');
const operatorLogin = uniqueName('lp_operator_login');

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
  const script = await roleScript(db.schema, { relayRole: relayGroup, consumerRole: consumerGroup, viewerRole: viewerGroup, operatorRole: operatorGroup });
  await db.pool.query(script);
  await db.pool.query(script); // idempotent: applying it again changes nothing and fails nothing
  await db.pool.query(`CREATE ROLE "${relayLogin}" LOGIN IN ROLE "${relayGroup}"`);
  await db.pool.query(`CREATE ROLE "${consumerLogin}" LOGIN IN ROLE "${consumerGroup}"`);
  await db.pool.query(`CREATE ROLE "${viewerLogin}" LOGIN IN ROLE "${viewerGroup}"`);
  await db.pool.query(`CREATE ROLE "${operatorLogin}" LOGIN IN ROLE "${operatorGroup}"`);
});

after(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => undefined);
  const roles = [relayLogin, consumerLogin, viewerLogin, operatorLogin, relayGroup, consumerGroup, viewerGroup, operatorGroup];
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
  // Its per-minute counts for the console (written on stop, as the relay role).
  const { rows: minutes } = await db.pool.query<{ sent: number }>(`SELECT coalesce(sum(sent), 0)::int AS sent FROM "${db.schema}".outbox_relay_minutes WHERE relay_id = $1`, [second.relay.instanceId]);
  assert.ok(minutes[0]!.sent > 0, 'the relay role recorded what it published');
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
  assert.match(script, /'"c1"'/);
  assert.match(script, /TO "outbox_viewer";/);
  assert.match(script, /TO "outbox_operator";/);
  assert.ok(!script.includes(':"'), 'every placeholder filled in');
  await assert.rejects(roleScript('app', { relayRole: 'x"; DROP TABLE outbox; --' }), /relayRole/);
  assert.match(await roleScript(), /TO "outbox_relay";/);
});

test("integration: the console's viewer role reads everything the console shows and changes nothing (a clear error, not retriable); the operator role replays, discards and unparks", async () => {
  const s = `"${db.schema}"`;
  const topic = uniqueName('lp_console');
  await db.pool.query(
    `INSERT INTO ${s}.outbox_dead_letters (id, message_id, topic, key, payload, created_at, attempts, reason, error_name, policy)
     SELECT 800000 + g, gen_random_uuid(), $1, 'k' || g, jsonb_build_object('g', g), now(), 1, 'too big', 'MESSAGE_TOO_LARGE', 'park'
       FROM generate_series(1, 3) AS g`,
    [topic],
  );
  await db.pool.query(`INSERT INTO ${s}.outbox_parked_keys (topic, key, dead_letter_id) SELECT $1, 'k' || g, 800000 + g FROM generate_series(1, 3) AS g`, [topic]);

  const viewer = new pg.Pool({ connectionString: urlFor(viewerLogin), max: 8 });
  const operator = new pg.Pool({ connectionString: urlFor(operatorLogin), max: 8 });
  cleanups.push(() => viewer.end(), () => operator.end());

  // Reads: the console's data layer, status and the CLI's list.
  const overview = await readOverview(viewer, { name: 'lp', schema: db.schema });
  assert.ok(overview.deadLetters.total.count >= 3);
  assert.ok(overview.parkedKeys.count >= 3);
  const page = await searchDeadLetters(viewer, db.schema, { topic }, { afterId: null, limit: 10 });
  assert.deepEqual(page.deadLetters.map((d) => d.id), [800001, 800002, 800003]);
  assert.deepEqual(await countDeadLetters(viewer, db.schema, { topic, errorName: 'MESSAGE_TOO_LARGE' }, 100), { count: 3, capped: false });
  assert.deepEqual((await readDeadLetter(viewer, db.schema, 800001))?.payload, { g: 1 });
  assert.ok((await listParkedKeys(viewer, db.schema, { after: null, limit: 100 })).parkedKeys.some((p) => p.topic === topic));
  assert.ok(await getStatus({ pool: viewer, schema: db.schema }));
  assert.equal((await listDeadLetters({ pool: viewer, schema: db.schema, topic })).total, 3);
  assert.equal((await discardDeadLetters({ pool: viewer, schema: db.schema, topic })).dryRun, true, 'a dry run only reads');

  // Changes: refused up front, with the role named, nothing changed.
  const refused = (verb: string) => (e: unknown): boolean =>
    e instanceof DeadLetterPermissionError && e.retriable === false && e.message.includes(`role "${viewerLogin}" may not change dead letters (${verb})`) && /operator/.test(e.message);
  await assert.rejects(replayDeadLetters({ pool: viewer, schema: db.schema, ids: [800001], rate: 100 }), refused('replay'));
  await assert.rejects(discardDeadLetters({ pool: viewer, schema: db.schema, ids: [800001], yes: true }), refused('discard'));
  await assert.rejects(unparkKey({ pool: viewer, schema: db.schema, topic, key: 'k1' }), refused('unpark'));
  const { rows: still } = await db.pool.query<{ n: number }>(`SELECT (SELECT count(*) FROM ${s}.outbox_dead_letters WHERE topic = $1)::int + (SELECT count(*) FROM ${s}.outbox_parked_keys WHERE topic = $1)::int AS n`, [topic]);
  assert.equal(still[0]!.n, 6, 'nothing changed');
  assert.equal(await asRole(viewerLogin, `SELECT payload FROM ${s}.outbox`), '42501', "the viewer never sees a pending row's payload");
  assert.equal(await asRole(viewerLogin, `DELETE FROM ${s}.outbox_dead_letters`), '42501');
  assert.equal(await asRole(viewerLogin, `INSERT INTO ${s}.outbox (topic, key) VALUES ('t', 'k')`), '42501');
  assert.equal(await asRole(operatorLogin, `DROP TABLE ${s}.outbox_dead_letters`), '42501');
  assert.equal(await asRole(operatorLogin, `UPDATE ${s}.outbox SET payload = '{}'`), '42501');

  // The operator does each of them.
  const replayed = await replayDeadLetters({ pool: operator, schema: db.schema, ids: [800001], rate: 100 });
  assert.deepEqual([replayed.replayed, replayed.releasedKeys.length], [1, 1]);
  const discarded = await discardDeadLetters({ pool: operator, schema: db.schema, ids: [800002], yes: true });
  assert.deepEqual([discarded.discarded, discarded.releasedKeys.length], [1, 1]);
  const unparked = await unparkKey({ pool: operator, schema: db.schema, topic, key: 'k3' });
  assert.equal(unparked.deadLetterId, 800003);
  const { rows: after } = await db.pool.query(`SELECT id, policy FROM ${s}.outbox_dead_letters WHERE topic = $1`, [topic]);
  assert.deepEqual(after.map((r) => [Number(r.id), r.policy]), [[800003, 'skip']]);
  const { rows: back } = await db.pool.query(`SELECT id FROM ${s}.outbox WHERE id = 800001 AND sent_at IS NULL`);
  assert.equal(back.length, 1, 'the replayed row is pending in the outbox');
});
