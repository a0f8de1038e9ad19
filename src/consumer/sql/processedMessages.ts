/**
 * Record the idempotency keys of a group of messages as processed, in the transaction
 * that runs their handlers. Returns the keys that were not there yet: the others are
 * duplicates. Rows another transaction inserted but has not committed make this wait
 * for it, so two consumers racing over one message (a rebalance) never both run it.
 *
 * $1 text    consumer group
 * $2 text[]  idempotency keys, distinct, in offset order (rows are locked in that order)
 */
export function claimKeysSql(quotedSchema: string): string {
  return `
INSERT INTO ${quotedSchema}.processed_messages (consumer_group, key)
SELECT $1, k
  FROM unnest($2::text[]) WITH ORDINALITY AS u(k, n)
 ORDER BY n
    ON CONFLICT (consumer_group, key) DO NOTHING
RETURNING key`;
}

/**
 * Take back keys this transaction claimed for messages that failed or were not run: the
 * rows were never visible to anyone else, so deleting them is the same as never having
 * inserted them.
 *
 * $1 text    consumer group
 * $2 text[]  keys this transaction inserted
 */
export function unclaimKeysSql(quotedSchema: string): string {
  return `
DELETE FROM ${quotedSchema}.processed_messages
 WHERE consumer_group = $1
   AND key = ANY($2::text[])`;
}

/**
 * Delete one bounded batch of rows older than the retention, oldest first.
 *
 * $1 float8  retention in seconds
 * $2 int     batch size
 * $3 text    only this consumer group, or NULL for all
 *
 * SKIP LOCKED: a purge never waits on, or deadlocks with, a consumer or another purge.
 */
export function purgeProcessedSql(quotedSchema: string): string {
  return `
WITH old AS (
  SELECT consumer_group, key
    FROM ${quotedSchema}.processed_messages
   WHERE processed_at < now() - make_interval(secs => $1)
     AND ($3::text IS NULL OR consumer_group = $3)
   ORDER BY processed_at
   LIMIT $2
     FOR UPDATE SKIP LOCKED)
DELETE FROM ${quotedSchema}.processed_messages AS p
 USING old
 WHERE p.consumer_group = old.consumer_group
   AND p.key = old.key`;
}
