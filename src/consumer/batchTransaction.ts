import type pg from 'pg';
import { HandlerEndedTransaction, MESSAGE_SAVEPOINT, guardClient, newTransactionMarker } from './clientGuard.js';
import type { DeadLetterReason } from './deadLetterTopic.js';
import { batchContext } from './handlerContext.js';
import { HandlerTimeout, withinHandlerTimeout } from './handlerTimeout.js';
import type { KeyClaims } from './keyClaims.js';
import { failedAtFirst, type CommittedHook, type Failure, type MessageOutcome, type TransactOutcome } from './outcome.js';
import type { Prepared } from './prepare.js';
import type { EmitConsumerEvent } from './report.js';
import { begin, checkOut } from './session.js';
import { abortedByHandler, type TransactionEngine } from './transaction.js';
import type { ResolvedConsumerOptions } from './options.js';
import type { StopSignal } from './stopSignal.js';
import type { ConsumerStats } from './types.js';

// The consumer's transaction with `handleBatch`: one call for a group's new messages.
// When it fails, the culprit is searched for without redoing more than it takes: in one
// transaction, the failed batch's first half runs as a batch in a savepoint (kept when it
// passes, rolled back and halved when it fails), and so on by halves, until at most
// ONE_AT_A_TIME_WINDOW messages are left around the culprit; the parts that passed
// commit. Those messages then run one per call, each in its own savepoint
// (TransactionEngine.savepointEach), up to and including the culprit. After it the
// partition goes on in full batches.

/** A failed batch is narrowed down by halves to this many messages, then redone one per call. */
const ONE_AT_A_TIME_WINDOW = 16;

/** A partition's search for the message that failed its batch. */
interface Search {
  /** The last offset that can hold the culprit: past it, batches again. */
  through: bigint;
  /** Above 1: search by halves next; 0: one message per call. */
  batchOf: number;
  /** The culprit is found (`through`): what runs now is its retry, not a redo. */
  found?: boolean;
}

/** Runs the consumer's transactions with a batch handler; see the file's head. */
export class BatchTransactions<V> {
  /** Per partition: the search after a failed batch, until the culprit is past. */
  private readonly searches = new Map<string, Search>();

  constructor(
    private readonly options: ResolvedConsumerOptions<V>,
    private readonly counters: ConsumerStats,
    /** Connections with a transaction in flight, rolled back by a hard stop. */
    private readonly activeClients: Set<pg.PoolClient>,
    private readonly emit: EmitConsumerEvent,
    private readonly keys: KeyClaims,
    /** For the one-message-per-call runs, in savepoints. */
    private readonly engine: TransactionEngine<V>,
    /** A hard stop: a batch handler still running is no longer waited for. */
    private readonly stop: StopSignal,
  ) {}

  /**
   * Handle a group of messages with `handleBatch`: one transaction, one call for the new
   * messages. A failed batch (the call threw, or the transaction could not commit) is
   * rolled back, announced (`batchFallback`) and searched as above, one transaction per
   * call of this method, so that what each committed has its offset committed. A group
   * with a single new message needs no search: its failure is that message's.
   *
   * @returns how many leading messages are committed, and the failure, if any
   * @throws when a transaction itself fails (nothing committed, or unknown after a lost COMMIT)
   */
  async transact(pool: pg.Pool, topic: string, partition: number, prepared: Prepared<V>[]): Promise<TransactOutcome> {
    await this.keys.giveBack(pool, topic, partition, []);
    const tp = partitionKey(topic, partition);
    const search = this.searches.get(tp);
    if (search) {
      const end = prepared.findIndex((p) => offsetOf(p) > search.through);
      if (end !== 0) return this.narrow(pool, topic, partition, end < 0 ? prepared : prepared.slice(0, end), search);
      this.searches.delete(tp);
    }
    const result = await this.runBatchTransaction(pool, topic, partition, prepared);
    if (!('batchFailed' in result)) return result;
    const { failure, fresh, error } = result.batchFailed;
    if (failure) return this.culprit(pool, topic, partition, prepared, failure);
    this.counters.batchFallbacks++;
    const first = prepared[fresh[0] as number] as Prepared<V>;
    const last = prepared[fresh[fresh.length - 1] as number] as Prepared<V>;
    this.emit('batchFallback', { topic, partition, firstOffset: first.raw.offset, lastOffset: last.raw.offset, count: fresh.length, error });
    const started: Search = { through: offsetOf(prepared[prepared.length - 1] as Prepared<V>), batchOf: halfOf(prepared.length, error) };
    this.searches.set(tp, started);
    return this.narrow(pool, topic, partition, prepared, started);
  }

