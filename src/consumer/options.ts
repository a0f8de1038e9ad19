import type pg from 'pg';
import type { Kafka } from 'kafkajs';
import { optionValue } from '../shared/settings.js';
import { databaseUrl, kafkaBrokers, schema } from '../shared/commonSettings.js';
import {
  BATCH_MESSAGES_PER_TRANSACTION, afterCommitTimeoutMs, batchesInFlight, consumerClientId, handlerTimeoutMs, heartbeatIntervalMs, isolationLevel, maxAttempts,
  maxWaitTimeMs, messagesPerTransaction, missingTopicTimeoutMs, onMissingKey, rebalanceTimeoutMs, retryBaseDelayMs, retryMaxDelayMs, savepoints,
  sessionTimeoutMs, shutdownTimeoutMs, withDeprecatedName,
} from './optionSettings.js';
import { ConfigError } from '../shared/errors.js';
import { isTopicName, topicNameProblem } from '../shared/kafkaNames.js';
import { silentLogger, type Logger } from '../shared/logger.js';
import type { ValueDecoder } from './decode.js';
import { resolveSchemaRegistryOptions, type SchemaRegistryOptions } from '../encodings/index.js';
import { classifyError, type ErrorClass } from './classifyError.js';
import type { BatchHandler, ConsumedMessage, MessageHandler } from './types.js';
import { checkOptionNames } from './optionNames.js';

// The consumer's options: what createConsumer accepts (ConsumerOptions), what it runs with
// (ResolvedConsumerOptions) and the validation (resolveConsumerOptions); the Setting
// objects that state each option's default and range once are in optionSettings.ts.
//
// Names shared with the relay mean the same thing: `batchesInFlight` (units of work at
// once, each on its own Postgres connection; the consumer's unit is a partition's
// transaction) and `shutdownTimeoutMs` (the soft-stop budget).

