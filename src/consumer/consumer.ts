import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import {
  Partitioners,
  type Consumer as KafkaConsumer,
  type EachBatchPayload,
  type Kafka,
  type KafkaMessage,
  type Producer,
} from 'kafkajs';
import * as settings from '../shared/settings.js';
import { clientId, databaseUrl, kafkaBrokers, schema } from '../shared/commonSettings.js';
import * as consumerSettings from './options.js';
import { ConfigError, ConnectionError, OutboxError, describeError } from '../shared/errors.js';
import { quoteIdentifier } from '../shared/identifiers.js';
import { createPool, describeDatabase } from '../shared/database.js';
import { assertMigrated } from '../commands/migrate.js';
import { silentLogger, type Logger } from '../shared/logger.js';
import { createKafka, HEADERS } from '../shared/kafka.js';
import { backoffDelayMs } from '../shared/backoff.js';
import { TypedEmitter } from '../shared/events.js';
import { DecodeError, decodeHeaders, decodeValue, type ValueDecoder } from './decode.js';
import { classifyError, type ErrorClass } from './classifyError.js';
import { publishDeadLetter, type DeadLetterReason } from './deadLetterTopic.js';
import { advanceEntityVersion } from './versionGate.js';
import { lockEntity, type EntityLockOptions } from './entityLock.js';
import { claimKeysSql, unclaimKeysSql } from './sql/processedMessages.js';

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
   * processed. Do all database effects on it, and never COMMIT or ROLLBACK on it: the
   * consumer does that (a savepoint scopes each message).
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
}

/** Handles one message. Throwing rolls the message's effects back (its dedup row too). */
export type MessageHandler<V = unknown> = (message: ConsumedMessage<V>, context: HandlerContext) => Promise<void>;

/** Options of {@link createConsumer}. */
export interface ConsumerOptions<V = unknown> {
  /** A kafkajs client; or give `kafkaBrokers` and one is made. */
  kafka?: Kafka;
  kafkaBrokers?: string[];
  /** Kafka client id when the consumer makes the client (default `outbox-relay-consumer`). */
  clientId?: string;
  /** Kafka consumer group. Also the namespace of the idempotency keys. */
  groupId: string;
  topics: string | string[];
  /**
   * Postgres pool the transactions run on (left open by stop()); or give `databaseUrl`.
   * It needs a connection per concurrently handled partition.
   */
  pool?: pg.Pool;
  databaseUrl?: string;
  /** Schema of processed_messages and entity_versions (default `public`). */
  schema?: string;
  handler: MessageHandler<V>;
  /** How values are decoded (default `'auto'`: JSON when content-type says so). */
  decode?: ValueDecoder;
  /**
   * Derive the idempotency key from the message, e.g. event type + entity id + version.
   * Default: the relay's `message-id` header. Return undefined (or throw) when there is
   * none: then `onMissingKey` decides.
   */
  idempotencyKey?: (message: Omit<ConsumedMessage<V>, 'idempotencyKey'>) => string | undefined | null;
  /**
   * What happens to a message without a usable idempotency key (absent, empty, over 512
   * characters or containing NUL): `'dead-letter'` (default) or `'process-without-dedup'`
   * (at least once for that message). Either way it is counted in stats().missingKey.
   */
  onMissingKey?: 'dead-letter' | 'process-without-dedup';
  /** Transient errors are retried, permanent ones dead-lettered (default {@link classifyError}). */
  classifyError?: (error: unknown, message: ConsumedMessage<V>) => ErrorClass;
  /** Dead-letter topic, or a function of the original topic (default `<topic>.dead-letter`). */
  deadLetterTopic?: string | ((topic: string) => string);
  /** Attempts per message on transient errors before it is dead-lettered (default 5). */
  maxAttempts?: number;
  /** First retry's backoff ceiling in ms; doubles per attempt, full jitter (default 200). */
  retryBaseDelayMs?: number;
  /** Backoff ceiling in ms (default 30000). */
  retryMaxDelayMs?: number;
  /** Partitions handled at once (default 4). */
  partitionsConcurrency?: number;
  /**
   * Messages of a partition per Postgres transaction (default 100, at most 1000). With
   * `savepoints: 'always'`, at most 64 are used (one savepoint each).
   */
  messagesPerTransaction?: number;
  /**
   * When a message gets its own savepoint (default `'on-failure'`). `'on-failure'`: a
   * group runs as one plain transaction; when a handler fails, the group is rolled back
   * and the messages before the failing one run again, so their handlers are called twice
   * (their database effects still happen once). `'always'`: a savepoint per message from
   * the start, one more round trip per message, handlers never rerun.
   */
  savepoints?: 'on-failure' | 'always';
  /** Soft stop budget in ms; then transactions in flight are rolled back (default 15000). */
  stopTimeoutMs?: number;
  sessionTimeoutMs?: number;
  heartbeatIntervalMs?: number;
  rebalanceTimeoutMs?: number;
  maxWaitTimeMs?: number;
  /**
   * Where a group without committed offsets starts: true (default) from the oldest
   * message still in the topic, so a new consumer misses nothing; false from new ones.
   */
  fromBeginning?: boolean;
  logger?: Logger;
}

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
  /** Something outside a handler failed (Postgres, the dead-letter publish, Kafka); it is retried. */
  error: { error: unknown; during: string; topic?: string; partition?: number };
  /** The group assigned partitions to this member. */
  assigned: { partitions: Array<{ topic: string; partition: number }> };
  stopped: { hard: boolean };
}

