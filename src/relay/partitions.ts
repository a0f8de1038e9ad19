import pg from 'pg';
import { DETACH_MAX_WAIT_MS, detachWithin } from './partitionDetach.js';
import { oldestLockHolder, type OutboxLockHolder } from './lockHolder.js';
import { quoteIdentifier } from '../shared/identifiers.js';
import { ConfigError, OutboxError, SchemaError } from '../shared/errors.js';
import { outboxLastIdSql } from '../shared/outboxSequence.js';
import { dropOrReattach, hasUnsent } from './partitionReattach.js';

// The partitioned outbox (docs/partitioning.md): reading its partitions, creating the
// ones ahead of the sequence and dropping the old ones whose rows are all sent. The relay
// runs this from its partition loop (partitionLoop.ts); `outbox-relay maintain-partitions`
// (src/commands/partitions.ts) runs the same function.
//
// Every step is one autocommit statement or one short transaction, with no session
// state, so it works through a transaction-pooling proxy. Maintainers on a pool take
// turns (see maintain()); on a single client they do not, and each step tolerates
// another maintainer having done it first (a partition that exists, a detach under way).

/** Something that runs a query: a client, or a pool that lends one per query. */
export type Queryable = pg.ClientBase | pg.Pool;

/** One partition of the outbox: the ids from `lower` (inclusive; null for MINVALUE) to `upper` (exclusive). */
export interface OutboxPartition {
  name: string;
  lower: number | null;
  upper: number;
  /** Left half-detached by a `DETACH ... CONCURRENTLY` that did not finish. */
  detachPending: boolean;
}

/** Partition names are the outbox's name and the first id they hold; the first one holds everything below. */
export function partitionName(lower: number | null): string {
  return lower === null ? 'outbox_p0' : `outbox_p${lower}`;
}

/** Whether the outbox of the schema is a partitioned table (false for a plain one; throws when it is missing). */
export async function isPartitioned(db: Queryable, schema: string): Promise<boolean> {
  const { rows } = await db.query<{ relkind: string }>(
    `SELECT c.relkind FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
      WHERE n.nspname = $1 AND c.relname = 'outbox'`,
    [schema],
  );
  if (rows.length === 0) {
    throw new SchemaError(`schema ${quoteIdentifier(schema, 'schema')} has no outbox table: run \`outbox-relay migrate\` first`, { schema });
  }
  return rows[0]!.relkind === 'p';
}

/** The outbox's partitions, lowest ids first. */
export async function listPartitions(db: Queryable, schema: string): Promise<OutboxPartition[]> {
  const { rows } = await db.query<{ name: string; bound: string; pending: boolean }>(
    `SELECT c.relname AS name, pg_get_expr(c.relpartbound, c.oid) AS bound, i.inhdetachpending AS pending
       FROM pg_catalog.pg_inherits AS i
       JOIN pg_catalog.pg_class AS c ON c.oid = i.inhrelid
       JOIN pg_catalog.pg_class AS p ON p.oid = i.inhparent
       JOIN pg_catalog.pg_namespace AS n ON n.oid = p.relnamespace
      WHERE n.nspname = $1 AND p.relname = 'outbox'`,
    [schema],
  );
  const parts = rows.map((r) => {
    const m = /FROM \((.+?)\) TO \((.+?)\)/.exec(r.bound);
    if (!m) throw new SchemaError(`partition ${r.name} of the outbox has a bound outbox-relay does not read: ${r.bound}`, { schema });
    const value = (text: string): number | null => (text === 'MINVALUE' ? null : Number(text.replaceAll("'", '')));
    const upper = value(m[2]!);
    if (upper === null) throw new SchemaError(`partition ${r.name} of the outbox has no upper bound: ${r.bound}`, { schema });
    return { name: r.name, lower: value(m[1]!), upper, detachPending: r.pending };
  });
  return parts.sort((a, b) => (a.lower ?? -Infinity) - (b.lower ?? -Infinity));
}

/** The highest id the outbox sequence handed out (0 before the first). */
export async function sequenceLastId(db: Queryable, quotedSchema: string): Promise<number> {
  const { rows } = await db.query<{ last: string }>(
    `SELECT ${outboxLastIdSql(quotedSchema)}::text AS last`,
  );
  return Number(rows[0]!.last);
}

