import type pg from 'pg';
import { OutboxError, describeError } from '../shared/errors.js';
import { batchMarker, beginClaimInlineSql, beginClaimSql, prepareClaimSql, type ClaimArguments, type ClaimedRow } from './sql/claim.js';
import { leaseLostCounts, markAndCommitInlineSql, markAndCommitSql, prepareMarkSql } from './sql/markSent.js';
import { deadLetterSql, recordAttemptSql } from './sql/deadLetter.js';
import { publishBatch, PublishError, TopicWaitError, type DeadLetterPlan } from './publishBatch.js';
import type { RelayMessage } from './message.js';
import type { SendResult } from './producer.js';
import type { ResolvedRelayOptions } from './options.js';

// One batch of one worker, as one Postgres transaction:
//   BEGIN → claim (FOR UPDATE SKIP LOCKED, below the horizon, on owned shards)
//         → publish to Kafka and wait for the acknowledgement
//         → dead-letter what Kafka can never take, mark sent (or delete)
//         → COMMIT.
// A crash or error anywhere before COMMIT rolls the claim back: the rows stay unsent and
// are published again (at least once). The relay loop (relay.ts) decides when to run a
// batch and what to tell listeners about it; nothing here emits events.
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
  /** Shards this worker handles when the relay owns them. */
  shards: number[];
  /** Watermark up to which this worker found nothing more to claim. */
  drainedTo: number;
  lastClaimAtMs: number;
  /** Rechecks in a row (claims while the horizon had not moved) that found nothing (relay.ts). */
  emptyRechecks: number;
  failures: number;
  /** The connection of the batch in flight, so a hard stop can destroy it. */
  client: pg.PoolClient | undefined;
  /** Set by runBatch for the claim floor (floor.ts): the generation the claim read (undefined
   *  when it returned nothing, saw a shard unleased, or the batch failed before it) and the
   *  rows claimed, in id order. */
  claimGeneration: string | undefined;
  claimedRows: ClaimedRow[];
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
  /** True once a hard stop began: a batch acknowledged by Kafka is then not marked. */
  aborted(): boolean;
  /**
   * True when connections go through a transaction-pooling proxy: no prepared statements,
   * the statements' text in every batch (./poolerProbe.ts decides; read at each batch).
   */
  inline(): boolean;
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
  startedAtMs: number;
  ackedAtMs: number;
  claimMs: number;
  publishMs: number;
  markMs: number;
}

/**
 * Claim, publish, mark sent, commit.
 *
 * @returns the committed batch (`claimed` 0 when there was nothing to claim)
 * @throws PublishError when Kafka did not acknowledge (the attempt is recorded on the
 *   rows); any other error when Postgres failed or the lease was lost. Either way the
 *   transaction was rolled back.
 */
