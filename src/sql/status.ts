// Read-only queries behind `outbox-relay status`.

/** Backlog and the age of its oldest row. Uses the partial index of unsent rows. */
export const backlogSql = (s: string): string => `
SELECT count(*)::bigint AS pending,
       extract(epoch FROM now() - min(created_at))::float8 AS oldest_pending_seconds
  FROM ${s}.outbox
 WHERE sent_at IS NULL`;

/** Relays with their heartbeat age and whether they count as live. */
export const relaysSql = (s: string): string => `
SELECT relay_id, application_name, started_at,
       extract(epoch FROM now() - heartbeat_at)::float8 AS heartbeat_age_seconds,
       heartbeat_at > now() - make_interval(secs => lease_ttl_ms / 1000.0) AS live
  FROM ${s}.outbox_relays
 ORDER BY relay_id`;

/** Every shard's owner, if any, and whether the lease is still valid. */
export const leasesSql = (s: string): string => `
SELECT shard, owner, epoch, expires_at > now() AS valid
  FROM ${s}.outbox_shard_leases
 ORDER BY shard`;
