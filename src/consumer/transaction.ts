import type pg from 'pg';
import { describeError } from '../shared/errors.js';
import { traceHandlerRun, type HandlerFailureOutcome, type SettleHandlerRun } from '../shared/tracing.js';
import type { DeadLetterReason } from './deadLetterTopic.js';
import { HandlerEndedTransaction, MESSAGE_SAVEPOINT, guardClient, newTransactionMarker, transactionStatus, type ClientGuard } from './clientGuard.js';
import { batchContext, handlerContext } from './handlerContext.js';
import { HandlerTimeout, abandonSession, withinHandlerTimeout } from './handlerTimeout.js';
import type { KeyClaims } from './keyClaims.js';
import { failedAtFirst, type CommittedHook, type Failure, type MessageOutcome, type TransactOutcome } from './outcome.js';
import type { Prepared } from './prepare.js';
import type { EmitConsumerEvent } from './report.js';
import { begin, checkOut, type Session } from './session.js';
import type { ResolvedConsumerOptions } from './options.js';
import type { StopSignal } from './stopSignal.js';
import type { ConsumedMessage, ConsumerStats } from './types.js';

// The consumer's transaction: how a group of one partition's messages becomes one
// Postgres transaction that records their idempotency keys and runs their handlers.
//
//   transact        run the group, first without savepoints ('on-failure'), then with
//   savepointEach   a savepoint per message, at most SAVEPOINT_GROUP of them
//   runTransaction  BEGIN, claim the keys, run the handlers (in savepoints or not), COMMIT
//
// Before it: prepare.ts (decoding, idempotency keys). The batch handler's transaction is
// batchTransaction.ts (it falls back on savepointEach); the handler's context is
// handlerContext.ts; counting and announcing the outcome, report.ts. What happens around
// it (offsets, retries, dead letters, pause and resume) is the lifecycle, consumer.ts.

/**
 * Most savepoints in one transaction: 64 is PostgreSQL's per-backend cache of
 * subtransaction ids; past it every other session's snapshot checks go to pg_subtrans.
 */
const SAVEPOINT_GROUP = 64;

/**
 * Runs the consumer's transactions with `handler` (and, one message per call, a batch
 * handler's fallback). It shares the consumer's counters, its set of connections in
 * flight (a hard stop destroys them) and its events.
 */
export class TransactionEngine<V> {
  constructor(
    private readonly options: ResolvedConsumerOptions<V>,
    private readonly counters: ConsumerStats,
    /** Connections with a transaction in flight, rolled back by a hard stop. */
    private readonly activeClients: Set<pg.PoolClient>,
    private readonly emit: EmitConsumerEvent,
    private readonly keys: KeyClaims,
    /** A hard stop: a handler still running is no longer waited for. */
    private readonly stop: StopSignal,
  ) {}

  /**
   * Handle a group of messages, committing the leading ones that succeed.
   *
   * With `savepoints: 'on-failure'` (default) the group first runs as one plain
   * transaction, without a savepoint per message: one round trip per handler query plus
   * BEGIN, the key claim and COMMIT. If handler i fails, the whole transaction is rolled
   * back, messages 0..i-1 run again (and commit) in a fresh one, and message i is reported
   * failed, with its own error, without running it again. A handler that left the
   * transaction aborted (it caught a database error and went on) cannot be told apart
   * from the next message's failure this way: then the group runs again with a savepoint
   * per message, which finds it. Either way the outcome is the one of the savepoint path:
   * the effects of the messages before the failing one commit, the failing one's do not.
   * A handler that ended the transaction itself (clientGuard.ts) fails for good, in either
   * mode, and the messages before it run again in a fresh transaction.
   *
   * @returns how many leading messages are committed, and the handler failure, if any
   * @throws when a transaction itself fails (nothing committed, or unknown after a lost COMMIT)
   */
  async transact(pool: pg.Pool, topic: string, partition: number, prepared: Prepared<V>[]): Promise<TransactOutcome> {
    await this.keys.giveBack(pool, topic, partition, []);
    let group = prepared;
    let pending: Failure | undefined;
    // Which run of this group it is: from 2 on, a redo after a roll back (for the spans).
    let run = 1;
    if (this.options.savepoints === 'on-failure') {
      for (;; run++) {
        const result = await this.runTransaction(pool, topic, partition, group, false, run);
        if (!('rolledBack' in result)) return result.committed === group.length && pending ? { ...result, failure: pending } : result;
        if (!result.rolledBack) break;
        // Message `index` failed by itself: the ones before it run again, it does not.
        pending = result.rolledBack;
        if (pending.index === 0) return failedAtFirst(pending);
        group = group.slice(0, pending.index);
      }
    }
    return this.savepointEach(pool, topic, partition, group, pending, run);
  }

