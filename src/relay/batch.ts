import type pg from 'pg';
import { OutboxError, describeError } from '../shared/errors.js';
import { batchMarker, beginClaimInlineSql, beginClaimSql, prepareClaimSql, type ClaimArguments, type ClaimedRow } from './sql/claim.js';
import { leaseLostCounts, markAndCommitInlineSql, markAndCommitSql, prepareMarkSql } from './sql/markSent.js';
import { deadLetterSql, recordAttemptSql } from './sql/deadLetter.js';
import type { EncodingStep } from './encodingStep.js';
import { publishBatch, PublishError, TopicWaitError, type DeadLetterPlan } from './publishBatch.js';
import type { RelayMessage } from './message.js';
import type { SendResult } from './producer.js';
import type { ResolvedRelayOptions } from './options.js';
import { shardsOf } from './shards.js';
import { leaseLost, publishClaims, type ClaimsWithin } from './claimsInTransaction.js';

// One batch of one worker, as one Postgres transaction:
//   BEGIN → claim (FOR UPDATE SKIP LOCKED, below the horizon, on owned shards)
//         → publish to Kafka and wait for the acknowledgement
//         → dead-letter what Kafka can never take, mark sent (or delete)
//         → COMMIT.
// A crash or error anywhere before COMMIT rolls the claim back: the rows stay unsent and
// are published again (at least once). The worker loop (workerLoop.ts) decides when to
// run a batch, claims the next one ahead while one is published, and tells listeners what
// each did; nothing here emits events. So a batch is three calls: claimBatch (BEGIN and
// the claim: the transaction stays open), then finishBatch (publish, mark, COMMIT) or
// abandonBatch (ROLLBACK, nothing published).
//
// Two round trips per batch, not four: at 1,000 rows/s a batch carries a handful of rows,
// there are 100-150 of them a second, and per-statement overhead (parse, plan, a message
// each way) was most of the relay's Postgres CPU. BEGIN, the plan settings and the claim
// go as one simple-query message, and so do the mark and COMMIT; the claim and the mark
// are prepared statements (once per connection), executed with their arguments written
// as literals, integers and quoted strings only (sql/literals.ts). node-pg cannot
// pipeline several parameterised statements, and simple-query messages cannot carry
// parameters; preparing keeps the parse and plan out of every batch, which sending the
// statements' full text each time would not. The lease check that fences a relay which
// lost a shard while publishing is inside the prepared mark (sql/markSent.ts): a count
// short of what was published fails the statement, Postgres skips the COMMIT that
// follows it in the message, and the batch rolls back as before.
//
// Behind a transaction-pooling proxy (ctx.inline) a connection is not a session: the same
// two messages go with the statements' full text instead of EXECUTE (sql/claim.ts).

/** One of the relay's concurrent batch runners and the shards it handles. */
export interface Worker {
  index: number;
  /** Shards this worker handles when the relay owns them; they move between workers (workerShards.ts). */
  shards: number[];
  /** Watermark up to which this worker found nothing more to claim. */
  drainedTo: number;
  lastClaimAtMs: number;
  /** Rechecks in a row (claims while the horizon had not moved) that found nothing (relay.ts). */
  emptyRechecks: number;
  /** Horizon.rowsReturned when this worker last claimed: a higher value calls for a claim now. */
  rowsReturnedSeen: number;
  failures: number;
  /**
   * The connections of this worker's open batch transactions (the batch being published
   * and the one claimed ahead of it, workerLoop.ts), so a hard stop can destroy them.
   */
  clients: Set<pg.PoolClient>;
  /** The next batch, claimed while the previous one was being published (workerLoop.ts). */
  ahead: ClaimedBatch | undefined;
  /** Whether this worker logged its first batch claimed ahead (once per worker). */
  loggedClaimAhead: boolean;
  /** Batches in a row below the batch size (workerShards.ts). */
  smallBatches: number;
  /** Worker 0 made a full batch while holding others' shards: it hands them back next (workerShards.ts). */
  handBackDue: boolean;
  /** Which shard moves this worker logged at info already ('over', 'back'; workerLoop.ts). */
  loggedShardMoves: Set<'over' | 'back'>;
  /** Exactly-once mode: the worker's unit was started since the relay got it and since its last failed batch (unitStart.ts). */
  unitReady: boolean;
}

