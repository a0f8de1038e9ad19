// SQL of shard ownership (src/membership.ts). Tables: sql/003_relay_leases.sql.

/**
 * Begin a membership round's transaction, bounded in time. Its lock statements hold row
 * locks on lease rows (and on the membership rows of stale owners) that other relays'
 * rounds need; a relay frozen inside the transaction (SIGSTOP, a VM paused, a long GC
 * pause) would hold them for as long as it stays frozen, and every other relay's round
 * would wait on them. So Postgres ends such a transaction once it has been idle for a
 * third of the TTL (a round needs milliseconds; a third leaves room for a loaded machine's
 * event-loop stalls). A round never waits for a row lock longer than half the TTL: a lock
 * held by anything else, an operator's session say, fails the round with a lock timeout
 * (retried) rather than hanging it. The heartbeat, which is what keeps a relay's leases
 * live ({@link liveLeasesSql}), commits before this transaction, so a round that fails
 * here still renewed them.
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

/**
 * The shards relay `relay` (a parameter such as `$4`) may claim, mark and dead-letter rows
 * of: it is their owner and its heartbeat is within its TTL. A lease is live by its
 * owner's heartbeat, one row per relay, not by a time on each shard's row: a membership
 * round then writes one row (the heartbeat), where renewing 256 lease rows every round
 * left 256 dead row versions behind it, which nothing can remove while a long transaction
 * elsewhere holds the horizon back, and which every claim and mark walked through (under a
 * 3-minute hold, 7,807 buffer hits per claim against 614:
 * bench/committed/held-horizon-leases-2026-12-05). The lease rows now change only when a
 * shard changes hands. The heartbeat check is uncorrelated, so Postgres evaluates it once
 * per statement.
 */
export function liveLeasesSql(s: string, relay: string): string {
  return `SELECT l.shard FROM ${s}.outbox_shard_leases AS l
                           WHERE l.owner = ${relay}
                             AND EXISTS (SELECT 1 FROM ${s}.outbox_relays AS lr
                                          WHERE lr.relay_id = ${relay}
                                            AND lr.heartbeat_at > now() - make_interval(secs => lr.lease_ttl_ms / 1000.0))`;
}

/**
 * $1 relay id. The shards this relay owns, live or not: a relay whose heartbeat lapsed
 * and that nobody took over gets them back with its next heartbeat. Reads only: the
 * heartbeat, committed before the round, is the renewal.
 */
export const ownedSql = (s: string): string => `
SELECT shard FROM ${s}.outbox_shard_leases WHERE owner = $1 ORDER BY shard`;

/**
 * $1 relay id, $2 shards wanted. Lock the wanted shards this relay does not own; returns
 * their owner. Whether a shard is available is decided afterwards, under these locks
 * ({@link knownRelaysSql}, {@link lockStaleOwnersSql}): deciding it here, from a join to
 * the owner's heartbeat, would go wrong when the lock had to wait for another relay taking
 * the same shard (Postgres re-checks the locked row's new version, not the joined row, so
 * a shard just taken by a relay whose first heartbeat this statement's snapshot predates
 * would look free).
 */
export const lockWantedSql = (s: string): string => `
SELECT shard, owner
  FROM ${s}.outbox_shard_leases
 WHERE shard = ANY($2::smallint[])
   AND owner IS DISTINCT FROM $1
   FOR UPDATE`;

/** $1 relay ids. Which of them still have a membership row, with its application_name. */
export const knownRelaysSql = (s: string): string => `
SELECT relay_id, application_name FROM ${s}.outbox_relays WHERE relay_id = ANY($1::text[])`;

/**
 * $1 relay ids (owners of locked shards). Lock the membership rows of those whose
 * heartbeat lapsed, and return them: their shards may be taken. The lock is the fence: a
 * stale owner that wakes up cannot heartbeat, and so cannot claim or mark anything (every
 * claim and mark checks the heartbeat), until this round has committed; after that it is
 * no longer the owner. Postgres re-checks the condition on the newest row version before
 * locking it, so an owner that heartbeated meanwhile is not returned.
 */
export const lockStaleOwnersSql = (s: string): string => `
SELECT relay_id
  FROM ${s}.outbox_relays
 WHERE relay_id = ANY($1::text[])
   AND heartbeat_at <= now() - make_interval(secs => lease_ttl_ms / 1000.0)
   FOR UPDATE`;

/**
 * $1 shards. Of the given (locked) shards, those whose expires_at is still to come. Only a
 * relay of an earlier version writes it (renewing every shard row, its heartbeat apart,
 * and claiming until that time), so such a shard is not taken before it, whatever the
 * owner's heartbeat says. This version acquires with expires_at NULL.
 */
export const unexpiredOldLeasesSql = (s: string): string => `
SELECT shard FROM ${s}.outbox_shard_leases WHERE shard = ANY($1::smallint[]) AND expires_at >= now()`;

/** $1 relay id, $2 shards. Take the given (locked, available) shards; returns when. */
export const acquireSql = (s: string): string => `
UPDATE ${s}.outbox_shard_leases
   SET owner = $1, epoch = epoch + 1, expires_at = NULL
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
