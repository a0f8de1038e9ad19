/**
 * Who holds locks on the outbox (pg_locks is readable by every role). Shared by the
 * horizon probe (./horizon.ts: which running transactions may still commit outbox rows),
 * the held-horizon warning, `status`, the console, and partition maintenance (what a
 * detach waited for).
 */

/** Lock modes an INSERT into the outbox takes (RowExclusiveLock) or that include the right to write. */
export const OUTBOX_WRITE_LOCK_MODES = `('RowExclusiveLock', 'ShareRowExclusiveLock', 'ExclusiveLock', 'AccessExclusiveLock')`;

/** Starts every detach statement of partition maintenance (../partitionDetach.ts finds and cancels it by this). */
export const DETACH_MARKER = '/* outbox-relay detach ';

/**
 * The pg_locks row `alias` is a granted lock on the outbox or one of its partitions, in this database.
 * pg_partition_tree lists nothing for a table that is not partitioned, hence the first test.
 */
export function onOutboxSql(alias: string, quotedSchema: string): string {
  return `${alias}.locktype = 'relation' AND ${alias}.granted
   AND ${alias}.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
   AND (${alias}.relation = '${quotedSchema}.outbox'::regclass
        OR ${alias}.relation IN (SELECT relid FROM pg_catalog.pg_partition_tree('${quotedSchema}.outbox'::regclass)))`;
}

/**
 * The oldest open transaction holding a lock on the outbox, other than this connection and
 * partition maintenance's detaches. `writersOnly`: a write lock, and not a relay's batch
 * (the transaction a held horizon waits for); otherwise any lock (a reader too: what a
 * detach waits for). No query text: it may carry an application's data. A prepared
 * transaction has no backend and is not found here (pg_prepared_xacts).
 */
export function oldestLockHolderSql(quotedSchema: string, writersOnly: boolean): string {
  return `
SELECT a.pid, a.application_name, a.state,
       extract(epoch FROM now() - a.xact_start)::float8 AS transaction_age_seconds
  FROM pg_catalog.pg_locks AS l
  JOIN pg_catalog.pg_stat_activity AS a ON a.pid = l.pid
 WHERE ${onOutboxSql('l', quotedSchema)}
   AND a.pid <> pg_catalog.pg_backend_pid()
   AND NOT starts_with(coalesce(a.query, ''), '${DETACH_MARKER}')${
     writersOnly
       ? `
   AND l.mode IN ${OUTBOX_WRITE_LOCK_MODES}
   AND NOT starts_with(coalesce(a.query, ''), '/* outbox-relay batch ')`
       : ''
   }
 ORDER BY a.xact_start NULLS LAST
 LIMIT 1`;
}

export interface LockHolderRow {
  pid: number;
  application_name: string | null;
  state: string | null;
  transaction_age_seconds: number | null;
}

/**
 * The virtual transaction ids of the open transactions, other than this connection's,
 * that hold a lock on the outbox or one of its partitions (a prepared transaction runs
 * no more statements: not listed).
 */
export function outboxLockerTransactionsSql(quotedSchema: string): string {
  return `
SELECT DISTINCT l.virtualtransaction
  FROM pg_catalog.pg_locks AS l
 WHERE ${onOutboxSql('l', quotedSchema)}
   AND l.pid IS NOT NULL AND l.pid <> pg_catalog.pg_backend_pid()`;
}

/** $1 text[] virtual transaction ids: how many of them are still open (each holds the lock on its own id until it ends). */
export const openTransactionsSql = `
SELECT count(*)::int AS open FROM pg_catalog.pg_locks WHERE locktype = 'virtualxid' AND virtualxid = ANY($1::text[])`;
