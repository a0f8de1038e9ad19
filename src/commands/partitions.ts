import pg from 'pg';
import { DEFAULT_SCHEMA, quoteIdentifier } from '../shared/identifiers.js';
import { connectionError, createPool, type DatabaseOptions } from '../shared/database.js';
import { OutboxError } from '../shared/errors.js';
import { optionValue } from '../shared/settings.js';
import { parseDuration } from '../shared/durations.js';
import { silentLogger, type Logger } from '../shared/logger.js';
import { createPartition, isPartitioned, listPartitions, maintain, partitionName, sequenceLastId, type PartitionMaintenance } from '../relay/partitions.js';
import { partitionRetention, partitionSizeIds, partitionsAhead } from '../relay/partitionSettings.js';
import { openDatabase } from './openDatabase.js';

// `outbox-relay partition-outbox` and `outbox-relay maintain-partitions` (docs/partitioning.md).

/** Options of {@link partitionOutbox}. */
export interface PartitionOutboxOptions extends DatabaseOptions {
  /** Ids per partition (default 1,000,000). */
  partitionSizeIds?: number;
  /** Give up when the outbox could not be locked for the swap within this long (default 5 minutes). */
  maxWaitMs?: number;
  logger?: Logger;
}

/** What {@link partitionOutbox} did. */
export interface PartitionOutboxResult {
  /** False when the outbox was partitioned already (nothing done). */
  converted: boolean;
  /** The partition the existing rows are in now (ids below `firstBoundId`). */
  firstPartition: string;
  /** The first id of the first new partition. */
  firstBoundId: number;
  /** Ids per partition. */
  partitionSizeIds: number;
  /** How many times a step gave up on its lock (writers or relays held the table) and tried again. */
  lockRetries: number;
}

/** Each try at the swap's lock waits this long at most, so writers never queue behind it for longer. */
const SWAP_LOCK_TIMEOUT_MS = 200;
const BOUND_CHECK = 'outbox_partition_bound';
/** How long the writers' rate is sampled before B is chosen. */
const RATE_SAMPLE_MS = 1_000;
/** Time allowed for the validation scan and the index build, beyond the lock waits. */
const SCAN_ALLOWANCE_MS = 600_000;

/**
 * `outbox-relay partition-outbox`: turn the plain outbox table of a schema into one
 * range-partitioned by id, with writers and relays running: no row is moved or lost, and
 * no lock writers wait on is held for longer than {@link SWAP_LOCK_TIMEOUT_MS} plus the
 * swap itself (catalog changes only).
 *
 * 1. `CHECK (id < B) NOT VALID`, then VALIDATE (SHARE UPDATE EXCLUSIVE: writers go on),
 *    B far enough above the sequence that writers cannot reach it before the swap
 *    ({@link boundFor}): an insert at or above B would fail. Given up, the check is removed.
 * 2. A non-unique twin of the dedup index, built CONCURRENTLY (see below).
 * 3. One short transaction, under a lock timeout and tried again until it gets its lock:
 *    rename the table to `outbox_p0`, create the partitioned `outbox` like it (columns,
 *    defaults with the same sequence, the generated shard, checks, indexes, grants,
 *    owner), attach `outbox_p0` for the ids below B (the validated check spares the scan,
 *    its indexes are adopted, not rebuilt) and a first partition from B.
 *
 * Producer-side dedup (`dedup_key`) is unique only within a partition's rows on a
 * partitioned table: Postgres requires the partition key in every unique index, so the
 * outbox's dedup index becomes a plain one and `INSERT ... ON CONFLICT (dedup_key)` fails.
 *
 * Idempotent: on a partitioned outbox it does nothing and says so. On an empty,
 * freshly migrated outbox every step is instant.
 */
