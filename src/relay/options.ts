import type { Kafka, KafkaConfig } from 'kafkajs';
import { partitionMaintenanceIntervalMs, partitionsAhead, relayPartitionRetention } from './partitionSettings.js';
import * as settings from '../shared/settings.js';
import { clientId, databaseUrl, kafkaBrokers, schema } from '../shared/commonSettings.js';
import { silentLogger, type Logger } from '../shared/logger.js';
import { kafkaSecurityConfig, type KafkaSecurityOptions } from '../shared/kafkaSecurity.js';
import { topicNameProblem } from '../shared/kafkaNames.js';
import { assertPlatformaticInstalled } from './platformaticPackage.js';
import type { EncodingOptions, ResolvedEncodingOptions } from '../encodings/index.js';
import { encodingsFile, relayEncodings } from './encodingSettings.js';
import { checkExactlyOnce, delivery, exactlyOnceUnits, producer, transactionalIdPrefix, transactionIntervalMs, transactionTimeoutMs } from './deliverySettings.js';

export { delivery, exactlyOnceUnits, producer, transactionalIdPrefix, transactionIntervalMs, transactionTimeoutMs } from './deliverySettings.js';

// The relay's options: their types, the user-facing settings behind them (flag,
// environment, default, accepted values), and their validation.

/** What happens to a key's later rows when one of its rows is dead-lettered. */
export type DeadLetterPolicy = 'park' | 'skip';

