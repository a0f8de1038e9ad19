import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import {
  Partitioners,
  type Consumer as KafkaConsumer,
  type EachBatchPayload,
  type KafkaMessage,
  type Producer,
} from 'kafkajs';
import { ConnectionError, OutboxError, describeError } from '../shared/errors.js';
import { createPool, describeDatabase } from '../shared/database.js';
import { assertMigrated } from '../shared/schema.js';
import type { Logger } from '../shared/logger.js';
import { createKafka } from '../shared/kafka.js';
import { backoffDelayMs } from '../shared/backoff.js';
import { TypedEmitter } from '../shared/events.js';
import { loadTracingApi } from '../shared/tracing.js';
import type { ErrorClass } from './classifyError.js';
import { publishDeadLetter } from './deadLetterTopic.js';
import { resolveConsumerOptions, type ConsumerOptions, type ResolvedConsumerOptions } from './options.js';
import { TransactionEngine } from './transaction.js';
import { BatchTransactions } from './batchTransaction.js';
import { KeyClaims } from './keyClaims.js';
import type { CommittedHook, Failure, TransactOutcome } from './outcome.js';
import { prepareChunk } from './prepare.js';
import { SchemaDecoding, unknownSchema } from './schemaDecoding.js';
import { reportCommitted, type EmitConsumerEvent } from './report.js';
import { runAfterCommitHooks } from './afterCommitHooks.js';
import { StopSignal } from './stopSignal.js';
import { settlesWithin } from '../shared/deadline.js';
import { waitForTopics } from './topicWait.js';
import { publishConsumerStarted } from '../shared/diagnostics.js';
import { KafkaRestart } from './kafkaRestart.js';
import type { ConsumedMessage, ConsumerEvents, ConsumerStats } from './types.js';

// The consumer's lifecycle: start (schema check, group join), eachBatch dispatch (a chunk
// of a partition per transaction), offset commits, retries and dead letters (pause and
// resume of a partition), stop. The transaction itself is in transaction.ts, the options
// in options.ts, the types handlers and listeners see in types.ts.

// For importers from before the split (src/index.ts, src/metrics/consumerMetrics.ts): the
// types are defined in options.ts and types.ts; import them from there.

/**
 * What stop() takes beyond shutdownTimeoutMs at most: leaving the group, disconnecting
 * from Kafka, closing the pool.
 */
export const STOP_GRACE_MS = 1_000;

/** A Postgres or Kafka failure outside any handler: back off, never dead-letter. */
class InfrastructureError extends OutboxError {
  constructor(during: string, cause: unknown) {
    super(`${during}: ${describeError(cause)}`, { retriable: true, context: { during }, cause });
  }
}

/**
 * The consumer runtime: each message's database effects happen once, however often Kafka
 * delivers it. Create with {@link createConsumer}, then `start()`; `stop()` is idempotent
 * and bounded by `shutdownTimeoutMs`.
 */
export class Consumer<V = unknown> extends TypedEmitter<ConsumerEvents> {
  readonly options: ResolvedConsumerOptions<V>;
  readonly instanceId = randomUUID().slice(0, 8);
  private readonly logger: Logger;
  private readonly transactions: TransactionEngine<V>;
  private readonly emitEvent: EmitConsumerEvent = (event, payload) => this.emit(event, payload);
  /** Fired when shutdownTimeoutMs runs out: what still runs is no longer waited for. */
  private readonly stopSignal = new StopSignal();
  /** With handleBatch: its transactions, and the search for the culprit of a failed batch. */
  private readonly batches: BatchTransactions<V> | undefined;
  private pool: pg.Pool | undefined;
  private ownPool = false;
  private consumer: KafkaConsumer | undefined;
  private producer: Producer | undefined;
  private started = false;
  private stopping = false;
  private stopPromise: Promise<{ hard: boolean }> | undefined;
  private readonly counters: ConsumerStats = {
    processed: 0, duplicates: 0, stale: 0, deadLettered: 0, retries: 0, missingKey: 0, transactions: 0, infrastructureErrors: 0, afterCommitErrors: 0, batchFallbacks: 0,
  };
  /** Values in Confluent's wire format decoded by schema id, when `schemaRegistry` is set. */
  private readonly schemas: SchemaDecoding | undefined;
  /** Per partition: the message being retried and its next attempt number. */
  private readonly attempts = new Map<string, { offset: string; attempt: number }>();
  /** Per partition: consecutive infrastructure failures, for their backoff. */
  private readonly infraFailures = new Map<string, number>();
  private readonly resumeTimers = new Set<NodeJS.Timeout>();
  /** Starts the Kafka consumer again when kafkajs gives up on it (kafkaRestart.ts). */
  private readonly kafkaRestart: KafkaRestart;
  /** Connections with a transaction in flight, rolled back by a hard stop. */
  private readonly activeClients = new Set<pg.PoolClient>();

