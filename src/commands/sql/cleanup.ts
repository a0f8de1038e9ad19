// `outbox-relay cleanup`: delete sent rows past the retention.

/**
 * Delete one bounded batch of sent rows older than the retention, lowest id first.
 *
 * $1 float8  retention in seconds
 * $2 int     batch size
 * $3 bigint  only ids above this (the last batch's highest id), so no batch walks again
 *            over the index entries of rows the previous batches deleted
 *
 * Rows with sent_at NULL (pending, or claimed by a relay right now) never match. SKIP
 * LOCKED: a row some other transaction holds is left for the next run, so cleanup never
 * waits on, or deadlocks with, a relay or another cleanup. Each batch is one statement,
 * one short transaction.
 */
export const cleanupBatchSql = (s: string): string => `
WITH batch AS (
  SELECT id
    FROM ${s}.outbox
   WHERE sent_at IS NOT NULL
     AND sent_at < now() - make_interval(secs => $1)
     AND id > $3
   ORDER BY id
   LIMIT $2
     FOR UPDATE SKIP LOCKED)
DELETE FROM ${s}.outbox AS o
 USING batch
 WHERE o.id = batch.id
RETURNING o.id`;

/**
 * The planner's estimate of the rows a cleanup will delete, for its progress report:
 * EXPLAIN only, nothing scanned (the outbox has no index on sent_at, and a count would
 * read the whole table). As good as the table's statistics.
 *
 * $1 float8  retention in seconds
 */
export const cleanupEstimateSql = (s: string): string => `
EXPLAIN (FORMAT JSON)
SELECT id
  FROM ${s}.outbox
 WHERE sent_at IS NOT NULL
   AND sent_at < now() - make_interval(secs => $1)`;