  /**
   * Run `group` with a savepoint per message, at most SAVEPOINT_GROUP of them
   * (subtransaction cache), committing the leading messages that succeed. `pending` is a
   * failure already known, of the message right after `group`. `run` is 2 or more when
   * the group's messages ran before in a transaction that was rolled back.
   */
  async savepointEach(pool: pg.Pool, topic: string, partition: number, group: Prepared<V>[], pending: Failure | undefined, run = 1): Promise<TransactOutcome> {
    for (;; run++) {
      const limited = group.length > SAVEPOINT_GROUP ? group.slice(0, SAVEPOINT_GROUP) : group;
      const result = await this.runTransaction(pool, topic, partition, limited, true, run);
      if (!('rolledBack' in result)) return result.committed === group.length && pending ? { ...result, failure: pending } : result;
      // Here only a handler that ended the transaction rolls back a whole group.
      if (!result.rolledBack) throw new Error('unreachable: the savepoint path rolls back a whole group only for a handler that ended it');
      pending = result.rolledBack;
      if (pending.index === 0) return failedAtFirst(pending);
      group = group.slice(0, pending.index);
    }
  }

  /**
   * One transaction: claim the keys, run each new message's handler (in its own savepoint
   * when `savepoints`), commit.
   *
   * With savepoints: stop at the first failing handler (its effects and its key, and the
   * keys of the messages after it, are taken back) and commit the rest.
   * Without: on a handler failure roll everything back and return `rolledBack`: the
   * failure when it is the handler's own, null when the transaction was aborted by an
   * earlier handler that swallowed a database error (the caller redoes with savepoints).
   */
  private async runTransaction(
    pool: pg.Pool,
    topic: string,
    partition: number,
    prepared: Prepared<V>[],
    savepoints: boolean,
    run: number,
  ): Promise<TransactOutcome | { rolledBack: Failure | null }> {
    const session = await checkOut(pool, this.activeClients);
    const { client, release } = session;
    // The spans of the handler runs that returned, by index, ended once the transaction
    // is decided: the first `committedCount` committed, the others were rolled back.
    const spans = new Map<number, SettleHandlerRun>();
    let committedCount = 0;
    try {
      // The marker tells, after a handler, that this transaction is still the one open.
      const marker = newTransactionMarker();
      await begin(session, marker);
      const { firstIndex, claimed } = await this.keys.claim(client, prepared);
      // A message's afterCommit hooks live in its outcome: a run that is rolled back (or a
      // message that fails) drops them with it.
      const outcomes: MessageOutcome[] = [];
      let failure: Failure | undefined;
      // Index of the message whose savepoint is open: it is released together with the
      // next message's SAVEPOINT, in one round trip.
      let open = -1;
      const fail = async (index: number, error: unknown, reason?: DeadLetterReason): Promise<void> => {
        await client.query(`ROLLBACK TO SAVEPOINT ${MESSAGE_SAVEPOINT}`);
        failure = { index, error, attempt: (prepared[index] as Prepared<V>).attempt, reason };
        await this.keys.unclaim(client, [...claimed].filter((k) => (firstIndex.get(k) as number) >= index));
      };
      // Handler `index` ended the transaction (clientGuard.ts): nothing here holds any more.
      const ended = (index: number, how: string): Promise<{ rolledBack: Failure }> =>
        this.endedByHandler(pool, session, topic, partition, prepared[index] as Prepared<V>, index, how, [...claimed].filter((k) => (firstIndex.get(k) as number) >= index));
      for (let i = 0; i < prepared.length; i++) {
        const p = prepared[i] as Prepared<V>;
        const { message } = p;
        const key = message.idempotencyKey;
        if (key !== undefined && (!claimed.has(key) || firstIndex.get(key) !== i)) {
          outcomes.push({ duplicate: true, stale: false, hooks: [], settled: true });
          continue;
        }
        if (savepoints) {
          try {
            await client.query(open >= 0 ? `RELEASE SAVEPOINT ${MESSAGE_SAVEPOINT}; SAVEPOINT ${MESSAGE_SAVEPOINT}` : `SAVEPOINT ${MESSAGE_SAVEPOINT}`);
          } catch (error) {
            if (session.broken || open < 0) throw session.broken ?? error;
            if (savepointGone(client, error)) return await ended(open, 'the savepoint the consumer opened for it was gone after it');
            // The RELEASE failed, so the SAVEPOINT did not run: the previous handler returned
            // with the transaction aborted (it caught a database error and went on).
            await fail(open, abortedByHandler(error));
            break;
          }
          open = i;
        }
        const outcome: MessageOutcome = { duplicate: false, stale: false, hooks: [], settled: false };
        // The handler's client refuses COMMIT, ROLLBACK, BEGIN... (clientGuard.ts).
        const guard = guardClient(client);
        let thrown: { error: unknown } | undefined;
        try {
          // Inside a CONSUMER span when OpenTelemetry is there (src/shared/tracing.ts).
          const traced = await traceHandlerRun(message, this.options.groupId, p.attempt, run, () => this.runHandler(client, p, outcome, guard), (error) => failureOutcome(this.options, error, message, p.attempt));
          spans.set(i, traced.settle);
        } catch (error) {
          thrown = { error };
        }
        outcome.settled = true;
        // From here on ctx.client and the helpers refuse use (an afterCommit hook, a callback left running).
        guard.close();
        if (thrown?.error instanceof HandlerTimeout) {
          // The handler may still be using the connection: the whole transaction goes.
          await this.handlerTimedOut(pool, session, topic, partition, [p], thrown.error);
          return { rolledBack: { index: i, error: thrown.error, attempt: p.attempt } };
        }
        if (thrown && session.broken) throw session.broken;
        // Whatever the handler did, the transaction must still be this one, open.
        const how = await guard.endedBy(marker);
        if (how !== undefined) return await ended(i, how);
        if (thrown || guard.refused) {
          // A refused statement fails its message for good, even when the handler caught it.
          const error = guard.refused ?? thrown?.error;
          const reason: DeadLetterReason | undefined = guard.refused ? 'permanent-error' : undefined;
          if (!savepoints) {
            await client.query('ROLLBACK');
            release();
            // 25P02: the transaction was already aborted, maybe by an earlier handler.
            return { rolledBack: !guard.refused && (error as { code?: unknown })?.code === '25P02' ? null : { index: i, error, attempt: p.attempt, reason } };
          }
          await fail(i, error, reason);
          break;
        }
        outcomes.push(outcome);
      }
      if (savepoints && !failure && open >= 0) {
        try {
          await client.query(`RELEASE SAVEPOINT ${MESSAGE_SAVEPOINT}`);
        } catch (error) {
          if (session.broken) throw session.broken;
          if (savepointGone(client, error)) return await ended(open, 'the savepoint the consumer opened for it was gone after it');
          await fail(open, abortedByHandler(error));
        }
      }
      const committed = failure ? (failure as Failure).index : prepared.length;
      if (committed === 0) {
        await client.query('ROLLBACK');
      } else {
        const result = await client.query('COMMIT');
        // COMMIT of an aborted transaction rolls back: a handler swallowed a database error.
        if (result.command === 'ROLLBACK') {
          if (savepoints) throw new Error('COMMIT rolled back: the transaction was aborted outside any handler');
          release();
          return { rolledBack: null };
        }
        this.counters.transactions++;
      }
      release();
      const hooks: CommittedHook[] = [];
      for (let i = 0; i < committed; i++) {
        const { offset, idempotencyKey } = (prepared[i] as Prepared<V>).message;
        for (const fn of (outcomes[i] as MessageOutcome).hooks) hooks.push({ offset, idempotencyKey, fn });
      }
      // Counted and announced by report(), once the caller has the outcome.
      committedCount = committed;
      return { committed, failure, hooks, outcomes: outcomes.slice(0, committed) };
    } catch (error) {
      // The connection's state is unknown: destroy it (the server rolls back) rather
      // than return it to the pool mid-transaction.
      release(error instanceof Error ? error : new Error(String(error)));
      throw error;
    } finally {
      for (const [index, settle] of spans) settle(index >= committedCount);
    }
  }