  /** Forget the searches of partitions this member no longer owns. */
  forgetPartitions(owned: ReadonlySet<string>): void {
    for (const tp of [...this.searches.keys()]) if (!owned.has(tp)) this.searches.delete(tp);
  }

  /**
   * One step of the search in `window` (the messages up to `search.through`): the search
   * by halves, or, once the window is small, its messages one per call.
   */
  private async narrow(pool: pg.Pool, topic: string, partition: number, window: Prepared<V>[], search: Search): Promise<TransactOutcome> {
    if (search.batchOf <= 1 || window.length <= ONE_AT_A_TIME_WINDOW) return this.oneAtATime(pool, topic, partition, window, search);
    return this.searchByHalves(pool, topic, partition, window, search);
  }

  /**
   * One transaction that narrows the window down by halves, each part a handleBatch call
   * in a savepoint of its own: a part that passes is kept, one that fails is rolled back to
   * its savepoint and halved. When at most ONE_AT_A_TIME_WINDOW messages are left around
   * the culprit, the parts that passed (the messages before them) commit, and those are
   * left for one-per-call runs. One transaction instead of one per part: a commit and an
   * offset commit per poison message, not per halving.
   */
  private async searchByHalves(pool: pg.Pool, topic: string, partition: number, window: Prepared<V>[], search: Search): Promise<TransactOutcome> {
    const session = await checkOut(pool, this.activeClients);
    const { client, release } = session;
    try {
      const marker = newTransactionMarker();
      await begin(session, marker);
      const { firstIndex, claimed } = await this.keys.claim(client, window);
      const outcomes: MessageOutcome[] = window.map((p, i) => {
        const key = p.message.idempotencyKey;
        return { duplicate: key !== undefined && (!claimed.has(key) || firstIndex.get(key) !== i), stale: false, hooks: [], settled: false };
      });
      // [lo, end) holds the culprit; the part tried is [lo, lo + size).
      let lo = 0;
      let end = window.length;
      let size = Math.ceil(window.length / 2);
      while (end - lo > ONE_AT_A_TIME_WINDOW) {
        const fresh: number[] = [];
        for (let i = lo; i < lo + size; i++) if (!(outcomes[i] as MessageOutcome).duplicate) fresh.push(i);
        let passed = true;
        if (fresh.length > 0) {
          await client.query(`SAVEPOINT ${MESSAGE_SAVEPOINT}`);
          const messages = fresh.map((i) => (window[i] as Prepared<V>).message);
          const hookOutcome = outcomes[fresh[fresh.length - 1] as number] as MessageOutcome;
          const guard = guardClient(client);
          const attempt = Math.max(...fresh.map((i) => (window[i] as Prepared<V>).attempt));
          const context = batchContext(this.options, client, attempt, messages, fresh.map((i) => outcomes[i] as MessageOutcome), hookOutcome, guard);
          let thrown = false;
          let timedOut: HandlerTimeout | undefined;
          try {
            await this.callBatch(messages, context);
          } catch (error) {
            thrown = true;
            if (error instanceof HandlerTimeout) timedOut = error;
          }
          hookOutcome.settled = true;
          guard.close();
          if (timedOut) {
            // The transaction goes with the parts that passed: the window's messages go one per call.
            await this.engine.handlerTimedOut(pool, session, topic, partition, fresh.map((i) => window[i] as Prepared<V>), timedOut);
            search.batchOf = 0;
            return this.oneAtATime(pool, topic, partition, window, search);
          }
          if (thrown && session.broken) throw session.broken;
          const how = await guard.endedBy(marker);
          if (how !== undefined) {
            // It may have committed part of its work: no more batches, one message per call.
            await this.engine.endedByHandler(pool, session, topic, partition, window[lo] as Prepared<V>, lo, how, [...claimed]);
            search.batchOf = 0;
            return this.oneAtATime(pool, topic, partition, window, search);
          }
          passed = !thrown && !guard.refused;
          if (passed) {
            try {
              await client.query(`RELEASE SAVEPOINT ${MESSAGE_SAVEPOINT}`);
            } catch (error) {
              if (session.broken) throw session.broken;
              passed = false; // returned with the transaction aborted (it swallowed a database error)
            }
          }
          if (!passed) {
            await client.query(`ROLLBACK TO SAVEPOINT ${MESSAGE_SAVEPOINT}; RELEASE SAVEPOINT ${MESSAGE_SAVEPOINT}`);
            for (const i of fresh) Object.assign(outcomes[i] as MessageOutcome, { stale: false, hooks: [] });
          }
        }
        if (passed) lo += size;
        else end = lo + size;
        size = Math.ceil((end - lo) / 2);
      }
      // The messages from `lo` on are handled later, one per call: their keys go back.
      await this.keys.unclaim(client, [...claimed].filter((k) => (firstIndex.get(k) as number) >= lo));
      search.through = offsetOf(window[end - 1] as Prepared<V>);
      search.batchOf = 0;
      if (lo === 0) {
        await client.query('ROLLBACK');
        release();
        return { committed: 0, failure: undefined, hooks: [], outcomes: [] };
      }
      const result = await client.query('COMMIT');
      if (result.command === 'ROLLBACK') throw new Error('COMMIT rolled back: the transaction was aborted outside any handler');
      this.counters.transactions++;
      release();
      const hooks: CommittedHook[] = [];
      for (let i = 0; i < lo; i++) {
        const { offset, idempotencyKey } = (window[i] as Prepared<V>).message;
        for (const fn of (outcomes[i] as MessageOutcome).hooks) hooks.push({ offset, idempotencyKey, fn });
      }
      return { committed: lo, failure: undefined, hooks, outcomes: outcomes.slice(0, lo) };
    } catch (error) {
      release(error instanceof Error ? error : new Error(String(error)));
      throw error;
    }
  }

