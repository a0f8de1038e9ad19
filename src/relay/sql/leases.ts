// SQL of shard ownership (src/membership.ts). Tables: sql/003_relay_leases.sql.

/**
 * Begin a membership round's transaction, bounded in time. Its renew and lock statements
 * hold row locks on lease rows that every other relay's round needs; a relay frozen
 * inside the transaction (SIGSTOP, a VM paused, a long GC pause) would hold them for as
 * long as it stays frozen, and every other relay's round would wait on them, its own
 * leases and heartbeat included. So Postgres ends such a transaction once it has been
 * idle for a third of the TTL (a round needs milliseconds; a third leaves room for a
 * loaded machine's event-loop stalls). A round then waits at most that long, and its
 * relay renews its leases by about two thirds of the TTL after the last renewal, before
 * they expire. A round never waits for a lease row longer than half the TTL: a lock held
 * by anything else, an operator's session say, fails the round with a lock timeout
 * (retried) rather than hanging it.
 * Both are transaction-local settings, so they hold behind a transaction pooler too.
 */
export function beginMembershipSql(leaseTtlMs: number): string {
  // leaseTtlMs is a validated integer of at least 500 (options.ts): both are at least 166 ms.
  const idleMs = Math.floor(leaseTtlMs / 3);
  const lockMs = Math.floor(leaseTtlMs / 2);
  return `BEGIN; SET LOCAL idle_in_transaction_session_timeout = ${idleMs}; SET LOCAL lock_timeout = ${lockMs}`;
}

/**
 * $1 relay id, $2 application_name prefix, $3 lease TTL in ms, $4 when its circuit
 * breaker opened (NULL: closed; read by the console). Announce or renew a relay.
 */
export const heartbeatSql = (s: string): string => `
INSERT INTO ${s}.outbox_relays AS r (relay_id, application_name, lease_ttl_ms, breaker_opened_at)
VALUES ($1, $2, $3, $4)
ON CONFLICT (relay_id) DO UPDATE
   SET heartbeat_at = now(), lease_ttl_ms = EXCLUDED.lease_ttl_ms, breaker_opened_at = EXCLUDED.breaker_opened_at`;

/** Relays whose heartbeat is within their own TTL, in a stable order every relay agrees on. */
export const liveRelaysSql = (s: string): string => `
SELECT relay_id
  FROM ${s}.outbox_relays
 WHERE heartbeat_at > now() - make_interval(secs => lease_ttl_ms / 1000.0)
 ORDER BY relay_id`;

/** Forget relays that are dead and own nothing any more. */
export const forgetDeadRelaysSql = (s: string): string => `
DELETE FROM ${s}.outbox_relays AS r
 WHERE heartbeat_at < now() - make_interval(secs => lease_ttl_ms / 1000.0)
   AND NOT EXISTS (SELECT 1 FROM ${s}.outbox_shard_leases l WHERE l.owner = r.relay_id)`;

/** $1 relay id, $2 TTL ms. Extend every lease this relay holds; returns them. */
export const renewSql = (s: string): string => `
UPDATE ${s}.outbox_shard_leases
   SET expires_at = now() + make_interval(secs => $2 / 1000.0)
 WHERE owner = $1
RETURNING shard`;

/**
 * $1 relay id, $2 shards wanted. Lock the wanted shards this relay does not hold and say
 * which are free or expired, with the application_name of an expired owner.
 */
export const lockWantedSql = (s: string): string => `
SELECT l.shard, l.owner, r.application_name AS owner_application_name,
       (l.owner IS NULL OR l.expires_at < now()) AS available
  FROM ${s}.outbox_shard_leases l
  LEFT JOIN ${s}.outbox_relays r ON r.relay_id = l.owner
 WHERE l.shard = ANY($2::smallint[])
   AND l.owner IS DISTINCT FROM $1
   FOR UPDATE OF l`;

/** $1 relay id, $2 shards, $3 TTL ms. Take the given (locked, available) shards; returns when. */
export const acquireSql = (s: string): string => `
UPDATE ${s}.outbox_shard_leases
   SET owner = $1, epoch = epoch + 1, expires_at = now() + make_interval(secs => $3 / 1000.0)
 WHERE shard = ANY($2::smallint[])
RETURNING now() AS taken_at`;

/** $1 relay id, $2 shards. Give shards back. */
export const releaseSql = (s: string): string => `
UPDATE ${s}.outbox_shard_leases
   SET owner = NULL, expires_at = NULL
 WHERE owner = $1 AND shard = ANY($2::smallint[])`;

/** $1 relay id. Leave: give back every shard and the membership row. */
export const leaveSql = (s: string): string => `
WITH released AS (
  UPDATE ${s}.outbox_shard_leases SET owner = NULL, expires_at = NULL WHERE owner = $1
)
DELETE FROM ${s}.outbox_relays WHERE relay_id = $1`;

/**
 * $1 relay id of a stale owner, $2 ms to wait for each backend to exit, $3 when its
 * shards were taken over.
 *
 * Terminating the backends running its batches rolls back their transactions, which
 * releases the row locks of a batch it claimed before it stalled; a paused relay that
 * wakes up finds its batch gone and cannot mark anything sent (its next claims and marks
 * check the leases). A backend is the owner's when it is inside a transaction begun before
 * the takeover and its statement starts with the owner's batch marker (batchMarker in
 * ./claim.ts: every statement of a batch does). Not by application_name or connection age:
 * behind a transaction-pooling proxy a server connection that last carried the owner's
 * name may be serving another client by now, and its idle connections hold nothing.
 * Returns how many are still there, and the pids signalled.
 */
export const terminateOwnerSql = `
WITH targets AS (
  SELECT pid FROM pg_stat_activity
   WHERE xact_start <= $3
     AND left(query, length('/* outbox-relay batch ' || $1 || ' */')) = '/* outbox-relay batch ' || $1 || ' */'
     AND pid <> pg_backend_pid()
), terminated AS (
  SELECT pid, pg_terminate_backend(pid, $2) AS gone FROM targets
)
SELECT count(*) FILTER (WHERE NOT gone)::int AS survivors, coalesce(array_agg(pid), '{}') AS pids FROM terminated`;