export type ResolvedConsumerOptions<V> = Required<
  Omit<ConsumerOptions<V>, 'kafka' | 'kafkaBrokers' | 'pool' | 'databaseUrl' | 'idempotencyKey' | 'logger' | 'topics' | 'deadLetterTopic'>
> & {
  kafka: Kafka | undefined;
  kafkaBrokers: string[] | undefined;
  pool: pg.Pool | undefined;
  databaseUrl: string | undefined;
  topics: string[];
  idempotencyKey: ConsumerOptions<V>['idempotencyKey'];
  deadLetterTopic: (topic: string) => string;
  logger: Logger;
};

/** Validate options and fill in defaults. @throws ConfigError naming the bad option */
export function resolveConsumerOptions<V>(options: ConsumerOptions<V>): ResolvedConsumerOptions<V> {
  if (options === null || typeof options !== 'object') throw new ConfigError('options', 'must be an object');
  if (!options.kafka && !options.kafkaBrokers) throw new ConfigError('kafka', 'is required: pass a kafkajs client (kafka) or kafkaBrokers');
  if (options.kafkaBrokers) settings.optionValue(kafkaBrokers, options.kafkaBrokers);
  if (!options.pool && !options.databaseUrl) throw new ConfigError('pool', 'is required: pass a pg.Pool (pool) or databaseUrl');
  if (options.databaseUrl) settings.optionValue(databaseUrl, options.databaseUrl);
  if (typeof options.groupId !== 'string' || !/^[A-Za-z0-9._-]{1,249}$/.test(options.groupId)) {
    throw new ConfigError('groupId', `${JSON.stringify(options.groupId)} is not 1-249 letters, digits, '.', '_' or '-'`);
  }
  const topics = typeof options.topics === 'string' ? [options.topics] : options.topics;
  if (!Array.isArray(topics) || topics.length === 0 || topics.some((t) => typeof t !== 'string' || !/^[A-Za-z0-9._-]{1,249}$/.test(t))) {
    throw new ConfigError('topics', 'must be a topic name or a non-empty list of them (letters, digits, ., _, -)');
  }
  if (typeof options.handler !== 'function') throw new ConfigError('handler', 'must be an async function (message, context)');
  const decode = options.decode ?? 'auto';
  if (!(decode === 'auto' || decode === 'json' || decode === 'raw' || typeof decode === 'function')) {
    throw new ConfigError('decode', `${JSON.stringify(decode)} is not 'auto', 'json', 'raw' or a function`);
  }
  if (options.idempotencyKey !== undefined && typeof options.idempotencyKey !== 'function') {
    throw new ConfigError('idempotencyKey', 'must be a function (message) => string | undefined');
  }
  const onMissingKey = options.onMissingKey ?? 'dead-letter';
  if (onMissingKey !== 'dead-letter' && onMissingKey !== 'process-without-dedup') {
    throw new ConfigError('onMissingKey', `${JSON.stringify(onMissingKey)} is not 'dead-letter' or 'process-without-dedup'`);
  }
  if (options.classifyError !== undefined && typeof options.classifyError !== 'function') {
    throw new ConfigError('classifyError', 'must be a function (error, message) => "transient" | "permanent"');
  }
  const savepoints = options.savepoints ?? 'on-failure';
  if (savepoints !== 'on-failure' && savepoints !== 'always') {
    throw new ConfigError('savepoints', `${JSON.stringify(savepoints)} is not 'on-failure' or 'always'`);
  }
  const dlt = options.deadLetterTopic;
  let deadLetterTopic: (topic: string) => string;
  if (dlt === undefined) deadLetterTopic = (t) => `${t}.dead-letter`;
  else if (typeof dlt === 'function') deadLetterTopic = dlt;
  else if (typeof dlt === 'string' && /^[A-Za-z0-9._-]{1,249}$/.test(dlt)) deadLetterTopic = () => dlt;
  else throw new ConfigError('deadLetterTopic', `${JSON.stringify(dlt)} is not a topic name or a function`);
  if (typeof dlt === 'string' && topics.includes(dlt)) throw new ConfigError('deadLetterTopic', 'must not be one of the consumed topics');
  const resolved: ResolvedConsumerOptions<V> = {
    kafka: options.kafka,
    kafkaBrokers: options.kafkaBrokers,
    clientId: settings.optionValue({ ...clientId, defaultValue: 'outbox-relay-consumer' }, options.clientId),
    groupId: options.groupId,
    topics: [...topics],
    pool: options.pool,
    databaseUrl: options.databaseUrl,
    schema: settings.optionValue(schema, options.schema),
    handler: options.handler,
    decode,
    idempotencyKey: options.idempotencyKey,
    onMissingKey,
    classifyError: options.classifyError ?? ((error: unknown) => classifyError(error)),
    deadLetterTopic,
    maxAttempts: settings.optionValue(consumerSettings.maxAttempts, options.maxAttempts),
    retryBaseDelayMs: settings.optionValue(consumerSettings.retryBaseDelayMs, options.retryBaseDelayMs),
    retryMaxDelayMs: settings.optionValue(consumerSettings.consumerRetryMaxDelayMs, options.retryMaxDelayMs),
    partitionsConcurrency: settings.optionValue(consumerSettings.partitionsConcurrency, options.partitionsConcurrency),
    messagesPerTransaction: settings.optionValue(consumerSettings.messagesPerTransaction, options.messagesPerTransaction),
    savepoints,
    stopTimeoutMs: settings.optionValue(consumerSettings.stopTimeoutMs, options.stopTimeoutMs),
    sessionTimeoutMs: settings.optionValue(consumerSettings.sessionTimeoutMs, options.sessionTimeoutMs),
    heartbeatIntervalMs: settings.optionValue(consumerSettings.heartbeatIntervalMs, options.heartbeatIntervalMs),
    rebalanceTimeoutMs: settings.optionValue(consumerSettings.rebalanceTimeoutMs, options.rebalanceTimeoutMs),
    maxWaitTimeMs: settings.optionValue(consumerSettings.maxWaitTimeMs, options.maxWaitTimeMs),
    fromBeginning: options.fromBeginning ?? true,
    logger: options.logger ?? silentLogger(),
  };
  if (resolved.retryBaseDelayMs > resolved.retryMaxDelayMs) {
    throw new ConfigError('retryBaseDelayMs', `${resolved.retryBaseDelayMs} is above retryMaxDelayMs (${resolved.retryMaxDelayMs})`);
  }
  if (resolved.heartbeatIntervalMs >= resolved.sessionTimeoutMs) {
    throw new ConfigError('heartbeatIntervalMs', `${resolved.heartbeatIntervalMs} must be below sessionTimeoutMs (${resolved.sessionTimeoutMs})`);
  }
  return resolved;
}

