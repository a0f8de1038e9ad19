import { outboxLastIdSql } from '../../shared/outboxSequence.js';
import { walkStartSql } from '../../relay/sql/walkStart.js';

/**
 * The backlog sampler's queries (src/metrics/backlogSampler.ts). Each runs every few
 * seconds beside the relay, so each must stay cheap however large the backlog grows: they
 * read the partial index outbox_unsent_idx (unsent rows only, by id), the sequence or the
 * small outbox_parked_keys table, never the whole outbox.
 */

/**
 * Unsent rows above an id, counted exactly up to a cap: an index scan of outbox_unsent_idx
 * from that id on, stopping at $1 unsent rows. When the count reaches the cap the caller
 * falls back to {@link backlogEstimateSql}. The console counts with $2 = 0.
 *
 * $1 int     cap
 * $2 bigint  count rows with ids above this only (0: all)
 */
export function backlogCountSql(quotedSchema: string): string {
  return `
SELECT count(*)::int AS pending
  FROM (SELECT 1
          FROM ${quotedSchema}.outbox
         WHERE sent_at IS NULL
           AND id > $2::bigint
         LIMIT $1) AS capped`;
}

/**
 * {@link backlogCountSql} for the relay's sampler (../backlogSampler.ts), with the
 * generation it walked under, read in the same snapshot as the count.
 *
 * $1 int     cap
 * $2 bigint  count rows with ids above this only
 * $3 bigint  ... if outbox_claim_floors.generation is still this (else from 0: ../../relay/sql/walkStart.ts)
 */
export function sampledBacklogCountSql(quotedSchema: string): string {
  return `
SELECT count(*)::int AS pending,
       (SELECT generation::text FROM ${quotedSchema}.outbox_claim_floors) AS generation
  FROM (SELECT 1
          FROM ${quotedSchema}.outbox
         WHERE sent_at IS NULL
           AND id > ${walkStartSql(quotedSchema, '$2', '$3')}
         LIMIT $1) AS capped`;
}

/** A row of {@link sampledBacklogCountSql}. */
export interface SampledBacklogCountRow {
  pending: number;
  /** outbox_claim_floors.generation, bigint as text. */
  generation: string;
}

/**
 * The planner's estimate of the unsent rows: EXPLAIN only plans, it reads nothing. The
 * estimate scales the table's statistics by its current size, so it follows a growing
 * backlog between ANALYZE runs; it is used only above the exact count's cap.
 */
export function backlogEstimateSql(quotedSchema: string): string {
  return `EXPLAIN (FORMAT JSON) SELECT 1 FROM ${quotedSchema}.outbox WHERE sent_at IS NULL`;
}

/**
 * The oldest unsent row above an id (lowest id: the first in the partial index after it)
 * and its age by the database's clock, so the relay's clock does not matter. Rows are
 * created in id order up to the length of the writers' transactions, so this is the age
 * of the oldest pending row to within that. No row: no result. $1 and $2 as in
 * {@link sampledBacklogCountSql}'s $2 and $3.
 *
 * $1 bigint  look above this id only
 * $2 bigint  ... if outbox_claim_floors.generation is still this (else from 0)
 */
export function oldestPendingSql(quotedSchema: string): string {
  return `
SELECT id,
       extract(epoch FROM clock_timestamp() - created_at)::float8 AS age_seconds
  FROM ${quotedSchema}.outbox
 WHERE sent_at IS NULL
   AND id > ${walkStartSql(quotedSchema, '$1', '$2')}
 ORDER BY id
 LIMIT 1`;
}

/**
 * The outbox sequence's last value: every enqueued row took one id, so its growth over
 * time is the ingress rate (ids of rolled-back inserts count too: a slight overcount).
 */
export function sequenceLastValueSql(quotedSchema: string): string {
  return `
SELECT ${outboxLastIdSql(quotedSchema)} AS last_id`;
}

/**
 * How many keys are held back behind a parked dead letter (migration 004). The table
 * holds one row per parked key, so it stays small; a count is cheap.
 */
export function parkedKeyCountSql(quotedSchema: string): string {
  return `SELECT count(*)::int AS parked FROM ${quotedSchema}.outbox_parked_keys`;
}

/** A row of {@link oldestPendingSql}. */
export interface OldestPendingRow {
  id: number;
  age_seconds: number;
}