export async function partitionOutbox(options: PartitionOutboxOptions = {}): Promise<PartitionOutboxResult> {
  const size = optionValue(partitionSizeIds, options.partitionSizeIds);
  const maxWaitMs = options.maxWaitMs ?? 300_000;
  const schema = options.schema ?? DEFAULT_SCHEMA;
  const q = quoteIdentifier(schema, 'schema');
  const logger = options.logger ?? silentLogger();
  const { db, close } = await openDatabase(options, 'outbox-relay:partition-outbox');
  const client = db instanceof pg.Pool ? await db.connect() : db;
  try {
    if (await isPartitioned(client, schema)) {
      const parts = await listPartitions(client, schema);
      const first = parts.find((p) => p.lower !== null);
      return {
        converted: false,
        firstPartition: parts[0]?.name ?? '',
        firstBoundId: first?.lower ?? 0,
        partitionSizeIds: first ? first.upper - first.lower! : size,
        lockRetries: 0,
      };
    }
    const deadline = Date.now() + maxWaitMs;
    let lockRetries = 0;
    let checked: number | undefined;
    try {
      for (;;) {
        const { last, idsPerSecond } = await sequenceRate(client, q);
        const bound = boundFor(last, idsPerSecond, size, maxWaitMs);
        lockRetries += await addBoundCheck(client, q, bound, deadline);
        checked = bound;
        await buildDedupTwin(client, q, deadline);
        const outcome = await swap(client, q, bound, size, deadline);
        lockRetries += outcome.retries;
        if (outcome.done) {
          checked = undefined;
          logger.info({ schema, firstBoundId: bound, partitionSizeIds: size, lockRetries }, 'outbox partitioned');
          return { converted: true, firstPartition: partitionName(null), firstBoundId: bound, partitionSizeIds: size, lockRetries };
        }
        // Writers came close to B while the swap waited for its lock: a new B, further up.
        logger.warn({ schema, bound }, 'outbox ids neared the partition bound before the swap got its lock: moving the bound up');
      }
    } catch (error) {
      if (checked === undefined) throw error;
      throw await removeBoundCheck(client, q, checked, maxWaitMs, error);
    }
  } finally {
    if (db instanceof pg.Pool) (client as pg.PoolClient).release();
    await close();
  }
}

function code(error: unknown): string | undefined {
  return (error as { code?: string }).code;
}

async function pause(ms: number): Promise<void> {
  await new Promise((resolve) => setTimeout(resolve, ms));
}

/** Run `fn` in a transaction under the swap's lock timeout, again and again while it times out. */
async function withLockRetries<T>(client: pg.ClientBase, deadline: number, fn: () => Promise<T>): Promise<{ value: T; retries: number }> {
  for (let retries = 0; ; retries++) {
    await client.query('BEGIN');
    try {
      await client.query(`SET LOCAL lock_timeout = '${SWAP_LOCK_TIMEOUT_MS}ms'`);
      const value = await fn();
      await client.query('COMMIT');
      return { value, retries };
    } catch (error) {
      await client.query('ROLLBACK').catch(() => undefined);
      if (code(error) !== '55P03' && code(error) !== '40P01') throw error;
      if (Date.now() > deadline) {
        throw new OutboxError(`partition-outbox could not lock the outbox for ${SWAP_LOCK_TIMEOUT_MS} ms in a row before its deadline: a long transaction holds it; try again`, {
          retriable: true,
          context: { retries },
          cause: error,
        });
      }
      // Jittered, so that the swap does not keep arriving just as a relay's batch does.
      await pause(50 + Math.random() * 250);
    }
  }
}

/**
 * The sequence's last value, and the ids writers take per second, sampled over a second.
 * The bound check must stay ahead of the writers for as long as the conversion may take,
 * since every insert at or above it fails until the swap.
 */
async function sequenceRate(client: pg.ClientBase, q: string): Promise<{ last: number; idsPerSecond: number }> {
  const first = await sequenceLastId(client, q);
  const started = performance.now();
  await pause(RATE_SAMPLE_MS);
  const last = await sequenceLastId(client, q);
  return { last, idsPerSecond: ((last - first) * 1_000) / (performance.now() - started) };
}

/**
 * B: the sequence's last value plus what writers take, at the sampled rate, in the longest
 * the conversion may run with its check in place (its lock waits and the check's removal
 * on giving up, each up to maxWaitMs, plus {@link SCAN_ALLOWANCE_MS} for the validation
 * and the index build), at least one partition's worth; rounded up to a partition size.
 * Rows up to B go into outbox_p0.
 */
