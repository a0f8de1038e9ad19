// Query behind `outbox-relay dead-letters replay --wait` (../replayWait.ts).

/**
 * Where each replayed row is now, by primary key in both tables: in the outbox unsent
 * (pending), in the outbox sent (published), back among the dead letters (failed again,
 * with the new reason), or in neither (published and deleted by `--on-publish delete`,
 * or removed by someone else).
 *
 * $1 bigint[]  the replayed ids
 */
export const replayedRowsSql = (s: string): string => `
SELECT i.id,
       o.id IS NOT NULL AS in_outbox,
       o.sent_at IS NOT NULL AS sent,
       d.error_name,
       d.reason
  FROM unnest($1::bigint[]) AS i(id)
  LEFT JOIN ${s}.outbox AS o ON o.id = i.id
  LEFT JOIN ${s}.outbox_dead_letters AS d ON d.id = i.id
 ORDER BY i.id`;
