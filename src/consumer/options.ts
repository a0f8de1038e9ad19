import type pg from 'pg';
import type { Kafka } from 'kafkajs';
import { integer, optionValue } from '../shared/settings.js';
import { clientId, databaseUrl, kafkaBrokers, schema } from '../shared/commonSettings.js';
import { ConfigError } from '../shared/errors.js';
import { isTopicName, topicNameProblem } from '../shared/kafkaNames.js';
import { silentLogger, type Logger } from '../shared/logger.js';
import type { ValueDecoder } from './decode.js';
import { classifyError, type ErrorClass } from './classifyError.js';
import type { ConsumedMessage, MessageHandler } from './types.js';

// The consumer's options: what createConsumer accepts (ConsumerOptions), what it runs with
// (ResolvedConsumerOptions), the Setting objects that state each numeric option's default
// and range once, and the validation (resolveConsumerOptions).

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


export const maxAttempts = integer({
  option: 'maxAttempts',
  flag: '--max-attempts',
  env: 'OUTBOX_CONSUMER_MAX_ATTEMPTS',
  description: 'Attempts at a message failing with a transient error before it is dead-lettered.',
  defaultValue: 5,
  min: 1,
  max: 1_000,
});

export const retryBaseDelayMs = integer({
  option: 'retryBaseDelayMs',
  flag: '--retry-base-delay-ms',
  env: 'OUTBOX_CONSUMER_RETRY_BASE_DELAY_MS',
  description: 'Backoff ceiling of the first retry (milliseconds); it doubles per attempt, with full jitter.',
  defaultValue: 200,
  min: 1,
  max: 600_000,
});

export const consumerRetryMaxDelayMs = integer({
  option: 'retryMaxDelayMs',
  flag: '--retry-max-delay-ms',
  env: 'OUTBOX_CONSUMER_RETRY_MAX_DELAY_MS',
  description: 'Upper bound of the backoff between retries of a message (milliseconds).',
  defaultValue: 30_000,
  min: 1,
  max: 3_600_000,
});

export const partitionsConcurrency = integer({
  option: 'partitionsConcurrency',
  flag: '--partitions-concurrency',
  env: 'OUTBOX_CONSUMER_PARTITIONS_CONCURRENCY',
  description: 'Partitions handled at once (each holds one Postgres connection while it works).',
  defaultValue: 4,
  min: 1,
  max: 256,
});

// A group runs as one transaction without savepoints unless a handler fails (consumer
// option `savepoints`); with a savepoint per message at most 64 of them are used.
export const messagesPerTransaction = integer({
  option: 'messagesPerTransaction',
  flag: '--messages-per-transaction',
  env: 'OUTBOX_CONSUMER_MESSAGES_PER_TRANSACTION',
  description: 'Messages of one partition handled in one Postgres transaction (at most 64 with a savepoint per message).',
  defaultValue: 100,
  min: 1,
  max: 1_000,
});

export const stopTimeoutMs = integer({
  option: 'stopTimeoutMs',
  flag: '--stop-timeout-ms',
  env: 'OUTBOX_CONSUMER_STOP_TIMEOUT_MS',
  description: 'How long stop() waits for the transactions in flight before it rolls them back (milliseconds).',
  defaultValue: 15_000,
  min: 0,
  max: 600_000,
});

export const sessionTimeoutMs = integer({
  option: 'sessionTimeoutMs',
  flag: '--session-timeout-ms',
  env: 'OUTBOX_CONSUMER_SESSION_TIMEOUT_MS',
  description: 'Kafka group session timeout: a member silent this long is removed from the group (milliseconds).',
  defaultValue: 30_000,
  min: 1_000,
  max: 3_600_000,
});

export const heartbeatIntervalMs = integer({
  option: 'heartbeatIntervalMs',
  flag: '--heartbeat-interval-ms',
  env: 'OUTBOX_CONSUMER_HEARTBEAT_INTERVAL_MS',
  description: 'Kafka group heartbeat interval (milliseconds); keep it well below the session timeout.',
  defaultValue: 3_000,
  min: 100,
  max: 600_000,
});