/** Worker `index` of `count`, with its own shards and nothing done yet. */
export function newWorker(index: number, count: number): Worker {
  return {
    index,
    shards: shardsOf(index, count),
    drainedTo: 0,
    lastClaimAtMs: 0,
    emptyRechecks: 0,
    rowsReturnedSeen: 0,
    failures: 0,
    clients: new Set(),
    ahead: undefined,
    loggedClaimAhead: false,
    smallBatches: 0,
    handBackDue: false,
    loggedShardMoves: new Set(),
    unitReady: false,
  };
}

/** A batch whose transaction is open, and the horizon it was claimed under (for the claim floor). */
export interface ClaimedBatch {
  batch: OpenBatch;
  /** Horizon.settled read before the claim. */
  settled: number;
  /** Horizon.resets when it was claimed. */
  resets: number;
}

/** What a batch needs from the relay that runs it. */
export interface BatchContext {
  pool: pg.Pool;
  quotedSchema: string;
  /** Checked in SQL by the claim and the mark: only the shard's owner may act. */
  instanceId: string;
  options: Pick<ResolvedRelayOptions, 'batchSize' | 'maxMessageBytes' | 'missingTopicTimeoutMs' | 'deadLetterPolicy' | 'deadLetterPolicyByTopic' | 'onPublish'>;
  /** Publish messages; one result per message, in order (the producer port, ./producer.ts). */
  send(messages: RelayMessage[]): Promise<SendResult[]>;
  /** Encodings configured: encode a message in place before it is sent (./encodingStep.ts). */
  encode?: EncodingStep['encode'];
  /** Called before a batch's first send (exactly-once mode: its transaction starts empty). */
  beginPublish?(): void;
  /** Called after a batch's sends, before anything is marked (exactly-once mode: Kafka's commit). */
  commitPublish?(): Promise<void>;
  /** Exactly-once mode: whether and what the batch claims again inside its transaction (./claimsInTransaction.ts). */
  claimsWithin?: ClaimsWithin;
  /** True once a hard stop began: a batch acknowledged by Kafka is then not marked. */
  aborted(): boolean;
  /**
   * True when connections go through a transaction-pooling proxy: no prepared statements,
   * the statements' text in every batch (./poolerProbe.ts decides; read at each batch).
   */
  inline(): boolean;
}

/** A claimed batch whose transaction is open: its rows are locked, nothing published yet. */
export interface OpenBatch {
  client: pg.PoolClient;
  /** Claimed rows, in id order. */
  rows: ClaimedRow[];
  /** What the claim was asked (the claim floor reads shards, watermark and floor back). */
  claim: ClaimArguments;
  /**
   * The outbox_claim_floors generation the claim read, when it returned rows and saw
   * every shard leased (the floor may rise only over such a claim: floor.ts); else undefined.
   */
  generation: string | undefined;
  startedAtMs: number;
  claimMs: number;
  /** Set when the connection failed while checked out (the pool only watches idle ones). */
  broken: Error | undefined;
  /** Whether this batch prepared the statements on its connection. */
  fresh: boolean;
  /** Statements in full, none prepared (read from BatchContext.inline when claiming). */
  inline: boolean;
  /** The connection sets this batch's client belongs to until released (Worker.clients). */
  owners: Set<pg.PoolClient>;
  onError(error: Error): void;
}

/** A committed batch. */
export interface BatchResult {
  /** Rows claimed (published, dead-lettered, or held behind a key parked just now). */
  claimed: number;
  published: ClaimedRow[];
  deadLetters: DeadLetterPlan[];
  /** Rows left unsent for a reason that may pass (committed without them; a later batch retries them). */
  unsent: ClaimedRow[];
  /** Why the first of `unsent` was not sent. */
  unsentError: Error | undefined;
  /** The claimed rows the claim floor may rise over, in id order (floor.ts; more than one claim's in exactly-once mode's interval). */
  floorRows: ClaimedRow[];
  /** Claims in the batch's transaction (more than one only in exactly-once mode's interval). */
  claims: number;
  startedAtMs: number;
  ackedAtMs: number;
  claimMs: number;
  publishMs: number;
  markMs: number;
}

/**
 * BEGIN and claim: the first round trip of a batch. The transaction stays open, its rows
 * locked, until {@link finishBatch} or {@link abandonBatch}. An empty claim is still open.
 *
 * @param owners where the connection is recorded while checked out (a hard stop destroys
 *   what it finds there)
 * @throws whatever Postgres answered; the transaction was rolled back and the connection released
 */
