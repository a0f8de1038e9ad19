// Every operator command through a real PgBouncer 1.18 in transaction pooling, with a
// pool of two server connections so that the commands' transactions really share
// backends: migrate (the CLI, three at once), status (the CLI and getStatus), cleanup,
// purge-processed, dead-letters list/replay/discard, and the role script applied through
// it, whose login roles then work through it; debezium attach/detach; status's batches in
// flight.
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { migrate } from '../src/commands/migrate.js';
import { getStatus } from '../src/commands/status.js';
import { cleanupOutbox } from '../src/commands/cleanup.js';
import { purgeProcessedMessages } from '../src/commands/purgeProcessed.js';
import { listDeadLetters, replayDeadLetters, discardDeadLetters } from '../src/commands/deadLetters.js';
import { roleScript } from '../src/commands/roles.js';
import { attachDebeziumOutbox, detachDebeziumOutbox } from '../src/commands/debeziumOutbox.js';
import { DATABASE_URL, uniqueName } from './helpers/db.js';
import { startPgBouncer, type PgBouncer } from './helpers/pgbouncer.js';
import { spawnCli } from './helpers/processes.js';

const schema = uniqueName('pgb_cmd');
const relayRole = uniqueName('pgb_relay');
const consumerRole = uniqueName('pgb_consumer');
const relayLogin = uniqueName('pgb_relay_login');
const consumerLogin = uniqueName('pgb_consumer_login');
let bouncer: PgBouncer;
/** Direct to Postgres: the test's own checks and seeding, never through the pooler. */
let direct: pg.Pool;
/** Through PgBouncer: what a user's application would hold. */
let pooled: pg.Pool;

const T = (table: string): string => `"${schema}".${table}`;
const urlAs = (role: string): string => bouncer.url().replace('postgres://postgres@', `postgres://${role}@`);

before(async () => {
  bouncer = await startPgBouncer({ mode: 'transaction', poolSize: 2 });
  direct = new pg.Pool({ connectionString: DATABASE_URL, max: 4 });
  pooled = new pg.Pool({ connectionString: bouncer.url(), max: 6 });
  direct.on('error', () => undefined);
  pooled.on('error', () => undefined);
});

after(async () => {
  try {
    await pooled?.end();
  } finally {
    await bouncer?.stop();
  }
  const roles = [relayLogin, consumerLogin, relayRole, consumerRole].map((r) => `"${r}"`).join(', ');
  await direct.query(`DROP OWNED BY ${roles}`).catch(() => undefined);
  for (const r of [relayLogin, consumerLogin, relayRole, consumerRole]) await direct.query(`DROP ROLE IF EXISTS "${r}"`);
  await direct.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await direct.end();
});

test('integration (PgBouncer, transaction pooling): three `outbox-relay migrate` at once apply each migration once; `status` works', async () => {
  const env = { DATABASE_URL: bouncer.url(), OUTBOX_SCHEMA: schema };
  const runs = [spawnCli(['migrate'], env), spawnCli(['migrate'], env), spawnCli(['migrate'], env)];
  for (const run of runs) assert.equal(await run.exited, 0, run.output());
  const { rows } = await direct.query<{ id: number; n: number }>(`SELECT id, count(*)::int AS n FROM ${T('outbox_migrations')} GROUP BY id ORDER BY id`);
  assert.ok(rows.length >= 8, `every migration recorded (${rows.length})`);
  assert.ok(rows.every((r) => r.n === 1), 'each once');

  // Once more through the exported function: nothing left to apply.
  const again = await migrate({ databaseUrl: bouncer.url(), schema });
  assert.deepEqual(again.applied, []);
  assert.equal(again.alreadyApplied.length, rows.length);

  await direct.query(`INSERT INTO ${T('outbox')} (topic, key, payload, created_at) VALUES ('orders', 'a', '{}', now() - interval '30 seconds'), ('orders', 'b', '{}', now())`);
  const status = spawnCli(['status', '--json'], env);
  assert.equal(await status.exited, 0, status.output());
  const parsed = JSON.parse(status.output()) as { pending: number; oldestPendingSeconds: number; unownedShards: string };
  assert.equal(parsed.pending, 2);
  assert.ok(parsed.oldestPendingSeconds >= 29, `oldest ${parsed.oldestPendingSeconds}`);
  assert.equal(parsed.unownedShards, '0-255');
  const table = spawnCli(['status'], env);
  assert.equal(await table.exited, 0, table.output());
  assert.match(table.output(), /2 pending/);

  // The exported function on a pool through PgBouncer, eight at once on two server connections.
  const statuses = await Promise.all(Array.from({ length: 8 }, () => getStatus({ pool: pooled, schema })));
  assert.ok(statuses.every((s) => s.pending === 2 && s.inFlightBatches === 0));
  await direct.query(`TRUNCATE ${T('outbox')}`);
});

