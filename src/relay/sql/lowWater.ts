import { bigintLiteral } from './literals.js';
import { walkStartSql } from './walkStart.js';

/**
 * The relay's low-water mark (../lowWater.ts): the first row at or below the settled id
 * that may still need publishing, walking the unsent-row index up from the last mark.
 *
 * A plain read, no SKIP LOCKED: a row another transaction holds locked (a fenced relay's
 * batch, an operator) is unsent in this snapshot and stops the walk, which is the point:
 * the claim skips such rows, the mark must not. Rows of a parked key are passed over, as
 * the claim passes them: releasing the key bumps the generation. The walk starts above
 * `from` only under the generation `from` was found under (read in this same statement
 * snapshot); under another one (a dead letter replayed, a key released, a partition
 * attached again) it starts from the lowest id.
 *
 * Values written in (one simple query, BEGIN to COMMIT, one round trip also through a
 * transaction pooler) under the batch's plan settings, so the walk is the index in id
 * order that stops at the first match on any outbox, never a sort of every unsent row.
 */
export function lowWaterSql(quotedSchema: string, batchSettingsSql: string, from: number, generation: string, settled: number): string {
  return `BEGIN; ${batchSettingsSql};
SELECT f.generation::text AS generation,
       (SELECT o.id FROM ${quotedSchema}.outbox AS o
         WHERE o.sent_at IS NULL
           AND o.id > ${walkStartSql(quotedSchema, bigintLiteral(from), bigintLiteral(generation))}
           AND o.id <= ${bigintLiteral(settled)}::bigint
           AND NOT EXISTS (SELECT 1 FROM ${quotedSchema}.outbox_parked_keys AS p
                            WHERE p.topic = o.topic AND p.key = o.key)
         ORDER BY o.id
         LIMIT 1)::text AS first_unsent
  FROM ${quotedSchema}.outbox_claim_floors AS f;
COMMIT`;
}

export interface LowWaterRow {
  generation: string;
  first_unsent: string | null;
}
