// SQL of the per-minute counts the relay records for the console (./../flowRecorder.ts).
// Table: sql/010_console.sql.

import { outboxLastIdSql } from '../../shared/outboxSequence.js';

/**
 * Add this relay's counts to its rows of the given minutes, and prune rows older than two
 * hours (every relay's: whichever writes first). The newest of the given minutes also
 * takes the outbox sequence's value now, the mark the console measures ingress by; older
 * minutes (counts a failed write left behind) keep the mark they had.
 *
 * $1 timestamptz[] minutes (start, UTC)   $2 text relay id
 * $3 bigint[] rows sent                   $4 bigint[] rows dead-lettered
 */
export const recordMinutesSql = (s: string): string => `
WITH pruned AS (
  DELETE FROM ${s}.outbox_relay_minutes WHERE minute < now() - interval '2 hours'
), counts AS (
  SELECT * FROM unnest($1::timestamptz[], $3::bigint[], $4::bigint[]) AS u(minute, sent, dead_lettered)
)
INSERT INTO ${s}.outbox_relay_minutes AS m (minute, relay_id, sent, dead_lettered, last_id)
SELECT c.minute, $2::text, c.sent, c.dead_lettered,
       CASE WHEN c.minute = (SELECT max(minute) FROM counts)
            THEN ${outboxLastIdSql(s)} END
  FROM counts AS c
    ON CONFLICT (minute, relay_id) DO UPDATE
   SET sent = m.sent + EXCLUDED.sent,
       dead_lettered = m.dead_lettered + EXCLUDED.dead_lettered,
       last_id = greatest(m.last_id, EXCLUDED.last_id)`;
