/**
 * Claim the next batch of unsent rows of some shards, oldest first.
 *
 * $1 bigint     horizon: highest id known to be final (no transaction can still commit
 *               a row at or below it; src/horizon.ts)
 * $2 smallint[] shards the claiming worker handles
 * $3 int        batch size
 * $4 text       relay id: only shards it holds an unexpired lease on are claimed
 * $5 timestamptz server start time the horizon was computed on: after a restart the
 *               watermark no longer holds (see src/horizon.ts), and this claim finds nothing
 *
 * Rows of a parked key (its dead letter waits for an operator) are left where they are,
 * in order, until the key is released.
 *
 * Shard ownership is what keeps one key's rows in one relay's hands; SKIP LOCKED is the
 * safety net, leaving rows another transaction holds to it instead of waiting.
 * payload goes out as text so the relay forwards the stored JSON without parsing it.
 *
 * The lease check is an array, not `shard IN (subquery)`: as a semi-join the planner
 * hashes the leases and then reads every unsent row and sorts them (242 ms per claim on
 * a 200,000-row backlog); as a constant array it walks the unsent-row index in id order
 * and stops at the batch size (1.4 ms).
 */
export function claimSql(quotedSchema: string): string {
  return `
SELECT id, message_id, topic, key, payload::text AS payload, payload_bytes, headers, created_at
  FROM ${quotedSchema}.outbox
 WHERE sent_at IS NULL
   AND id <= $1
   AND shard = ANY($2::smallint[])
   AND shard = ANY (ARRAY(SELECT shard FROM ${quotedSchema}.outbox_shard_leases
                           WHERE owner = $4 AND expires_at > now()))
   AND pg_postmaster_start_time() = $5::timestamptz
   AND NOT EXISTS (SELECT 1 FROM ${quotedSchema}.outbox_parked_keys AS p
                    WHERE p.topic = outbox.topic AND p.key = outbox.key)
 ORDER BY id
 LIMIT $3
   FOR UPDATE OF outbox SKIP LOCKED`;
}

export interface ClaimedRow {
  id: number;
  message_id: string;
  topic: string;
  key: string;
  payload: string | null;
  payload_bytes: Buffer | null;
  headers: Record<string, unknown> | null;
  created_at: Date;
}
