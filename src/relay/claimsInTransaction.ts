import type pg from 'pg';
import { OutboxError } from '../shared/errors.js';
import { claimAgainSql, type ClaimArguments, type ClaimedRow } from './sql/claim.js';
import { leaseLostCounts, markOnlySql } from './sql/markSent.js';
import type { BatchOutcome } from './publishBatch.js';

// Exactly-once mode's transaction interval (docs/exactly-once.md): a batch's Kafka
// transaction takes the rows of several claims, all in the batch's one Postgres
// transaction, so that the transaction's fixed cost (AddOffsetsToTxn, the progress commit,
// EndTxn and its markers) is paid once per interval, not once per claim.
//
//   claim 1 → publish 1 ─┐
//             mark nothing, claim 2 (while 1 is published) → publish 2 ─┐
//                           mark 1, claim 3 (while 2 is published) → ...
//   then Kafka's commit, and the last claim's mark with COMMIT (./batch.ts).
//
// Each next claim is made only behind a full claim that saw all its shards leased, and
// starts above its last id under its generation (as a claim ahead does: floor.ts). Its
// rows are published only when the previous claim's were all published: a dead letter, a
// parked key or a row left unsent ends the transaction's claims, and what the next claim
// locked goes back unsent at COMMIT. A row the next claim returns again (its scan started
// at 0: a dead letter replayed or a key released meanwhile bumped the generation) is
// already in the transaction and is not published twice. A claim's mark runs in its
// transaction before the next claim but one: Postgres sees those rows sent, and only
// Kafka's commit, before COMMIT, makes any of it true.

/** What decides whether a batch's transaction claims again. */
export interface ClaimsWithin {
  /**
   * The claim after a full one that ended at `lastId` under `generation`, in a batch that
   * began at `startedAtMs`; or undefined when the transaction claims no more (its interval
   * is over, the relay stops, the shards or the horizon changed).
   */
  next(lastId: number, generation: string, startedAtMs: number): ClaimArguments | undefined;
  quotedSchema: string;
  onPublish: 'mark' | 'delete';
  batchSize: number;
}

/** Every claim's outcome, and what the batch's COMMIT still has to mark. */
export interface ClaimsOutcome extends BatchOutcome {
  /** Published rows whose mark already ran in the transaction (they need none at COMMIT). */
  marked: ReadonlySet<number>;
  /** The claims the floor may rise over (floor.ts): the first, and each next one while all saw their shards leased. */
  floorRows: ClaimedRow[];
  /** Rows claimed and dealt with (published, dead-lettered, held), over every claim. */
  claimed: number;
  claims: number;
}

/** The claim's generation when it returned rows and saw every shard leased; else undefined. */
export function claimGeneration(rows: readonly ClaimedRow[]): string | undefined {
  return rows[0]?.all_leased === true ? rows[0].generation : undefined;
}

/**
 * Publish `rows` (the batch's first claim), and, while `within` allows, claim and publish
 * again in the same transaction (see above). Rejects when a publish or a Postgres
 * statement failed: the caller rolls the batch back.
 */
export async function publishClaims(
  client: pg.PoolClient,
  inline: boolean,
  relayId: string,
  rows: ClaimedRow[],
  startedAtMs: number,
  publish: (rows: ClaimedRow[]) => Promise<BatchOutcome>,
  within: ClaimsWithin | undefined,
): Promise<ClaimsOutcome> {
  const total: ClaimsOutcome = { published: [], deadLetters: [], held: [], unsent: [], unsentError: undefined, marked: new Set(), floorRows: [...rows], claimed: 0, claims: 0 };
  const seen = new Set(rows.map((r) => r.id));
  const marked = new Set<number>();
  let current = rows;
  let unmarked: number[] = [];
  let floorChain = claimGeneration(rows) !== undefined;
  for (;;) {
    const generation = claimGeneration(current);
    const nextClaim = within && generation !== undefined && current.length >= within.batchSize ? within.next(current[current.length - 1]!.id, generation, startedAtMs) : undefined;
    const publishing = publish(current);
    const claiming = nextClaim ? claimAgain(client, inline, relayId, within!, unmarked, nextClaim) : undefined;
    // Both settle before either's failure is thrown: the connection is idle for the rollback.
    const [published, claimed] = await Promise.allSettled([publishing, claiming]);
    if (published.status === 'rejected') throw published.reason;
    if (claimed.status === 'rejected') throw claimed.reason;
    const outcome = published.value;
    if (claiming) {
      for (const id of unmarked) marked.add(id);
      unmarked = [];
    }
    total.claims++;
    total.claimed += outcome.published.length + outcome.deadLetters.length + outcome.held.length;
    total.published.push(...outcome.published);
    total.deadLetters.push(...outcome.deadLetters);
    total.held.push(...outcome.held);
    total.unsent.push(...outcome.unsent);
    total.unsentError ??= outcome.unsentError;
    unmarked.push(...outcome.published.map((r) => r.id));
    const allPublished = outcome.published.length === current.length;
    const next = (claimed.status === 'fulfilled' ? claimed.value : undefined)?.filter((r) => !seen.has(r.id));
    if (!allPublished || !next || next.length === 0) break;
    for (const r of next) seen.add(r.id);
    // The floor may rise over this claim too only if every claim before it could.
    floorChain &&= claimGeneration(next) !== undefined;
    if (floorChain) total.floorRows.push(...next);
    current = next;
  }
  total.published.sort((a, b) => a.id - b.id);
  total.floorRows.sort((a, b) => a.id - b.id);
  return { ...total, marked };
}

/** Mark `ids` (the previous claim's published rows; none at the second claim) and claim again: one round trip. */
async function claimAgain(client: pg.PoolClient, inline: boolean, relayId: string, within: ClaimsWithin, ids: readonly number[], claim: ClaimArguments): Promise<ClaimedRow[]> {
  const mark = ids.length > 0 ? markOnlySql(within.quotedSchema, within.onPublish, ids, relayId, inline) : '';
  try {
    const answer = (await client.query(claimAgainSql(within.quotedSchema, claim, inline, mark))) as unknown as pg.QueryResult<ClaimedRow> | Array<pg.QueryResult<ClaimedRow>>;
    return (Array.isArray(answer) ? answer[answer.length - 1]! : answer).rows;
  } catch (error) {
    const lost = leaseLostCounts(error);
    if (lost) throw leaseLost(lost.expected, lost.changed);
    throw error;
  }
}

/** A mark changed fewer rows than it should: a lease was lost while the batch was out (sql/markSent.ts checks). */
export function leaseLost(expected: number, changed: number | null): OutboxError {
  return new OutboxError('lost the lease of a shard while publishing; rolled back, the new owner publishes these rows', {
    retriable: true,
    context: { expected, changed },
  });
}