/** Options of `createRelay` (src/relay.ts). Only `databaseUrl` and `kafkaBrokers` are required. */
export interface RelayOptions extends KafkaSecurityOptions {
  /** PostgreSQL connection string. */
  databaseUrl: string;
  /** Kafka bootstrap brokers, `host:port`. */
  kafkaBrokers: string[];
  /** Schema holding the outbox (default `public`). */
  schema?: string;
  /** Rows per batch, one Kafka request each (default 500). */
  batchSize?: number;
  /** Batches published at once, each on its own shards (default 2). */
  batchesInFlight?: number;
  /** Idle polling interval in ms (default 10). */
  pollIntervalMs?: number;
  /** How often a relay looks for new rows after 2 s without any, in ms (default 1000). */
  idlePollMaxMs?: number;
  /** Soft stop budget in ms before in-flight work is abandoned (default 15000). */
  shutdownTimeoutMs?: number;
  /** Ceiling of the retry backoff in ms (default 30000). */
  retryMaxDelayMs?: number;
  /** Kafka client id and Postgres application_name prefix (default `outbox-relay`). */
  clientId?: string;
  /** Batch compression (default `none`). */
  compression?: 'none' | 'gzip';
  /**
   * Kafka client that publishes: `platformatic` (`@platformatic/kafka`; the default) or
   * `kafkajs`. Both are dependencies and give the same guarantees: acks=all, the relay's
   * own murmur2 partitioning, one request per partition. With `platformatic` the relay
   * builds that client from kafkaBrokers, clientId and the Kafka security options. When
   * a kafkajs client is passed in (`kafka`) and `producer` is not given, it is `kafkajs`:
   * the client you passed publishes.
   */
  producer?: 'kafkajs' | 'platformatic';
  /**
   * How long a row may wait behind an open transaction elsewhere in the database before
   * it is claimed anyway, in ms (default 60000). See the Horizon class.
   */
  horizonMaxWaitMs?: number;
  /**
   * Shard lease time to live in ms (default 10000). A relay that dies, hangs or loses the
   * database loses its shards after this long, and the others take them over within
   * about 1.4 x this. Leases are renewed every third of it.
   */
  leaseTtlMs?: number;
  /** Largest message (key + value + headers, bytes) the relay sends; larger rows are dead-lettered (default 1000000). */
  maxMessageBytes?: number;
  /**
   * How long rows wait for a topic Kafka does not have and does not create, in ms
   * (default 30000): meanwhile they stay unsent and the batch's other topics publish;
   * after it they go to the dead letters (per the dead-letter policy).
   */
  missingTopicTimeoutMs?: number;
  /**
   * What a dead-lettered row does to its key's later rows (default `park`): `park` holds
   * them, in order, until an operator replays or discards the dead letter; `skip` lets
   * them go on without it.
   */
  deadLetterPolicy?: DeadLetterPolicy;
  /** Per-topic policies overriding {@link RelayOptions.deadLetterPolicy}. */
  deadLetterPolicyByTopic?: Record<string, DeadLetterPolicy>;
  /** After Kafka acknowledged a row: `mark` it sent (default; `cleanup` deletes it later) or `delete` it. */
  onPublish?: 'mark' | 'delete';
  /** Consecutive failed batches that open the circuit breaker (default 3). */
  breakerFailures?: number;
  /**
   * On a partitioned outbox (docs/partitioning.md): how often the relay creates the
   * partitions ahead and drops old fully sent ones, in ms (default 60000; 0: never).
   */
  partitionMaintenanceIntervalMs?: number;
  /** Whole partitions the relay keeps above the outbox sequence (default 2). */
  partitionsAhead?: number;
  /** A fully sent partition is dropped once its newest sent_at is older than this (default `7d`). */
  partitionRetention?: string;
  /**
   * Connection pooling between the relay and Postgres (default `auto`). `transaction`: the
   * connections go through a transaction-pooling proxy (PgBouncer `pool_mode = transaction`,
   * and the like), so the relay keeps nothing in a session: no prepared statements, no
   * session settings. `none`: direct connections (or session pooling); the relay prepares
   * its statements once per connection, and fails to start when it finds a transaction
   * pooler after all. `auto`: the relay probes at start (two connections served by one
   * backend mean transaction pooling) and switches over later if prepared statements
   * vanish between transactions.
   */
  pooler?: 'auto' | 'none' | 'transaction';
  /**
   * `at-least-once` (default): a crash between Kafka's acknowledgement and the Postgres
   * COMMIT publishes a batch again. `exactly-once`: every batch goes out in a Kafka
   * transaction under a transactional id per unit of shards, with the batch's progress in
   * it, so a reader with `isolation.level=read_committed` gets every row once, in per-key
   * order, across crashes and takeovers (docs/exactly-once.md), on either client. Needs
   * {@link RelayOptions.transactionalIdPrefix}.
   */
  delivery?: 'at-least-once' | 'exactly-once';
  /**
   * Exactly-once mode: the start of this outbox's Kafka transactional ids and of its
   * progress group and topic. Unique per database: two databases under one prefix fence
   * each other's relays and read each other's progress.
   */
  transactionalIdPrefix?: string;
  /** Exactly-once mode: Kafka's transaction.timeout.ms for the relay's transactions (default 30000). */
  transactionTimeoutMs?: number;
  /**
   * Exactly-once mode: how long a unit's Kafka transaction keeps taking full batches of a
   * backlog before it commits (default 100 ms; 0: one claim per transaction). The cost: a
   * row waits up to about this much longer for its commit (docs/exactly-once.md).
   */
  transactionIntervalMs?: number;
  /**
   * Exactly-once mode: units of shards (default 2), each under its own transactional id,
   * published by one worker, one transaction at a time; at most this many relays publish
   * at once. Every relay of a prefix must use the same count: a relay whose count differs
   * from the progress topic's partitions is refused at start (docs/exactly-once.md#units).
   */
  exactlyOnceUnits?: number;
  /**
   * Value and key encodings by topic rule, through a schema registry (docs/encodings.md):
   * Avro, Protobuf or JSON Schema in Confluent's wire format; JSON (as today) where no rule matches.
   */
  encodings?: EncodingOptions | ResolvedEncodingOptions;
  /** A JSON file of {@link RelayOptions.encodings} (the CLI's `--encodings-file`); relative schema files are read from its folder. */
  encodingsFile?: string;
  logger?: Logger;
  /** Use this kafkajs client instead of building one from kafkaBrokers. */
  kafka?: Kafka;
}

/** Options after validation and defaults: what the relay's modules read. */
export type ResolvedRelayOptions = Required<Omit<RelayOptions, 'logger' | 'kafka' | 'encodings' | 'encodingsFile' | keyof KafkaSecurityOptions>> & {
  encodings: ResolvedEncodingOptions | undefined;
  logger: Logger;
  kafka: Kafka | undefined;
  /** TLS and SASL, resolved (files read, combinations checked) once, here. */
  kafkaSecurity: Pick<KafkaConfig, 'ssl' | 'sasl'>;
};