export async function claimBatch(ctx: BatchContext, claim: ClaimArguments, owners: Set<pg.PoolClient>): Promise<OpenBatch> {
  const startedAtMs = Date.now();
  const client = await ctx.pool.connect();
  owners.add(client);
  const open: OpenBatch = {
    client,
    rows: [],
    claim,
    generation: undefined,
    startedAtMs,
    claimMs: 0,
    broken: undefined,
    fresh: false,
    inline: ctx.inline(),
    owners,
    // The pool listens for errors only on idle clients. A connection dropped while this
    // one is checked out (during the Kafka send, say) would otherwise be an uncaught
    // 'error' event; the next query on it fails and the batch is retried.
    onError: (error: Error): void => {
      open.broken ??= error;
    },
  };
  client.on('error', open.onError);
  try {
    const { inline } = open;
    // First batch on this connection: prepare the claim and the mark, outside the
    // transaction, in the same message.
    open.fresh = !inline && !prepared.has(client);
    const prepare = open.fresh ? `${prepareClaimSql(ctx.quotedSchema)}; ${prepareMarkSql(ctx.quotedSchema, ctx.options.onPublish)}; ` : '';
    const results = (await client.query(
      inline ? beginClaimInlineSql(ctx.quotedSchema, claim) : beginClaimSql(claim, prepare),
    )) as unknown as Array<pg.QueryResult<ClaimedRow>>;
    if (open.fresh) prepared.add(client);
    const { rows } = results[results.length - 1]!;
    open.rows = rows;
    // The floor may rise only over a claim that saw every one of its shards leased (claim.ts);
    // an empty claim says nothing about that, so it leaves the floor where it is.
    open.generation = rows[0]?.all_leased === true ? rows[0].generation : undefined;
    open.claimMs = Date.now() - startedAtMs;
    return open;
  } catch (error) {
    await endBatch(open, error as Error, undefined);
    throw error;
  }
}

/** Roll an open batch back (nothing of it was published) and release its connection. */
export async function abandonBatch(open: OpenBatch): Promise<void> {
  await endBatch(open, new OutboxError('batch abandoned', { retriable: true }), undefined);
}

/**
 * Publish an open batch, dead-letter what Kafka can never take, mark sent (or delete),
 * commit; always releases the connection.
 *
 * @returns the committed batch (`claimed` 0 when the claim found nothing)
 * @throws PublishError when Kafka did not acknowledge (the attempt is recorded on the
 *   rows); any other error when Postgres failed or the lease was lost. Either way the
 *   transaction was rolled back.
 */