/** Ids per partition: the span of the newest partition (the first one, from MINVALUE, has none). */
function partitionSize(parts: readonly OutboxPartition[]): number | undefined {
  for (let i = parts.length - 1; i >= 0; i--) {
    const p = parts[i]!;
    if (p.lower !== null) return p.upper - p.lower;
  }
  return undefined;
}

/** Ids the writers can still take before the last partition is full (negative: they are failing). */
export function headroomIds(parts: readonly OutboxPartition[], lastId: number): number {
  const top = parts.length ? parts[parts.length - 1]!.upper : 0;
  return top - 1 - lastId;
}

/**
 * Ids left before the last partition is full, {@link headroomIds} in one catalog query
 * for the metrics sampler (no row for a plain outbox), and how many partitions a detach
 * left pending (one that gave up waiting, or a crash). Anyone may read the catalog: the
 * relay role needs no more than it has.
 */
export function partitionHeadroomSql(quotedSchema: string): string {
  return `
SELECT ((SELECT max((regexp_match(pg_catalog.pg_get_expr(c.relpartbound, c.oid), 'TO \\(''?(-?\\d+)''?\\)'))[1]::bigint)
           FROM pg_catalog.pg_inherits AS i JOIN pg_catalog.pg_class AS c ON c.oid = i.inhrelid
          WHERE i.inhparent = o.oid AND NOT i.inhdetachpending) - 1
        - ${outboxLastIdSql(quotedSchema)})::text AS headroom,
       (SELECT count(*) FROM pg_catalog.pg_inherits AS i WHERE i.inhparent = o.oid AND i.inhdetachpending)::int AS detach_pending
  FROM pg_catalog.pg_class AS o
 WHERE o.oid = to_regclass('${quotedSchema}.outbox') AND o.relkind = 'p'`;
}

/**
 * Create and attach one partition for the ids [lower, upper), in one short transaction:
 * CREATE TABLE (LIKE ...) then ATTACH PARTITION, which takes SHARE UPDATE EXCLUSIVE on the
 * outbox (writers and claims go on; `CREATE TABLE ... PARTITION OF` would take ACCESS
 * EXCLUSIVE). The table is empty, so the bound check and its indexes cost nothing.
 * Returns false when another maintainer created it first.
 */
export async function createPartition(db: Queryable, quotedSchema: string, lower: number, upper: number): Promise<boolean> {
  const name = quoteIdentifier(partitionName(lower));
  const client = db instanceof pg.Pool ? await db.connect() : db;
  try {
    await client.query('BEGIN');
    try {
      await client.query("SET LOCAL lock_timeout = '5s'");
      await client.query(
        `CREATE TABLE ${quotedSchema}.${name} (LIKE ${quotedSchema}.outbox INCLUDING DEFAULTS INCLUDING GENERATED INCLUDING CONSTRAINTS)`,
      );
      await client.query(`ALTER TABLE ${quotedSchema}.outbox ATTACH PARTITION ${quotedSchema}.${name} FOR VALUES FROM (${lower}) TO (${upper})`);
      await client.query('COMMIT');
      return true;
    } catch (error) {
      await client.query('ROLLBACK').catch(() => undefined);
      // 42P07: the table exists; 42P17: it would overlap one that does. Both mean another
      // maintainer got there first.
      const code = (error as { code?: string }).code;
      if (code === '42P07' || code === '42P17') return false;
      throw error;
    }
  } finally {
    if (db instanceof pg.Pool) (client as pg.PoolClient).release();
  }
}

/** Why {@link maintain} left a partition in place. */
export type KeptReason = 'unsent rows' | 'dead letters' | 'retention' | 'late commit' | 'busy' | 'blocked';

/** What one {@link maintain} pass did. */
export interface PartitionMaintenance {
  /** Partitions created (their names). */
  created: string[];
  /** Partitions detached and dropped. */
  dropped: string[];
  /** Partitions wholly below the sequence that stay, and why. `late commit`: detached, found holding a row committed late, attached again. */
  kept: Array<{ partition: string; reason: KeptReason }>;
  /** Ids the writers can take before the last partition is full, after this pass. */
  headroomIds: number;
  /** True when another maintainer was at work (on a pool only): this pass did nothing (but finish a crashed detach). */
  skipped?: boolean;
  /** `blocked`: a detach gave up after `detachMaxWaitMs`; the oldest transaction holding a lock on the outbox then. */
  blocker?: OutboxLockHolder;
}

