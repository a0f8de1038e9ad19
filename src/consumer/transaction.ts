import type pg from 'pg';
import type { KafkaMessage } from 'kafkajs';
import { describeError } from '../shared/errors.js';
import { quoteIdentifier } from '../shared/identifiers.js';
import { HEADERS } from '../shared/kafka.js';
import { traceHandler, traceSkipped, type HandlerFailureOutcome } from '../shared/tracing.js';
import { DecodeError, decodeHeaders, decodeValue } from './decode.js';
import type { DeadLetterReason } from './deadLetterTopic.js';
import { advanceEntityVersion } from './versionGate.js';
import { lockEntity } from './entityLock.js';
import { claimKeysSql, unclaimKeysSql } from './sql/processedMessages.js';
import { HandlerEndedTransaction, MESSAGE_SAVEPOINT, beginSql, guardClient, newTransactionMarker, transactionStatus } from './clientGuard.js';
import type { ResolvedConsumerOptions } from './options.js';
import type { BatchContext, ConsumedMessage, ConsumerEvents, ConsumerStats, HandlerContext } from './types.js';

// The consumer's transaction: how a chunk of one partition's messages becomes one
// Postgres transaction that records their idempotency keys and runs their handlers.
//
//   prepareChunk   decode each message and find its idempotency key
//   transact       run the group, first without savepoints ('on-failure'), then with
//   runTransaction BEGIN, claim the keys, run the handlers (in savepoints or not), COMMIT
//   runBatchTransaction  the same with handleBatch: one call for the group's new messages;
//                  when it fails, the group runs again one message per savepoint
//   context        what a handler gets: the open transaction and helpers bound to it
//
// What happens around it (offsets, retries, dead letters, pause and resume) is the
// consumer's lifecycle, in consumer.ts.

/**
 * Most savepoints in one transaction: 64 is PostgreSQL's per-backend cache of
 * subtransaction ids; past it every other session's snapshot checks go to pg_subtrans.
 */
const SAVEPOINT_GROUP = 64;

/** Longest idempotency key accepted; longer ones would not fit a btree index entry safely. */
const MAX_KEY_CHARS = 512;

/** One message of a transaction, ready for its handler. */
export interface Prepared<V> {
  raw: KafkaMessage;
  message: ConsumedMessage<V>;
  attempt: number;
  /** No usable idempotency key: processed without dedup. */
  missingKey: boolean;
}

/** Why a message could not be handled. */
export interface Failure {
  /** Index in the chunk. */
  index: number;
  error: unknown;
  /** Set when the failure is permanent by nature, whatever the classifier says. */
  reason?: DeadLetterReason;
  attempt: number;
}

/** An `afterCommit` hook of a message whose transaction committed, to run now. */
export interface CommittedHook {
  offset: string;
  idempotencyKey: string | undefined;
  fn: () => unknown;
}

/** What a transaction did: how many leading messages committed, the failure, the hooks to run. */
export interface TransactOutcome {
  committed: number;
  failure: Failure | undefined;
  /** The afterCommit hooks of the committed messages, in offset order. */
  hooks: CommittedHook[];
  /** Per committed message (the first `committed` of the group): duplicate, stale. */
  outcomes: Array<{ duplicate: boolean; stale: boolean }>;
}

/** What a run of a handler reported for one message, while its transaction is open. */
interface MessageOutcome {
  duplicate: boolean;
  stale: boolean;
  /** Its afterCommit hooks, dropped with it when its run is rolled back. */
  hooks: Array<() => unknown>;
  /** Its handler returned: no more hooks. */
  settled: boolean;
}

/** Emits one of the consumer's events (the Consumer's own emit). */
export type EmitConsumerEvent = <K extends keyof ConsumerEvents & string>(event: K, payload: ConsumerEvents[K]) => void;

/**
 * Runs the consumer's transactions. It shares the consumer's counters, its set of
 * connections in flight (a hard stop destroys them) and its events.
 */
export class TransactionEngine<V> {
  private readonly claimSql: string;
  private readonly unclaimSql: string;
  /** Per partition: keys to take back (see giveBack) that could not be yet. */
  private readonly pendingGiveBacks = new Map<string, string[]>();

  constructor(
    private readonly options: ResolvedConsumerOptions<V>,
    private readonly counters: ConsumerStats,
    /** Connections with a transaction in flight, rolled back by a hard stop. */
    private readonly activeClients: Set<pg.PoolClient>,
    private readonly emit: EmitConsumerEvent,
  ) {
    const quotedSchema = quoteIdentifier(options.schema, 'schema');
    this.claimSql = claimKeysSql(quotedSchema);
    this.unclaimSql = unclaimKeysSql(quotedSchema);
  }

