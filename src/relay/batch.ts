import type pg from 'pg';
import { OutboxError, describeError } from '../shared/errors.js';
import { beginClaimSql, claimSql, type ClaimedRow } from './sql/claim.js';
import { markSentSql } from './sql/markSent.js';
import { deadLetterSql, recordAttemptSql } from './sql/deadLetter.js';
import { publishBatch, PublishError, TopicWaitError, type DeadLetterPlan } from './publishBatch.js';
import type { RelayMessage } from './message.js';
import type { SendResult } from './producer.js';
import type { ResolvedRelayOptions } from './options.js';
import { tracePublish } from '../shared/tracing.js';

// One batch of one worker, as one Postgres transaction:
//   BEGIN → claim (FOR UPDATE SKIP LOCKED, below the horizon, on owned shards)
//         → publish to Kafka and wait for the acknowledgement
//         → mark sent (or delete) and dead-letter what Kafka can never take
//         → COMMIT.
// A crash or error anywhere before COMMIT rolls the claim back: the rows stay unsent and
// are published again (at least once). The relay loop (relay.ts) decides when to run a
// batch and what to tell listeners about it; nothing here emits events.

/** One of the relay's concurrent batch runners and the shards it handles. */
export interface Worker {
  index: number;
  /** Shards this worker handles when the relay owns them. */
  shards: number[];
  /** Watermark up to which this worker found nothing more to claim. */
  drainedTo: number;
  lastClaimAtMs: number;
  failures: number;
  /** The connection of the batch in flight, so a hard stop can destroy it. */
  client: pg.PoolClient | undefined;
  /** Set by runBatch for the claim floor (floor.ts): the generation read at BEGIN (undefined
   *  when the batch failed before it) and the rows claimed, in id order. */
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
  // The pool listens for errors only on idle clients. A connection dropped while this
  // one is checked out (during the Kafka send, say) would otherwise be an uncaught
  // 'error' event; the next query on it fails and the batch is retried.
  const onError = (error: Error): void => {
    broken ??= error;
  };
  client.on('error', onError);
  try {
    // BEGIN, the plan settings and the floor generation in one round trip (see beginClaimSql).
    const begun = (await client.query(beginClaimSql(ctx.quotedSchema))) as unknown as Array<pg.QueryResult<{ generation: string }>>;
    const generation = begun[begun.length - 1]!.rows[0]!.generation;
    const claimStarted = Date.now();
    const { rows } = await client.query<ClaimedRow>(claimSql(ctx.quotedSchema), [
      watermark,
      shards,
      ctx.options.batchSize,
      ctx.instanceId,
      incarnation ?? '-infinity',
      from.floor,
      from.generation,
    ]);
    // The floor may rise only over a claim that saw every one of its shards leased (claim.ts);
    // an empty claim says nothing about that, so it leaves the floor where it is.
    worker.claimGeneration = (rows[0] as (ClaimedRow & { all_leased?: boolean }) | undefined)?.all_leased === true ? generation : undefined;
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
        // A PRODUCER span per message when OpenTelemetry is there (src/shared/tracing.ts).
        send: async (batch) => {
          let results: SendResult[] = [];
          await tracePublish(batch, async (traced) => {
            results = await ctx.send(traced);
          });
          return results;
        },
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
    if (published.length > 0) {
      const marked = await client.query(markSentSql(ctx.quotedSchema, ctx.options.onPublish), [published.map((r) => r.id), ctx.instanceId]);
      if (marked.rowCount !== published.length) throw leaseLost(published.length, marked.rowCount);
    }
    if (deadLetters.length > 0) {
      const { rows: moved } = await client.query<{ moved: number }>(deadLetterSql(ctx.quotedSchema), [
        deadLetters.map((d) => d.row.id),
        deadLetters.map((d) => d.reason),
        deadLetters.map((d) => d.errorName),
        deadLetters.map((d) => d.policy),
        ctx.instanceId,
      ]);
      if (moved[0]!.moved !== deadLetters.length) throw leaseLost(deadLetters.length, moved[0]!.moved);
    }
    await client.query('COMMIT');
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
      // A connection that failed mid-transaction is discarded, not reused.
      client.release(broken && isConnectionError(broken) ? broken : undefined);
    }
  }
}

function leaseLost(expected: number, changed: number | null): OutboxError {
  return new OutboxError('lost the lease of a shard while publishing; rolled back, the new owner publishes these rows', {
    retriable: true,
    context: { expected, changed },
  });
}

function isConnectionError(error: Error): boolean {
  const code = (error as { code?: string }).code;
  // Class 08 (connection exception), 57P01-57P03 (admin shutdown, crash shutdown,
  // cannot connect now), or a socket error without an SQLSTATE.
  return code === undefined || code.startsWith('08') || code.startsWith('57P');
}