export const batchSize = settings.integer({
  option: 'batchSize',
  flag: '--batch-size',
  env: 'OUTBOX_BATCH_SIZE',
  description: 'Rows claimed and published per batch (one Kafka request per batch).',
  defaultValue: 500,
  min: 1,
  max: 10_000,
});

export const batchesInFlight = settings.integer({
  option: 'batchesInFlight',
  flag: '--batches-in-flight',
  env: 'OUTBOX_BATCHES_IN_FLIGHT',
  description: 'Batches published at once under a backlog. Each works on its own shards, so one key never has two batches in flight; at a trickle one worker takes them all (fewer, fuller batches).',
  defaultValue: 2,
  min: 1,
  max: 64,
});

export const pollIntervalMs = settings.integer({
  option: 'pollIntervalMs',
  flag: '--poll-interval-ms',
  env: 'OUTBOX_POLL_INTERVAL_MS',
  description: 'How often an idle relay looks for new rows (milliseconds).',
  defaultValue: 10,
  min: 1,
  max: 60_000,
});

export const idlePollMaxMs = settings.integer({
  option: 'idlePollMaxMs',
  flag: '--idle-poll-max-ms',
  env: 'OUTBOX_IDLE_POLL_MAX_MS',
  description: 'How often a relay looks for new rows after 2 s without any (milliseconds): the first row after such a silence waits up to this long.',
  defaultValue: 1_000,
  min: 1,
  max: 60_000,
});

export const shutdownTimeoutMs = settings.integer({
  option: 'shutdownTimeoutMs',
  flag: '--shutdown-timeout-ms',
  env: 'OUTBOX_SHUTDOWN_TIMEOUT_MS',
  description: 'How long a soft stop may take to finish the batches in flight before it stops hard (milliseconds).',
  defaultValue: 15_000,
  min: 0,
  max: 600_000,
});

export const retryMaxDelayMs = settings.integer({
  option: 'retryMaxDelayMs',
  flag: '--retry-max-delay-ms',
  env: 'OUTBOX_RETRY_MAX_DELAY_MS',
  description: 'Upper bound of the backoff between retries after a failed batch (milliseconds).',
  defaultValue: 30_000,
  min: 10,
  max: 3_600_000,
});

export const compression = settings.choice({
  option: 'compression',
  flag: '--compression',
  env: 'OUTBOX_COMPRESSION',
  description: 'Compression of published batches.',
  defaultValue: 'none',
  choices: ['none', 'gzip'] as const,
});

export const horizonMaxWaitMs = settings.integer({
  option: 'horizonMaxWaitMs',
  flag: '--horizon-max-wait-ms',
  env: 'OUTBOX_HORIZON_MAX_WAIT_MS',
  description: 'How long rows may wait behind a transaction still open elsewhere in the database before they are claimed anyway (milliseconds).',
  defaultValue: 60_000,
  min: 0,
  max: 86_400_000,
});

export const leaseTtlMs = settings.integer({
  option: 'leaseTtlMs',
  flag: '--lease-ttl-ms',
  env: 'OUTBOX_LEASE_TTL_MS',
  description: 'Shard lease time to live: a relay that dies or stalls loses its shards after this long, and others take them over (milliseconds).',
  defaultValue: 10_000,
  min: 500,
  max: 600_000,
});

export const maxMessageBytes = settings.integer({
  option: 'maxMessageBytes',
  flag: '--max-message-bytes',
  env: 'OUTBOX_MAX_MESSAGE_BYTES',
  description: 'Largest message (key + value + headers) the relay sends; a larger row goes to the dead letters at once.',
  defaultValue: 1_000_000,
  min: 1_024,
  max: 100_000_000,
});

export const missingTopicTimeoutMs = settings.integer({
  option: 'missingTopicTimeoutMs',
  flag: '--missing-topic-timeout-ms',
  env: 'OUTBOX_MISSING_TOPIC_TIMEOUT_MS',
  description: "How long rows wait for a topic Kafka does not have and does not create (other topics flow meanwhile) before they go to the dead letters (milliseconds).",
  defaultValue: 30_000,
  min: 0,
  max: 86_400_000,
});

export const deadLetterPolicy = settings.choice({
  option: 'deadLetterPolicy',
  flag: '--dead-letter-policy',
  env: 'OUTBOX_DEAD_LETTER_POLICY',
  description: "What a dead-lettered row does to its key's later rows: park (they wait, in order, for an operator) or skip (they go on).",
  defaultValue: 'park',
  choices: ['park', 'skip'] as const,
});

