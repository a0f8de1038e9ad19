import { cutText } from './deadLetters.js';

// Read-only queries behind the console's dashboard of one outbox (../data/overview.ts).
// Every one reads a bounded number of rows whatever the size of the tables: counts stop
// at a cap ($1) instead of scanning to the end.

/**
 * Age of the lowest unsent id: the first entry of the unsent index. Ids are taken in
 * commit order only roughly (horizon.ts), so this is the oldest pending row give or take
 * the few transactions in flight.
 */
export const oldestPendingSql = (s: string): string => `
SELECT extract(epoch FROM now() - created_at)::float8 AS seconds
  FROM ${s}.outbox
 WHERE sent_at IS NULL
 ORDER BY id
 LIMIT 1`;

/**
 * Dead letters, counted up to $1, and the planner's estimate of them all (pg_class, as of
 * the table's last VACUUM or ANALYZE; negative when never analyzed).
 */
export const deadLetterCountSql = (s: string): string => `
SELECT count(*)::int AS count,
       (SELECT reltuples FROM pg_catalog.pg_class WHERE oid = '${s}.outbox_dead_letters'::regclass)::float8 AS estimate
  FROM (SELECT 1 FROM ${s}.outbox_dead_letters LIMIT $1) AS d`;

/** Parked keys, counted up to $1. */
export const parkedKeyCountSql = (s: string): string => `
SELECT count(*)::int AS count
  FROM (SELECT 1 FROM ${s}.outbox_parked_keys LIMIT $1) AS p`;

/**
 * The newest $1 dead letters (down the primary key), grouped by error name and reason
 * (its first 239 characters: a page shows no more) and by topic, the $2 biggest groups of
 * each grouping, most first (ties in byte order, COLLATE "C", the same on every database);
 * the empty grouping set counts the rows grouped. A GROUP BY over every dead letter would
 * read the whole table on each page view, and sending every group to be ranked in Node
 * would cost as much again as the grouping: reasons that carry a number (a size, an id)
 * make one group per dead letter, 5,000 rows for the page to show 20.
 */
export const deadLetterGroupsSql = (s: string): string => `
WITH newest AS (
  SELECT error_name, ${cutText('reason')} AS reason, topic
    FROM ${s}.outbox_dead_letters
   ORDER BY id DESC
   LIMIT $1
), groups AS (
  SELECT error_name, reason, topic, count(*)::int AS count,
         GROUPING(error_name, reason, topic) AS grouping
    FROM newest
   GROUP BY GROUPING SETS ((error_name, reason), (topic), ())
), ranked AS (
  SELECT g.*, row_number() OVER (PARTITION BY g.grouping
                                 ORDER BY g.count DESC, g.error_name COLLATE "C", g.reason COLLATE "C", g.topic COLLATE "C") AS rank
    FROM groups AS g
)
SELECT error_name, reason, topic, count, grouping
  FROM ranked
 WHERE rank <= $2
 ORDER BY grouping, rank`;