  constructor(options: ConsumerOptions<V>) {
    super();
    this.options = resolveConsumerOptions(options);
    this.schemas = this.options.schemaRegistry ? new SchemaDecoding(this.options.schemaRegistry) : undefined;
    const emit = this.emitEvent;
    const keys = new KeyClaims(this.options.schema, this.options.groupId);
    this.transactions = new TransactionEngine<V>(this.options, this.counters, this.activeClients, emit, keys, this.stopSignal);
    this.batches = this.options.handleBatch ? new BatchTransactions<V>(this.options, this.counters, this.activeClients, emit, keys, this.transactions, this.stopSignal) : undefined;
    this.logger = this.options.logger.child({ component: 'consumer', groupId: this.options.groupId, consumer: this.instanceId });
    this.kafkaRestart = new KafkaRestart({
      retryBaseDelayMs: this.options.retryBaseDelayMs,
      retryMaxDelayMs: this.options.retryMaxDelayMs,
      stopping: () => this.stopping,
      announce: (error, attempt, delayMs) => {
        this.logger.warn({ err: describeError(error), attempt, delayMs }, 'kafka consumer stopped after an error kafkajs does not retry; starting it again');
        this.emit('restarting', { error, attempt, delayMs });
      },
      // Subscriptions outlive the crash; run() joins the group again.
      start: () => (this.consumer as KafkaConsumer).run(this.runOptions()),
      failed: (error) => this.emit('error', { error, during: 'kafka consumer' }),
    });
  }

  /** A listener threw or rejected: logged; the outcome it observed stands. */
  protected override listenerFailed(event: string, error: unknown): void {
    this.logger.error({ event, err: describeError(error) }, 'a consumer event listener failed; ignored, the outcome stands');
  }

  /** Counters since start(). */
  stats(): ConsumerStats {
    return { ...this.counters };
  }