/** Options of {@link createConsumer}. */
export interface ConsumerOptions<V = unknown> {
  /** A kafkajs client; or give `kafkaBrokers` and one is made. */
  kafka?: Kafka;
  /** Kafka bootstrap brokers, `host:port`, when the consumer makes its own client. */
  kafkaBrokers?: string[];
  /** Kafka client id when the consumer makes the client (default `outbox-relay-consumer`). */
  clientId?: string;
  /** Kafka consumer group. Also the namespace of the idempotency keys. */
  groupId: string;
  /** The topic, or topics, to consume. */
  topics: string | string[];
  /**
   * Postgres pool the transactions run on (left open by stop()); or give `databaseUrl`.
   * It needs a connection per batch in flight (`batchesInFlight`).
   */
  pool?: pg.Pool;
  /** Postgres connection string, when the consumer makes (and closes) its own pool. */
  databaseUrl?: string;
  /** Schema of processed_messages and entity_versions (default `public`). */
  schema?: string;
  /**
   * Handles one message inside the transaction that records it as processed. Give
   * exactly one of `handler` and `handleBatch`.
   */
  handler?: MessageHandler<V>;
  /**
   * Handles a partition's new messages of one transaction in one call, for set-based
   * statements (one multi-row INSERT for the batch instead of one per message). Same
   * guarantees as `handler`: duplicates are never passed, effects happen once, the offset
   * is committed after the COMMIT. When it throws, the batch is rolled back and its
   * messages are passed again, in halves and then one at a time (each in a savepoint) up
   * to the failing one, which is retried or dead-lettered alone; the others are applied. Give exactly one of
   * `handler` and `handleBatch`; `savepoints: 'always'` does not apply to it.
   */
  handleBatch?: BatchHandler<V>;
  /** How values are decoded (default `'auto'`: JSON when content-type says so). */
  decode?: ValueDecoder;
  /**
   * A Confluent-compatible schema registry (docs/encodings.md): with `decode` `'auto'` or
   * `'json'`, a value in Confluent's wire format (Avro, Protobuf, JSON Schema) is decoded
   * by its schema id and the handler gets the value and `schemaId`. An id the registry does
   * not know is retried like a transient error, then dead-lettered as undecodable.
   */
  schemaRegistry?: SchemaRegistryOptions;
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
  /**
   * Batches handled at once (default 4, at most 256). A batch is one partition's
   * transaction, so this is also how many partitions are handled at once, and each holds
   * one Postgres connection while it works.
   */
  batchesInFlight?: number;
  /** @deprecated The old name of `batchesInFlight`; still accepted. Giving both with different values is a ConfigError. */
  partitionsConcurrency?: number;
  /**
   * Messages of a partition per Postgres transaction (default 100, at most 1000). With
   * `savepoints: 'always'`, at most 64 are used (one savepoint each). With `handleBatch`
   * the default is 500: a batch costs its four round trips (BEGIN, the key claim, the
   * handler's statement, COMMIT) and an offset commit per transaction, not per message.
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
  /**
   * Soft-stop budget in ms: how long stop() lets the transactions in flight finish before
   * it rolls them back (default 15000).
   */
  shutdownTimeoutMs?: number;
  /**
   * Longest an `afterCommit` hook is waited for, in ms (default 5000). A hook still running
   * then is given up on: logged, counted (`stats().afterCommitErrors`) and reported (the
   * `afterCommitError` event, an `AfterCommitTimeout` error); the partition goes on and the
   * offset is committed. The hook itself is not cancelled; what it does later is ignored.
   */
  afterCommitTimeoutMs?: number;
  /**
   * Longest one call of `handler` or `handleBatch` is waited for, in ms (default 60000,
   * 1-3600000). A call still running then is given up on: its transaction is rolled back
   * (the connection destroyed, its server process ended), the `handlerTimeout` event is
   * emitted, and the message fails with a HandlerTimeout (retriable: retried with backoff,
   * then dead-lettered, as classifyError decides). A batch is searched as after any
   * failure. The call itself is not cancelled: its ctx.client refuses further use.
   */
  handlerTimeoutMs?: number;
  /**
   * How long start() waits for topics that do not exist yet, in ms (default 60000; 0:
   * not at all). Past it, start() rejects with a MissingTopicError naming them. While it
   * waits, the 'waitingForTopics' event and a warning say which are missing.
   */
  missingTopicTimeoutMs?: number;
  /** @deprecated The old name of `shutdownTimeoutMs`; still accepted. Giving both with different values is a ConfigError. */
  stopTimeoutMs?: number;
  /** Kafka group session timeout in ms: a member silent this long leaves the group (default 30000). */
  sessionTimeoutMs?: number;
  /** Kafka group heartbeat interval in ms, below sessionTimeoutMs (default 3000). */
  heartbeatIntervalMs?: number;
  /** How long the group waits for members to rejoin during a rebalance, in ms (default 60000). */
  rebalanceTimeoutMs?: number;
  /** Longest a fetch waits on the broker for new messages, in ms (default 500). */
  maxWaitTimeMs?: number;
  /**
   * Where a group without committed offsets starts: true (default) from the oldest
   * message still in the topic, so a new consumer misses nothing; false from new ones.
   */
  fromBeginning?: boolean;
  /**
   * Which records a fetch returns (Kafka's `isolation.level`). `'read_committed'`
   * (default): only records of committed Kafka transactions, and every record written
   * outside a transaction; a partition is read up to its last stable offset, so a
   * transaction still open holds back the records after it until it commits or aborts.
   * `'read_uncommitted'`: every record, those of aborted and open transactions included.
   * The two differ only for topics that transactional producers write to. (kafkajs, on
   * which the consumer runs, reads committed by default; Kafka's Java consumer reads
   * uncommitted.)
   */
  isolationLevel?: 'read_committed' | 'read_uncommitted';
  /** A pino logger (default: silent). */
  logger?: Logger;
}

/** The options a Consumer runs with: validated, defaults filled in, deprecated names gone. */
export type ResolvedConsumerOptions<V> = Required<
  Omit<
    ConsumerOptions<V>,
    'kafka' | 'kafkaBrokers' | 'pool' | 'databaseUrl' | 'idempotencyKey' | 'logger' | 'topics' | 'deadLetterTopic' | 'partitionsConcurrency' | 'stopTimeoutMs' | 'handler' | 'handleBatch' | 'schemaRegistry'
  >
> & {
  schemaRegistry: SchemaRegistryOptions | undefined;
  /** Exactly one of handler and handleBatch is set. */
  handler: MessageHandler<V> | undefined;
  handleBatch: BatchHandler<V> | undefined;
  kafka: Kafka | undefined;
  kafkaBrokers: string[] | undefined;
  pool: pg.Pool | undefined;
  databaseUrl: string | undefined;
  topics: string[];
  idempotencyKey: ConsumerOptions<V>['idempotencyKey'];
  deadLetterTopic: (topic: string) => string;
  logger: Logger;
};

