import type pg from 'pg';
import { leasesSql } from '../../src/commands/sql/status.js';

/**
 * Lease shards to `relayId` by hand, the way a live relay holds them: it owns them and its
 * membership row has a heartbeat within its TTL (an hour here, so the lease stays live for
 * the test's length). `where` picks the shards (SQL over outbox_shard_leases' columns).
 */
export async function leaseShards(pool: pg.Pool, schema: string, relayId: string, where = 'true'): Promise<void> {
  const s = `"${schema}"`;
  await pool.query(
    `INSERT INTO ${s}.outbox_relays (relay_id, application_name, lease_ttl_ms) VALUES ($1, $1, 3600000)
     ON CONFLICT (relay_id) DO UPDATE SET heartbeat_at = now(), lease_ttl_ms = 3600000`,
    [relayId],
  );
  await pool.query(`UPDATE ${s}.outbox_shard_leases SET owner = $1, expires_at = NULL WHERE ${where}`, [relayId]);
}

/** How many shards each relay holds a valid lease on, as `status` reports them. */
export async function liveLeasesByOwner(pool: pg.Pool, schema: string): Promise<Map<string, number>> {
  const { rows } = await pool.query<{ owner: string; n: number }>(
    `SELECT owner, count(*)::int AS n FROM (${leasesSql(`"${schema}"`)}) AS l WHERE l.valid GROUP BY owner`,
  );
  return new Map(rows.map((r) => [r.owner, r.n]));
}
