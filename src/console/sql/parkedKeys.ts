import { cutText } from './deadLetters.js';

// The console's parked keys (../data/parkedKeys.ts).

/**
 * A page of parked keys, parked longest first, after the cursor ($1 parked_at, $2 topic,
 * $3 key; NULLs: from the start), at most $4, with the reason of each one's dead letter and
 * its unsent rows among the first $5 unsent rows (the outbox has no index by key, and gets
 * none for the console: one pass over the head of the backlog serves the whole page).
 * `scanned` says how many unsent rows were looked at: fewer than $5 means all of them.
 */
export const parkedKeyPageSql = (s: string): string => `
WITH page AS (
  SELECT p.topic, p.key, p.dead_letter_id, p.parked_at
    FROM ${s}.outbox_parked_keys AS p
   WHERE $1::timestamptz IS NULL OR (p.parked_at, p.topic, p.key) > ($1::timestamptz, $2::text, $3::text)
   ORDER BY p.parked_at, p.topic, p.key
   LIMIT $4
), head AS (
  SELECT o.topic, o.key FROM ${s}.outbox AS o WHERE o.sent_at IS NULL ORDER BY o.id LIMIT $5
), waiting AS (
  SELECT h.topic, h.key, count(*)::int AS n
    FROM head AS h
    JOIN page ON page.topic = h.topic AND page.key = h.key
   GROUP BY h.topic, h.key
)
SELECT page.topic, page.key, page.dead_letter_id, page.parked_at,
       coalesce(${cutText('d.reason')}, '') AS reason, coalesce(d.error_name, '') AS error_name,
       coalesce(w.n, 0) AS waiting,
       (SELECT count(*)::int FROM head) AS scanned
  FROM page
  LEFT JOIN ${s}.outbox_dead_letters AS d ON d.id = page.dead_letter_id
  LEFT JOIN waiting AS w ON w.topic = page.topic AND w.key = page.key
 ORDER BY page.parked_at, page.topic, page.key`;

/** The key parked behind dead letter $1, if one is. */
export const parkedKeyOfSql = (s: string): string => `
SELECT p.topic, p.key, p.parked_at FROM ${s}.outbox_parked_keys AS p WHERE p.dead_letter_id = $1 LIMIT 1`;