  /**
   * Check the schema, join the group and start consuming. Resolves once the consumer is
   * running (partitions are assigned shortly after; see the 'assigned' event).
   *
   * @throws ConnectionError when Postgres cannot be reached; SchemaError when the schema
   *   lacks processed_messages (run `outbox-relay migrate`); MissingTopicError when a topic
   *   still does not exist after missingTopicTimeoutMs; kafkajs errors when the broker
   *   cannot be reached.
   */
  async start(): Promise<void> {
    if (this.started) throw new OutboxError('consumer already started', { retriable: false });
    this.started = true;
    const o = this.options;
    if (o.pool) this.pool = o.pool;
    else {
      this.pool = createPool(o.databaseUrl as string, `${o.clientId}:${this.instanceId}`, o.batchesInFlight + 1, this.logger);
      this.ownPool = true;
    }
    let client: pg.PoolClient;
    try {
      client = await this.pool.connect();
    } catch (error) {
      await this.closePool();
      throw new ConnectionError(`cannot connect to Postgres: ${describeError(error)}`, { database: o.databaseUrl ? describeDatabase(o.databaseUrl) : 'pool' }, error);
    }
    try {
      await assertMigrated(client, o.schema);
    } catch (error) {
      client.release();
      await this.closePool();
      throw error;
    }
    client.release();

    // When @opentelemetry/api is installed, importing it takes a while: at start, not in
    // the middle of a partition's first failure (the first span of a message of its own).
    await loadTracingApi();
    const kafka = o.kafka ?? createKafka({ brokers: o.kafkaBrokers as string[], clientId: o.clientId, logger: o.logger });
    this.producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner, allowAutoTopicCreation: true });
    this.consumer = kafka.consumer({
      groupId: o.groupId,
      sessionTimeout: o.sessionTimeoutMs,
      heartbeatInterval: o.heartbeatIntervalMs,
      rebalanceTimeout: o.rebalanceTimeoutMs,
      maxWaitTimeInMs: o.maxWaitTimeMs,
      allowAutoTopicCreation: false,
      readUncommitted: o.isolationLevel === 'read_uncommitted',
    });
    const consumer = this.consumer;
    consumer.on(consumer.events.GROUP_JOIN, (event) => {
      const partitions = Object.entries(event.payload.memberAssignment).flatMap(([topic, list]) => list.map((partition) => ({ topic, partition })));
      const assigned = new Set(partitions.map((p) => partitionKey(p.topic, p.partition)));
      // Retry state of partitions another member now owns would be stale if they came back.
      for (const key of [...this.attempts.keys()]) if (!assigned.has(key)) this.attempts.delete(key);
      this.batches?.forgetPartitions(assigned);
      this.kafkaRestart.reset();
      this.logger.info({ partitions }, 'partitions assigned');
      this.emit('assigned', { partitions });
    });
    consumer.on(consumer.events.CRASH, (event) => {
      this.logger.error({ err: describeError(event.payload.error), restart: event.payload.restart }, 'kafka consumer crashed');
      this.emit('error', { error: event.payload.error, during: 'kafka consumer' });
      // kafkajs gave up on it (kafkaRestart.ts says when): start it again ourselves.
      if (!event.payload.restart) this.kafkaRestart.schedule(event.payload.error);
    });
    try {
      await waitForTopics(kafka, o.topics, {
        timeoutMs: o.missingTopicTimeoutMs,
        logger: this.logger,
        onWait: (missing, waitedMs) => this.emit('waitingForTopics', { missing, waitedMs, timeoutMs: o.missingTopicTimeoutMs }),
        stopped: () => this.stopping,
      });
      await this.producer.connect();
      await consumer.connect();
      await consumer.subscribe({ topics: o.topics, fromBeginning: o.fromBeginning });
      await consumer.run(this.runOptions());
    } catch (error) {
      await consumer.disconnect().catch(() => undefined);
      await this.producer.disconnect().catch(() => undefined);
      await this.closePool();
      throw error;
    }
    publishConsumerStarted({ client: 'kafkajs', groupId: o.groupId, handler: o.handleBatch ? 'handleBatch' : 'handler' });
    this.logger.info({ topics: o.topics, schema: o.schema, batchesInFlight: o.batchesInFlight }, 'consumer started');
  }

  /**
   * Stop: finish the transaction in flight per partition, commit its offsets, leave the
   * group, disconnect. After `shutdownTimeoutMs` transactions still open are rolled back (their
   * messages come again, to this group's next member). Idempotent: every call returns the
   * same promise; `hard` tells whether the timeout cut work short.
   */
  stop(): Promise<{ hard: boolean }> {
    if (!this.stopPromise) this.stopPromise = this.doStop();
    return this.stopPromise;
  }

  private async doStop(): Promise<{ hard: boolean }> {
    this.stopping = true;
    this.kafkaRestart.cancel();
    for (const timer of this.resumeTimers) clearTimeout(timer);
    this.resumeTimers.clear();
    let hard = false;
    const consumer = this.consumer;
    if (consumer && !(await settlesWithin(consumer.stop(), this.options.shutdownTimeoutMs))) {
      hard = true;
      this.logger.warn({ shutdownTimeoutMs: this.options.shutdownTimeoutMs }, 'shutdown timeout: rolling back transactions in flight, no longer waiting for handlers and hooks');
      // Destroying the connection rolls its transaction back on the server; a handler or
      // hook waiting on anything else is no longer waited for (StopSignal), so the batch ends.
      this.stopSignal.abort();
      for (const client of this.activeClients) client.release(new Error('consumer stopped'));
      this.activeClients.clear();
    }
    // Leaving the group and closing the connections, together, in a bounded time whatever
    // still hangs: stop() resolves within shutdownTimeoutMs + STOP_GRACE_MS.
    const closed = await settlesWithin(Promise.all([consumer?.disconnect(), this.producer?.disconnect(), this.closePool()]), STOP_GRACE_MS);
    if (!closed) {
      hard = true;
      this.logger.warn({ graceMs: STOP_GRACE_MS }, 'consumer stop: leaving the group or disconnecting did not finish in time; given up on');
    }
    this.logger.info({ hard, ...this.counters }, 'consumer stopped');
    this.emit('stopped', { hard });
    return { hard };
  }

  private runOptions(): Parameters<KafkaConsumer['run']>[0] {
    return {
      autoCommit: false,
      eachBatchAutoResolve: false,
      partitionsConsumedConcurrently: this.options.batchesInFlight,
      eachBatch: (payload) => this.eachBatch(payload),
    };
  }

  private async closePool(): Promise<void> {
    if (this.ownPool) await this.pool?.end().catch(() => undefined);
    await this.schemas?.close();
  }

  private async eachBatch(payload: EachBatchPayload): Promise<void> {
    const { batch } = payload;
    const { topic, partition } = batch;
    const messages = batch.messages;
    const size = this.options.messagesPerTransaction;
    let next = 0;
    while (next < messages.length) {
      if (this.stopping || !payload.isRunning() || payload.isStale()) return;
      const chunk = messages.slice(next, next + size);
      const done = await this.runChunk(topic, partition, chunk, payload);
      if (done === 'paused') return;
      next += done;
      // Keeps the session alive through long batches; throws when the group rebalances,
      // which ends this batch with everything handled so far committed.
      await payload.heartbeat();
    }
  }

  /**
   * Handle up to one transaction's worth of messages of a partition.
   * @returns how many messages of `chunk` are finished (committed or dead-lettered), or
   *   'paused' when the partition waits for a retry.
   */
  private async runChunk(topic: string, partition: number, chunk: KafkaMessage[], payload: EachBatchPayload): Promise<number | 'paused'> {
    const tp = partitionKey(topic, partition);
    const registryDown = await this.schemas?.prefetch(chunk);
    if (registryDown) return this.backOffInfrastructure(tp, topic, partition, 'schema registry', registryDown, payload);
    const { prepared, failure: prepareFailure } = prepareChunk(this.options, topic, partition, chunk, (offset) => this.attemptOf(tp, offset), this.schemas);
    let failure: Failure | undefined = prepareFailure;

    let committed = 0;
    if (prepared.length > 0) {
      let outcome: TransactOutcome;
      try {
        outcome = await (this.batches ?? this.transactions).transact(this.pool as pg.Pool, topic, partition, prepared);
      } catch (error) {
        return this.backOffInfrastructure(tp, topic, partition, 'transaction', error, payload);
      }
      // The outcome is decided: only now are its events emitted, outside the try above.
      reportCommitted(this.options.groupId, this.counters, this.emitEvent, topic, partition, prepared, outcome);
      committed = outcome.committed;
      if (outcome.failure) failure = outcome.failure;
      this.infraFailures.delete(tp);
      // After the Postgres COMMIT, before the offset commit; never undoes either.
      await runAfterCommitHooks(outcome.hooks, { topic, partition }, { timeoutMs: this.options.afterCommitTimeoutMs, stop: this.stopSignal, logger: this.logger, counters: this.counters, emit: this.emitEvent });
      if (committed > 0) {
        const last = chunk[committed - 1] as KafkaMessage;
        await this.commitOffset(topic, partition, last.offset, payload);
        this.attempts.delete(tp);
      }
    }
    if (!failure) return committed;
    if (this.stopping) return 'paused';

    const raw = chunk[failure.index] as KafkaMessage;
    let reason = failure.reason;
    if (!reason) {
      const message = prepared[failure.index]?.message;
      // Not prepared: a schema id the registry does not know (yet), the one such failure retried.
      const kind = message ? this.classify(failure.error, message) : unknownSchema(failure.error) ? 'transient' : 'permanent';
      if (kind === 'transient' && failure.attempt < this.options.maxAttempts) {
        const delayMs = backoffDelayMs(failure.attempt - 1, this.options.retryBaseDelayMs, this.options.retryMaxDelayMs);
        this.attempts.set(tp, { offset: raw.offset, attempt: failure.attempt + 1 });
        this.counters.retries++;
        this.logger.warn({ topic, partition, offset: raw.offset, attempt: failure.attempt, delayMs, err: describeError(failure.error) }, 'handler failed, will retry');
        this.emit('retry', { topic, partition, offset: raw.offset, attempt: failure.attempt, delayMs, error: failure.error });
        this.pauseFor(payload, delayMs);
        return 'paused';
      }
      reason = !message ? 'undecodable' : kind === 'transient' ? 'retries-exhausted' : 'permanent-error';
    }
    let deadLetterTopic: string;
    try {
      // A deadLetterTopic function that returns no usable name is a ConfigError: the
      // message is kept (backoff, 'error' event naming the option) rather than dropped.
      deadLetterTopic = this.options.deadLetterTopic(topic);
      await this.stopSignal.race(publishDeadLetter(this.producer as Producer, deadLetterTopic, {
        topic,
        partition,
        message: raw,
        reason,
        error: failure.error,
        attempts: failure.attempt,
        consumerGroup: this.options.groupId,
      }), 'a dead-letter publish');
    } catch (error) {
      // Not committing the offset is what keeps the message: it is handled (and, failing
      // again, dead-lettered) again after the backoff.
      return this.backOffInfrastructure(tp, topic, partition, 'dead-letter publish', error, payload);
    }
    this.counters.deadLettered++;
    if (reason === 'missing-key') {
      this.counters.missingKey++;
      this.emit('missingKey', { topic, partition, offset: raw.offset, outcome: 'dead-letter' });
    }
    this.logger.warn({ topic, partition, offset: raw.offset, deadLetterTopic, reason, attempts: failure.attempt, err: describeError(failure.error) }, 'message dead-lettered');
    this.emit('deadLettered', { topic, partition, offset: raw.offset, deadLetterTopic, reason, error: failure.error, attempts: failure.attempt });
    await this.commitOffset(topic, partition, raw.offset, payload);
    this.attempts.delete(tp);
    return failure.index + 1;
  }

  private classify(error: unknown, message: ConsumedMessage<V>): ErrorClass {
    try {
      const kind = this.options.classifyError(error, message);
      return kind === 'permanent' ? 'permanent' : 'transient';
    } catch (classifierError) {
      this.logger.error({ err: describeError(classifierError) }, 'classifyError threw; treating the error as transient');
      return 'transient';
    }
  }

  private attemptOf(tp: string, offset: string): number {
    const entry = this.attempts.get(tp);
    return entry && entry.offset === offset ? entry.attempt : 1;
  }

  /**
   * Commit `offset + 1`, after the Postgres commit. Through the batch's own commit, so it
   * carries this member's generation: after a rebalance the broker refuses it, and the
   * error ends the batch (kafkajs rejoins; the new owner's redelivery hits the dedup rows).
   */
  private async commitOffset(topic: string, partition: number, offset: string, payload: EachBatchPayload): Promise<void> {
    const nextOffset = (BigInt(offset) + 1n).toString();
    try {
      await this.stopSignal.race(payload.commitOffsetsIfNecessary({ topics: [{ topic, partitions: [{ partition, offset: nextOffset }] }] }), 'an offset commit');
    } catch (error) {
      this.logger.warn({ topic, partition, offset: nextOffset, err: describeError(error) }, 'offset commit failed; the messages will come again');
      this.emit('error', { error, during: 'offset commit', topic, partition });
      throw error;
    }
    payload.resolveOffset(offset);
    this.emit('offsetCommitted', { topic, partition, offset: nextOffset });
  }

  private backOffInfrastructure(tp: string, topic: string, partition: number, during: string, cause: unknown, payload: EachBatchPayload): 'paused' {
    const failures = (this.infraFailures.get(tp) ?? 0) + 1;
    this.infraFailures.set(tp, failures);
    this.counters.infrastructureErrors++;
    const error = new InfrastructureError(during, cause);
    const delayMs = backoffDelayMs(failures - 1, this.options.retryBaseDelayMs, this.options.retryMaxDelayMs);
    this.logger.error({ topic, partition, during, failures, delayMs, err: describeError(cause) }, 'consumer infrastructure error; partition paused');
    this.emit('error', { error, during, topic, partition });
    if (!this.stopping) this.pauseFor(payload, delayMs);
    return 'paused';
  }

  /**
   * Pause this partition and resume it after `delayMs`. The batch returns at once, so the
   * other partitions keep flowing and kafkajs keeps heartbeating; on resume the fetch
   * starts again at the first message not yet resolved.
   */
  private pauseFor(payload: EachBatchPayload, delayMs: number): void {
    const resume = payload.pause();
    const timer = setTimeout(() => {
      this.resumeTimers.delete(timer);
      if (!this.stopping) resume();
    }, delayMs);
    this.resumeTimers.add(timer);
  }
}

function partitionKey(topic: string, partition: number): string {
  return `${topic}\u0000${partition}`;
}

/**
 * Create a consumer whose handler's database effects happen exactly once per message.
 * Options are validated here (ConfigError naming the option); call `start()` on it.
 *
 * @example
 * const consumer = createConsumer({
 *   kafka, groupId: 'billing', topics: 'orders', pool,
 *   handler: async (message, { client }) => {
 *     await client.query('INSERT INTO invoices (order_id) VALUES ($1)', [message.key]);
 *   },
 * });
 * await consumer.start();
 */
export function createConsumer<V = unknown>(options: ConsumerOptions<V>): Consumer<V> {
  return new Consumer<V>(options);
}
