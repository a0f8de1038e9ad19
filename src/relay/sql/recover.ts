/**
 * Exactly-once mode: mark sent (or delete) the rows a unit's last committed Kafka
 * transaction published, when a relay (re)starts the unit (../transactionalUnit.ts): they
 * are in Kafka, and a crash between Kafka's commit and the batch's Postgres COMMIT left
 * them unsent. Runs before the unit's first claim, in a transaction of its own.
 *
 * $1 bigint[]   ids from the unit's progress
 * $2 smallint[] the unit's shards: the progress of one unit never names another's rows
 * $3 text       relay id: only rows of shards it holds an unexpired lease on
 *
 * Returns how many rows changed: rows already marked (the batch's COMMIT happened after
 * all) are left as they are.
 */
export function markRecoveredSql(quotedSchema: string, onPublish: 'mark' | 'delete'): string {
  const where = `
 WHERE id = ANY($1::bigint[])
   AND sent_at IS NULL
   AND shard = ANY($2::smallint[])
   AND shard = ANY (ARRAY(SELECT shard FROM ${quotedSchema}.outbox_shard_leases
                           WHERE owner = $3 AND expires_at > now()))`;
  return onPublish === 'delete' ? `DELETE FROM ${quotedSchema}.outbox${where}` : `UPDATE ${quotedSchema}.outbox\n   SET sent_at = now()${where}`;
}