// Every option createConsumer knows (checkOptionNames refuses any other key).
const KNOWN_OPTIONS = new Set<string>([
  'kafka', 'kafkaBrokers', 'clientId', 'groupId', 'topics', 'pool', 'databaseUrl', 'schema', 'handler', 'handleBatch', 'decode', 'schemaRegistry',
  'idempotencyKey', 'onMissingKey', 'classifyError', 'deadLetterTopic', 'maxAttempts', 'retryBaseDelayMs', 'retryMaxDelayMs',
  'batchesInFlight', 'partitionsConcurrency', 'messagesPerTransaction', 'savepoints', 'shutdownTimeoutMs', 'stopTimeoutMs',
  'afterCommitTimeoutMs', 'handlerTimeoutMs', 'missingTopicTimeoutMs', 'sessionTimeoutMs', 'heartbeatIntervalMs', 'rebalanceTimeoutMs', 'maxWaitTimeMs',
  'fromBeginning', 'isolationLevel', 'logger',
] satisfies Array<keyof ConsumerOptions>);

// Kafka accepts any group id; this rule is narrower on purpose, since the group id is also
// the namespace of the idempotency keys and goes into dead-letter headers and logs.
const GROUP_ID = /^[A-Za-z0-9._-]{1,249}$/;

/**
 * Exactly one of `handler` and `handleBatch`, a function.
 * @throws ConfigError naming the option at fault
 */
export function checkHandlers(options: { handler?: unknown; handleBatch?: unknown }): void {
  const { handler, handleBatch } = options;
  if (handler !== undefined && handleBatch !== undefined) {
    throw new ConfigError('handleBatch', 'give either handler (one message per call) or handleBatch (the messages of a transaction per call), not both');
  }
  if (handleBatch !== undefined) {
    if (typeof handleBatch !== 'function') throw new ConfigError('handleBatch', 'must be an async function (messages, context)');
    return;
  }
  if (handler === undefined) throw new ConfigError('handler', 'is required: an async function (message, context), or give handleBatch (messages, context)');
  if (typeof handler !== 'function') throw new ConfigError('handler', 'must be an async function (message, context)');
}

