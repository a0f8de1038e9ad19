import { deadLetterFilterSql } from '../../commands/sql/deadLetters.js';

// The console's dead-letter list: the CLI's filter (deadLetterFilterSql, $1-$8), paged by
// id. Each filter has an index that yields its matches in id order (sql/010), so a page
// reads about as many rows as it shows; the reason filter (a substring) has none and
// reads dead letters in id order until the page is full.

/** Characters of a key or a reason a list row carries at most (the pages show at most 200), the last of a longer one an ellipsis. */
export const LIST_TEXT_CHARS = 240;

export const cutText = (column: string): string => `CASE WHEN length(${column}) > ${LIST_TEXT_CHARS} THEN left(${column}, ${LIST_TEXT_CHARS - 1}) || '…' ELSE ${column} END`;

/** The columns a list shows: no payload, no headers (a 1 MB payload stays in the table), key and reason cut to what a row shows. */
const LIST_COLUMNS = `d.id, d.message_id, d.topic, ${cutText('d.key')} AS key, NULL::jsonb AS payload, NULL::bytea AS payload_bytes, NULL::jsonb AS headers,
       d.created_at, d.dedup_key, d.attempts, ${cutText('d.reason')} AS reason, d.error_name, d.policy,
       d.first_failed_at, d.dead_lettered_at,
       EXISTS (SELECT 1 FROM %s.outbox_parked_keys AS p
                WHERE p.topic = d.topic AND p.key = d.key AND p.dead_letter_id = d.id) AS parks_key`;

/** One dead letter whole; its JSON payload as Postgres writes it (parsed, and printed, without recursion: it may nest 10,000 deep). */
const DETAIL_COLUMNS = `d.id, d.message_id, d.topic, d.key, d.payload::text AS payload_text, d.payload_bytes, d.headers,
       d.created_at, d.dedup_key, d.attempts, d.reason, d.error_name, d.policy,
       d.first_failed_at, d.dead_lettered_at,
       EXISTS (SELECT 1 FROM %s.outbox_parked_keys AS p
                WHERE p.topic = d.topic AND p.key = d.key AND p.dead_letter_id = d.id) AS parks_key`;

const columns = (s: string): string => LIST_COLUMNS.replace('%s', s);

/**
 * How many dead letters a time range holds ($1 at or after, $2 before; NULL: open),
 * counted up to $3, and the lowest and highest of their ids, read from the index on
 * (dead_lettered_at, id) alone. Passed back as $9 and $10 below, when the range held
 * fewer than $3: redundant bounds (every match lies between them) that let a page walk
 * ids only where the range's rows are. Without them Postgres walks a topic's or an error
 * name's ids from the lowest, expecting the range's rows spread evenly, while they sit
 * together (ids rise with time): half a second to reach the last days of a million dead
 * letters. A range holding more is most of the table: its rows are found quickly anyway.
 * (A plain min(id) would be planned as a walk of the primary key, the same trap.)
 */
export const timeRangeIdsSql = (s: string): string => `
SELECT count(*)::int AS count, min(id) AS first_id, max(id) AS last_id
  FROM (SELECT id
          FROM ${s}.outbox_dead_letters
         WHERE ($1::timestamptz IS NULL OR dead_lettered_at >= $1::timestamptz)
           AND ($2::timestamptz IS NULL OR dead_lettered_at < $2::timestamptz)
         ORDER BY dead_lettered_at
         LIMIT $3) AS r`;

const ID_BOUNDS = `($9::bigint IS NULL OR d.id >= $9::bigint) AND ($10::bigint IS NULL OR d.id <= $10::bigint)`;

/**
 * Matches of the filter ($1-$8) between the ids $9 and $10 (NULL: open) with an id above
 * $11 (NULL: from the start), lowest first, at most $12.
 */
export const deadLetterPageSql = (s: string): string => `
SELECT ${columns(s)}
  FROM ${s}.outbox_dead_letters AS d
 WHERE ${deadLetterFilterSql}
   AND ${ID_BOUNDS}
   AND ($11::bigint IS NULL OR d.id > $11::bigint)
 ORDER BY d.id
 LIMIT $12`;

/** The ids of the filter's ($1-$8) matches between the ids $9 and $10 (NULL: open), lowest first, at most $11. */
export const deadLetterMatchIdsSql = (s: string): string => `
SELECT d.id FROM ${s}.outbox_dead_letters AS d WHERE ${deadLetterFilterSql} AND ${ID_BOUNDS} ORDER BY d.id LIMIT $11`;

/** Matches of the filter ($1-$8) between the ids $9 and $10 (NULL: open), counted up to $11. */
export const deadLetterMatchesSql = (s: string): string => `
SELECT count(*)::int AS count
  FROM (SELECT 1 FROM ${s}.outbox_dead_letters AS d WHERE ${deadLetterFilterSql} AND ${ID_BOUNDS} LIMIT $11) AS m`;

/** One dead letter by id ($1), whole. */
export const deadLetterSql = (s: string): string => `
SELECT ${DETAIL_COLUMNS.replace('%s', s)}
  FROM ${s}.outbox_dead_letters AS d
 WHERE d.id = $1`;
