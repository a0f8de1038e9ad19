/**
 * Mark published rows sent. Runs in the claim's transaction, after Kafka acknowledged
 * the batch, so a crash before the commit leaves the rows unsent (published again: at
 * least once) and never sent-but-unpublished.
 *
 * The lease condition fences a relay that lost its shards while it was publishing: its
 * update then touches fewer rows than it claimed, and it rolls back. (A relay taking a
 * shard over also terminates the stale owner's connections; this is the second line.)
 *
 * $1 bigint[] ids of the batch
 * $2 text     relay id
 *
 * The lease check is an array computed once, not `shard IN (subquery)`: as a semi-join
 * the plan depended on the statistics, and in delete mode it flipped between drains
 * (89-236 ms and up to 394,000 buffer hits per 500-row batch against 9-11 ms). As an
 * array it is a filter on the primary-key lookups, whatever the table looks like (and
 * beginClaimSql keeps those lookups a plain index scan).
 */
export function markSentSql(quotedSchema: string, onPublish: 'mark' | 'delete' = 'mark'): string {
  if (onPublish === 'delete') {
    // Delete-on-publish: one dead tuple per row and no index insertions, where marking
    // writes a new row version and new index entries (sent_at is in the partial index's
    // predicate, so the update is never HOT). Nothing to clean up afterwards.
    return `
DELETE FROM ${quotedSchema}.outbox
 WHERE id = ANY($1::bigint[])
   AND shard = ANY (ARRAY(SELECT shard FROM ${quotedSchema}.outbox_shard_leases
                           WHERE owner = $2 AND expires_at > now()))`;
  }
  return `
UPDATE ${quotedSchema}.outbox
   SET sent_at = now()
 WHERE id = ANY($1::bigint[])
   AND shard = ANY (ARRAY(SELECT shard FROM ${quotedSchema}.outbox_shard_leases
                           WHERE owner = $2 AND expires_at > now()))`;
}
