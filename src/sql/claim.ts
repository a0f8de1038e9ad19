/**
 * Claim the next batch of unsent rows of some shards, oldest first.
 *
 * $1 bigint     horizon: highest id known to be final (no transaction can still commit
 *               a row at or below it)
 * $2 smallint[] shards this worker owns
 * $3 int        batch size
 *
 * SKIP LOCKED is a safety net: rows another transaction holds are left to it instead of
 * blocking on them. Shard ownership, not the lock, is what keeps one key's rows in order.
 * payload goes out as text so the relay forwards the stored JSON without parsing it.
 */
export function claimSql(quotedSchema: string): string {
  return `
SELECT id, message_id, topic, key, payload::text AS payload, payload_bytes, headers, created_at
  FROM ${quotedSchema}.outbox
 WHERE sent_at IS NULL
   AND id <= $1
   AND shard = ANY($2::smallint[])
 ORDER BY id
 LIMIT $3
   FOR UPDATE SKIP LOCKED`;
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
