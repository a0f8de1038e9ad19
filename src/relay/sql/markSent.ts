import { intArrayLiteral, intLiteral, textLiteral } from './literals.js';
import { batchMarker, bindLiterals } from './claim.js';
import { liveLeasesSql } from './leases.js';

/**
 * Mark published rows sent. Runs in the claim's transaction, after Kafka acknowledged
 * the batch, so a crash before the commit leaves the rows unsent (published again: at
 * least once) and never sent-but-unpublished.
 *
 * The lease condition fences a relay that lost its shards while it was publishing: its
 * update then touches fewer rows than it claimed, and it rolls back. (A relay taking a
 * shard over also terminates the stale owner's connections; this is the second line.)
 *
 * $1 bigint[] ids of the batch
 * $2 text     relay id
 *
 * The lease check is an array computed once, not `shard IN (subquery)`: as a semi-join
 * the plan depended on the statistics, and in delete mode it flipped between drains
 * (89-236 ms and up to 394,000 buffer hits per 500-row batch against 9-11 ms). As an
 * array it is a filter on the primary-key lookups, whatever the table looks like (and
 * beginClaimSql keeps those lookups a plain index scan).
 */
export function markSentSql(quotedSchema: string, onPublish: 'mark' | 'delete' = 'mark'): string {
  if (onPublish === 'delete') {
    // Delete-on-publish: one dead tuple per row and no index insertions, where marking
    // writes a new row version and new index entries (sent_at is in the partial index's
    // predicate, so the update is never HOT). Nothing to clean up afterwards.
    return `
DELETE FROM ${quotedSchema}.outbox
 WHERE id = ANY($1::bigint[])
   AND shard = ANY (ARRAY(${liveLeasesSql(quotedSchema, '$2')}))`;
  }
  return `
UPDATE ${quotedSchema}.outbox
   SET sent_at = now()
 WHERE id = ANY($1::bigint[])
   AND shard = ANY (ARRAY(${liveLeasesSql(quotedSchema, '$2')}))`;
}

/** The mark's prepared statement, per connection (see {@link prepareMarkSql}). */
export const MARK_STATEMENT = 'outbox_relay_mark';

/** What the lease check of {@link prepareMarkSql} says when it fails: `lease lost: marked N of M`. */
const LEASE_LOST = 'outbox-relay lease lost: marked';

/**
 * Prepare the mark (or the delete) of {@link markSentSql} on a connection, once, with the
 * lease check inside it, so that the mark and COMMIT can go in one simple-query message
 * ({@link markAndCommitSql}) and a lost lease still aborts the transaction before COMMIT.
 *
 * $1 bigint[] ids of the batch   $2 text relay id   $3 int how many rows must change
 *
 * Fewer rows changed than published means the lease of one of their shards was lost while
 * publishing: the statement then fails (an integer cast of a text that names the counts,
 * evaluated only on that branch: it depends on count(*), so the planner cannot fold it),
 * Postgres skips the rest of the message, COMMIT included, and the batch rolls back.
 * {@link leaseLostCounts} reads the counts back from the error.
 */
export function prepareMarkSql(quotedSchema: string, onPublish: 'mark' | 'delete' = 'mark'): string {
  return `PREPARE ${MARK_STATEMENT} (bigint[], text, int) AS ${checkedMarkSql(quotedSchema, onPublish)}`;
}

/** The mark with its lease check (see {@link prepareMarkSql}); $1 ids, $2 relay id, $3 how many must change. */
function checkedMarkSql(quotedSchema: string, onPublish: 'mark' | 'delete'): string {
  return `
WITH changed AS (${markSentSql(quotedSchema, onPublish)}
RETURNING 1)
SELECT CASE WHEN count(*) = $3 THEN count(*)::int
            ELSE ('${LEASE_LOST} ' || count(*) || ' of ' || $3)::int END AS changed
  FROM changed`;
}

/**
 * Mark `ids` sent (or delete them), check the lease, and commit: one round trip. Ids and
 * the relay id go in as literals (./literals.ts).
 */
export function markAndCommitSql(ids: readonly number[], relayId: string): string {
  return `${batchMarker(relayId)} ${executeMarkSql(ids, relayId)}; COMMIT`;
}

/**
 * {@link markAndCommitSql} without a prepared statement (a transaction-pooling proxy, see
 * beginClaimInlineSql in ./claim.ts): the checked mark's text with its arguments in place.
 */
export function markAndCommitInlineSql(quotedSchema: string, onPublish: 'mark' | 'delete', ids: readonly number[], relayId: string): string {
  const literals = [intArrayLiteral(ids, 'bigint'), textLiteral(relayId), intLiteral(ids.length)];
  return `${batchMarker(relayId)} ${bindLiterals(checkedMarkSql(quotedSchema, onPublish), literals)}; COMMIT`;
}

/** The checked mark of `ids` without COMMIT, prepared or (`inline`) in full: for {@link claimAgainSql} of ./claim.ts. */
export function markOnlySql(quotedSchema: string, onPublish: 'mark' | 'delete', ids: readonly number[], relayId: string, inline: boolean): string {
  if (!inline) return executeMarkSql(ids, relayId);
  return bindLiterals(checkedMarkSql(quotedSchema, onPublish), [intArrayLiteral(ids, 'bigint'), textLiteral(relayId), intLiteral(ids.length)]);
}

/** Execute the prepared mark ({@link prepareMarkSql}): every one of `ids` must change. */
export function executeMarkSql(ids: readonly number[], relayId: string): string {
  return `EXECUTE ${MARK_STATEMENT}(${intArrayLiteral(ids, 'bigint')}, ${textLiteral(relayId)}, ${intLiteral(ids.length)})`;
}

/** The counts of a failed lease check of {@link prepareMarkSql}, or undefined for any other error. */
export function leaseLostCounts(error: unknown): { expected: number; changed: number } | undefined {
  const message = (error as { message?: unknown } | undefined)?.message;
  if (typeof message !== 'string') return undefined;
  const m = /outbox-relay lease lost: marked (\d+) of (\d+)/.exec(message);
  return m ? { changed: Number(m[1]), expected: Number(m[2]) } : undefined;
}