  /** One message's handler: `handler`, or `handleBatch` with that message alone. */
  private runHandler(client: pg.PoolClient, p: Prepared<V>, outcome: MessageOutcome, guard: ClientGuard): Promise<void> {
    const { handler, handleBatch } = this.options;
    const run = handleBatch
      ? handleBatch([p.message], batchContext(this.options, client, p.attempt, [p.message], [outcome], outcome, guard))
      : (handler as NonNullable<typeof handler>)(p.message, handlerContext(this.options, client, p.attempt, outcome, guard));
    const { offset } = p.message;
    return this.stop.race(withinHandlerTimeout(run, this.options.handlerTimeoutMs, offset, offset), 'a handler');
  }

  /**
   * A handler or batch handler call of `messages` timed out: give its transaction up
   * (handlerTimeout.ts), then say so. Nothing of the transaction committed; the caller
   * reports the failure (its messages are retried or dead-lettered, or, for a batch,
   * redone) without giving back any key (the server rolled them back).
   */
  async handlerTimedOut(pool: pg.Pool, session: Session, topic: string, partition: number, messages: Prepared<V>[], error: HandlerTimeout): Promise<void> {
    await abandonSession(pool, session, error, this.options.logger);
    const firstOffset = (messages[0] as Prepared<V>).message.offset;
    const lastOffset = (messages[messages.length - 1] as Prepared<V>).message.offset;
    const attempt = Math.max(...messages.map((m) => m.attempt));
    const timeoutMs = this.options.handlerTimeoutMs;
    this.options.logger.warn({ topic, partition, firstOffset, lastOffset, attempt, handlerTimeoutMs: timeoutMs }, 'handler timed out; its transaction is rolled back and the message fails');
    this.emit('handlerTimeout', { topic, partition, firstOffset, lastOffset, count: messages.length, attempt, timeoutMs, error });
  }