/**
 * Most savepoints in one transaction: 64 is PostgreSQL's per-backend cache of
 * subtransaction ids; past it every other session's snapshot checks go to pg_subtrans.
 */
const SAVEPOINT_GROUP = 64;

/** Longest idempotency key accepted; longer ones would not fit a btree index entry safely. */
const MAX_KEY_CHARS = 512;

/** One message of a transaction, ready for its handler. */
interface Prepared<V> {
  raw: KafkaMessage;
  message: ConsumedMessage<V>;
  attempt: number;
  /** No usable idempotency key: processed without dedup. */
  missingKey: boolean;
}

/** Why a message could not be handled. */
interface Failure {
  /** Index in the chunk. */
  index: number;
  error: unknown;
  /** Set when the failure is permanent by nature, whatever the classifier says. */
  reason?: DeadLetterReason;
  attempt: number;
}

/** A Postgres or Kafka failure outside any handler: back off, never dead-letter. */
class InfrastructureError extends OutboxError {
  constructor(during: string, cause: unknown) {
    super(`${during}: ${describeError(cause)}`, { retriable: true, context: { during }, cause });
  }
}

/**
 * The consumer runtime: each message's database effects happen once, however often Kafka
 * delivers it. Create with {@link createConsumer}, then `start()`; `stop()` is idempotent
 * and bounded by `stopTimeoutMs`.
 */
