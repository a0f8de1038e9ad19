/**
 * Claim the next batch of unsent rows of some shards, oldest first.
 *
 * $1 bigint     horizon: highest id known to be final (no transaction can still commit
 *               a row at or below it; src/horizon.ts)
 * $2 smallint[] shards the claiming worker handles
 * $3 int        batch size
 * $4 text       relay id: only shards it holds an unexpired lease on are claimed
 * $5 timestamptz server start time the horizon was computed on: after a restart the
 *               watermark no longer holds (see src/horizon.ts), and this claim finds nothing
 * $6 bigint     floor: the scan starts above it (src/relay/floor.ts says why that is safe)
 * $7 bigint     the outbox_claim_floors generation the floor was computed under; under any
 *               other (a dead letter replayed, a parked key released since) the scan
 *               starts from the lowest id instead
 *
 * Each row also says whether every shard of $2 was leased to the relay when the claim ran
 * (all_leased): a shard whose lease had lapsed (a late renewal) has its rows skipped by the
 * lease check, so a claim that saw one must not raise the worker's floor over them.
 *
 * Rows of a parked key (its dead letter waits for an operator) are left where they are,
 * in order, until the key is released.
 *
 * Shard ownership is what keeps one key's rows in one relay's hands; SKIP LOCKED is the
 * safety net, leaving rows another transaction holds to it instead of waiting.
 * payload goes out as text so the relay forwards the stored JSON without parsing it.
 *
 * The lease check is an array, not `shard IN (subquery)`: as a semi-join the planner
 * hashes the leases and then reads every unsent row and sorts them (242 ms per claim on
 * a 200,000-row backlog); as a constant array it walks the unsent-row index in id order
 * and stops at the batch size (1.4 ms).
 *
 * The floor keeps a claim's cost flat while a snapshot older than the drain is open (a
 * REPEATABLE READ report, a pg_dump): the index entries of the rows published since
 * cannot be removed, and a scan from the lowest id walked every one of them (measured
 * 4,461 against 14,853 rows/s on a 1,000,000-row drain). The plan itself is fixed by
 * {@link beginClaimSql}.
 */
export function claimSql(quotedSchema: string): string {
  return `
SELECT id, message_id, topic, key, payload::text AS payload, payload_bytes, headers, created_at,
       (SELECT count(*) FROM ${quotedSchema}.outbox_shard_leases
         WHERE owner = $4 AND expires_at > now() AND shard = ANY($2::smallint[])) = cardinality($2::smallint[]) AS all_leased
  FROM ${quotedSchema}.outbox
 WHERE sent_at IS NULL
   AND id <= $1
   AND id > (CASE WHEN (SELECT generation FROM ${quotedSchema}.outbox_claim_floors) = $7::bigint
                  THEN $6::bigint ELSE 0 END)
   AND shard = ANY($2::smallint[])
   AND shard = ANY (ARRAY(SELECT shard FROM ${quotedSchema}.outbox_shard_leases
                           WHERE owner = $4 AND expires_at > now()))
   AND pg_postmaster_start_time() = $5::timestamptz
   AND NOT EXISTS (SELECT 1 FROM ${quotedSchema}.outbox_parked_keys AS p
                    WHERE p.topic = outbox.topic AND p.key = outbox.key)
 ORDER BY id
 LIMIT $3
   FOR UPDATE OF outbox SKIP LOCKED`;
}

/**
 * Begin a batch's transaction, fix its plans, and read the claim-floor generation, in one
 * round trip (a simple query: no parameters).
 *
 * The claim, the mark, the delete and the dead-letter move must take the same plan on a
 * never-analyzed table, a 10,000- and a 10,000,000-row backlog (test/planShapes.integration.test.ts).
 * Rewriting them is not enough for the claim: with no statistics (a new deployment, a
 * fresh schema, a backfill) the planner estimates `sent_at IS NULL` at 0.5 % of the rows
 * and picks "bitmap scan of every unsent row, then sort" over walking the unsent-row index
 * in id order and stopping at the batch size (200,000 unsent rows: 243-510 ms per claim,
 * an external merge sort, against 1.8 ms). The alternatives that need no setting were
 * measured and are worse: a LATERAL index scan per shard reads up to a batch per shard
 * (64,000 entries for a 500-row batch over 128 shards, 53 ms); a UNION ALL per shard
 * under a Merge Append has the right plan but costs ~10 ms to plan per claim. So, as a
 * last resort, for this transaction only (SET LOCAL: nothing else on the connection sees
 * it): no sort and no bitmap scan, which leaves the ordered index scan for the claim and
 * a plain index scan of the primary key for the others. jit off as well: a statement
 * that has to sort anyway (the dead-letter move's DISTINCT ON) is then costed above
 * jit_above_cost, and compiling it took 300-700 ms here.
 *
 * Returns the generation (text: bigint) as the last result.
 */
export function beginClaimSql(quotedSchema: string): string {
  return `BEGIN; SET LOCAL enable_sort = off; SET LOCAL enable_bitmapscan = off; SET LOCAL jit = off; SELECT generation::text AS generation FROM ${quotedSchema}.outbox_claim_floors`;
}

export interface ClaimedRow {
  id: number;
  message_id: string;
  topic: string;
  key: string;
  payload: string | null;
  payload_bytes: Buffer | null;
  headers: Record<string, unknown> | null;
  created_at: Date;
}
