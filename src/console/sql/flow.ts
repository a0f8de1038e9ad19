// The console's flow chart: what the relays recorded per minute (sql/010,
// src/relay/flowRecorder.ts).

/**
 * The 60 whole minutes before the current one, oldest first, with the rows every relay
 * published and dead-lettered in each, and ingress: how far the outbox sequence's mark
 * rose from the minute before (NULL when either minute has no mark: no relay ran).
 */
export const flowSql = (s: string): string => `
WITH minutes AS (
  SELECT generate_series(date_trunc('minute', now()) - interval '60 minutes',
                         date_trunc('minute', now()) - interval '1 minute',
                         interval '1 minute') AS minute
), recorded AS (
  SELECT minute, sum(sent)::bigint AS sent, sum(dead_lettered)::bigint AS dead_lettered, max(last_id) AS last_id
    FROM ${s}.outbox_relay_minutes
   WHERE minute >= date_trunc('minute', now()) - interval '61 minutes'
   GROUP BY minute
)
SELECT m.minute,
       r.minute IS NOT NULL AS recorded,
       coalesce(r.sent, 0) AS sent,
       coalesce(r.dead_lettered, 0) AS dead_lettered,
       -- greatest() skips NULLs: without the CASE a minute with no mark before it read 0.
       CASE WHEN r.last_id IS NOT NULL AND p.last_id IS NOT NULL THEN greatest(r.last_id - p.last_id, 0) END AS ingress
  FROM minutes AS m
  LEFT JOIN recorded AS r ON r.minute = m.minute
  LEFT JOIN recorded AS p ON p.minute = m.minute - interval '1 minute'
 ORDER BY m.minute`;