export const deadLetterPolicyByTopic: settings.Setting<Record<string, DeadLetterPolicy>> = {
  option: 'deadLetterPolicyByTopic',
  flag: '--dead-letter-policy-topics',
  env: 'OUTBOX_DEAD_LETTER_POLICY_TOPICS',
  description: 'Per-topic dead-letter policies overriding the default, e.g. "audit=skip,orders=park".',
  defaultValue: {},
  parse(raw) {
    const out: Record<string, DeadLetterPolicy> = {};
    for (const part of raw.split(',').map((p) => p.trim()).filter(Boolean)) {
      const m = /^(.*)=(park|skip)$/.exec(part);
      if (!m) return { problem: `${JSON.stringify(part)} is not topic=park or topic=skip` };
      const topicProblem = topicNameProblem(m[1]);
      if (topicProblem) return { problem: topicProblem };
      if (m[1]! in out) return { problem: `topic ${JSON.stringify(m[1])} is listed twice` };
      out[m[1]!] = m[2] as DeadLetterPolicy;
    }
    return { value: out };
  },
  check(value) {
    for (const [topic, policy] of Object.entries(value)) {
      const topicProblem = topicNameProblem(topic);
      if (topicProblem) return topicProblem;
      if (policy !== 'park' && policy !== 'skip') return `policy of ${JSON.stringify(topic)} is ${JSON.stringify(policy)}, not park or skip`;
    }
    return undefined;
  },
};

export const onPublish = settings.choice({
  option: 'onPublish',
  flag: '--on-publish',
  env: 'OUTBOX_ON_PUBLISH',
  description: 'After Kafka acknowledged a row: mark it sent (kept until `cleanup`) or delete it (no bloat, nothing to clean up, no history).',
  defaultValue: 'mark',
  choices: ['mark', 'delete'] as const,
});

export const breakerFailures = settings.integer({
  option: 'breakerFailures',
  flag: '--breaker-failures',
  env: 'OUTBOX_BREAKER_FAILURES',
  description: 'Consecutive failed batches after which the relay stops claiming and probes the broker until it answers.',
  defaultValue: 3,
  min: 1,
  max: 1_000,
});

export const pooler = settings.choice({
  option: 'pooler',
  flag: '--pooler',
  env: 'OUTBOX_POOLER',
  description:
    'Connection pooling between the relay and Postgres: transaction (PgBouncer pool_mode = transaction and the like: nothing kept in a session), none (direct or session pooling: prepared statements), or auto (probed at start).',
  defaultValue: 'auto',
  choices: ['auto', 'none', 'transaction'] as const,
});

/** The relay's own settings, in the order the CLI and docs/configuration.md list them (the `run` command adds Kafka security, metrics and logging). */
export const RELAY_SETTINGS = [
  databaseUrl,
  kafkaBrokers,
  schema,
  batchSize,
  batchesInFlight,
  pollIntervalMs,
  idlePollMaxMs,
  shutdownTimeoutMs,
  retryMaxDelayMs,
  horizonMaxWaitMs,
  leaseTtlMs,
  maxMessageBytes,
  missingTopicTimeoutMs,
  deadLetterPolicy,
  deadLetterPolicyByTopic,
  onPublish,
  breakerFailures,
  pooler,
  clientId,
  compression,
  producer,
  delivery,
  transactionalIdPrefix,
  transactionTimeoutMs,
  transactionIntervalMs,
  exactlyOnceUnits,
  partitionMaintenanceIntervalMs,
  partitionsAhead,
  relayPartitionRetention,
  encodingsFile,
] as const;

/** Marks an object {@link resolveRelayOptions} made; not enumerable, so a copy of it is not one. */
const RESOLVED = Symbol('outbox-relay.resolvedRelayOptions');

/** Whether `options` came out of {@link resolveRelayOptions} as is (not a copy). */
export function isResolvedRelayOptions(options: RelayOptions | ResolvedRelayOptions): options is ResolvedRelayOptions {
  return Object.prototype.hasOwnProperty.call(options, RESOLVED);
}

/**
 * The same resolved options with another Kafka client (the relay group shares one),
 * without resolving them again: TLS files are not read twice.
 */
export function withKafkaClient(options: ResolvedRelayOptions, kafka: Kafka | undefined): ResolvedRelayOptions {
  return brand({ ...options, kafka });
}

