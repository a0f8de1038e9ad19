/**
 * The relay's readiness, for /readyz: the database answers `SELECT 1`, the relay can claim
 * and mark there (privileges, a read-write database, the tables as migrated), a Kafka
 * metadata request succeeds with the relay's own client (answers cached a few seconds),
 * the relay runs (owning shards or waiting for them), and it publishes when rows are
 * pending (`publishing`: not when rows have waited long and nothing went out). A failed check reports an error
 * label (./errorLabel.ts) or what it could not do, never a message or a connection string.
 */
import type pg from 'pg';
import type { Admin, Kafka } from 'kafkajs';
import { createKafka } from '../shared/kafka.js';
import { createPool } from '../shared/database.js';
import { quoteIdentifier } from '../shared/identifiers.js';
import { schemaDrift } from '../shared/schema.js';
import { silentLogger, type Logger } from '../shared/logger.js';
import { errorLabel } from './errorLabel.js';
import { withDeadline } from './promises.js';
import type { RelayInstrumentation } from './relayMetrics.js';
import type { RelayStatusSource } from './relayStatusSource.js';
import { outboxLastIdSql } from '../shared/outboxSequence.js';

/** One check of /readyz. */
export interface ReadinessCheck {
  ok: boolean;
  detail: string;
}

/** The answer of /readyz: ready when every check is ok. */
export interface Readiness {
  ready: boolean;
  checks: Record<string, ReadinessCheck>;
}

/** Options of {@link relayReadiness}. */
export interface RelayReadinessOptions {
  /** Kafka client to probe with (default: relay.options.kafka, else one from its brokers and TLS/SASL settings). */
  kafka?: Kafka;
  /** Per check, in ms (default 2000). */
  timeoutMs?: number;
  /** Reuse a Kafka probe's answer this long, in ms (default 5000). */
  kafkaCacheMs?: number;
  /**
   * The `publishing` check fails when rows have been pending this long and the relay
   * published nothing for as long, in ms (default: horizonMaxWaitMs + 30000, 90 s at the
   * defaults: rows may legitimately wait horizonMaxWaitMs behind a long transaction).
   */
  notPublishingAfterMs?: number;
  logger?: Logger;
}

/** The relay's /readyz: database reachable, can claim and mark, schema as migrated, Kafka reachable, running (owning shards or waiting for them). */
export interface RelayReadiness {
  check(): Promise<Readiness>;
  close(): Promise<void>;
}

/**
 * The relay's readiness checks: database, Kafka, shards. `close()` disconnects the Kafka
 * probe's admin client.
 */
