// `outbox-relay purge-processed`: what it reports while it runs. The purge itself is the
// consumer runtime's (src/consumer/sql/processedMessages.ts purgeProcessedSql).

/**
 * The planner's estimate of the rows a purge will delete, for its progress report:
 * EXPLAIN only, nothing read. As good as the table's statistics.
 *
 * $1 float8  retention in seconds
 * $2 text    only this consumer group, or NULL for all
 */
export const purgeEstimateSql = (s: string): string => `
EXPLAIN (FORMAT JSON)
SELECT key
  FROM ${s}.processed_messages
 WHERE processed_at < now() - make_interval(secs => $1)
   AND ($2::text IS NULL OR consumer_group = $2)`;