  /**
   * Messages of the window one per call, each in its own savepoint. The first that fails
   * is the culprit: from then on only it runs this way (its retries); once it is
   * committed or dead-lettered, the partition goes on in batches.
   */
  private async oneAtATime(pool: pg.Pool, topic: string, partition: number, window: Prepared<V>[], search: Search): Promise<TransactOutcome> {
    const tp = partitionKey(topic, partition);
    // A redo of messages the failed batch ran (run 2, for the spans), or the culprit's retry.
    const result = await this.engine.savepointEach(pool, topic, partition, window, undefined, search.found ? 1 : 2);
    if (result.failure) this.searches.set(tp, { through: offsetOf(window[result.failure.index] as Prepared<V>), batchOf: 0, found: true });
    else if (result.committed > 0 && offsetOf(window[result.committed - 1] as Prepared<V>) >= search.through) this.searches.delete(tp);
    return result;
  }

  /**
   * The failure of `group`'s single new message: it alone runs next (its retry, one per
   * call); the messages before it are duplicates (no handler runs for them) and commit.
   */
  private async culprit(pool: pg.Pool, topic: string, partition: number, group: Prepared<V>[], failure: Failure): Promise<TransactOutcome> {
    this.searches.set(partitionKey(topic, partition), { through: offsetOf(group[failure.index] as Prepared<V>), batchOf: 0, found: true });
    if (failure.index === 0) return failedAtFirst(failure);
    return this.engine.savepointEach(pool, topic, partition, group.slice(0, failure.index), failure, 2);
  }

  /** One call of the batch handler, bounded by handlerTimeoutMs and a hard stop. */
  private callBatch(messages: Array<Prepared<V>['message']>, context: Parameters<NonNullable<ResolvedConsumerOptions<V>['handleBatch']>>[1]): Promise<void> {
    const handleBatch = this.options.handleBatch as NonNullable<ResolvedConsumerOptions<V>['handleBatch']>;
    const first = (messages[0] as Prepared<V>['message']).offset;
    const last = (messages[messages.length - 1] as Prepared<V>['message']).offset;
    return this.stop.race(withinHandlerTimeout(handleBatch(messages, context), this.options.handlerTimeoutMs, first, last), 'a batch handler');
  }