export function boundFor(last: number, idsPerSecond: number, size: number, maxWaitMs: number): number {
  const headroom = Math.max(size, Math.ceil((idsPerSecond * (2 * maxWaitMs + SCAN_ALLOWANCE_MS)) / 1_000));
  return Math.ceil((last + headroom) / size) * size;
}

/** Step 1: the check that lets the attach skip its scan. Returns how often its lock was tried again. */
async function addBoundCheck(client: pg.ClientBase, q: string, bound: number, deadline: number): Promise<number> {
  const { retries } = await withLockRetries(client, deadline, () =>
    client.query(
      `ALTER TABLE ${q}.outbox DROP CONSTRAINT IF EXISTS ${BOUND_CHECK}, ADD CONSTRAINT ${BOUND_CHECK} CHECK (id < ${bound}) NOT VALID`,
    ),
  );
  // SHARE UPDATE EXCLUSIVE: reads the table while writers and relays go on.
  await client.query(`ALTER TABLE ${q}.outbox VALIDATE CONSTRAINT ${BOUND_CHECK}`);
  return retries;
}

/**
 * On giving up, the bound check must not stay behind: writers would fail once the
 * sequence reached it. Removing it needs the same lock, tried for up to maxWaitMs more.
 * Returns the error to throw.
 */
async function removeBoundCheck(client: pg.ClientBase, q: string, bound: number, maxWaitMs: number, cause: unknown): Promise<unknown> {
  try {
    await withLockRetries(client, Date.now() + maxWaitMs, () => client.query(`ALTER TABLE ${q}.outbox DROP CONSTRAINT IF EXISTS ${BOUND_CHECK}`));
    return cause;
  } catch (error) {
    const message = cause instanceof Error ? cause.message : String(cause);
    return new OutboxError(
      `${message}; its check ${BOUND_CHECK} (id < ${bound}) could not be removed either: every insert fails once the outbox sequence reaches ${bound}. Run partition-outbox again, or ALTER TABLE ${q}.outbox DROP CONSTRAINT ${BOUND_CHECK}, before then`,
      { retriable: true, context: { bound }, cause: error },
    );
  }
}

/**
 * Step 2: the partitioned outbox's dedup index cannot be unique (it would need the id),
 * and the attach adopts only an index that matches exactly: a plain one is built now,
 * concurrently, so the attach does not build it under the swap's lock.
 */
async function buildDedupTwin(client: pg.ClientBase, q: string, deadline: number): Promise<void> {
  const { rows } = await client.query<{ valid: boolean }>(
    `SELECT i.indisvalid AS valid FROM pg_catalog.pg_index AS i
      WHERE i.indexrelid = to_regclass($1)`,
    [`${q}.outbox_p0_dedup_idx`],
  );
  if (rows[0]?.valid) return;
  // A crash during an earlier build leaves an invalid index: start it over.
  // A concurrent build waits for every transaction older than it: bounded by the deadline
  // like the lock tries, since the bound check is in place meanwhile.
  const { rows: setting } = await client.query<{ t: string }>(`SELECT current_setting('lock_timeout') AS t`);
  await client.query(`SELECT set_config('lock_timeout', $1, false)`, [`${Math.max(1, deadline - Date.now())}ms`]);
  try {
    if (rows.length) await client.query(`DROP INDEX CONCURRENTLY ${q}.outbox_p0_dedup_idx`);
    await client.query(`CREATE INDEX CONCURRENTLY outbox_p0_dedup_idx ON ${q}.outbox (dedup_key) WHERE dedup_key IS NOT NULL`);
  } catch (error) {
    if (code(error) !== '55P03') throw error;
    throw new OutboxError('partition-outbox waited for transactions older than its index build until its deadline: a long transaction holds the outbox; try again', {
      retriable: true,
      cause: error,
    });
  } finally {
    await client.query(`SELECT set_config('lock_timeout', $1, false)`, [setting[0]!.t]);
  }
}

