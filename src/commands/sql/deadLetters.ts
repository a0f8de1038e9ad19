// Queries behind `outbox-relay dead-letters list | replay | discard`.

/**
 * The dead-letter filter, shared by every query that selects dead letters (table alias d).
 *
 * $1 bigint[]     ids, or NULL for any
 * $2 text         topic, or NULL
 * $3 text         key, or NULL
 * $4 text         case-insensitive substring of the reason or the error name, or NULL
 * $5 timestamptz  dead-lettered at or after, or NULL
 * $6 timestamptz  dead-lettered before, or NULL
 * $7 text         policy ('park' or 'skip'), or NULL
 * $8 text         error name, exactly, or NULL
 *
 * The reason: a substring of the error name and the reason as one text (a line break
 * between them), lower-cased, which is what the trigram index of sql/010 holds, when
 * pg_trgm is there: then a rare substring is found through it instead of by reading every
 * dead letter. % _ and \ typed in it mean those characters (escaped for LIKE). The key
 * is compared by its hash first, which the index by key holds (sql/006, sql/010).
 */
export const deadLetterFilterSql = `
       ($1::bigint[] IS NULL OR d.id = ANY($1::bigint[]))
   AND ($2::text IS NULL OR d.topic = $2::text)
   AND ($3::text IS NULL OR (md5(d.key) = md5($3::text) AND d.key = $3::text))
   AND ($4::text IS NULL
        OR lower(d.error_name || E'\n' || d.reason)
           LIKE '%' || replace(replace(replace(lower($4::text), '\\', '\\\\'), '%', '\\%'), '_', '\\_') || '%')
   AND ($5::timestamptz IS NULL OR d.dead_lettered_at >= $5::timestamptz)
   AND ($6::timestamptz IS NULL OR d.dead_lettered_at < $6::timestamptz)
   AND ($7::text IS NULL OR d.policy = $7::text)
   AND ($8::text IS NULL OR d.error_name = $8::text)`;

/**
 * Dead letters matching the filter ($1-$8), lowest id first, at most $9 (NULL: all), with
 * whether each is the one its key is parked behind, and the number of matches in all.
 */
export const listDeadLettersSql = (s: string): string => `
SELECT d.id, d.message_id, d.topic, d.key, d.payload, d.payload_bytes, d.headers,
       d.created_at, d.dedup_key, d.attempts, d.reason, d.error_name, d.policy,
       d.first_failed_at, d.dead_lettered_at,
       p.dead_letter_id IS NOT NULL AS parks_key,
       count(*) OVER () AS total
  FROM ${s}.outbox_dead_letters AS d
  LEFT JOIN ${s}.outbox_parked_keys AS p
         ON p.topic = d.topic AND p.key = d.key AND p.dead_letter_id = d.id
 WHERE ${deadLetterFilterSql}
 ORDER BY d.id
 LIMIT $9`;

/**
 * The parked keys of dead letters leaving the table (CTE `gone`: id, topic, key): each key
 * whose parking dead letter left is released, unless another dead letter of the key with
 * policy park stays behind; then the key stays parked, now behind the lowest of those, so
 * the key's waiting rows never overtake it. (The relay parks a key once, on its first
 * failing row, and holds the rest back; several park dead letters of one key arise only
 * when a replayed row fails again or the policy changed.) CTEs of one statement see the
 * table as it was before the statement, hence `NOT IN gone`.
 */
const RELEASE = (s: string): string => `remaining AS (
  SELECT d.topic, d.key, min(d.id) AS next_id
    FROM ${s}.outbox_dead_letters AS d
    JOIN (SELECT DISTINCT topic, key FROM gone) AS g ON g.topic = d.topic AND g.key = d.key
   WHERE d.policy = 'park'
     AND d.id NOT IN (SELECT id FROM gone)
   GROUP BY d.topic, d.key
), released AS (
  DELETE FROM ${s}.outbox_parked_keys AS p
   USING gone
   WHERE p.topic = gone.topic AND p.key = gone.key AND p.dead_letter_id = gone.id
     AND NOT EXISTS (SELECT 1 FROM remaining AS r WHERE r.topic = p.topic AND r.key = p.key)
  RETURNING p.dead_letter_id
), handed_on AS (
  UPDATE ${s}.outbox_parked_keys AS p
     SET dead_letter_id = r.next_id
    FROM gone, remaining AS r
   WHERE p.topic = gone.topic AND p.key = gone.key AND p.dead_letter_id = gone.id
     AND r.topic = p.topic AND r.key = p.key
  RETURNING p.topic, p.key, p.dead_letter_id
)`;