/** Validate options and fill in defaults. @throws ConfigError naming the bad option */
export function resolveConsumerOptions<V>(options: ConsumerOptions<V>): ResolvedConsumerOptions<V> {
  if (options === null || typeof options !== 'object') throw new ConfigError('options', 'must be an object');
  checkOptionNames(Object.keys(options), KNOWN_OPTIONS);
  if (!options.kafka && !options.kafkaBrokers) throw new ConfigError('kafka', 'is required: pass a kafkajs client (kafka) or kafkaBrokers');
  if (options.kafkaBrokers) optionValue(kafkaBrokers, options.kafkaBrokers);
  if (!options.pool && !options.databaseUrl) throw new ConfigError('pool', 'is required: pass a pg.Pool (pool) or databaseUrl');
  if (options.databaseUrl) optionValue(databaseUrl, options.databaseUrl);
  if (typeof options.groupId !== 'string' || !GROUP_ID.test(options.groupId)) {
    throw new ConfigError('groupId', `${JSON.stringify(options.groupId)} is not 1-249 letters, digits, '.', '_' or '-'`);
  }
  const topics = typeof options.topics === 'string' ? [options.topics] : options.topics;
  if (!Array.isArray(topics) || topics.length === 0) throw new ConfigError('topics', 'must be a topic name or a non-empty list of them');
  const badTopic = topics.find((t) => !isTopicName(t));
  if (badTopic !== undefined) throw new ConfigError('topics', topicNameProblem(badTopic) as string);
  checkHandlers(options);
  const decode = options.decode ?? 'auto';
  if (!(decode === 'auto' || decode === 'json' || decode === 'raw' || typeof decode === 'function')) {
    throw new ConfigError('decode', `${JSON.stringify(decode)} is not 'auto', 'json', 'raw' or a function`);
  }
  if (options.idempotencyKey !== undefined && typeof options.idempotencyKey !== 'function') {
    throw new ConfigError('idempotencyKey', 'must be a function (message) => string | undefined');
  }
  const missingKey = optionValue(onMissingKey, options.onMissingKey);
  if (options.classifyError !== undefined && typeof options.classifyError !== 'function') {
    throw new ConfigError('classifyError', 'must be a function (error, message) => "transient" | "permanent"');
  }
  const savepointsWhen = optionValue(savepoints, options.savepoints);
  // 'always' promises that no handler runs twice; a failed batch is redone one message at
  // a time, so with handleBatch that promise cannot be kept.
  if (options.handleBatch !== undefined && savepointsWhen === 'always') {
    throw new ConfigError('savepoints', "'always' does not apply to handleBatch: a failed batch is rolled back and its messages are passed again one at a time (each in its own savepoint)");
  }
  const dlt = options.deadLetterTopic;
  let deadLetterTopic: (topic: string) => string;
  if (dlt === undefined) deadLetterTopic = (t) => `${t}.dead-letter`;
  else if (typeof dlt === 'function') {
    // The rules a name given as a string meets, checked on what the function returns,
    // when a message is dead-lettered: a consumed topic would feed the message back in.
    deadLetterTopic = (t) => {
      const name: unknown = dlt(t);
      if (typeof name !== 'string' || !isTopicName(name)) {
        throw new ConfigError('deadLetterTopic', `the function returned ${typeof name === 'string' ? JSON.stringify(name) : String(name)} for topic ${JSON.stringify(t)}: ${typeof name === 'string' ? (topicNameProblem(name) as string) : 'not a topic name'}`);
      }
      if (topics.includes(name)) throw new ConfigError('deadLetterTopic', `the function returned ${JSON.stringify(name)} for topic ${JSON.stringify(t)}, one of the consumed topics; it must not be one`);
      return name;
    };
  }
  else if (isTopicName(dlt)) deadLetterTopic = () => dlt;
  else throw new ConfigError('deadLetterTopic', `${topicNameProblem(dlt) as string}, nor a function`);
  if (typeof dlt === 'string' && topics.includes(dlt)) throw new ConfigError('deadLetterTopic', 'must not be one of the consumed topics');
  const resolved: ResolvedConsumerOptions<V> = {
    kafka: options.kafka,
    kafkaBrokers: options.kafkaBrokers,
    clientId: optionValue(consumerClientId, options.clientId),
    groupId: options.groupId,
    topics: [...topics],
    pool: options.pool,
    databaseUrl: options.databaseUrl,
    schema: optionValue(schema, options.schema),
    handler: options.handler,
    handleBatch: options.handleBatch,
    decode,
    schemaRegistry: options.schemaRegistry === undefined ? undefined : resolveSchemaRegistryOptions(options.schemaRegistry, 'schemaRegistry'),
    idempotencyKey: options.idempotencyKey,
    onMissingKey: missingKey,
    classifyError: options.classifyError ?? ((error: unknown) => classifyError(error)),
    deadLetterTopic,
    maxAttempts: optionValue(maxAttempts, options.maxAttempts),
    retryBaseDelayMs: optionValue(retryBaseDelayMs, options.retryBaseDelayMs),
    retryMaxDelayMs: optionValue(retryMaxDelayMs, options.retryMaxDelayMs),
    batchesInFlight: withDeprecatedName(batchesInFlight, options.batchesInFlight, 'partitionsConcurrency', options.partitionsConcurrency),
    messagesPerTransaction: optionValue(messagesPerTransaction, options.messagesPerTransaction ?? (options.handleBatch ? BATCH_MESSAGES_PER_TRANSACTION : undefined)),
    savepoints: savepointsWhen,
    afterCommitTimeoutMs: optionValue(afterCommitTimeoutMs, options.afterCommitTimeoutMs),
    handlerTimeoutMs: optionValue(handlerTimeoutMs, options.handlerTimeoutMs),
    missingTopicTimeoutMs: optionValue(missingTopicTimeoutMs, options.missingTopicTimeoutMs),
    shutdownTimeoutMs: withDeprecatedName(shutdownTimeoutMs, options.shutdownTimeoutMs, 'stopTimeoutMs', options.stopTimeoutMs),
    sessionTimeoutMs: optionValue(sessionTimeoutMs, options.sessionTimeoutMs),
    heartbeatIntervalMs: optionValue(heartbeatIntervalMs, options.heartbeatIntervalMs),
    rebalanceTimeoutMs: optionValue(rebalanceTimeoutMs, options.rebalanceTimeoutMs),
    maxWaitTimeMs: optionValue(maxWaitTimeMs, options.maxWaitTimeMs),
    fromBeginning: options.fromBeginning ?? true,
    isolationLevel: optionValue(isolationLevel, options.isolationLevel),
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
