import type pg from 'pg';
import type { ValueDecoder } from './decode.js';
import type { DeadLetterReason } from './deadLetterTopic.js';
import type { advanceEntityVersion } from './versionGate.js';
import type { EntityLockOptions, lockEntity } from './entityLock.js';

// What a handler and a listener of the consumer see: the message, the handler's context,
// the counters and the events. The options are in options.ts, the transaction that runs
// handlers in transaction.ts, the lifecycle in consumer.ts.

/** A Kafka message as a handler sees it. */
export interface ConsumedMessage<V = unknown> {
  topic: string;
  partition: number;
  /** Kafka offset, a decimal string (offsets can exceed 2^53). */
  offset: string;
  /** The Kafka key as UTF-8 text (the relay's entity key), or null. */
  key: string | null;
  /** The decoded value (see {@link ValueDecoder}); null for a tombstone. */
  value: V;
  /** The value's bytes as they came from Kafka. */
  rawValue: Buffer | null;
  /** The registry's id of the value's schema, when the value came in Confluent's wire format and `schemaRegistry` decoded it. */
  schemaId?: number;
  /** Headers, first value of each, as UTF-8 text. */
  headers: Readonly<Record<string, string>>;
  /** The relay's `message-id` header, if present. */
  messageId: string | undefined;
  /** The key this message is deduplicated on; undefined when processed without dedup. */
  idempotencyKey: string | undefined;
  /** The Kafka timestamp (for relay messages: when the outbox row was written). */
  timestamp: Date;
}

/** What a handler gets besides the message: the open transaction and helpers bound to it. */
export interface HandlerContext {
  /**
   * A Postgres connection inside the open transaction that also records the message as
   * processed. Do all database effects on it. The consumer alone begins, commits and rolls
   * back: this client refuses BEGIN, COMMIT, ROLLBACK, END, ABORT, START TRANSACTION,
   * PREPARE TRANSACTION and their AND CHAIN forms (TransactionControlRefused) and
   * `release()`, and a handler that ended the transaction anyway is caught after it returns
   * (HandlerEndedTransaction); either fails the message for good. Savepoints of your own
   * are allowed (names starting with `outbox_relay` are the consumer's). Only while the
   * handler runs: once it returned (in an afterCommit hook, a callback left running) every
   * query fails with HandlerClientClosed and is not sent, as do advanceVersion and lockEntity.
   */
  client: pg.PoolClient;
  /** 1 on the first attempt at this message, 2 on the first retry, and so on. */
  attempt: number;
  /** The consumer group id. */
  groupId: string;
  /**
   * The version gate (see {@link advanceEntityVersion}): true when `version` is newer
   * than the entity's stored version and is now stored; false when the event is stale,
   * which is also counted (stats().stale, the 'stale' event). Scope defaults to the group id.
   */
  advanceVersion(entity: string, version: number | bigint | string, options?: { scope?: string }): Promise<boolean>;
  /** Count this message as stale when you gate on a version column of your own. */
  markStale(): void;
  /** Lock an entity until this transaction ends (see {@link lockEntity}). */
  lockEntity(key: string, options?: EntityLockOptions): Promise<void>;
  /**
   * Run `fn` after the Postgres COMMIT of this message's transaction: for effects that must
   * not happen before the database change is durable and visible, such as invalidating a
   * cache entry or notifying another service.
   *
   * `fn` runs only if this message's effects committed: never on rollback, never for a
   * duplicate (its handler does not run), never when this message failed, and never for a
   * run of the handler that was rolled back and redone (with `savepoints: 'on-failure'` a
   * handler can run twice; only the hooks of the run that committed fire). Hooks run one
   * after another in offset order, after the COMMIT and before the Kafka offset commit;
   * the partition waits for them, at most `afterCommitTimeoutMs` each (then the hook is
   * given up on and reported as an `AfterCommitTimeout`; the offset is committed), so keep
   * them short.
   *
   * A hook that throws or rejects is logged, counted (`stats().afterCommitErrors`) and
   * reported (the `afterCommitError` event); the commit stands, the message is not
   * redelivered and the partition goes on.
   *
   * At least once, at most once per commit: a crash between the COMMIT and the hook skips
   * it, and the redelivered message is a duplicate whose handler (and hooks) do not run.
   * Make what a hook does repairable by a later event (a version-checked cache write), or
   * record it in the transaction too (an outbox row). Do not use `client` in a hook: the
   * transaction is over, and it refuses (HandlerClientClosed). Call `afterCommit` while the handler runs, not after it returned.
   */
  afterCommit(fn: () => unknown): void;
}