export function relayReadiness(
  relay: RelayStatusSource,
  instrumentation: Pick<RelayInstrumentation, 'pingDatabase' | 'stopped' | 'lastSample' | 'lastPublishAtMs'> &
    Partial<Pick<RelayInstrumentation, 'failingBatches'>>,
  options: RelayReadinessOptions = {},
): RelayReadiness {
  const timeoutMs = options.timeoutMs ?? 2_000;
  const cacheMs = options.kafkaCacheMs ?? 5_000;
  const logger = options.logger ?? silentLogger();
  const kafka =
    options.kafka ??
    relay.options.kafka ??
    createKafka({ brokers: relay.options.kafkaBrokers, clientId: `${relay.options.clientId}-readiness`, logger, ...relay.options.kafkaSecurity });
  let admin: Admin | undefined;
  let cached: { at: number; result: ReadinessCheck } | undefined;
  let pool: pg.Pool | undefined;
  let cachedClaim: { at: number; result: { claim: ReadinessCheck; schema: ReadinessCheck } } | undefined;
  const quoted = quoteIdentifier(relay.options.schema, 'schema');

  const probeClaim = async (): Promise<{ claim: ReadinessCheck; schema: ReadinessCheck }> => {
    if (cachedClaim && Date.now() - cachedClaim.at < cacheMs) return cachedClaim.result;
    let result: { claim: ReadinessCheck; schema: ReadinessCheck };
    try {
      pool ??= createPool(relay.options.databaseUrl, `${relay.options.clientId}:readiness`, 1, logger);
      const p = pool;
      result = await withDeadline(canClaimAndMark(p, relay.options.schema, quoted, timeoutMs), timeoutMs + 500, 'claim check');
    } catch (error) {
      const failed = { ok: false, detail: errorLabel(error) };
      result = { claim: failed, schema: failed };
    }
    cachedClaim = { at: Date.now(), result };
    return result;
  };

  const probeKafka = async (): Promise<ReadinessCheck> => {
    if (cached && Date.now() - cached.at < cacheMs) return cached.result;
    let result: ReadinessCheck;
    try {
      admin ??= kafka.admin({ retry: { retries: 0 } });
      const a = admin;
      const cluster = await withDeadline(
        (async () => {
          await a.connect();
          return a.describeCluster();
        })(),
        timeoutMs,
        'Kafka metadata request',
      );
      result = { ok: true, detail: `${cluster.brokers.length} broker(s)` };
    } catch (error) {
      // Not awaited: against a broker that accepts and never answers, kafkajs' disconnect
      // waits out its request timeout (30 s), and /readyz must answer within timeoutMs.
      void admin?.disconnect().catch(() => undefined);
      admin = undefined;
      result = { ok: false, detail: errorLabel(error) };
    }
    cached = { at: Date.now(), result };
    return result;
  };

  const notPublishingAfterMs = options.notPublishingAfterMs ?? (relay.options.horizonMaxWaitMs ?? 60_000) + 30_000;
  /** Rows pending for long and nothing published for as long: the relay is up but not doing its job. */
  const publishing = (): ReadinessCheck => {
    const sample = instrumentation.lastSample;
    if (!sample || sample.pending === 0) return { ok: true, detail: 'nothing pending' };
    const idleMs = Date.now() - instrumentation.lastPublishAtMs;
    const detail = `${sample.pending} rows pending, the oldest for ${Math.round(sample.oldestAgeSeconds)} s; last published ${Math.round(idleMs / 1000)} s ago`;
    // Rows of parked keys wait on purpose (outbox_relay_parked_keys has its own alert); a
    // relay that owns no shards publishes nothing by design.
    const stalled =
      idleMs > notPublishingAfterMs && sample.oldestAgeSeconds * 1000 > notPublishingAfterMs && sample.parkedKeys === 0 && relay.ownedShards.length > 0;
    return stalled ? { ok: false, detail: `not publishing although rows are pending: ${detail}` } : { ok: true, detail };
  };

  /**
   * Batches failing one after another: within seconds, where `publishing` waits for rows
   * to age. A statement Postgres refuses on every batch (prepared statements lost behind a
   * transaction pooler, a privilege revoked) otherwise looked like a relay that merely
   * retries.
   */
  const batches = (): ReadinessCheck => {
    const failing = instrumentation.failingBatches;
    if (!failing || failing.inARow < FAILING_BATCHES) return { ok: true, detail: failing ? `${failing.inARow} failed in a row` : 'none failing' };
    return { ok: false, detail: `${failing.inARow} batches in a row failed: ${errorLabel(failing.error)}${batchFailureHint(failing.error)}` };
  };

  const probeDatabase = async (): Promise<ReadinessCheck> => {
    try {
      await instrumentation.pingDatabase(timeoutMs);
      return { ok: true, detail: 'reachable' };
    } catch (error) {
      return { ok: false, detail: errorLabel(error) };
    }
  };

  return {
    async check() {
      const [database, kafkaCheck, { claim, schema }] = await Promise.all([probeDatabase(), probeKafka(), probeClaim()]);
      const count = relay.ownedShards.length;
      const shards: ReadinessCheck = instrumentation.stopped
        ? { ok: false, detail: 'relay stopped' }
        : { ok: true, detail: count > 0 ? `owns ${count} shard(s)` : 'waiting for shards' };
      const checks = { database, claim, schema, kafka: kafkaCheck, shards, publishing: publishing(), batches: batches() };
      return { ready: Object.values(checks).every((c) => c.ok), checks };
    },
    async close() {
      await admin?.disconnect().catch(() => undefined);
      admin = undefined;
      await pool?.end().catch(() => undefined);
      pool = undefined;
    },
  };
}
/** Batches failed in a row (by one worker) that make the relay not ready. */
const FAILING_BATCHES = 5;