/** Settings of one {@link maintain} pass (checked by the caller). */
export interface MaintainSettings {
  partitionsAhead: number;
  retentionMs: number;
  /** How long a detach may wait before it gives up until the next pass (on a pool; default {@link DETACH_MAX_WAIT_MS}). */
  detachMaxWaitMs?: number;
}

/**
 * One maintenance pass over a partitioned outbox: finish detaches a crash left pending,
 * create partitions until `partitionsAhead` whole ones lie above the sequence, and drop
 * the partitions whose ids are all below the sequence, whose rows are all sent, whose
 * range holds no dead letter (a replay puts it back under its id) and whose newest
 * sent_at is older than the retention. Never a DEFAULT partition: it would
 * make DETACH ... CONCURRENTLY impossible.
 *
 * Dropping: `DETACH PARTITION ... CONCURRENTLY` (no lock that writers or claims wait
 * on; it waits for every transaction using the outbox to end, so afterwards nobody can
 * still be inserting into it), then the partition is checked again: a row committed
 * late by a writer that took its id before the check leaves it attached again, and the
 * claim floors' generation is bumped (twice: ./partitionReattach.ts says why), so relays
 * whose floor passed that id while it was detached scan from the start again
 * (src/relay/floor.ts).
 *
 * @throws SchemaError when the outbox is not partitioned
 */
export async function maintain(db: Queryable, schema: string, settings: MaintainSettings): Promise<PartitionMaintenance> {
  const quoted = quoteIdentifier(schema, 'schema');
  if (!(await isPartitioned(db, schema))) {
    throw new SchemaError(`the outbox of schema ${quoted} is not partitioned: run \`outbox-relay partition-outbox\` first`, { schema });
  }
  if (!(db instanceof pg.Pool)) return await maintainLocked(db, schema, quoted, settings, undefined, true);
  const waitMs = settings.detachMaxWaitMs ?? DETACH_MAX_WAIT_MS;
  // The lock's transaction holds one connection while the pass needs another.
  if ((db.options.max ?? 10) < 2) throw new ConfigError('pool', 'partition maintenance needs a pool of at least 2 connections (one holds the maintainers\' lock)');
  // One maintainer at a time: a transaction-level advisory lock, held by a transaction
  // of its own (no session state: it works through a transaction pooler) while the pass
  // runs on other connections. That transaction touches no table, so the detaches, which
  // wait for the transactions using the outbox, do not wait for it.
  const holder = await db.connect();
  try {
    await holder.query('BEGIN');
    const { rows } = await holder.query<{ locked: boolean }>('SELECT pg_try_advisory_xact_lock(hashtext($1)) AS locked', [`outbox-relay:partitions:${schema}`]);
    const skipped = async (done: PartitionMaintenance): Promise<PartitionMaintenance> => {
      const parts = (await listPartitions(db, schema)).filter((x) => !x.detachPending);
      return { ...done, headroomIds: headroomIds(parts, await sequenceLastId(db, quoted)), skipped: true };
    };
    if (!rows[0]!.locked) return await skipped({ created: [], dropped: [], kept: [], headroomIds: 0 });
    // Creation first: the writers' inserts depend on it, and a detach may wait.
    const finished: PartitionMaintenance = { created: await createAhead(db, schema, quoted, settings.partitionsAhead), dropped: [], kept: [], headroomIds: 0 };
    // A detach a crash (or a wait that gave up) left pending: FINALIZE waits for every
    // snapshot older than it, this transaction's too, so it runs in this transaction,
    // which then ends and takes the lock again. Nobody else holds the lock: no other
    // maintainer is detaching. Bounded like a detach, cancelled from the pool's other
    // connection; a cancel ends this transaction, and the pass with it.
    const pending = (await listPartitions(db, schema)).filter((x) => x.detachPending);
    if (pending.length) {
      for (const p of pending) {
        const statement = `ALTER TABLE ${quoted}.outbox DETACH PARTITION ${quoted}.${quoteIdentifier(p.name)} FINALIZE`;
        if (!(await detachWithin(holder, db, statement, waitMs))) return await blocked(db, schema, quoted, finished, p.name);
      }
      await holder.query('COMMIT');
      for (const p of pending) await settleDetached(db, quoted, p, finished, waitMs);
      await holder.query('BEGIN');
      const again = await holder.query<{ locked: boolean }>('SELECT pg_try_advisory_xact_lock(hashtext($1)) AS locked', [`outbox-relay:partitions:${schema}`]);
      if (!again.rows[0]!.locked) return await skipped(finished);
    }
    // Partitions were created above, before the FINALIZE: not again.
    const result = await maintainLocked(db, schema, quoted, settings, holder, false);
    return { ...result, created: [...finished.created, ...result.created], dropped: [...finished.dropped, ...result.dropped], kept: [...finished.kept, ...result.kept] };
  } finally {
    await holder.query('COMMIT').catch(() => undefined);
    holder.release();
  }
}