/** Handles one message. Throwing rolls the message's effects back (its dedup row too). */
export type MessageHandler<V = unknown> = (message: ConsumedMessage<V>, context: HandlerContext) => Promise<void>;

/**
 * What a batch handler gets besides its messages: the open transaction and helpers bound
 * to it, as {@link HandlerContext} but for several messages at once.
 */
export interface BatchContext<V = unknown> {
  /**
   * A Postgres connection inside the open transaction that also records the batch's
   * messages as processed. Same rules as {@link HandlerContext.client}: the consumer alone
   * begins, commits and rolls back (TransactionControlRefused, HandlerEndedTransaction),
   * savepoints of your own are allowed; it refuses use once the batch handler returned
   * (HandlerClientClosed).
   */
  client: pg.PoolClient;
  /**
   * The highest attempt among the batch's messages: 1 when none of them failed before;
   * on a retry, the retried message (always the first of its batch) counts its attempts.
   */
  attempt: number;
  /** The consumer group id. */
  groupId: string;
  /**
   * The version gate for one entity (see {@link advanceEntityVersion}), one round trip
   * per call. Unlike {@link HandlerContext.advanceVersion} it counts nothing by itself,
   * since it cannot tell which of the batch's messages the entity belongs to: call
   * {@link BatchContext.markStale} with the message when it returns false. For a
   * set-based gate, check a version column of your own in the batch's statement.
   */
  advanceVersion(entity: string, version: number | bigint | string, options?: { scope?: string }): Promise<boolean>;
  /**
   * Count `message` (one of this batch's, the same object) as stale: stats().stale and
   * the 'stale' event, once the transaction committed.
   * @throws TypeError when `message` is not one of this batch's messages
   */
  markStale(message: ConsumedMessage<V>): void;
  /** Lock an entity until this transaction ends (see {@link lockEntity}). */
  lockEntity(key: string, options?: EntityLockOptions): Promise<void>;
  /**
   * Run `fn` after the Postgres COMMIT of this batch's transaction; as
   * {@link HandlerContext.afterCommit}, with the batch as the unit: `fn` runs only when the
   * batch committed, never for a run of the batch that was rolled back (a failed batch is
   * redone in smaller batches and one message at a time, each call registering its own hooks). A failing hook is
   * reported (`afterCommitError`) with the offset and key of the batch's last message.
   */
  afterCommit(fn: () => unknown): void;
}

/**
 * Handles a partition's new messages of one transaction at once: the ones not already
 * recorded as processed (duplicates are never passed), in offset order, at least one.
 * Apply them with set-based statements (`INSERT ... SELECT ... FROM unnest($1::text[], ...)`).
 * Throwing rolls the whole batch back (its dedup rows too); the consumer then hands the
 * same messages to this handler again, in halves and then one at a time, to find the one
 * that fails.
 */
export type BatchHandler<V = unknown> = (messages: ReadonlyArray<ConsumedMessage<V>>, context: BatchContext<V>) => Promise<void>;