export const rebalanceTimeoutMs = integer({
  option: 'rebalanceTimeoutMs',
  flag: '--rebalance-timeout-ms',
  env: 'OUTBOX_CONSUMER_REBALANCE_TIMEOUT_MS',
  description: 'How long the group waits for members to rejoin during a rebalance (milliseconds).',
  defaultValue: 60_000,
  min: 1_000,
  max: 3_600_000,
});

export const maxWaitTimeMs = integer({
  option: 'maxWaitTimeMs',
  flag: '--max-wait-time-ms',
  env: 'OUTBOX_CONSUMER_MAX_WAIT_TIME_MS',
  description: 'Longest a fetch waits on the broker for new messages (milliseconds).',
  defaultValue: 500,
  min: 0,
  max: 60_000,
});

export const retentionDays = integer({
  option: 'retentionDays',
  flag: '--retention-days',
  env: 'OUTBOX_PROCESSED_RETENTION_DAYS',
  description: 'Keep processed_messages rows this many days; must outlast the longest redelivery and replay horizon.',
  defaultValue: 14,
  min: 1,
  max: 3_650,
});

export const purgeBatchSize = integer({
  option: 'batchSize',
  flag: '--batch-size',
  env: 'OUTBOX_PURGE_BATCH_SIZE',
  description: 'Rows deleted per purge transaction.',
  defaultValue: 1_000,
  min: 1,
  max: 100_000,
});

// Kafka accepts any group id; this rule is narrower on purpose, since the group id is also
// the namespace of the idempotency keys and goes into dead-letter headers and logs.
const GROUP_ID = /^[A-Za-z0-9._-]{1,249}$/;

/** Validate options and fill in defaults. @throws ConfigError naming the bad option */
export function resolveConsumerOptions<V>(options: ConsumerOptions<V>): ResolvedConsumerOptions<V> {
  if (options === null || typeof options !== 'object') throw new ConfigError('options', 'must be an object');
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
  else if (isTopicName(dlt)) deadLetterTopic = () => dlt;
  else throw new ConfigError('deadLetterTopic', `${topicNameProblem(dlt) as string}, nor a function`);
  if (typeof dlt === 'string' && topics.includes(dlt)) throw new ConfigError('deadLetterTopic', 'must not be one of the consumed topics');
  const resolved: ResolvedConsumerOptions<V> = {
    kafka: options.kafka,
    kafkaBrokers: options.kafkaBrokers,
    clientId: optionValue({ ...clientId, defaultValue: 'outbox-relay-consumer' }, options.clientId),
    groupId: options.groupId,
    topics: [...topics],
    pool: options.pool,
    databaseUrl: options.databaseUrl,
    schema: optionValue(schema, options.schema),
    handler: options.handler,
    decode,
    idempotencyKey: options.idempotencyKey,
    onMissingKey,
    classifyError: options.classifyError ?? ((error: unknown) => classifyError(error)),
    deadLetterTopic,
    maxAttempts: optionValue(maxAttempts, options.maxAttempts),
    retryBaseDelayMs: optionValue(retryBaseDelayMs, options.retryBaseDelayMs),
    retryMaxDelayMs: optionValue(consumerRetryMaxDelayMs, options.retryMaxDelayMs),
    partitionsConcurrency: optionValue(partitionsConcurrency, options.partitionsConcurrency),
    messagesPerTransaction: optionValue(messagesPerTransaction, options.messagesPerTransaction),
    savepoints,
    stopTimeoutMs: optionValue(stopTimeoutMs, options.stopTimeoutMs),
    sessionTimeoutMs: optionValue(sessionTimeoutMs, options.sessionTimeoutMs),
    heartbeatIntervalMs: optionValue(heartbeatIntervalMs, options.heartbeatIntervalMs),
    rebalanceTimeoutMs: optionValue(rebalanceTimeoutMs, options.rebalanceTimeoutMs),
    maxWaitTimeMs: optionValue(maxWaitTimeMs, options.maxWaitTimeMs),
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