test('integration (PgBouncer, transaction pooling): cleanup (the CLI and cleanupOutbox) deletes old sent rows only; purge-processed deletes old rows only', async () => {
  await direct.query(`TRUNCATE ${T('outbox')}, ${T('processed_messages')}`);
  await direct.query(
    `INSERT INTO ${T('outbox')} (topic, key, payload, created_at, sent_at)
     SELECT 'orders', 'k' || (g % 7), '{}', now() - interval '10 days',
            CASE WHEN g % 3 = 0 THEN NULL WHEN g % 3 = 1 THEN now() - interval '9 days' ELSE now() - interval '3 hours' END
       FROM generate_series(1, 900) AS g`,
  );
  // Small batches: many short transactions, each on whichever server connection is free.
  const cli = spawnCli(['cleanup', '--retention', '7d', '--batch-size', '50'], { DATABASE_URL: bouncer.url(), OUTBOX_SCHEMA: schema });
  assert.equal(await cli.exited, 0, cli.output());
  const count = async (): Promise<unknown> =>
    (
      await direct.query<{ pending: number; recent: number; old: number }>(
        `SELECT count(*) FILTER (WHERE sent_at IS NULL)::int AS pending,
                count(*) FILTER (WHERE sent_at > now() - interval '1 day')::int AS recent,
                count(*) FILTER (WHERE sent_at < now() - interval '7 days')::int AS old
           FROM ${T('outbox')}`,
      )
    ).rows[0];
  assert.deepEqual(await count(), { pending: 300, recent: 300, old: 0 });
  const rest = await cleanupOutbox({ databaseUrl: bouncer.url(), schema, retention: '2h', batchSize: 40 });
  assert.equal(rest.deleted, 300);
  assert.ok(rest.batches >= 8, `${rest.batches} batches`);
  assert.deepEqual(await count(), { pending: 300, recent: 0, old: 0 }, 'pending rows are never touched');

  await direct.query(
    `INSERT INTO ${T('processed_messages')} (consumer_group, key, processed_at)
     SELECT CASE WHEN g % 2 = 0 THEN 'billing' ELSE 'shipping' END, 'm' || g, now() - (CASE WHEN g % 4 < 2 THEN interval '20 days' ELSE interval '1 day' END)
       FROM generate_series(1, 400) AS g`,
  );
  const billing = await purgeProcessedMessages({ databaseUrl: bouncer.url(), schema, retention: '14d', batchSize: 30, consumerGroup: 'billing' });
  assert.equal(billing.deleted, 100);
  const everyone = await purgeProcessedMessages({ pool: pooled, schema, retention: '14d', batchSize: 30 });
  assert.equal(everyone.deleted, 100);
  const kept = await direct.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${T('processed_messages')} WHERE processed_at > now() - interval '14 days'`);
  assert.equal(kept.rows[0]!.n, 200);
  const total = await direct.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${T('processed_messages')}`);
  assert.equal(total.rows[0]!.n, 200);
});

async function deadLetter(key: string, policy: 'park' | 'skip'): Promise<number> {
  const { rows } = await direct.query<{ id: number }>(
    `INSERT INTO ${T('outbox_dead_letters')} (id, message_id, topic, key, payload, created_at, attempts, reason, error_name, policy, dead_lettered_at)
     VALUES (nextval('${schema}.outbox_id_seq'), gen_random_uuid(), 'orders', $1, '{}', now(), 3, 'too large', 'MESSAGE_TOO_LARGE', $2, now())
     RETURNING id`,
    [key, policy],
  );
  const id = Number(rows[0]!.id);
  if (policy === 'park') await direct.query(`INSERT INTO ${T('outbox_parked_keys')} (topic, key, dead_letter_id) VALUES ('orders', $1, $2)`, [key, id]);
  return id;
}

