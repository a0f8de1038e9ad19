import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { createRelay } from '../src/relay/relay.js';
import { Membership } from '../src/relay/membership.js';
import { heartbeatSql, liveLeasesSql, lockWantedSql } from '../src/relay/sql/leases.js';
import { createLogger, silentLogger } from '../src/shared/logger.js';
import { createTestSchema, type TestSchema } from './helpers/db.js';
import { testBrokers } from './helpers/kafka.js';
import { waitFor } from './helpers/wait.js';
import { TEST_PRODUCER } from './helpers/producer.js';

// A relay frozen (SIGSTOP, a paused VM) inside its lease round's transaction holds row
// locks on lease rows or on its membership row. Every other relay's round needs those rows: without a bound on that
// transaction, the live relay's round waited on them for as long as the frozen one stayed
// frozen, so it never renewed its own leases nor took the frozen relay's shards over (seen
// in CI: scaleOut's SIGSTOP test, both relays' heartbeats 28-30 s old, every shard
// unowned). Here the frozen relay is a real Membership on a real connection that stops
// sending after one of its statements: to Postgres, exactly a frozen process.

const LEASE_TTL_MS = 2_000;

let db: TestSchema;
let s: string;
before(async () => {
  db = await createTestSchema('mstall');
  s = `"${db.schema}"`;
});
after(async () => {
  await db.drop();
});

interface FrozenConnection {
  client: pg.ClientBase;
  /** Resolves once the statement the relay freezes after has run. */
  frozen: Promise<void>;
  /** Resolves with the error Postgres ended the connection with. */
  ended: Promise<Error>;
  close(): Promise<void>;
}

/** A connection that answers until `freezeAfter` has run, then never sends again. */
async function freezingConnection(freezeAfter: string): Promise<FrozenConnection> {
  const real = new pg.Client({ connectionString: db.databaseUrl });
  let endedWith: (e: Error) => void = () => undefined;
  const ended = new Promise<Error>((resolve) => (endedWith = resolve));
  real.on('error', endedWith);
  await real.connect();
  let isFrozen = false;
  let markFrozen: () => void = () => undefined;
  const frozen = new Promise<void>((resolve) => (markFrozen = resolve));
  const client = {
    async query(text: string, values?: unknown[]) {
      if (isFrozen) return new Promise(() => undefined);
      const result = await real.query(text, values);
      if (text === freezeAfter) {
        isFrozen = true;
        markFrozen();
      }
      return result;
    },
  } as unknown as pg.ClientBase;
  return { client, frozen, ended, close: () => real.end().catch(() => undefined) };
}

function frozenRelay(): Membership {
  return new Membership(s, `frozen${Date.now().toString(36)}`, 'outbox-relay:frozen', LEASE_TTL_MS, silentLogger());
}

/**
 * Whether `relayId` holds every shard on a live lease (src/relay/sql/leases.ts: it owns
 * them and its heartbeat is within its TTL), with a heartbeat from less than half a TTL
 * ago: renewed, not left to lapse.
 */
async function renewedForMostOfATtl(relayId: string): Promise<boolean> {
  const { rows } = await db.pool.query<{ live: number; age_ms: number | null }>(
    `SELECT (SELECT count(*) FROM (${liveLeasesSql(s, '$1')}) AS live)::int AS live,
            (SELECT extract(epoch FROM now() - heartbeat_at) * 1000 FROM ${s}.outbox_relays WHERE relay_id = $1)::float8 AS age_ms`,
    [relayId],
  );
  return rows[0]!.live === 256 && rows[0]!.age_ms! < LEASE_TTL_MS / 2;
}

async function assertEndedByIdleTimeout(connection: FrozenConnection): Promise<void> {
  const error = (await connection.ended) as Error & { code?: string };
  assert.equal(error.code, '25P03', `the frozen transaction ended by its idle timeout: ${error.message}`);
}

async function isLive(relayId: string): Promise<boolean> {
  const { rows } = await db.pool.query(
    `SELECT 1 FROM ${s}.outbox_relays WHERE relay_id = $1 AND heartbeat_at > now() - make_interval(secs => lease_ttl_ms / 1000.0)`,
    [relayId],
  );
  return rows.length > 0;
}

async function clearLeases(): Promise<void> {
  await db.pool.query(`UPDATE ${s}.outbox_shard_leases SET owner = NULL, expires_at = NULL`);
  await db.pool.query(`DELETE FROM ${s}.outbox_relays`);
}

function liveRelay() {
  return createRelay({ producer: TEST_PRODUCER, databaseUrl: db.databaseUrl, kafkaBrokers: testBrokers(), schema: db.schema, leaseTtlMs: LEASE_TTL_MS });
}

test('integration: a relay frozen inside its heartbeat, holding its own membership row locked, does not stop another relay from taking its shards over', async () => {
  await clearLeases();
  const frozen = frozenRelay();
  const first = await db.pool.connect();
  try {
    await frozen.tick(first);
  } finally {
    first.release();
  }
  assert.equal(frozen.owned.size, 256);

  const relay = liveRelay();
  await relay.start();
  const connection = await freezingConnection(heartbeatSql(s));
  try {
    // Its heartbeat's update locks its membership row, which a relay taking its shards
    // over locks too (the fence against its waking up); then the process freezes.
    void frozen.tick(connection.client);
    await connection.frozen;
    await waitFor('the live relay to take every shard over', () => relay.ownedShards.length === 256, { timeoutMs: 6 * LEASE_TTL_MS });
    await assertEndedByIdleTimeout(connection);
  } finally {
    await relay.stop();
    await connection.close();
  }
});

