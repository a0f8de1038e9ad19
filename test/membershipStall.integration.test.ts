import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { createRelay } from '../src/relay/relay.js';
import { Membership } from '../src/relay/membership.js';
import { lockWantedSql, renewSql } from '../src/relay/sql/leases.js';
import { createLogger, silentLogger } from '../src/shared/logger.js';
import { createTestSchema, type TestSchema } from './helpers/db.js';
import { testBrokers } from './helpers/kafka.js';
import { waitFor } from './helpers/wait.js';
import { TEST_PRODUCER } from './helpers/producer.js';

// A relay frozen (SIGSTOP, a paused VM) inside its lease round's transaction holds row
// locks on lease rows. Every other relay's round needs those rows: without a bound on that
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

async function validLeases(relayId: string): Promise<{ count: number; minLeftMs: number | null }> {
  const { rows } = await db.pool.query<{ count: number; min_left_ms: number | null }>(
    `SELECT count(*)::int AS count, min(extract(epoch FROM expires_at - now()) * 1000)::float8 AS min_left_ms
       FROM ${s}.outbox_shard_leases WHERE owner = $1 AND expires_at > now()`,
    [relayId],
  );
  return { count: rows[0]!.count, minLeftMs: rows[0]!.min_left_ms };
}

/** Whether `relayId` holds every shard on a lease renewed since half a TTL ago: renewed, not left to lapse. */
async function renewedForMostOfATtl(relayId: string): Promise<boolean> {
  const leases = await validLeases(relayId);
  return leases.count === 256 && leases.minLeftMs! > LEASE_TTL_MS / 2;
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

test('integration: a relay frozen inside its lease round, holding its own leases locked, does not stop another relay from taking its shards over', async () => {
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
  const connection = await freezingConnection(renewSql(s));
  try {
    // Its renewal locks its 256 lease rows; then the process freezes.
    void frozen.tick(connection.client);
    await connection.frozen;
    await waitFor('the live relay to take every shard over', () => relay.ownedShards.length === 256, { timeoutMs: 6 * LEASE_TTL_MS });
    await assertEndedByIdleTimeout(connection);
  } finally {
    await relay.stop();
    await connection.close();
  }
});

test("integration: a relay frozen inside its lease round, holding another relay's leases locked, does not stop that relay renewing them", async () => {
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

test('integration: a session that is not a relay holding the lease rows locked fails lease rounds with a lock timeout, logged, instead of hanging them; once it ends, the relay renews again', async () => {
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
    await operator.query(`SELECT shard FROM ${s}.outbox_shard_leases FOR UPDATE`);
    const failed = await waitFor(
      'a lease round failed with a lock timeout',
      () => warnings.find((w) => w.msg === 'shard lease renewal failed' && /lock timeout/.test(w.err ?? '')),
      { timeoutMs: 4 * LEASE_TTL_MS },
    );
    assert.ok(failed);
    await operator.query('ROLLBACK');
    // Renewed after the lock went: every lease valid for most of a TTL again.
    await waitFor('the leases renewed', () => renewedForMostOfATtl(relay.instanceId), { timeoutMs: 4 * LEASE_TTL_MS });
  } finally {
    await operator.end().catch(() => undefined);
    await relay.stop();
  }
});