/** What to change, for the failures whose fix is known. */
function batchFailureHint(error: Error): string {
  const code = (error as { code?: unknown }).code;
  if (code === '26000' || code === '42P05') {
    return ' (prepared statements vanished between transactions: the connections go through a transaction-pooling proxy; start the relay with --pooler transaction)';
  }
  if (code === '42501') return ' (permission denied: grant the relay role what sql/roles.sql grants)';
  if (code === '25006') return ' (the database is read-only)';
  return '';
}

/**
 * Whether the relay can claim and mark here, not just connect: the statements of a batch
 * (claim lock, mark sent, delete, dead letter, park, heartbeat, taking leases, sequence read), each
 * on no rows, in one transaction that is rolled back. They fail as the relay's would on a
 * read-only database (default_transaction_read_only, a standby: SQLSTATE 25006), for a
 * role without the privileges (42501), or on tables altered after migrate.
 */
function canClaimAndMarkStatements(q: string): Array<[what: string, sql: string]> {
  return [
    ['lock outbox rows for a claim', `SELECT 1 FROM ${q}.outbox WHERE false FOR UPDATE`],
    ['mark outbox rows sent', `UPDATE ${q}.outbox SET sent_at = now(), attempts = attempts + 1, last_error = NULL WHERE false`],
    ['delete outbox rows', `DELETE FROM ${q}.outbox WHERE false`],
    ['insert dead letters', `INSERT INTO ${q}.outbox_dead_letters SELECT * FROM ${q}.outbox_dead_letters WHERE false`],
    ['park keys', `INSERT INTO ${q}.outbox_parked_keys SELECT * FROM ${q}.outbox_parked_keys WHERE false`],
    ['heartbeat', `UPDATE ${q}.outbox_relays SET heartbeat_at = now() WHERE false`],
    ['take shard leases', `UPDATE ${q}.outbox_shard_leases SET owner = owner, epoch = epoch + 1, expires_at = NULL WHERE false`],
    ['read the outbox sequence', `SELECT ${outboxLastIdSql(q)}`],
  ];
}

/** What a failed statement says about the database, without its message. */
function whyNot(error: unknown): string {
  const code = (error as { code?: unknown }).code;
  if (code === '25006') return 'the database is read-only (transaction_read_only is on: default_transaction_read_only, or a standby)';
  if (code === '42501') return 'permission denied (42501): grant the relay role what sql/roles.sql grants';
  if (code === '42P01' || code === '42703') return `a table or column is missing (${code}): run \`outbox-relay migrate\``;
  return errorLabel(error);
}

async function canClaimAndMark(pool: pg.Pool, schema: string, quoted: string, timeoutMs: number): Promise<{ claim: ReadinessCheck; schema: ReadinessCheck }> {
  const client = await pool.connect();
  let broken: Error | undefined;
  try {
    const drift = await schemaDrift(client, schema);
    const schemaCheck: ReadinessCheck = drift.length === 0 ? { ok: true, detail: 'as migrated' } : { ok: false, detail: `changed after migrate: ${drift[0]}` };
    let claim: ReadinessCheck = { ok: true, detail: 'can claim and mark' };
    await client.query('BEGIN');
    try {
      await client.query(`SET LOCAL statement_timeout = ${Math.max(1, Math.floor(timeoutMs))}`);
      for (const [what, sql] of canClaimAndMarkStatements(quoted)) {
        try {
          await client.query(sql);
        } catch (error) {
          claim = { ok: false, detail: `cannot ${what}: ${whyNot(error)}` };
          break;
        }
      }
    } finally {
      await client.query('ROLLBACK').catch((error: Error) => {
        broken = error;
      });
    }
    return { claim, schema: schemaCheck };
  } catch (error) {
    broken = error as Error;
    throw error;
  } finally {
    client.release(broken);
  }
}