export class Consumer<V = unknown> extends TypedEmitter<ConsumerEvents> {
  readonly options: ResolvedConsumerOptions<V>;
  readonly instanceId = randomUUID().slice(0, 8);
  private readonly logger: Logger;
  private readonly quotedSchema: string;
  private readonly claimSql: string;
  private readonly unclaimSql: string;
  private pool: pg.Pool | undefined;
  private ownPool = false;
  private consumer: KafkaConsumer | undefined;
  private producer: Producer | undefined;
  private started = false;
  private stopping = false;
  private stopPromise: Promise<{ hard: boolean }> | undefined;
  private readonly counters: ConsumerStats = {
    processed: 0,
    duplicates: 0,
    stale: 0,
    deadLettered: 0,
    retries: 0,
    missingKey: 0,
    transactions: 0,
    infrastructureErrors: 0,
  };
  /** Per partition: the message being retried and its next attempt number. */
  private readonly attempts = new Map<string, { offset: string; attempt: number }>();
  /** Per partition: consecutive infrastructure failures, for their backoff. */
  private readonly infraFailures = new Map<string, number>();
  private readonly resumeTimers = new Set<NodeJS.Timeout>();
  /** Connections with a transaction in flight, rolled back by a hard stop. */
  private readonly activeClients = new Set<pg.PoolClient>();