/**
 * The pass under the maintainers' lock. `canceller`: a connection other than `db`'s from
 * which a detach that waits too long is cancelled (none: detaches wait unbounded).
 * `create`: create partitions ahead first (false when the caller just did).
 */
async function maintainLocked(db: Queryable, schema: string, quoted: string, settings: MaintainSettings, canceller: Queryable | undefined, create: boolean): Promise<PartitionMaintenance> {
  const waitMs = settings.detachMaxWaitMs ?? DETACH_MAX_WAIT_MS;
  const created = create ? await createAhead(db, schema, quoted, settings.partitionsAhead) : [];
  const result: PartitionMaintenance = { created, dropped: [], kept: [], headroomIds: 0 };
  let parts = await listPartitions(db, schema);
  for (const p of parts.filter((x) => x.detachPending)) {
    const statement = `ALTER TABLE ${quoted}.outbox DETACH PARTITION ${quoted}.${quoteIdentifier(p.name)} FINALIZE`;
    if (!(await detachWithin(db, canceller, statement, waitMs))) return await blocked(db, schema, quoted, result, p.name);
    await settleDetached(db, quoted, p, result, waitMs);
  }
  // A crash between a detach and its drop leaves a table of the outbox's that is no
  // partition any more; a row committed late into it would be lost with it.
  for (const p of await detachedLeftovers(db, schema)) {
    try {
      await settleDetached(db, quoted, p, result, waitMs);
    } catch (error) {
      // Another maintainer on a single client got there first (dropped: 42P01; attached: 42P17).
      const code = (error as { cause?: { code?: string }; code?: string }).cause?.code ?? (error as { code?: string }).code;
      if (code !== '42P01' && code !== '42P17') throw error;
      result.kept.push({ partition: p.name, reason: 'busy' });
    }
  }
  parts = (await listPartitions(db, schema)).filter((x) => !x.detachPending);
  const last = await sequenceLastId(db, quoted);

  for (const p of parts) {
    if (p.upper > last) break; // the sequence is in it, or it is ahead
    const name = `${quoted}.${quoteIdentifier(p.name)}`;
    if (await hasUnsent(db, name)) {
      result.kept.push({ partition: p.name, reason: 'unsent rows' });
      continue;
    }
    // A dead letter goes back into the outbox under its own id when replayed, which
    // needs its partition: one with dead letters in its range stays until they are
    // replayed or discarded.
    const { rows: dead } = await db.query<{ dead: boolean }>(
      `SELECT EXISTS (SELECT 1 FROM ${quoted}.outbox_dead_letters WHERE id >= $1 AND id < $2) AS dead`,
      [p.lower ?? Number.MIN_SAFE_INTEGER, p.upper],
    );
    if (dead[0]!.dead) {
      result.kept.push({ partition: p.name, reason: 'dead letters' });
      continue;
    }
    if (settings.retentionMs > 0) {
      const { rows } = await db.query<{ old: boolean | null }>(
        `SELECT max(sent_at) < now() - make_interval(secs => $1) AS old FROM ${name}`,
        [settings.retentionMs / 1000],
      );
      // A partition sent later than the retention: the ones above it were sent later
      // still, as relays publish in id order, so none of them is read.
      if (rows[0]?.old === false) {
        result.kept.push({ partition: p.name, reason: 'retention' });
        break;
      }
    }
    try {
      if (!(await detachWithin(db, canceller, `ALTER TABLE ${quoted}.outbox DETACH PARTITION ${name} CONCURRENTLY`, waitMs))) {
        return await blocked(db, schema, quoted, result, p.name);
      }
    } catch (error) {
      // Another maintainer is detaching it (55000: already pending) or did (42P01, 42P16).
      const code = (error as { code?: string }).code;
      if (code === '55000' || code === '42P01' || code === '42P16' || code === '55006') {
        result.kept.push({ partition: p.name, reason: 'busy' });
        continue;
      }
      throw error;
    }
    await settleDetached(db, quoted, p, result, waitMs);
  }
  const after = (await listPartitions(db, schema)).filter((x) => !x.detachPending);
  result.headroomIds = headroomIds(after, await sequenceLastId(db, quoted));
  return result;
}