/** Step 3, the swap. `done: false` when writers neared B meanwhile (the caller picks a new one). */
async function swap(client: pg.ClientBase, q: string, bound: number, size: number, deadline: number): Promise<{ done: boolean; retries: number }> {
  const { value, retries } = await withLockRetries(client, deadline, async () => {
    await client.query(`LOCK TABLE ${q}.outbox IN ACCESS EXCLUSIVE MODE`);
    // Another partition-outbox may have swapped it while this one waited.
    const kind = await client.query<{ k: string }>(`SELECT relkind::text AS k FROM pg_catalog.pg_class WHERE oid = '${q}.outbox'::regclass`);
    if (kind.rows[0]!.k === 'p') return 'already' as const;
    // Under the lock no writer takes an id for the old table any more; what remains
    // below B after the swap goes into outbox_p0, through the new table.
    if (bound - (await sequenceLastId(client, q)) < size / 4) return false;
    const grants = await client.query<{ sql: string }>(grantsSql(q));
    const owner = await client.query<{ owner: string }>(`SELECT pg_get_userbyid(relowner) AS owner FROM pg_catalog.pg_class WHERE oid = '${q}.outbox'::regclass`);
    const p0 = `${q}.${partitionName(null)}`;
    const next = `${q}.${quoteIdentifier(partitionName(bound))}`;
    await client.query(`ALTER TABLE ${q}.outbox RENAME TO ${partitionName(null)}`);
    await client.query(`ALTER TABLE ${p0} RENAME CONSTRAINT outbox_pkey TO outbox_p0_pkey`);
    await client.query(`ALTER INDEX ${q}.outbox_unsent_idx RENAME TO outbox_p0_unsent_idx`);
    await client.query(`ALTER INDEX ${q}.outbox_dedup_key_idx RENAME TO outbox_p0_dedup_key_idx`);
    // LIKE copies the columns in order, NOT NULL, the defaults (the id's nextval names
    // the sequence by oid: the same outbox_id_seq), the generated shard and the checks.
    await client.query(
      `CREATE TABLE ${q}.outbox (LIKE ${p0} INCLUDING DEFAULTS INCLUDING GENERATED INCLUDING CONSTRAINTS INCLUDING COMMENTS) PARTITION BY RANGE (id)`,
    );
    await client.query(`ALTER TABLE ${q}.outbox DROP CONSTRAINT ${BOUND_CHECK}`);
    await client.query(`ALTER TABLE ${q}.outbox ADD CONSTRAINT outbox_pkey PRIMARY KEY (id)`);
    await client.query(`CREATE INDEX outbox_unsent_idx ON ${q}.outbox (id) WHERE sent_at IS NULL`);
    await client.query(`CREATE INDEX outbox_dedup_key_idx ON ${q}.outbox (dedup_key) WHERE dedup_key IS NOT NULL`);
    // Owned by the old table, the sequence would go with it when retention drops it.
    await client.query(`ALTER SEQUENCE ${q}.outbox_id_seq OWNED BY ${q}.outbox.id`);
    await client.query(`ALTER TABLE ${q}.outbox ATTACH PARTITION ${p0} FOR VALUES FROM (MINVALUE) TO (${bound})`);
    await client.query(`ALTER TABLE ${p0} DROP CONSTRAINT ${BOUND_CHECK}`);
    for (const g of grants.rows) await client.query(g.sql);
    if (owner.rows[0]!.owner !== (await client.query<{ u: string }>('SELECT current_user AS u')).rows[0]!.u) {
      await client.query(`ALTER TABLE ${q}.outbox OWNER TO ${quoteIdentifier(owner.rows[0]!.owner)}`);
    }
    await client.query(`COMMENT ON TABLE ${q}.outbox IS 'outbox-relay: range-partitioned by id, ${size} ids per partition (docs/partitioning.md)'`);
    await client.query(`CREATE TABLE ${next} (LIKE ${q}.outbox INCLUDING DEFAULTS INCLUDING GENERATED INCLUDING CONSTRAINTS)`);
    await client.query(`ALTER TABLE ${q}.outbox ATTACH PARTITION ${next} FOR VALUES FROM (${bound}) TO (${bound + size})`);
    return true;
  });
  if (value === 'already') return { done: true, retries };
  if (value) {
    // More partitions ahead, outside the swap (each its own short transaction).
    await createPartition(client, q, bound + size, bound + 2 * size);
  }
  return { done: value, retries };
}