  constructor(options: ConsumerOptions<V>) {
    super();
    this.options = resolveConsumerOptions(options);
    this.quotedSchema = quoteIdentifier(this.options.schema, 'schema');
    this.claimSql = claimKeysSql(this.quotedSchema);
    this.unclaimSql = unclaimKeysSql(this.quotedSchema);
    this.logger = this.options.logger.child({ component: 'consumer', groupId: this.options.groupId, consumer: this.instanceId });
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
   *   lacks processed_messages (run `outbox-relay migrate`); kafkajs errors when the broker
   *   cannot be reached.
   */
  async start(): Promise<void> {
    if (this.started) throw new OutboxError('consumer already started', { retriable: false });
    this.started = true;
    const o = this.options;
    if (o.pool) this.pool = o.pool;
    else {
      this.pool = createPool(o.databaseUrl as string, `${o.clientId}:${this.instanceId}`, o.partitionsConcurrency + 1, this.logger);
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

    const kafka = o.kafka ?? createKafka({ brokers: o.kafkaBrokers as string[], clientId: o.clientId, logger: o.logger });
    this.producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner, allowAutoTopicCreation: true });
    this.consumer = kafka.consumer({
      groupId: o.groupId,
      sessionTimeout: o.sessionTimeoutMs,
      heartbeatInterval: o.heartbeatIntervalMs,
      rebalanceTimeout: o.rebalanceTimeoutMs,
      maxWaitTimeInMs: o.maxWaitTimeMs,
      allowAutoTopicCreation: false,
    });
    const consumer = this.consumer;
    consumer.on(consumer.events.GROUP_JOIN, (event) => {
      const partitions = Object.entries(event.payload.memberAssignment).flatMap(([topic, list]) => list.map((partition) => ({ topic, partition })));
      const assigned = new Set(partitions.map((p) => partitionKey(p.topic, p.partition)));
      // Retry state of partitions another member now owns would be stale if they came back.
      for (const key of [...this.attempts.keys()]) if (!assigned.has(key)) this.attempts.delete(key);
      this.logger.info({ partitions }, 'partitions assigned');
      this.emit('assigned', { partitions });
    });
    consumer.on(consumer.events.CRASH, (event) => {
      this.logger.error({ err: describeError(event.payload.error), restart: event.payload.restart }, 'kafka consumer crashed');
      this.emit('error', { error: event.payload.error, during: 'kafka consumer' });
    });
    try {
      await this.producer.connect();
      await consumer.connect();
      await consumer.subscribe({ topics: o.topics, fromBeginning: o.fromBeginning });
      await consumer.run({
        autoCommit: false,
        eachBatchAutoResolve: false,
        partitionsConsumedConcurrently: o.partitionsConcurrency,
        eachBatch: (payload) => this.eachBatch(payload),
      });
    } catch (error) {
      await consumer.disconnect().catch(() => undefined);
      await this.producer.disconnect().catch(() => undefined);
      await this.closePool();
      throw error;
    }
    this.logger.info({ topics: o.topics, schema: o.schema, partitionsConcurrency: o.partitionsConcurrency }, 'consumer started');
  }

  /**
   * Stop: finish the transaction in flight per partition, commit its offsets, leave the
   * group, disconnect. After `stopTimeoutMs` transactions still open are rolled back (their
   * messages come again, to this group's next member). Idempotent: every call returns the
   * same promise; `hard` tells whether the timeout cut work short.
   */
  stop(): Promise<{ hard: boolean }> {
    if (!this.stopPromise) this.stopPromise = this.doStop();
    return this.stopPromise;
  }

  private async doStop(): Promise<{ hard: boolean }> {
    this.stopping = true;
    for (const timer of this.resumeTimers) clearTimeout(timer);
    this.resumeTimers.clear();
    let hard = false;
    if (this.consumer) {
      const consumer = this.consumer;
      const soft = await withTimeout(consumer.stop(), this.options.stopTimeoutMs);
      if (!soft) {
        hard = true;
        this.logger.warn({ stopTimeoutMs: this.options.stopTimeoutMs }, 'stop timeout: rolling back transactions in flight');
        // Destroying the connection rolls its transaction back on the server; the handler
        // waiting on it fails and the batch ends.
        for (const client of this.activeClients) client.release(new Error('consumer stopped'));
        this.activeClients.clear();
      }
      // Bounded even when a handler hangs on something other than Postgres.
      if (!(await withTimeout(consumer.disconnect(), Math.max(this.options.stopTimeoutMs, 1_000)))) hard = true;
    }
    await withTimeout(this.producer?.disconnect() ?? Promise.resolve(), 5_000);
    await this.closePool();
    this.logger.info({ hard, ...this.counters }, 'consumer stopped');
    this.emit('stopped', { hard });
    return { hard };
  }