test('integration (PgBouncer, transaction pooling): dead-letters list, replay (the CLI and the function) and discard', async () => {
  await direct.query(`TRUNCATE ${T('outbox')}, ${T('outbox_dead_letters')}, ${T('outbox_parked_keys')}`);
  const ids: Record<string, number> = {};
  for (const key of ['p1', 'p2', 'p3']) ids[key] = await deadLetter(key, 'park');
  for (const key of ['s1', 's2']) ids[key] = await deadLetter(key, 'skip');

  const listed = await listDeadLetters({ databaseUrl: bouncer.url(), schema });
  assert.equal(listed.total, 5);
  assert.deepEqual(listed.deadLetters.map((d) => d.key).sort(), ['p1', 'p2', 'p3', 's1', 's2']);

  const cli = spawnCli(['dead-letters', 'replay', String(ids.p1)], { DATABASE_URL: bouncer.url(), OUTBOX_SCHEMA: schema });
  assert.equal(await cli.exited, 0, cli.output());
  const replayed = await replayDeadLetters({ databaseUrl: bouncer.url(), schema, policy: 'park', rate: 1_000 });
  assert.deepEqual(replayed.replayedIds, [ids.p2, ids.p3]);
  assert.deepEqual(replayed.releasedKeys.map((k) => k.key).sort(), ['p2', 'p3']);

  const outbox = await direct.query<{ id: number; key: string }>(`SELECT id, key FROM ${T('outbox')} ORDER BY id`);
  assert.deepEqual(outbox.rows.map((r) => [Number(r.id), r.key]), [[ids.p1, 'p1'], [ids.p2, 'p2'], [ids.p3, 'p3']], 'back under their original ids');
  const parked = await direct.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${T('outbox_parked_keys')}`);
  assert.equal(parked.rows[0]!.n, 0, 'every replayed key released');

  const dry = await discardDeadLetters({ databaseUrl: bouncer.url(), schema, policy: 'skip' });
  assert.equal(dry.dryRun, true);
  assert.equal(dry.matched.length, 2);
  const discarded = await discardDeadLetters({ pool: pooled, schema, policy: 'skip', yes: true });
  assert.equal(discarded.discarded, 2);
  assert.equal((await listDeadLetters({ databaseUrl: bouncer.url(), schema })).total, 0);
});

test('integration (PgBouncer, transaction pooling): the role script applies through it (twice), and its login roles work through it', async () => {
  await direct.query(`TRUNCATE ${T('outbox')}, ${T('processed_messages')}`);
  const script = await roleScript(schema, { relayRole, consumerRole });
  await pooled.query(script);
  await pooled.query(script);
  await pooled.query(`CREATE ROLE "${relayLogin}" LOGIN IN ROLE "${relayRole}"`);
  await pooled.query(`CREATE ROLE "${consumerLogin}" LOGIN IN ROLE "${consumerRole}"`);

  await direct.query(`INSERT INTO ${T('outbox')} (topic, key, payload, created_at, sent_at) SELECT 'orders', 'k', '{}', now() - interval '9 days', now() - interval '8 days' FROM generate_series(1, 25)`);
  await direct.query(`INSERT INTO ${T('processed_messages')} (consumer_group, key, processed_at) SELECT 'g', 'm' || g, now() - interval '30 days' FROM generate_series(1, 15) AS g`);
  // The relay's role may clean up the outbox, the consumer's may purge its table, each
  // logged in through PgBouncer (auth_user looks the role up in Postgres).
  assert.equal((await cleanupOutbox({ databaseUrl: urlAs(relayLogin), schema, retention: '7d' })).deleted, 25);
  assert.equal((await purgeProcessedMessages({ databaseUrl: urlAs(consumerLogin), schema, retention: '14d' })).deleted, 15);
  // And not more than the script grants.
  const consumer = new pg.Client({ connectionString: urlAs(consumerLogin) });
  consumer.on('error', () => undefined);
  await consumer.connect();
  try {
    assert.equal((await consumer.query<{ user: string }>('SELECT current_user AS user')).rows[0]!.user, consumerLogin);
    await assert.rejects(consumer.query(`DELETE FROM ${T('outbox')}`), /permission denied/);
  } finally {
    await consumer.end();
  }
});

test('integration (PgBouncer, transaction pooling): status counts a relay\'s batch in flight by its batch marker, not an application transaction that inherited the relay\'s application_name', async () => {
  await direct.query(`TRUNCATE ${T('outbox')}, ${T('outbox_relays')}`);
  const relayId = 'a1b2c3d4e5f6';
  const applicationName = `outbox-relay:${relayId}`;
  await direct.query(`INSERT INTO ${T('outbox_relays')} (relay_id, application_name, lease_ttl_ms) VALUES ($1, $2, 60000)`, [relayId, applicationName]);
  await direct.query(`INSERT INTO ${T('outbox')} (topic, key) VALUES ('orders', 'inflight')`);
  // One server connection: whatever the relay's client sets stays on it for the next client.
  const single = await startPgBouncer({ mode: 'transaction', poolSize: 1 });
  const relay = new pg.Client({ connectionString: single.url(), application_name: applicationName });
  const app = new pg.Client({ connectionString: single.url() });
  for (const c of [relay, app]) c.on('error', () => undefined);
  try {
    await relay.connect();
    await app.connect();
    await relay.query('SELECT 1');
    // The application's transaction, holding a transaction id, on the backend named like the relay.
    await app.query('BEGIN');
    await app.query(`INSERT INTO ${T('outbox')} (topic, key) VALUES ('orders', 'app')`);
    const name = await direct.query<{ n: number }>('SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND backend_xid IS NOT NULL', [applicationName]);
    assert.equal(name.rows[0]!.n, 1, 'the application transaction carries the relay\'s name');
    assert.equal((await getStatus({ pool: pooled, schema })).inFlightBatches, 0, 'not a batch of the relay');
    await app.query('COMMIT');

    // A batch of that relay: its statements start with the relay's batch marker.
    await relay.query(`/* outbox-relay batch ${relayId} */ BEGIN; SELECT id FROM ${T('outbox')} WHERE key = 'inflight' FOR UPDATE SKIP LOCKED`);
    const during = await getStatus({ pool: pooled, schema });
    assert.equal(during.inFlightBatches, 1);
    assert.equal(during.relays.find((r) => r.relayId === relayId)?.inFlightBatches, 1);
    await relay.query('COMMIT');
  } finally {
    await relay.end().catch(() => undefined);
    await app.end().catch(() => undefined);
    await single.stop();
    await direct.query(`TRUNCATE ${T('outbox')}, ${T('outbox_relays')}`);
  }
});

test('integration (PgBouncer, transaction pooling): debezium attach and detach through it; inserts into the attached table reach the outbox', async () => {
  await direct.query(`TRUNCATE ${T('outbox')}`);
  await direct.query(`CREATE TABLE ${T('outboxevent')} (id uuid PRIMARY KEY, aggregatetype text NOT NULL, aggregateid text NOT NULL, type text, payload jsonb)`);
  const base = { databaseUrl: bouncer.url(), schema, table: `${schema}.outboxevent`, topicPattern: '${routedByValue}' };
  const attached = await attachDebeziumOutbox(base);
  assert.equal(attached.replaced, false);
  assert.equal((await attachDebeziumOutbox(base)).replaced, true, 'attaching again replaces its settings');
  await pooled.query(
    `INSERT INTO ${T('outboxevent')} (id, aggregatetype, aggregateid, type, payload) SELECT gen_random_uuid(), 'orders', 'order-' || g, 'OrderPlaced', '{}' FROM generate_series(1, 20) AS g`,
  );
  const rows = await direct.query<{ topic: string; n: number }>(`SELECT topic, count(*)::int AS n FROM ${T('outbox')} GROUP BY topic`);
  assert.deepEqual(rows.rows, [{ topic: 'orders', n: 20 }]);
  assert.equal((await detachDebeziumOutbox(base)).detached, true);
  assert.equal((await detachDebeziumOutbox(base)).detached, false);
  await pooled.query(`INSERT INTO ${T('outboxevent')} (id, aggregatetype, aggregateid) VALUES (gen_random_uuid(), 'orders', 'after')`);
  assert.equal((await direct.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${T('outbox')}`)).rows[0]!.n, 20, 'detached: no more rows');
});