  /**
   * One transaction with handleBatch: claim the keys, one call for the new messages (all
   * but the duplicates, in offset order), commit.
   * @returns the outcome when it committed; `batchFailed` when it was rolled back: with
   *   the failure when there was a single new message (it is that message's), otherwise
   *   the new messages' indexes and the error, for the caller's run one message at a time
   */
  private async runBatchTransaction(
    pool: pg.Pool,
    topic: string,
    partition: number,
    prepared: Prepared<V>[],
  ): Promise<TransactOutcome | { batchFailed: { failure?: Failure; fresh: number[]; error: unknown } }> {
    const session = await checkOut(pool, this.activeClients);
    const { client, release } = session;
    try {
      const marker = newTransactionMarker();
      await begin(session, marker);
      const { firstIndex, claimed } = await this.keys.claim(client, prepared);
      const outcomes: MessageOutcome[] = [];
      const fresh: number[] = [];
      for (let i = 0; i < prepared.length; i++) {
        const key = (prepared[i] as Prepared<V>).message.idempotencyKey;
        const duplicate = key !== undefined && (!claimed.has(key) || firstIndex.get(key) !== i);
        outcomes.push({ duplicate, stale: false, hooks: [], settled: false });
        if (!duplicate) fresh.push(i);
      }
      if (fresh.length > 0) {
        const messages = fresh.map((i) => (prepared[i] as Prepared<V>).message);
        const attempt = Math.max(...fresh.map((i) => (prepared[i] as Prepared<V>).attempt));
        // The batch's hooks live with its last message: they run, or are dropped, with it.
        const hookOutcome = outcomes[fresh[fresh.length - 1] as number] as MessageOutcome;
        const guard = guardClient(client);
        const context = batchContext(this.options, client, attempt, messages, fresh.map((i) => outcomes[i] as MessageOutcome), hookOutcome, guard);
        let thrown: { error: unknown } | undefined;
        try {
          await this.callBatch(messages, context);
        } catch (error) {
          thrown = { error };
        }
        hookOutcome.settled = true;
        // From here on ctx.client and the helpers refuse use (an afterCommit hook, a callback left running).
        guard.close();
        const single = fresh.length === 1 ? (fresh[0] as number) : undefined;
        if (thrown?.error instanceof HandlerTimeout) {
          // Nothing committed: a single message fails (retried, then dead-lettered), a batch is searched.
          const error = thrown.error;
          await this.engine.handlerTimedOut(pool, session, topic, partition, fresh.map((i) => prepared[i] as Prepared<V>), error);
          if (single === undefined) return { batchFailed: { fresh, error } };
          return { batchFailed: { failure: { index: single, error, attempt: (prepared[single] as Prepared<V>).attempt }, fresh, error } };
        }
        if (thrown && session.broken) throw session.broken;
        const how = await guard.endedBy(marker);
        if (how !== undefined) {
          // What it committed cannot be taken back. One message: it fails for good, as with
          // `handler`. Several: every key of the group is taken back and the messages run
          // again one at a time, where the one that ends its transaction fails for good.
          const keys = [...claimed].filter((k) => single === undefined || (firstIndex.get(k) as number) >= single);
          const { rolledBack } = await this.engine.endedByHandler(pool, session, topic, partition, prepared[single ?? (fresh[0] as number)] as Prepared<V>, single ?? (fresh[0] as number), how, keys);
          return { batchFailed: single !== undefined ? { failure: rolledBack, fresh, error: rolledBack.error } : { fresh, error: rolledBack.error } };
        }
        if (thrown || guard.refused) {
          const error = guard.refused ?? thrown?.error;
          await client.query('ROLLBACK');
          release();
          if (single === undefined) return { batchFailed: { fresh, error } };
          const reason: DeadLetterReason | undefined = guard.refused ? 'permanent-error' : undefined;
          return { batchFailed: { failure: { index: single, error, attempt: (prepared[single] as Prepared<V>).attempt, reason }, fresh, error } };
        }
      }
      const result = await client.query('COMMIT');
      // COMMIT of an aborted transaction rolls back: the handler swallowed a database error.
      if (result.command === 'ROLLBACK') {
        release();
        const error = abortedByHandler(new Error('COMMIT rolled back: the transaction was aborted'));
        if (fresh.length !== 1) return { batchFailed: { fresh, error } };
        const index = fresh[0] as number;
        return { batchFailed: { failure: { index, error, attempt: (prepared[index] as Prepared<V>).attempt }, fresh, error } };
      }
      this.counters.transactions++;
      release();
      const hooks: CommittedHook[] = [];
      for (let i = 0; i < prepared.length; i++) {
        const { offset, idempotencyKey } = (prepared[i] as Prepared<V>).message;
        for (const fn of (outcomes[i] as MessageOutcome).hooks) hooks.push({ offset, idempotencyKey, fn });
      }
      return { committed: prepared.length, failure: undefined, hooks, outcomes };
    } catch (error) {
      // The connection's state is unknown: destroy it (the server rolls back) rather
      // than return it to the pool mid-transaction.
      release(error instanceof Error ? error : new Error(String(error)));
      throw error;
    }
  }

}

function partitionKey(topic: string, partition: number): string {
  return `${topic}\u0000${partition}`;
}

function offsetOf<V>(p: Prepared<V>): bigint {
  return BigInt(p.raw.offset);
}

/**
 * The next part to try after a failed one of `size` messages. A batch that ended the
 * transaction itself may have committed part of its work: it is not run again as a
 * batch, its messages go one per call at once.
 */
function halfOf(size: number, error: unknown): number {
  return error instanceof HandlerEndedTransaction ? 0 : Math.ceil(size / 2);
}
