// The SQL of the Postgres effect store (src/effects/postgresStore.ts) on the table of
// sql/009_effect_keys.sql. Each is one autocommit statement on the store's pool, decided
// on the database's clock (clock_timestamp(): the time the row is looked at, not when a
// statement that waited on a row lock began). A row whose expires_at has passed counts as
// absent everywhere.

const MS = `::float8 * interval '1 millisecond'`;

/**
 * Reserve a key, or say why not, in one round trip. `taken` inserts the reservation, or
 * overwrites a row that is forgotten (past expires_at) or, with $5, a reservation past its
 * reserved_until (a crashed attempt's): returning the row's attempts, 1 for a fresh one.
 * When it took nothing, `prior` (the row as the statement's snapshot saw it) says what
 * holds the key; under a concurrent change it can be a moment behind what the INSERT saw,
 * and the caller then asks again.
 *
 * When the snapshot already shows the key done or held, the INSERT is not even tried: ON
 * CONFLICT DO UPDATE locks the row it conflicts with even when its WHERE is false, and
 * that lock costs a transaction id and a WAL flush at commit. So a duplicate skipped is a
 * read-only statement. (A snapshot a moment behind still tries, and ON CONFLICT decides on
 * the row's latest version.)
 *
 * $1 text key, $2 uuid token, $3 reservation ms, $4 ttl ms, $5 boolean take over an expired reservation
 */
export function reserveSql(table: string): string {
  return `
WITH prior AS (
  SELECT token, confirmed_at, expires_at, reserved_until FROM ${table} WHERE key = $1
), taken AS (
  INSERT INTO ${table} AS e (key, token, reserved_until, expires_at)
  SELECT $1, $2, clock_timestamp() + $3${MS}, clock_timestamp() + $4${MS}
   WHERE NOT EXISTS (
     SELECT 1 FROM prior p
      WHERE p.expires_at > clock_timestamp()
        AND (p.confirmed_at IS NOT NULL OR p.reserved_until > clock_timestamp() OR NOT $5))
  ON CONFLICT (key) DO UPDATE
     SET token = EXCLUDED.token, reserved_until = EXCLUDED.reserved_until, confirmed_at = NULL, expires_at = EXCLUDED.expires_at,
         attempts = CASE WHEN e.expires_at <= clock_timestamp() THEN 1 ELSE e.attempts + 1 END
   WHERE e.expires_at <= clock_timestamp()
      OR ($5 AND e.token IS NOT NULL AND e.reserved_until <= clock_timestamp())
  RETURNING attempts
)
SELECT (SELECT attempts FROM taken) AS attempts,
       p.expires_at > clock_timestamp() AS live,
       p.confirmed_at IS NOT NULL AS confirmed,
       (extract(epoch FROM p.reserved_until - clock_timestamp()) * 1000)::float8 AS remaining_ms
  FROM (SELECT 1) AS one LEFT JOIN prior p ON true`;
}

/** $1 key, $2 token, $3 reservation ms, $4 ttl ms: extend the token's reservation. */
export function renewSql(table: string): string {
  return `
UPDATE ${table}
   SET reserved_until = clock_timestamp() + $3${MS},
       expires_at = greatest(expires_at, clock_timestamp() + $4${MS})
 WHERE key = $1 AND token = $2`;
}

/** $1 key, $2 token, $3 ttl ms: the token's reservation becomes a confirmation. */
export function confirmOwnedSql(table: string): string {
  return `
UPDATE ${table}
   SET token = NULL, reserved_until = NULL, confirmed_at = clock_timestamp(), expires_at = clock_timestamp() + $3${MS}
 WHERE key = $1 AND token = $2`;
}

/**
 * $1 key, $2 ttl ms: the key becomes confirmed whatever holds it (the effect happened,
 * though this attempt had lost its reservation), unless it already is.
 */
export function confirmAnySql(table: string): string {
  return `
INSERT INTO ${table} AS e (key, confirmed_at, expires_at)
VALUES ($1, clock_timestamp(), clock_timestamp() + $2${MS})
ON CONFLICT (key) DO UPDATE
   SET token = NULL, reserved_until = NULL, confirmed_at = EXCLUDED.confirmed_at, expires_at = EXCLUDED.expires_at
 WHERE e.confirmed_at IS NULL OR e.expires_at <= clock_timestamp()`;
}

/** $1 key, $2 token: drop the token's reservation. */
export function releaseSql(table: string): string {
  return `DELETE FROM ${table} WHERE key = $1 AND token = $2`;
}

/** $1 key: the live record, with its times on the database's clock. */
export function inspectSql(table: string): string {
  return `
SELECT confirmed_at,
       (extract(epoch FROM reserved_until - clock_timestamp()) * 1000)::float8 AS reserved_for_ms,
       (extract(epoch FROM expires_at - clock_timestamp()) * 1000)::float8 AS expires_in_ms
  FROM ${table}
 WHERE key = $1 AND expires_at > clock_timestamp()`;
}

/** $1 key: delete it; one row returned per live record deleted. */
export function forgetSql(table: string): string {
  return `DELETE FROM ${table} WHERE key = $1 RETURNING expires_at > clock_timestamp() AS live`;
}

/**
 * $1 int batch size: delete one bounded batch of forgotten rows, oldest first, skipping
 * rows another statement holds (a reserve taking one over).
 */
export function purgeExpiredSql(table: string): string {
  return `
DELETE FROM ${table}
 WHERE key IN (SELECT key FROM ${table} WHERE expires_at <= clock_timestamp() ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)`;
}