function brand(options: ResolvedRelayOptions): ResolvedRelayOptions {
  Object.defineProperty(options, RESOLVED, { value: true, enumerable: false });
  return Object.freeze(options);
}

/**
 * Validate options and fill in defaults. Idempotent: an object this function returned is
 * returned as is, so options resolved once at the boundary (the CLI) are not resolved
 * again by createRelay or createRelayGroup.
 *
 * @throws ConfigError naming the bad option
 */
export function resolveRelayOptions(options: RelayOptions | ResolvedRelayOptions): ResolvedRelayOptions {
  if (isResolvedRelayOptions(options)) return options;
  const resolved: ResolvedRelayOptions = {
    databaseUrl: settings.optionValue(databaseUrl, options.databaseUrl),
    kafkaBrokers: settings.optionValue(kafkaBrokers, options.kafkaBrokers),
    schema: settings.optionValue(schema, options.schema),
    batchSize: settings.optionValue(batchSize, options.batchSize),
    batchesInFlight: settings.optionValue(batchesInFlight, options.batchesInFlight),
    pollIntervalMs: settings.optionValue(pollIntervalMs, options.pollIntervalMs),
    idlePollMaxMs: settings.optionValue(idlePollMaxMs, options.idlePollMaxMs),
    shutdownTimeoutMs: settings.optionValue(shutdownTimeoutMs, options.shutdownTimeoutMs),
    retryMaxDelayMs: settings.optionValue(retryMaxDelayMs, options.retryMaxDelayMs),
    horizonMaxWaitMs: settings.optionValue(horizonMaxWaitMs, options.horizonMaxWaitMs),
    leaseTtlMs: settings.optionValue(leaseTtlMs, options.leaseTtlMs),
    maxMessageBytes: settings.optionValue(maxMessageBytes, options.maxMessageBytes),
    missingTopicTimeoutMs: settings.optionValue(missingTopicTimeoutMs, options.missingTopicTimeoutMs),
    deadLetterPolicy: settings.optionValue(deadLetterPolicy, options.deadLetterPolicy),
    deadLetterPolicyByTopic: settings.optionValue(deadLetterPolicyByTopic, options.deadLetterPolicyByTopic),
    onPublish: settings.optionValue(onPublish, options.onPublish),
    breakerFailures: settings.optionValue(breakerFailures, options.breakerFailures),
    pooler: settings.optionValue(pooler, options.pooler),
    clientId: settings.optionValue(clientId, options.clientId),
    compression: settings.optionValue(compression, options.compression),
    // A kafkajs client passed in is the one that publishes, unless told otherwise.
    producer: settings.optionValue(producer, options.producer ?? (options.kafka !== undefined ? 'kafkajs' : undefined)),
    delivery: settings.optionValue(delivery, options.delivery),
    transactionalIdPrefix: settings.optionValue(transactionalIdPrefix, options.transactionalIdPrefix),
    transactionTimeoutMs: settings.optionValue(transactionTimeoutMs, options.transactionTimeoutMs),
    transactionIntervalMs: settings.optionValue(transactionIntervalMs, options.transactionIntervalMs),
    exactlyOnceUnits: settings.optionValue(exactlyOnceUnits, options.exactlyOnceUnits),
    partitionMaintenanceIntervalMs: settings.optionValue(partitionMaintenanceIntervalMs, options.partitionMaintenanceIntervalMs),
    partitionsAhead: settings.optionValue(partitionsAhead, options.partitionsAhead),
    partitionRetention: settings.optionValue(relayPartitionRetention, options.partitionRetention),
    encodings: relayEncodings(options),
    logger: options.logger ?? silentLogger(),
    kafka: options.kafka,
    // A copy of resolved options (spread, so unbranded) carries its TLS and SASL resolved
    // and no longer the settings they came from: keep them rather than resolve nothing.
    kafkaSecurity: (options as Partial<ResolvedRelayOptions>).kafkaSecurity ?? kafkaSecurityConfig(options),
  };
  if (resolved.delivery === 'exactly-once') checkExactlyOnce(resolved);
  // An optional peer dependency: a missing package is a configuration error now, not a
  // failure of every batch later.
  if (resolved.producer === 'platformatic') assertPlatformaticInstalled();
  return brand(resolved);
}