export async function runBatch(
  ctx: BatchContext,
  worker: Worker,
  watermark: number,
  incarnation: string | undefined,
  shards: number[],
  from: { floor: number; generation: string } = { floor: 0, generation: '-1' },
): Promise<BatchResult> {
  const startedAtMs = Date.now();
  worker.lastClaimAtMs = startedAtMs;
  worker.claimGeneration = undefined;
  worker.claimedRows = [];
  const client = await ctx.pool.connect();
  worker.client = client;
  let broken: Error | undefined;
  let failedIds: number[] | undefined;
  /** Whether this batch prepares the statements on its connection. */
  let fresh = false;
  // The pool listens for errors only on idle clients. A connection dropped while this
  // one is checked out (during the Kafka send, say) would otherwise be an uncaught
  // 'error' event; the next query on it fails and the batch is retried.
  const onError = (error: Error): void => {
    broken ??= error;
  };
  client.on('error', onError);
  try {
    const claim: ClaimArguments = {
      watermark,
      shards,
      batchSize: ctx.options.batchSize,
      relayId: ctx.instanceId,
      incarnation: incarnation ?? '-infinity',
      floor: from.floor,
      generation: from.generation,
    };
    const inline = ctx.inline();
    // First batch on this connection: prepare the claim and the mark, outside the
    // transaction, in the same message.
    fresh = !inline && !prepared.has(client);
    const prepare = fresh ? `${prepareClaimSql(ctx.quotedSchema)}; ${prepareMarkSql(ctx.quotedSchema, ctx.options.onPublish)}; ` : '';
    const claimStarted = Date.now();
    const results = (await client.query(
      inline ? beginClaimInlineSql(ctx.quotedSchema, claim) : beginClaimSql(claim, prepare),
    )) as unknown as Array<pg.QueryResult<ClaimedRow>>;
    if (fresh) prepared.add(client);
    const { rows } = results[results.length - 1]!;
    // The floor may rise only over a claim that saw every one of its shards leased (claim.ts);
    // an empty claim says nothing about that, so it leaves the floor where it is.
    worker.claimGeneration = rows[0]?.all_leased === true ? rows[0].generation : undefined;
    worker.claimedRows = rows;
    if (rows.length === 0) {
      await client.query('COMMIT');
      return { claimed: 0, published: [], deadLetters: [], unsent: [], unsentError: undefined, startedAtMs, ackedAtMs: 0, claimMs: 0, publishMs: 0, markMs: 0 };
    }
    const claimMs = Date.now() - claimStarted;
    const publishStarted = Date.now();
    let outcome;
    try {
      outcome = await publishBatch(rows, {
        maxMessageBytes: ctx.options.maxMessageBytes,
        missingTopicTimeoutMs: ctx.options.missingTopicTimeoutMs,
        policyOf: (topic) => ctx.options.deadLetterPolicyByTopic[topic] ?? ctx.options.deadLetterPolicy,
        send: (batch) => ctx.send(batch),
      });
    } catch (error) {
      if (error instanceof PublishError || error instanceof TopicWaitError) failedIds = rows.map((r) => r.id);
      throw error;
    }
    const ackedAtMs = Date.now();
    const publishMs = ackedAtMs - publishStarted;
    if (ctx.aborted()) throw new OutboxError('relay aborted before marking the batch sent', { retriable: true });
    const { published, deadLetters, unsent } = outcome;
    if (published.length === 0 && deadLetters.length === 0 && outcome.held.length === 0 && unsent.length > 0) {
      // Nothing moved: roll back and let the relay back off (a batch of nothing but
      // waiting rows would otherwise be claimed again at once).
      failedIds = unsent.map((r) => r.id);
      throw outcome.unsentError ?? new OutboxError('no row of the batch was acknowledged', { retriable: true });
    }
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
    if (published.length > 0) {
      try {
        const ids = published.map((r) => r.id);
        await client.query(inline ? markAndCommitInlineSql(ctx.quotedSchema, ctx.options.onPublish, ids, ctx.instanceId) : markAndCommitSql(ids, ctx.instanceId));
      } catch (error) {
        const lost = leaseLostCounts(error);
        throw lost ? leaseLost(lost.expected, lost.changed) : error;
      }
    } else {
      await client.query('COMMIT');
    }
    const markMs = Date.now() - ackedAtMs;
    if (unsent.length > 0) {
      // Outside the committed transaction, like a failed batch: the attempt and its error stay on the rows.
      const error = describeError(outcome.unsentError).slice(0, 2_000);
      await ctx.pool.query(recordAttemptSql(ctx.quotedSchema), [unsent.map((r) => r.id), error]).catch(() => undefined);
    }
    // Held rows (behind a key parked just now) count as handled: the claim skips them now.
    return { claimed: rows.length, published, deadLetters, unsent, unsentError: outcome.unsentError, startedAtMs, ackedAtMs, claimMs, publishMs, markMs };
  } catch (error) {
    broken = error as Error;
    await client.query('ROLLBACK').catch(() => undefined);
    if (failedIds && !ctx.aborted()) {
      // Outside the rolled-back transaction: the attempt and its error stay on the rows.
      await ctx.pool.query(recordAttemptSql(ctx.quotedSchema), [failedIds, describeError(error).slice(0, 2_000)]).catch(() => undefined);
    }
    throw error;
  } finally {
    client.off('error', onError);
    if (worker.client === client) {
      worker.client = undefined;
      // A connection that failed mid-transaction is discarded, not reused; so is one whose
      // prepared statements are in doubt.
      const inDoubt = broken !== undefined && (preparedInDoubt(broken) || (fresh && !prepared.has(client)));
      client.release(broken && (isConnectionError(broken) || inDoubt) ? broken : undefined);
    }
  }
}

function leaseLost(expected: number, changed: number | null): OutboxError {
  return new OutboxError('lost the lease of a shard while publishing; rolled back, the new owner publishes these rows', {
    retriable: true,
    context: { expected, changed },
  });
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