  /**
   * Decode the messages of a chunk and find their idempotency keys, in offset order.
   * @returns the messages ready for their handlers, up to the first that cannot be
   *   handled (undecodable, no usable key), and that one's failure
   */
  prepareChunk(
    topic: string,
    partition: number,
    chunk: KafkaMessage[],
    attemptOf: (offset: string) => number,
  ): { prepared: Prepared<V>[]; failure: Failure | undefined } {
    const prepared: Prepared<V>[] = [];
    for (const [index, raw] of chunk.entries()) {
      const attempt = attemptOf(raw.offset);
      const result = this.prepare(topic, partition, raw, attempt);
      if ('error' in result) {
        void traceSkipped({ topic, partition, offset: raw.offset, key: raw.key?.toString('utf8') ?? null, headers: decodeHeaders(raw.headers) }, this.options.groupId, attempt, 'dead_letter', { 'outbox.dead_letter.reason': result.reason });
        return { prepared, failure: { index, error: result.error, reason: result.reason, attempt } };
      }
      prepared.push(result);
    }
    return { prepared, failure: undefined };
  }

  /** Decode a message and find its idempotency key; a failure here is permanent. */
  private prepare(topic: string, partition: number, raw: KafkaMessage, attempt: number): Prepared<V> | { error: unknown; reason: DeadLetterReason } {
    const headers = decodeHeaders(raw.headers);
    let value: V;
    try {
      value = decodeValue(raw.value, headers, this.options.decode) as V;
    } catch (error) {
      return { error, reason: 'undecodable' };
    }
    const message: ConsumedMessage<V> = {
      topic,
      partition,
      offset: raw.offset,
      key: raw.key === null ? null : raw.key.toString('utf8'),
      value,
      rawValue: raw.value,
      headers,
      messageId: headers[HEADERS.messageId],
      idempotencyKey: undefined,
      timestamp: new Date(Number(raw.timestamp)),
    };
    let key: string | undefined | null;
    let keyError: unknown;
    try {
      key = this.options.idempotencyKey ? this.options.idempotencyKey(message) : message.messageId;
    } catch (error) {
      keyError = error;
    }
    if (typeof key === 'string' && key !== '' && key.length <= MAX_KEY_CHARS && !key.includes('\u0000')) {
      message.idempotencyKey = key;
      return { raw, message, attempt, missingKey: false };
    }
    if (this.options.onMissingKey === 'process-without-dedup') return { raw, message, attempt, missingKey: true };
    const problem =
      keyError !== undefined
        ? `the idempotencyKey function failed: ${describeError(keyError)}`
        : key === undefined || key === null || key === ''
          ? `no idempotency key (${this.options.idempotencyKey ? 'the idempotencyKey function returned none' : `no ${HEADERS.messageId} header`})`
          : `unusable idempotency key (${typeof key === 'string' ? `${key.length} characters, at most ${MAX_KEY_CHARS}, no NUL` : typeof key})`;
    const error = new DecodeError(problem, { offset: raw.offset }, keyError);
    error.name = 'MissingIdempotencyKey';
    return { error, reason: 'missing-key' };
  }

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
    await this.giveBack(pool, topic, partition, []);
    if (this.options.handleBatch) return this.transactBatch(pool, topic, partition, prepared);
    let group = prepared;
    let pending: Failure | undefined;
    if (this.options.savepoints === 'on-failure') {
      for (;;) {
        const result = await this.runTransaction(pool, topic, partition, group, false);
        if (!('rolledBack' in result)) return result.committed === group.length && pending ? { ...result, failure: pending } : result;
        if (!result.rolledBack) break;
        // Message `index` failed by itself: the ones before it run again, it does not.
        pending = result.rolledBack;
        if (pending.index === 0) return { committed: 0, failure: pending, hooks: [], outcomes: [] };
        group = group.slice(0, pending.index);
      }
    }
    return this.savepointEach(pool, topic, partition, group, pending);
  }

  /**
   * Run `group` with a savepoint per message, at most SAVEPOINT_GROUP of them
   * (subtransaction cache), committing the leading messages that succeed. `pending` is a
   * failure already known, of the message right after `group`.
   */
  private async savepointEach(pool: pg.Pool, topic: string, partition: number, group: Prepared<V>[], pending: Failure | undefined): Promise<TransactOutcome> {
    for (;;) {
      const limited = group.length > SAVEPOINT_GROUP ? group.slice(0, SAVEPOINT_GROUP) : group;
      const result = await this.runTransaction(pool, topic, partition, limited, true);
      if (!('rolledBack' in result)) return result.committed === group.length && pending ? { ...result, failure: pending } : result;
      // Here only a handler that ended the transaction rolls back a whole group.
      if (!result.rolledBack) throw new Error('unreachable: the savepoint path rolls back a whole group only for a handler that ended it');
      pending = result.rolledBack;
      if (pending.index === 0) return { committed: 0, failure: pending, hooks: [], outcomes: [] };
      group = group.slice(0, pending.index);
    }
  }

  /**
   * A pooled connection for one transaction: tracked so a hard stop can destroy it, with
   * the last 'error' it emitted (the pool listens only on idle clients), and `release`,
   * which returns it to the pool (or destroys it when given an error) once.
   */
  private async checkOut(pool: pg.Pool): Promise<{ client: pg.PoolClient; broken: Error | undefined; release(destroyWith?: Error): void }> {
    const client = await pool.connect();
    const session = {
      client,
      broken: undefined as Error | undefined,
      release: (destroyWith?: Error): void => {
        if (this.activeClients.delete(client)) {
          client.off('error', onError);
          client.release(destroyWith);
        }
      },
    };
    const onError = (error: Error): void => {
      session.broken = error;
    };
    client.on('error', onError);
    this.activeClients.add(client);
    return session;
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
  ): Promise<TransactOutcome | { rolledBack: Failure | null }> {
    const session = await this.checkOut(pool);
    const { client, release } = session;
    try {
      // The marker tells, after a handler, that this transaction is still the one open.
      const marker = newTransactionMarker();
      await client.query(beginSql(marker));
      const { firstIndex, claimed } = await this.claimKeys(client, prepared);
      // A message's afterCommit hooks live in its outcome: a run that is rolled back (or a
      // message that fails) drops them with it.
      const outcomes: Array<{ duplicate: boolean; stale: boolean; hooks: Array<() => unknown> }> = [];
      let failure: Failure | undefined;
      // Index of the message whose savepoint is open: it is released together with the
      // next message's SAVEPOINT, in one round trip.
      let open = -1;
      const fail = async (index: number, error: unknown, reason?: DeadLetterReason): Promise<void> => {
        await client.query(`ROLLBACK TO SAVEPOINT ${MESSAGE_SAVEPOINT}`);
        failure = { index, error, attempt: (prepared[index] as Prepared<V>).attempt, reason };
        const giveBack = [...claimed].filter((k) => (firstIndex.get(k) as number) >= index);
        if (giveBack.length > 0) await client.query(this.unclaimSql, [this.options.groupId, giveBack]);
      };
      // Handler `index` ended the transaction (clientGuard.ts): nothing here holds any more.
      const ended = (index: number, how: string): Promise<{ rolledBack: Failure }> =>
        this.endedByHandler(pool, client, release, topic, partition, prepared[index] as Prepared<V>, index, how, [...claimed].filter((k) => (firstIndex.get(k) as number) >= index));
      for (let i = 0; i < prepared.length; i++) {
        const p = prepared[i] as Prepared<V>;
        const { message } = p;
        const key = message.idempotencyKey;
        if (key !== undefined && (!claimed.has(key) || firstIndex.get(key) !== i)) {
          outcomes.push({ duplicate: true, stale: false, hooks: [] });
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
          await traceHandler(message, this.options.groupId, p.attempt, () => this.runHandler(client, p, outcome, guard.client), (error) => failureOutcome(this.options, error, message, p.attempt));
        } catch (error) {
          thrown = { error };
        }
        outcome.settled = true;
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
        for (const fn of (outcomes[i] as { hooks: Array<() => unknown> }).hooks) hooks.push({ offset, idempotencyKey, fn });
      }
      // Counted and announced by report(), once the caller has the outcome.
      return { committed, failure, hooks, outcomes: outcomes.slice(0, committed) };
    } catch (error) {
      // The connection's state is unknown: destroy it (the server rolls back) rather
      // than return it to the pool mid-transaction.
      release(error instanceof Error ? error : new Error(String(error)));
      throw error;
    }
  }

  /** One message's handler: `handler`, or `handleBatch` with that message alone. */
  private runHandler(client: pg.PoolClient, p: Prepared<V>, outcome: MessageOutcome, handlerClient: pg.PoolClient): Promise<void> {
    const { handler, handleBatch } = this.options;
    if (handleBatch) return handleBatch([p.message], this.batchContext(client, p.attempt, [p.message], [outcome], outcome, handlerClient));
    return (handler as NonNullable<typeof handler>)(p.message, this.context(client, p.attempt, outcome, handlerClient));
  }

  /**
   * The group with `handleBatch`: first one transaction with one call for all its new
   * messages. If that call fails (or the transaction cannot commit), the group is rolled
   * back and runs again with a savepoint per message, handleBatch getting one message per
   * call: the messages before the failing one commit, the failing one is retried or
   * dead-lettered alone. A group with a single new message needs no second run: its
   * failure is that message's.
   */
  private async transactBatch(pool: pg.Pool, topic: string, partition: number, prepared: Prepared<V>[]): Promise<TransactOutcome> {
    const result = await this.runBatchTransaction(pool, topic, partition, prepared);
    if (!('batchFailed' in result)) return result;
    const { failure, fresh, error } = result.batchFailed;
    if (failure) {
      if (failure.index === 0) return { committed: 0, failure, hooks: [], outcomes: [] };
      // The messages before it are duplicates: no handler runs for them.
      return this.savepointEach(pool, topic, partition, prepared.slice(0, failure.index), failure);
    }
    this.counters.batchFallbacks++;
    const first = prepared[fresh[0] as number] as Prepared<V>;
    const last = prepared[fresh[fresh.length - 1] as number] as Prepared<V>;
    this.emit('batchFallback', { topic, partition, firstOffset: first.raw.offset, lastOffset: last.raw.offset, count: fresh.length, error });
    return this.savepointEach(pool, topic, partition, prepared, undefined);
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
    const session = await this.checkOut(pool);
    const { client, release } = session;
    try {
      const marker = newTransactionMarker();
      await client.query(beginSql(marker));
      const { firstIndex, claimed } = await this.claimKeys(client, prepared);
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
        const context = this.batchContext(client, attempt, messages, fresh.map((i) => outcomes[i] as MessageOutcome), hookOutcome, guard.client);
        let thrown: { error: unknown } | undefined;
        try {
          await (this.options.handleBatch as NonNullable<ResolvedConsumerOptions<V>['handleBatch']>)(messages, context);
        } catch (error) {
          thrown = { error };
        }
        hookOutcome.settled = true;
        if (thrown && session.broken) throw session.broken;
        const single = fresh.length === 1 ? (fresh[0] as number) : undefined;
        const how = await guard.endedBy(marker);
        if (how !== undefined) {
          // What it committed cannot be taken back. One message: it fails for good, as with
          // `handler`. Several: every key of the group is taken back and the messages run
          // again one at a time, where the one that ends its transaction fails for good.
          const keys = [...claimed].filter((k) => single === undefined || (firstIndex.get(k) as number) >= single);
          const { rolledBack } = await this.endedByHandler(pool, client, release, topic, partition, prepared[single ?? (fresh[0] as number)] as Prepared<V>, single ?? (fresh[0] as number), how, keys);
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

  /**
   * Record the group's idempotency keys (one statement). The first occurrence of a key in
   * offset order is the one that runs; a later one in the same group (a relay that
   * published twice) is a duplicate like any other.
   * @returns each key's first index, and the keys that were new (claimed here)
   */
  private async claimKeys(client: pg.PoolClient, prepared: Prepared<V>[]): Promise<{ firstIndex: Map<string, number>; claimed: Set<string> }> {
    const firstIndex = new Map<string, number>();
    for (let i = 0; i < prepared.length; i++) {
      const key = (prepared[i] as Prepared<V>).message.idempotencyKey;
      if (key !== undefined && !firstIndex.has(key)) firstIndex.set(key, i);
    }
    const claimed = new Set<string>();
    if (firstIndex.size > 0) {
      const { rows } = await client.query<{ key: string }>(this.claimSql, [this.options.groupId, [...firstIndex.keys()]]);
      for (const row of rows) claimed.add(row.key);
    }
    return { firstIndex, claimed };
  }

  /**
   * The batch handler's context. `outcomes[i]` is `messages[i]`'s (markStale sets it);
   * the hooks go to `hookOutcome`, which decides when registering is over (`settled`).
   */
  private batchContext(
    client: pg.PoolClient,
    attempt: number,
    messages: ReadonlyArray<ConsumedMessage<V>>,
    outcomes: MessageOutcome[],
    hookOutcome: MessageOutcome,
    handlerClient: pg.PoolClient,
  ): BatchContext<V> {
    const { groupId, schema } = this.options;
    return {
      client: handlerClient,
      attempt,
      groupId,
      advanceVersion: (entity, version, options) => advanceEntityVersion(client, { schema, scope: options?.scope ?? groupId, entity, version }),
      markStale: (message) => {
        const index = messages.indexOf(message);
        if (index < 0) throw new TypeError('markStale(message): not one of this batch\'s messages (pass the object the batch handler got)');
        (outcomes[index] as MessageOutcome).stale = true;
      },
      lockEntity: (key, options) => lockEntity(client, key, options),
      afterCommit: (fn) => {
        if (typeof fn !== 'function') throw new TypeError('afterCommit(fn): fn must be a function');
        if (hookOutcome.settled) throw new Error('afterCommit called after the batch handler returned: register hooks while it runs');
        hookOutcome.hooks.push(fn);
      },
    };
  }

  /**
   * Count and announce what a transaction committed (`duplicate`, `missingKey`, `stale`,
   * `committed`). Called by the consumer with the outcome decided, outside the
   * transaction's error handling: a listener can never turn a commit into a failure.
   */
  report(topic: string, partition: number, prepared: Prepared<V>[], result: TransactOutcome): void {
    const { committed } = result;
    let processed = 0;
    let duplicates = 0;
    for (let i = 0; i < committed; i++) {
      const outcome = result.outcomes[i] as { duplicate: boolean; stale: boolean };
      const p = prepared[i] as Prepared<V>;
      const { offset, idempotencyKey } = p.message;
      if (outcome.duplicate) {
        duplicates++;
        this.counters.duplicates++;
        this.emit('duplicate', { topic, partition, offset, idempotencyKey: idempotencyKey as string });
        void traceSkipped(p.message, this.options.groupId, p.attempt, 'duplicate', { 'outbox.consumer.idempotency_key': idempotencyKey as string });
        continue;
      }
      processed++;
      this.counters.processed++;
      if (p.missingKey) {
        this.counters.missingKey++;
        this.emit('missingKey', { topic, partition, offset, outcome: 'process-without-dedup' });
      }
      if (outcome.stale) {
        this.counters.stale++;
        this.emit('stale', { topic, partition, offset, idempotencyKey });
      }
    }
    if (committed > 0) {
      this.emit('committed', {
        topic,
        partition,
        firstOffset: (prepared[0] as Prepared<V>).raw.offset,
        lastOffset: (prepared[committed - 1] as Prepared<V>).raw.offset,
        count: committed,
        processed,
        duplicates,
      });
    }
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
  private async endedByHandler(
    pool: pg.Pool,
    client: pg.PoolClient,
    release: (destroyWith?: Error) => void,
    topic: string,
    partition: number,
    p: Prepared<V>,
    index: number,
    how: string,
    keys: string[],
  ): Promise<{ rolledBack: Failure }> {
    const error = new HandlerEndedTransaction(how);
    await client.query('ROLLBACK').catch(() => undefined);
    release(error);
    await this.giveBack(pool, topic, partition, keys);
    return { rolledBack: { index, error, attempt: p.attempt, reason: 'permanent-error' } };
  }

  /**
   * Delete claimed keys in a transaction of their own, after a handler ended the one that
   * claimed them. Until it worked they are remembered and deleted before the partition's
   * next transaction: left there, they would make their messages duplicates.
   */
  private async giveBack(pool: pg.Pool, topic: string, partition: number, keys: string[]): Promise<void> {
    const tp = `${topic}\u0000${partition}`;
    const all = [...(this.pendingGiveBacks.get(tp) ?? []), ...keys];
    if (all.length === 0) return;
    this.pendingGiveBacks.set(tp, all);
    await pool.query(this.unclaimSql, [this.options.groupId, all]);
    this.pendingGiveBacks.delete(tp);
  }

  /**
   * The handler's context. `outcome` collects what the handler reported (stale, afterCommit
   * hooks); the hooks run only when this outcome is the one that committed.
   */
  private context(client: pg.PoolClient, attempt: number, outcome: { stale: boolean; hooks: Array<() => unknown>; settled?: boolean }, handlerClient: pg.PoolClient): HandlerContext {
    const { groupId, schema } = this.options;
    const markStale = (): void => {
      outcome.stale = true;
    };
    return {
      client: handlerClient,
      attempt,
      groupId,
      markStale,
      advanceVersion: async (entity, version, options) => {
        const newer = await advanceEntityVersion(client, { schema, scope: options?.scope ?? groupId, entity, version });
        if (!newer) markStale();
        return newer;
      },
      lockEntity: (key, options) => lockEntity(client, key, options),
      afterCommit: (fn) => {
        if (typeof fn !== 'function') throw new TypeError('afterCommit(fn): fn must be a function');
        if (outcome.settled) throw new Error('afterCommit called after the handler returned: register hooks while the handler runs');
        outcome.hooks.push(fn);
      },
    };
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
function abortedByHandler(cause: unknown): Error {
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