/**
 * Move dead letters back into the outbox, in one statement (one transaction):
 *
 * 1. lock them (a concurrent replay or discard of the same row waits, then finds it gone);
 * 2. insert each into the outbox under its original id and message id, as a new pending
 *    row (attempts 0, sent_at and last_error NULL; created_at kept, it is the Kafka
 *    timestamp). ON CONFLICT DO NOTHING: a row already in the outbox with that id or that
 *    dedup key is not overwritten, and that dead letter stays where it is;
 * 3. delete only the dead letters that were inserted: a row is never in neither table;
 * 4. release the key of each moved dead letter that was the one parking it (see RELEASE),
 *    so the relay publishes it and then its key's waiting rows, in id order.
 *
 * $1 bigint[]  dead letter ids
 *
 * Returns one row per dead letter found: moved or not (conflict), whether it released its
 * key, and the id of the dead letter its key is still parked behind, if any.
 */
export const replayDeadLettersSql = (s: string): string => `
WITH dead AS (
  SELECT *
    FROM ${s}.outbox_dead_letters
   WHERE id = ANY($1::bigint[])
   ORDER BY id
     FOR UPDATE
), back AS (
  INSERT INTO ${s}.outbox (id, message_id, topic, key, payload, payload_bytes, headers, created_at, dedup_key)
  SELECT id, message_id, topic, key, payload, payload_bytes, headers, created_at, dedup_key
    FROM dead
   ORDER BY id
      ON CONFLICT DO NOTHING
  RETURNING id
), gone AS (
  DELETE FROM ${s}.outbox_dead_letters AS d
   USING back
   WHERE d.id = back.id
  RETURNING d.id, d.topic, d.key
), ${RELEASE(s)}
SELECT dead.id, dead.topic, dead.key,
       gone.id IS NOT NULL AS moved,
       released.dead_letter_id IS NOT NULL AS released_key,
       coalesce((SELECT h.dead_letter_id FROM handed_on AS h WHERE h.topic = dead.topic AND h.key = dead.key),
                (SELECT p.dead_letter_id
                   FROM ${s}.outbox_parked_keys AS p
                  WHERE p.topic = dead.topic AND p.key = dead.key AND p.dead_letter_id <> dead.id)) AS parked_behind
  FROM dead
  LEFT JOIN gone ON gone.id = dead.id
  LEFT JOIN released ON released.dead_letter_id = dead.id
 ORDER BY dead.id`;

/**
 * Delete dead letters for good, and release the keys they were parking (see RELEASE), in
 * one statement.
 *
 * $1 bigint[]  dead letter ids
 */
export const discardDeadLettersSql = (s: string): string => `
WITH gone AS (
  DELETE FROM ${s}.outbox_dead_letters
   WHERE id = ANY($1::bigint[])
  RETURNING id, topic, key
), ${RELEASE(s)}
SELECT gone.id, gone.topic, gone.key, released.dead_letter_id IS NOT NULL AS released_key
  FROM gone
  LEFT JOIN released ON released.dead_letter_id = gone.id
 ORDER BY gone.id`;

/**
 * Release a parked key without its dead letter (`outbox-relay dead-letters unpark`): the
 * key's rows go on as under the skip policy, and every park dead letter of the key becomes
 * a skip one, so that a later replay or discard of another of them (RELEASE above) does not
 * park the key again behind one the operator let go. The dead letters stay.
 *
 * $1 text topic   $2 text key
 *
 * One row when the key was parked, none when it was not.
 */
export const unparkKeySql = (s: string): string => `
WITH released AS (
  DELETE FROM ${s}.outbox_parked_keys
   WHERE topic = $1::text AND key = $2::text
  RETURNING topic, key, dead_letter_id, parked_at
), skipped AS (
  UPDATE ${s}.outbox_dead_letters AS d
     SET policy = 'skip'
    FROM released AS r
   WHERE d.topic = r.topic AND md5(d.key) = md5(r.key) AND d.key = r.key AND d.policy = 'park'
  RETURNING d.id
)
SELECT r.dead_letter_id, r.parked_at,
       coalesce((SELECT array_agg(id ORDER BY id) FROM skipped), '{}') AS skipped_ids
  FROM released AS r`;

/**
 * Unsent rows of one key, counted up to $3 (a pass over the unsent rows: the outbox has no
 * index by key, and gets none for this).
 *
 * $1 text topic   $2 text key   $3 int cap
 */
export const waitingRowsSql = (s: string): string => `
SELECT count(*)::int AS waiting
  FROM (SELECT 1 FROM ${s}.outbox
         WHERE sent_at IS NULL AND topic = $1::text AND key = $2::text
         LIMIT $3) AS w`;
