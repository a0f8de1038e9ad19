import { liveLeasesSql } from './leases.js';

/**
 * Exactly-once mode: mark sent (or delete) the rows a unit's last committed Kafka
 * transaction published, when a relay (re)starts the unit (../transactionalUnit.ts): they
 * are in Kafka, and a crash between Kafka's commit and the batch's Postgres COMMIT left
 * them unsent. Runs before the unit's first claim, on its own.
 *
 * $1 bigint[]   ids from the unit's progress
 * $2 smallint[] the unit's shards: the progress of one unit never names another's rows
 * $3 text       relay id: only rows of shards it holds a live lease on are changed
 *
 * Returns how many of those rows were unsent and how many it changed. Fewer changed than
 * unsent means a lease of the unit lapsed meanwhile: the caller must not claim (the rows
 * left would be published again), and starts the unit over. Rows already marked (the
 * batch's COMMIT happened after all) are left as they are.
 */
export function markRecoveredSql(quotedSchema: string, onPublish: 'mark' | 'delete'): string {
  const change =
    onPublish === 'delete'
      ? `DELETE FROM ${quotedSchema}.outbox AS o USING targets t WHERE o.id = t.id AND t.leased RETURNING 1`
      : `UPDATE ${quotedSchema}.outbox AS o SET sent_at = now() FROM targets t WHERE o.id = t.id AND t.leased RETURNING 1`;
  return `
WITH leased AS (
  ${liveLeasesSql(quotedSchema, '$3')}
), targets AS (
  SELECT id, shard IN (SELECT shard FROM leased) AS leased
    FROM ${quotedSchema}.outbox
   WHERE id = ANY($1::bigint[]) AND sent_at IS NULL AND shard = ANY($2::smallint[])
), changed AS (${change})
SELECT (SELECT count(*) FROM targets)::int AS unsent, (SELECT count(*) FROM changed)::int AS marked`;
}