  private async closePool(): Promise<void> {
    if (this.ownPool) await this.pool?.end().catch(() => undefined);
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
    const prepared: Prepared<V>[] = [];
    let failure: Failure | undefined;
    for (const [index, raw] of chunk.entries()) {
      const attempt = this.attemptOf(tp, raw.offset);
      const result = this.prepare(topic, partition, raw, attempt);
      if ('error' in result) {
        failure = { index, error: result.error, reason: result.reason, attempt };
        break;
      }
      prepared.push(result);
    }

    let committed = 0;
    if (prepared.length > 0) {
      let outcome: { committed: number; failure: Failure | undefined };
      try {
        outcome = await this.transact(topic, partition, prepared);
      } catch (error) {
        return this.backOffInfrastructure(tp, topic, partition, 'transaction', error, payload);
      }
      committed = outcome.committed;
      if (outcome.failure) failure = outcome.failure;
      this.infraFailures.delete(tp);
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
      const kind = message ? this.classify(failure.error, message) : 'permanent';
      if (kind === 'transient' && failure.attempt < this.options.maxAttempts) {
        const delayMs = backoffDelayMs(failure.attempt - 1, this.options.retryBaseDelayMs, this.options.retryMaxDelayMs);
        this.attempts.set(tp, { offset: raw.offset, attempt: failure.attempt + 1 });
        this.counters.retries++;
        this.logger.warn({ topic, partition, offset: raw.offset, attempt: failure.attempt, delayMs, err: describeError(failure.error) }, 'handler failed, will retry');
        this.emit('retry', { topic, partition, offset: raw.offset, attempt: failure.attempt, delayMs, error: failure.error });
        this.pauseFor(payload, delayMs);
        return 'paused';
      }
      reason = kind === 'transient' ? 'retries-exhausted' : 'permanent-error';
    }
    const deadLetterTopic = this.options.deadLetterTopic(topic);
    try {
      await publishDeadLetter(this.producer as Producer, deadLetterTopic, {
        topic,
        partition,
        message: raw,
        reason,
        error: failure.error,
        attempts: failure.attempt,
        consumerGroup: this.options.groupId,
      });
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
   *
   * @returns how many leading messages are committed, and the handler failure, if any
   * @throws when a transaction itself fails (nothing committed, or unknown after a lost COMMIT)
   */
  private async transact(topic: string, partition: number, prepared: Prepared<V>[]): Promise<{ committed: number; failure: Failure | undefined }> {
    let group = prepared;
    let pending: Failure | undefined;
    if (this.options.savepoints === 'on-failure') {
      for (;;) {
        const result = await this.runTransaction(topic, partition, group, false);
        if (!('rolledBack' in result)) return result.committed === group.length && pending ? { committed: result.committed, failure: pending } : result;
        if (!result.rolledBack) break;
        // Message `index` failed by itself: the ones before it run again, it does not.
        pending = result.rolledBack;
        if (pending.index === 0) return { committed: 0, failure: pending };
        group = group.slice(0, pending.index);
      }
    }
    // A savepoint per message; at most SAVEPOINT_GROUP of them (subtransaction cache).
    const limited = group.length > SAVEPOINT_GROUP ? group.slice(0, SAVEPOINT_GROUP) : group;
    const result = await this.runTransaction(topic, partition, limited, true);
    if ('rolledBack' in result) throw new Error('unreachable: the savepoint path never rolls back a whole group');
    return result.committed === group.length && pending ? { committed: result.committed, failure: pending } : result;
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
    topic: string,
    partition: number,
    prepared: Prepared<V>[],
    savepoints: boolean,
  ): Promise<{ committed: number; failure: Failure | undefined } | { rolledBack: Failure | null }> {
    const pool = this.pool as pg.Pool;
    const client = await pool.connect();
    let broken: Error | undefined;
    const onError = (error: Error): void => {
      broken = error;
    };
    client.on('error', onError);
    this.activeClients.add(client);
    const release = (): void => {
      if (this.activeClients.delete(client)) {
        client.off('error', onError);
        client.release();
      }
    };
    try {
      await client.query('BEGIN');
      // The first occurrence of a key in offset order is the one that runs; a later one in
      // the same group (a relay that published twice) is a duplicate like any other.
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
      const outcomes: Array<{ duplicate: boolean; stale: boolean }> = [];
      let failure: Failure | undefined;
      // Index of the message whose savepoint is open: it is released together with the
      // next message's SAVEPOINT, in one round trip.
      let open = -1;
      const fail = async (index: number, error: unknown): Promise<void> => {
        await client.query('ROLLBACK TO SAVEPOINT message');
        failure = { index, error, attempt: (prepared[index] as Prepared<V>).attempt };
        const giveBack = [...claimed].filter((k) => (firstIndex.get(k) as number) >= index);
        if (giveBack.length > 0) await client.query(this.unclaimSql, [this.options.groupId, giveBack]);
      };
      for (let i = 0; i < prepared.length; i++) {
        const p = prepared[i] as Prepared<V>;
        const { message } = p;
        const key = message.idempotencyKey;
        if (key !== undefined && (!claimed.has(key) || firstIndex.get(key) !== i)) {
          outcomes.push({ duplicate: true, stale: false });
          continue;
        }
        if (savepoints) {
          try {
            await client.query(open >= 0 ? 'RELEASE SAVEPOINT message; SAVEPOINT message' : 'SAVEPOINT message');
          } catch (error) {
            if (broken || open < 0) throw broken ?? error;
            // The RELEASE failed, so the SAVEPOINT did not run: the previous handler returned
            // with the transaction aborted (it caught a database error and went on).
            await fail(open, abortedByHandler(error));
            break;
          }
          open = i;
        }
        const outcome = { duplicate: false, stale: false };
        const context = this.context(client, p.attempt, () => {
          outcome.stale = true;
        });
        try {
          await this.options.handler(message, context);
        } catch (error) {
          if (broken) throw broken;
          if (!savepoints) {
            await client.query('ROLLBACK');
            release();
            // 25P02: the transaction was already aborted, maybe by an earlier handler.
            return { rolledBack: (error as { code?: unknown })?.code === '25P02' ? null : { index: i, error, attempt: p.attempt } };
          }
          await fail(i, error);
          break;
        }
        outcomes.push(outcome);
      }
      if (savepoints && !failure && open >= 0) {
        try {
          await client.query('RELEASE SAVEPOINT message');
        } catch (error) {
          if (broken) throw broken;
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
      let processed = 0;
      let duplicates = 0;
      for (let i = 0; i < committed; i++) {
        const outcome = outcomes[i] as { duplicate: boolean; stale: boolean };
        const p = prepared[i] as Prepared<V>;
        const { offset, idempotencyKey } = p.message;
        if (outcome.duplicate) {
          duplicates++;
          this.counters.duplicates++;
          this.emit('duplicate', { topic, partition, offset, idempotencyKey: idempotencyKey as string });
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
      return { committed, failure };
    } catch (error) {
      if (this.activeClients.delete(client)) {
        // The connection's state is unknown: destroy it (the server rolls back) rather
        // than return it to the pool mid-transaction.
        client.off('error', onError);
        client.release(error instanceof Error ? error : new Error(String(error)));
      }
      throw error;
    }
  }

  private context(client: pg.PoolClient, attempt: number, markStale: () => void): HandlerContext {
    const { groupId, schema } = this.options;
    return {
      client,
      attempt,
      groupId,
      markStale,
      advanceVersion: async (entity, version, options) => {
        const newer = await advanceEntityVersion(client, { schema, scope: options?.scope ?? groupId, entity, version });
        if (!newer) markStale();
        return newer;
      },
      lockEntity: (key, options) => lockEntity(client, key, options),
    };
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
      await payload.commitOffsetsIfNecessary({ topics: [{ topic, partitions: [{ partition, offset: nextOffset }] }] });
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

async function withTimeout(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  try {
    return await Promise.race([promise.then(() => true, () => true), timeout]);
  } finally {
    clearTimeout(timer);
  }
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

/** The error of a handler that returned normally with its transaction aborted. */
function abortedByHandler(cause: unknown): Error {
  const error = new Error(
    `the handler returned with the transaction aborted (it caught a database error and went on): ${describeError(cause)}`,
    { cause },
  );
  error.name = 'HandlerLeftTransactionAborted';
  return error;
}