/**
 * The old table's grants as GRANT statements for the new one: table privileges, then
 * column privileges (the relay role's UPDATE (sent_at, attempts, last_error)), the
 * owner's own left out. Read before the rename, run after it.
 */
function grantsSql(q: string): string {
  return `
SELECT format('GRANT %s ON TABLE ${q}.outbox TO %s', a.privilege_type,
              CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END) AS sql
  FROM pg_catalog.pg_class AS c, aclexplode(c.relacl) AS a
 WHERE c.oid = '${q}.outbox'::regclass AND a.grantee <> c.relowner
UNION ALL
SELECT format('GRANT %s (%I) ON TABLE ${q}.outbox TO %s', a.privilege_type, att.attname,
              CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END)
  FROM pg_catalog.pg_class AS c
  JOIN pg_catalog.pg_attribute AS att ON att.attrelid = c.oid AND att.attnum > 0 AND NOT att.attisdropped,
       aclexplode(att.attacl) AS a
 WHERE c.oid = '${q}.outbox'::regclass AND a.grantee <> c.relowner`;
}

/** Options of {@link maintainPartitions}. */
export interface MaintainPartitionsOptions extends DatabaseOptions {
  /** Whole partitions kept above the sequence (default 2). */
  partitionsAhead?: number;
  /** Drop a fully sent partition once its newest sent_at is older than this (default `7d`; `0s`: at once). */
  retention?: string;
  logger?: Logger;
}

/**
 * `outbox-relay maintain-partitions`: one maintenance pass over a partitioned outbox:
 * partitions created ahead of the sequence, old partitions whose rows are all sent (dead
 * letters live in their own table and stay) detached concurrently and dropped. The relay
 * does the same every minute when its role may; this is for a role that may not (cron,
 * as the outbox's owner). See {@link maintain} for the locks it takes.
 *
 * @throws SchemaError when the outbox is not partitioned (or the schema not migrated)
 */
export async function maintainPartitions(options: MaintainPartitionsOptions = {}): Promise<PartitionMaintenance> {
  const ahead = optionValue(partitionsAhead, options.partitionsAhead);
  const retention = optionValue(partitionRetention, options.retention);
  const retentionMs = (parseDuration(retention) as { value: number }).value;
  const schema = options.schema ?? DEFAULT_SCHEMA;
  const logger = options.logger ?? silentLogger();
  // From a URL, a pool of two: the pass runs beside the transaction that holds the
  // maintainers' lock (see maintain()).
  const own = !options.client && !options.pool && options.databaseUrl ? createPool(options.databaseUrl, 'outbox-relay:maintain-partitions', 2, logger) : undefined;
  try {
    const { db, close } = await openDatabase(own ? { pool: own, schema } : options, 'outbox-relay:maintain-partitions');
    try {
      const result = await maintain(db, schema, { partitionsAhead: ahead, retentionMs });
      logger.info({ ...result, schema, retention }, 'maintained outbox partitions');
      return result;
    } finally {
      await close();
    }
  } catch (error) {
    throw connectionFailure(error, options);
  } finally {
    await own?.end();
  }
}

export type { PartitionMaintenance } from '../relay/partitions.js';

/** A pool's failure to connect as the one-line ConnectionError `connect()` gives; other errors as they are. */
function connectionFailure(error: unknown, options: DatabaseOptions): unknown {
  if (error instanceof OutboxError || !options.databaseUrl || options.client || options.pool) return error;
  const code = (error as { code?: string }).code ?? '';
  const connecting = /^(E[A-Z]+|28\w{3}|3D000|57P03)$/.test(code) || /connect|Connection terminated/i.test((error as Error).message ?? '');
  return connecting ? connectionError(options.databaseUrl, error) : error;
}