/**
 * Create partitions until `ahead` whole ones lie above the sequence (read again after each
 * creation, as writers move it meanwhile). Returns the names created.
 */
async function createAhead(db: Queryable, schema: string, quoted: string, ahead: number): Promise<string[]> {
  const created: string[] = [];
  let parts = (await listPartitions(db, schema)).filter((x) => !x.detachPending);
  const size = partitionSize(parts);
  if (size === undefined) throw new SchemaError(`the outbox of schema ${quoted} has no partition with a lower bound: run \`outbox-relay partition-outbox\` again`, { schema });
  let last = await sequenceLastId(db, quoted);
  let top = parts.length ? parts[parts.length - 1]!.upper : 0;
  while (parts.filter((p) => p.lower !== null && p.lower > last).length < ahead) {
    if (await createPartition(db, quoted, top, top + size)) created.push(partitionName(top));
    parts = (await listPartitions(db, schema)).filter((x) => !x.detachPending);
    top = parts[parts.length - 1]!.upper;
    last = await sequenceLastId(db, quoted);
  }
  return created;
}

/** A detach gave up: the pass ends here, naming what it waited for. */
async function blocked(db: Queryable, schema: string, quoted: string, result: PartitionMaintenance, partition: string): Promise<PartitionMaintenance> {
  result.kept.push({ partition, reason: 'blocked' });
  const blocker = await oldestLockHolder(db, quoted, false);
  const after = (await listPartitions(db, schema)).filter((x) => !x.detachPending);
  return { ...result, ...(blocker ? { blocker } : {}), headroomIds: headroomIds(after, await sequenceLastId(db, quoted)) };
}

/**
 * Tables named like the outbox's partitions that are no partition: detached by a pass
 * that crashed before it dropped them. Their bounds come from the CHECK constraint a
 * concurrent detach leaves (`id >= lower AND id < upper`); a table without one is not
 * ours to touch.
 */
async function detachedLeftovers(db: Queryable, schema: string): Promise<OutboxPartition[]> {
  const { rows } = await db.query<{ name: string; checks: string[] }>(
    `SELECT c.relname AS name, array_agg(pg_catalog.pg_get_constraintdef(k.oid)) AS checks
       FROM pg_catalog.pg_class AS c
       JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
       JOIN pg_catalog.pg_constraint AS k ON k.conrelid = c.oid AND k.contype = 'c'
      WHERE n.nspname = $1 AND c.relkind = 'r' AND NOT c.relispartition AND c.relname ~ '^outbox_p[0-9]+$'
      GROUP BY c.relname`,
    [schema],
  );
  const out: OutboxPartition[] = [];
  for (const r of rows) {
    for (const check of r.checks) {
      const upper = /\bid < '?(-?\d+)'?/.exec(check);
      if (!upper) continue;
      const lower = /\bid >= '?(-?\d+)'?/.exec(check);
      const expectedLower = lower ? Number(lower[1]) : null;
      if (r.name !== partitionName(expectedLower)) continue;
      out.push({ name: r.name, lower: expectedLower, upper: Number(upper[1]), detachPending: false });
      break;
    }
  }
  return out;
}

/** A detached partition dropped, or attached again for a late commit (./partitionReattach.ts), into `result`. */
async function settleDetached(db: Queryable, quoted: string, p: OutboxPartition, result: PartitionMaintenance, waitMs: number): Promise<void> {
  if ((await dropOrReattach(db, quoted, p, waitMs)) === 'dropped') result.dropped.push(p.name);
  else result.kept.push({ partition: p.name, reason: 'late commit' });
}