test("integration: a relay frozen inside its lease round, holding another relay's lease rows locked, does not stop that relay renewing its leases", async () => {
  await clearLeases();
  const relay = liveRelay();
  await relay.start();
  const connection = await freezingConnection(lockWantedSql(s));
  try {
    await waitFor('the live relay to own every shard', () => relay.ownedShards.length === 256);
    // It joins, locks the half it wants (all leased to the live relay), then freezes.
    const frozen = frozenRelay();
    void frozen.tick(connection.client);
    await connection.frozen;
    // Renewed after the frozen relay's heartbeat expired: its leases were never left to lapse.
    await waitFor(
      "the live relay's leases on every shard renewed after the frozen relay died",
      async () => {
        if (await isLive(frozen.relayId)) return false;
        return renewedForMostOfATtl(relay.instanceId);
      },
      { timeoutMs: 6 * LEASE_TTL_MS },
    );
    await assertEndedByIdleTimeout(connection);
  } finally {
    await relay.stop();
    await connection.close();
  }
});

test('integration: a session that is not a relay holding the lease rows locked does not stop a relay renewing its leases; holding the membership rows locked fails lease rounds with a lock timeout, logged, instead of hanging them, and once it ends the relay renews again', async () => {
  await clearLeases();
  const warnings: Array<{ msg: string; err?: string }> = [];
  const relay = createRelay({
    producer: TEST_PRODUCER,
    databaseUrl: db.databaseUrl,
    kafkaBrokers: testBrokers(),
    schema: db.schema,
    leaseTtlMs: LEASE_TTL_MS,
    logger: createLogger('warn', { write: (line: string) => void warnings.push(JSON.parse(line)) }),
  });
  await relay.start();
  const operator = new pg.Client({ connectionString: db.databaseUrl });
  operator.on('error', () => undefined);
  await operator.connect();
  try {
    await waitFor('the relay to own every shard', () => relay.ownedShards.length === 256);
    // An operator's open transaction: idle in it, but not a relay's, so nothing ends it.
    await operator.query('BEGIN');
    const lockedAt = (await operator.query<{ at: Date }>(`SELECT now() AS at FROM ${s}.outbox_shard_leases FOR UPDATE`)).rows[0]!.at;
    // The lease rows change only when a shard changes hands: the relay's rounds (its
    // heartbeat) go on, for longer than a TTL, with every lease live.
    await waitFor(
      'the relay to heartbeat for a TTL past the lock, every lease live',
      async () => {
        const { rows } = await db.pool.query<{ past: boolean }>(
          `SELECT heartbeat_at > $2::timestamptz + make_interval(secs => lease_ttl_ms / 1000.0) AS past FROM ${s}.outbox_relays WHERE relay_id = $1`,
          [relay.instanceId, lockedAt],
        );
        return rows[0]?.past === true && (await renewedForMostOfATtl(relay.instanceId));
      },
      { timeoutMs: 4 * LEASE_TTL_MS },
    );
    assert.deepEqual(warnings.filter((w) => w.msg === 'shard lease renewal failed'), [], 'no round failed while the lease rows were locked');
    assert.equal(relay.ownedShards.length, 256);
    await operator.query('ROLLBACK');

    await operator.query('BEGIN');
    await operator.query(`SELECT relay_id FROM ${s}.outbox_relays FOR UPDATE`);
    const failed = await waitFor(
      'a lease round failed with a lock timeout',
      () => warnings.find((w) => w.msg === 'shard lease renewal failed' && /lock timeout/.test(w.err ?? '')),
      { timeoutMs: 4 * LEASE_TTL_MS },
    );
    assert.ok(failed);
    await operator.query('ROLLBACK');
    // Renewed after the lock went: every lease live, on a fresh heartbeat.
    await waitFor('the leases renewed', () => renewedForMostOfATtl(relay.instanceId), { timeoutMs: 4 * LEASE_TTL_MS });
  } finally {
    await operator.end().catch(() => undefined);
    await relay.stop();
  }
});

test('integration: a shard whose expires_at is still to come (a relay of an earlier version renews it on the row) is not taken, even with its owner’s heartbeat lapsed; one whose expires_at passed is', async () => {
  await clearLeases();
  await db.pool.query(`INSERT INTO ${s}.outbox_relays (relay_id, application_name, lease_ttl_ms, heartbeat_at) VALUES ('earlier-version', 'x', 1000, now() - interval '1 minute')`);
  await db.pool.query(
    `UPDATE ${s}.outbox_shard_leases SET owner = 'earlier-version',
            expires_at = CASE WHEN shard < 128 THEN now() + interval '1 hour' ELSE now() - interval '1 second' END`,
  );
  const taker = new Membership(s, 'taker', 'outbox-relay:taker', LEASE_TTL_MS, silentLogger());
  const c = await db.pool.connect();
  try {
    const change = await taker.tick(c);
    assert.deepEqual([...taker.owned].sort((a, b) => a - b), Array.from({ length: 128 }, (_, i) => 128 + i), 'only the shards whose expires_at passed');
    assert.equal(change.takenOver.length, 128);
    assert.ok(change.takenOver.every((t) => t.from === 'earlier-version'));
  } finally {
    c.release();
  }
});
