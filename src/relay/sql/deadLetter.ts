import { liveLeasesSql } from './leases.js';

/**
 * Move rows the relay can never publish from the outbox to the dead letters, whole, with
 * the reason; park their keys where the policy says so. Runs in the batch's transaction,
 * under the same lease check as marking rows sent.
 *
 * $1 bigint[] ids   $2 text[] reasons   $3 text[] error names   $4 text[] policies
 * $5 text     relay id
 *
 * Returns how many rows moved (fewer than given means the lease was lost: roll back).
 *
 * The outbox is reached only by primary-key lookups (`id = ANY`) under a lease array
 * computed once, never joined: no plan here depends on the outbox's size or statistics
 * (the reasons are joined to the few moved rows afterwards).
 */
export function deadLetterSql(s: string): string {
  return `
WITH failed AS (
  SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[]) AS f(id, reason, error_name, policy)
), moved AS (
  DELETE FROM ${s}.outbox AS o
   WHERE o.id = ANY($1::bigint[])
     AND o.shard = ANY (ARRAY(${liveLeasesSql(s, '$5')}))
  RETURNING o.id, o.message_id, o.topic, o.key, o.payload, o.payload_bytes, o.headers, o.created_at,
            o.dedup_key, o.attempts
), dead AS (
  INSERT INTO ${s}.outbox_dead_letters
         (id, message_id, topic, key, payload, payload_bytes, headers, created_at, dedup_key,
          attempts, reason, error_name, policy)
  SELECT m.id, m.message_id, m.topic, m.key, m.payload, m.payload_bytes, m.headers, m.created_at, m.dedup_key,
         m.attempts + 1, f.reason, f.error_name, f.policy
    FROM moved AS m
    JOIN failed AS f ON f.id = m.id
  RETURNING id, topic, key, policy
), parked AS (
  INSERT INTO ${s}.outbox_parked_keys (topic, key, dead_letter_id)
  SELECT DISTINCT ON (topic, key) topic, key, id FROM dead WHERE policy = 'park' ORDER BY topic, key, id
  ON CONFLICT (topic, key) DO NOTHING
)
SELECT count(*)::int AS moved FROM dead`;
}

/**
 * After a failed batch (rolled back): count the attempt and keep the error on its rows.
 * $1 bigint[] ids   $2 text last error
 */
export function recordAttemptSql(s: string): string {
  return `
UPDATE ${s}.outbox
   SET attempts = attempts + 1, last_error = $2
 WHERE id = ANY($1::bigint[]) AND sent_at IS NULL`;
}