  /**
   * Handler `index` ended the consumer's transaction: it committed or rolled back (maybe
   * then began another). What it committed cannot be taken back, and that may include the
   * idempotency keys of the whole group. So: roll back whatever is open now, destroy the
   * connection (its session may have been changed outside any transaction), take back the
   * keys of this message and the ones after it (their handlers did not run here), and
   * report this message failed for good. The caller runs the messages before it again:
   * duplicates if the handler committed them, handled anew if it rolled them back.
   */
  async endedByHandler(
    pool: pg.Pool,
    session: Session,
    topic: string,
    partition: number,
    p: Prepared<V>,
    index: number,
    how: string,
    keys: string[],
  ): Promise<{ rolledBack: Failure }> {
    const error = new HandlerEndedTransaction(how);
    await session.client.query('ROLLBACK').catch(() => undefined);
    session.release(error);
    await this.keys.giveBack(pool, topic, partition, keys);
    return { rolledBack: { index, error, attempt: p.attempt, reason: 'permanent-error' } };
  }

}

/**
 * A savepoint statement of the consumer failed because its savepoint, or the whole
 * transaction, is gone: the handler before it ended the transaction, or released or
 * rolled back past the consumer's savepoint.
 */
function savepointGone(client: pg.PoolClient, error: unknown): boolean {
  const code = (error as { code?: unknown })?.code;
  return code === '3B001' || code === '25P01' || transactionStatus(client) === 'I';
}

/** The error of a handler that returned normally with its transaction aborted. */
export function abortedByHandler(cause: unknown): Error {
  const error = new Error(
    `the handler returned with the transaction aborted (it caught a database error and went on): ${describeError(cause)}`,
    { cause },
  );
  error.name = 'HandlerLeftTransactionAborted';
  return error;
}

/** For the handler's span: what the consumer does with this failure (as consumer.ts decides). */
function failureOutcome<V>(options: ResolvedConsumerOptions<V>, error: unknown, message: ConsumedMessage<V>, attempt: number): HandlerFailureOutcome {
  const kind = options.classifyError(error, message) === 'permanent' ? 'permanent' : 'transient';
  if (kind === 'transient' && attempt < options.maxAttempts) return { event: 'retry', attributes: { 'outbox.consumer.attempt': attempt, 'outbox.consumer.next_attempt': attempt + 1 } };
  return { event: 'dead_letter', attributes: { 'outbox.dead_letter.reason': kind === 'transient' ? 'retries-exhausted' : 'permanent-error', 'outbox.consumer.attempt': attempt } };
}