export async function finishBatch(ctx: BatchContext, open: OpenBatch): Promise<BatchResult> {
  const { client, rows, startedAtMs, claimMs } = open;
  let failedIds: number[] | undefined;
  try {
    if (open.broken) throw open.broken;
    if (rows.length === 0) {
      await client.query('COMMIT');
      await endBatch(open, undefined, undefined);
      return { claimed: 0, published: [], deadLetters: [], unsent: [], unsentError: undefined, floorRows: [], claims: 1, startedAtMs, ackedAtMs: 0, claimMs: 0, publishMs: 0, markMs: 0 };
    }
    const publishStarted = Date.now();
    ctx.beginPublish?.();
    let outcome;
    let claimed: ClaimedRow[] = rows;
    try {
      const publish = (batch: ClaimedRow[]) => {
        claimed = batch;
        return publishBatch(batch, {
          maxMessageBytes: ctx.options.maxMessageBytes,
          missingTopicTimeoutMs: ctx.options.missingTopicTimeoutMs,
          policyOf: (topic) => ctx.options.deadLetterPolicyByTopic[topic] ?? ctx.options.deadLetterPolicy,
          send: (messages) => ctx.send(messages),
          ...(ctx.encode && { encode: ctx.encode }),
        });
      };
      outcome = await publishClaims(client, open.inline, ctx.instanceId, rows, startedAtMs, publish, ctx.claimsWithin);
    } catch (error) {
      if (error instanceof PublishError || error instanceof TopicWaitError) failedIds = claimed.map((r) => r.id);
      throw error;
    }
    if (ctx.aborted()) throw new OutboxError('relay aborted before marking the batch sent', { retriable: true });
    const { published, deadLetters, held, unsent, marked } = outcome;
    if (published.length === 0 && deadLetters.length === 0 && held.length === 0 && unsent.length > 0) {
      // Nothing moved: roll back and let the relay back off (a batch of nothing but
      // waiting rows would otherwise be claimed again at once).
      failedIds = unsent.map((r) => r.id);
      throw outcome.unsentError ?? new OutboxError('no row of the batch was acknowledged', { retriable: true });
    }
    await ctx.commitPublish?.();
    // Acknowledged: by Kafka's answer, or in exactly-once mode by its commit (a
    // read_committed reader sees nothing earlier).
    const ackedAtMs = Date.now();
    const publishMs = ackedAtMs - publishStarted;
    if (deadLetters.length > 0) {
      const { rows: moved } = await client.query<{ moved: number }>(`${batchMarker(ctx.instanceId)} ${deadLetterSql(ctx.quotedSchema)}`, [
        deadLetters.map((d) => d.row.id),
        deadLetters.map((d) => d.reason),
        deadLetters.map((d) => d.errorName),
        deadLetters.map((d) => d.policy),
        ctx.instanceId,
      ]);
      if (moved[0]!.moved !== deadLetters.length) throw leaseLost(deadLetters.length, moved[0]!.moved);
    }
    const toMark = published.filter((r) => !marked.has(r.id));
    if (toMark.length > 0) {
      try {
        const ids = toMark.map((r) => r.id);
        await client.query(open.inline ? markAndCommitInlineSql(ctx.quotedSchema, ctx.options.onPublish, ids, ctx.instanceId) : markAndCommitSql(ids, ctx.instanceId));
      } catch (error) {
        const lost = leaseLostCounts(error);
        throw lost ? leaseLost(lost.expected, lost.changed) : error;
      }
    } else {
      await client.query('COMMIT');
    }
    const markMs = Date.now() - ackedAtMs;
    await endBatch(open, undefined, undefined);
    if (unsent.length > 0) {
      // Outside the committed transaction, like a failed batch: the attempt and its error stay on the rows.
      const error = describeError(outcome.unsentError).slice(0, 2_000);
      await ctx.pool.query(recordAttemptSql(ctx.quotedSchema), [unsent.map((r) => r.id), error]).catch(() => undefined);
    }
    // Held rows (behind a key parked just now) count as handled: the claim skips them now.
    return {
      claimed: outcome.claimed + unsent.length,
      published,
      deadLetters,
      unsent,
      unsentError: outcome.unsentError,
      floorRows: outcome.floorRows,
      claims: outcome.claims,
      startedAtMs,
      ackedAtMs,
      claimMs,
      publishMs,
      markMs,
    };
  } catch (error) {
    await endBatch(open, error as Error, failedIds && !ctx.aborted() ? { ctx, failedIds } : undefined);
    throw error;
  }
}

/**
 * The end of an open batch: ROLLBACK when it failed, then the connection back to the pool,
 * or discarded when it failed mid-transaction or its prepared statements are in doubt.
 * Released only if a hard stop did not already destroy it.
 */
async function endBatch(open: OpenBatch, failure: Error | undefined, attempt: { ctx: BatchContext; failedIds: number[] } | undefined): Promise<void> {
  const { client } = open;
  const broken = failure ?? open.broken;
  if (failure) {
    await client.query('ROLLBACK').catch(() => undefined);
    if (attempt) {
      // Outside the rolled-back transaction: the attempt and its error stay on the rows.
      await attempt.ctx.pool
        .query(recordAttemptSql(attempt.ctx.quotedSchema), [attempt.failedIds, describeError(failure).slice(0, 2_000)])
        .catch(() => undefined);
    }
  }
  client.off('error', open.onError);
  if (open.owners.delete(client)) {
    // A connection that failed mid-transaction is discarded, not reused; so is one whose
    // prepared statements are in doubt.
    const inDoubt = broken !== undefined && (preparedInDoubt(broken) || (open.fresh && !prepared.has(client)));
    client.release(broken && (isConnectionError(broken) || inDoubt) ? broken : undefined);
  }
}

/** Connections the claim and the mark are prepared on (a connection is one session: they stay). */
const prepared = new WeakSet<pg.ClientBase>();

/**
 * Errors after which the prepared statements may be missing, doubled or stale: one
 * prepared already (42P05), one dropped (DISCARD: 26000), a cached plan whose result type
 * changed under it (0A000). The connection is then discarded and the next one prepares
 * afresh, as is one whose preparing message failed part-way.
 */
function preparedInDoubt(error: Error): boolean {
  const code = (error as { code?: string }).code;
  return code === '42P05' || code === '26000' || code === '0A000';
}

function isConnectionError(error: Error): boolean {
  const code = (error as { code?: string }).code;
  // Class 08 (connection exception), 57P01-57P03 (admin shutdown, crash shutdown,
  // cannot connect now), or a socket error without an SQLSTATE.
  return code === undefined || code.startsWith('08') || code.startsWith('57P');
}