/** Counters since start(). */
export interface ConsumerStats {
  /** Messages whose handler ran and committed. */
  processed: number;
  /** Messages skipped because their idempotency key was already recorded. */
  duplicates: number;
  /** Processed messages the version gate found stale. */
  stale: number;
  deadLettered: number;
  /** Retries scheduled after transient errors. */
  retries: number;
  /** Messages without a usable idempotency key (dead-lettered or processed without dedup). */
  missingKey: number;
  /** Postgres transactions committed. */
  transactions: number;
  /** Transactions that failed for reasons outside a handler (Postgres unreachable...). */
  infrastructureErrors: number;
  /** `afterCommit` hooks that threw or rejected (their transactions had committed). */
  afterCommitErrors: number;
  /**
   * Batches whose batch handler failed (or whose transaction could not commit) and whose
   * messages were then redone to find the failing one (`handleBatch` only).
   */
  batchFallbacks: number;
}

interface Position {
  topic: string;
  partition: number;
  offset: string;
}

/** Payloads of the consumer's events. Listeners run synchronously, in order. */
export interface ConsumerEvents {
  /**
   * A transaction committed: the effects of messages `firstOffset`..`lastOffset` of a
   * partition are durable, and their Kafka offset is not committed yet. A crash now means
   * redelivery and duplicates, never a lost or doubled effect.
   */
  committed: { topic: string; partition: number; firstOffset: string; lastOffset: string; count: number; processed: number; duplicates: number };
  /** The Kafka offset was committed: the next message the group reads here is `offset`. */
  offsetCommitted: { topic: string; partition: number; offset: string };
  /** A message came again and was skipped. */
  duplicate: Position & { idempotencyKey: string };
  /** The version gate dropped a stale event. */
  stale: Position & { idempotencyKey: string | undefined };
  /** A transient handler error; the partition is paused and the message retried after `delayMs`. */
  retry: Position & { attempt: number; delayMs: number; error: unknown };
  /** A message went to the dead-letter topic and its offset is committed. */
  deadLettered: Position & { deadLetterTopic: string; reason: DeadLetterReason; error: unknown; attempts: number };
  /** A message had no usable idempotency key. */
  missingKey: Position & { outcome: 'dead-letter' | 'process-without-dedup' };
  /** An `afterCommit` hook of a committed message threw or rejected; nothing is retried. */
  afterCommitError: Position & { idempotencyKey: string | undefined; error: unknown };
  /**
   * The batch handler failed for messages `firstOffset`..`lastOffset` (`count` new ones)
   * of a partition: the batch was rolled back and its messages are redone, in halves and then
   * one at a time up to the one at fault, which is retried or dead-lettered alone
   * (`handleBatch` only).
   */
  batchFallback: { topic: string; partition: number; firstOffset: string; lastOffset: string; count: number; error: unknown };
  /**
   * A handler call (`count` 1) or batch handler call was still running after
   * `handlerTimeoutMs` (`timeoutMs`) and was given up on: its transaction is rolled back
   * (connection destroyed, server process ended), nothing of it committed. The messages
   * fail with `error`, a HandlerTimeout (retriable): a single message is retried with
   * backoff, then dead-lettered, as classifyError decides (the `retry` or `deadLettered`
   * event follows); a batch's messages are redone as after any batch failure.
   */
  handlerTimeout: { topic: string; partition: number; firstOffset: string; lastOffset: string; count: number; attempt: number; timeoutMs: number; error: unknown };
  /** Something outside a handler failed (Postgres, the dead-letter publish, Kafka); it is retried. */
  error: { error: unknown; during: string; topic?: string; partition?: number };
  /**
   * kafkajs stopped the Kafka consumer after an error it does not retry (a broker restart
   * that outlasted its coordinator lookup, say); the runtime starts it again after
   * `delayMs`. `attempt` counts the give-ups since the group last assigned partitions.
   */
  restarting: { error: unknown; attempt: number; delayMs: number };
  /** start() found topics that do not exist yet and waits for them (missingTopicTimeoutMs). */
  waitingForTopics: { missing: string[]; waitedMs: number; timeoutMs: number };
  /** The group assigned partitions to this member. */
  assigned: { partitions: Array<{ topic: string; partition: number }> };
  stopped: { hard: boolean };
}
