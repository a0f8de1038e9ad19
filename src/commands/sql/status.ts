// Read-only queries behind `outbox-relay status`.

/**
 * Backlog, the age of its oldest row, and how much of it waits behind parked keys. Uses
 * the partial index of unsent rows; parked keys are few, so the join is a small hash.
 */
export const backlogSql = (s: string): string => `
SELECT count(*)::bigint AS pending,
       extract(epoch FROM now() - min(o.created_at))::float8 AS oldest_pending_seconds,
       count(*) FILTER (WHERE p.key IS NOT NULL)::bigint AS pending_behind_parked
  FROM ${s}.outbox AS o
  LEFT JOIN ${s}.outbox_parked_keys AS p ON p.topic = o.topic AND p.key = o.key
 WHERE o.sent_at IS NULL`;

/**
 * Batches in flight per relay: connections inside a transaction that holds a transaction
 * id (a claim that locked rows always does) whose statement starts with the relay's batch
 * marker (batchMarker in src/relay/sql/claim.ts: every statement of a batch does). Not by
 * application_name: behind a transaction-pooling proxy a server connection keeps the
 * name a relay set while it serves another client's transaction. Row locks live in the
 * rows themselves, not in pg_locks, so counting locked rows would mean scanning the
 * backlog; a batch holds at most --batch-size rows. Needs the status user to see the
 * relay's sessions (same role, or pg_read_all_stats).
 */
export const inFlightSql = (s: string): string => `
SELECT r.relay_id, count(a.pid)::int AS batches
  FROM ${s}.outbox_relays AS r
  LEFT JOIN pg_stat_activity AS a
         ON a.datname = current_database()
        AND a.backend_xid IS NOT NULL
        AND left(a.query, length('/* outbox-relay batch ' || r.relay_id || ' */')) = '/* outbox-relay batch ' || r.relay_id || ' */'
 GROUP BY r.relay_id`;

/** Dead letters in all, and the age of the newest. */
export const deadLetterTotalsSql = (s: string): string => `
SELECT count(*)::bigint AS total,
       extract(epoch FROM now() - max(dead_lettered_at))::float8 AS newest_seconds
  FROM ${s}.outbox_dead_letters`;

/**
 * Dead letters grouped by error name and reason, most frequent first, at most $1 groups.
 */
export const deadLettersByReasonSql = (s: string): string => `
SELECT error_name, reason,
       count(*)::bigint AS count,
       count(*) FILTER (WHERE policy = 'park')::bigint AS parked,
       min(dead_lettered_at) AS first_at,
       max(dead_lettered_at) AS last_at
  FROM ${s}.outbox_dead_letters
 GROUP BY error_name, reason
 ORDER BY count(*) DESC, error_name, reason
 LIMIT $1`;

/**
 * The number of parked keys, and the $1 parked longest with the rows waiting behind each
 * (one pass over the unsent rows for all of them).
 */
export const parkedKeysSql = (s: string): string => `
WITH first AS (
  SELECT topic, key, dead_letter_id, parked_at
    FROM ${s}.outbox_parked_keys
   ORDER BY parked_at, topic, key
   LIMIT $1
)
SELECT f.topic, f.key, f.dead_letter_id, f.parked_at,
       extract(epoch FROM now() - f.parked_at)::float8 AS parked_seconds,
       count(o.id)::bigint AS waiting,
       (SELECT count(*) FROM ${s}.outbox_parked_keys)::bigint AS total
  FROM first AS f
  LEFT JOIN ${s}.outbox AS o
         ON o.topic = f.topic AND o.key = f.key AND o.sent_at IS NULL
 GROUP BY f.topic, f.key, f.dead_letter_id, f.parked_at
 ORDER BY f.parked_at, f.topic, f.key`;

/**
 * Parked keys out of step with their dead letters (sql/012 keeps them in step; these
 * arise only from writing outbox_parked_keys by hand, or inserting a park dead letter by
 * hand): parks whose dead letter is gone or is no longer a park dead letter of that key,
 * and park dead letters whose key is not parked. The second is a pass over the dead
 * letters, as the grouping by reason above is.
 */
export const parkedKeysOutOfStepSql = (s: string): string => `
SELECT (SELECT count(*)
          FROM ${s}.outbox_parked_keys AS p
         WHERE NOT EXISTS (SELECT 1 FROM ${s}.outbox_dead_letters AS d
                            WHERE d.id = p.dead_letter_id AND d.topic = p.topic AND d.key = p.key
                              AND d.policy = 'park'))::bigint AS parks_without_dead_letter,
       (SELECT count(*)
          FROM ${s}.outbox_dead_letters AS d
         WHERE d.policy = 'park'
           AND NOT EXISTS (SELECT 1 FROM ${s}.outbox_parked_keys AS p
                            WHERE p.topic = d.topic AND p.key = d.key))::bigint AS dead_letters_without_park`;

/** Relays with their heartbeat age, whether they count as live, and their circuit breaker (sql/010). */
export const relaysSql = (s: string): string => `
SELECT relay_id, application_name, started_at, breaker_opened_at,
       extract(epoch FROM now() - heartbeat_at)::float8 AS heartbeat_age_seconds,
       heartbeat_at > now() - make_interval(secs => lease_ttl_ms / 1000.0) AS live
  FROM ${s}.outbox_relays
 ORDER BY relay_id`;

/**
 * Every shard's owner, if any, and whether the lease is still valid: its owner's heartbeat
 * is within the owner's TTL (src/relay/sql/leases.ts, liveLeasesSql), or, for a lease a
 * relay of an earlier version renewed, its expires_at is still to come.
 */
export const leasesSql = (s: string): string => `
SELECT l.shard, l.owner, l.epoch,
       l.owner IS NOT NULL
       AND (l.expires_at > now()
            OR EXISTS (SELECT 1 FROM ${s}.outbox_relays AS r
                        WHERE r.relay_id = l.owner
                          AND r.heartbeat_at > now() - make_interval(secs => r.lease_ttl_ms / 1000.0))) AS valid
  FROM ${s}.outbox_shard_leases AS l
 ORDER BY l.shard`;
