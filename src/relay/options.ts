import type { Kafka } from 'kafkajs';
import * as settings from '../shared/settings.js';
import { silentLogger, type Logger } from '../shared/logger.js';
import { KAFKA_SECURITY_SETTINGS } from '../shared/kafkaSecurity.js';
import { METRICS_SETTINGS } from '../metrics/options.js';
import type { DeadLetterPolicy } from './publishBatch.js';

// The relay's options: their types, the user-facing settings behind them (flag,
// environment, default, accepted values), and their validation.

/** Options of `createRelay` (src/relay.ts). Only `databaseUrl` and `kafkaBrokers` are required. */
export interface RelayOptions {
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
  /** Soft stop budget in ms before in-flight work is abandoned (default 15000). */
  shutdownTimeoutMs?: number;
  /** Ceiling of the retry backoff in ms (default 30000). */
  retryMaxDelayMs?: number;
  /** Kafka client id and Postgres application_name prefix (default `outbox-relay`). */
  clientId?: string;
  /** Batch compression (default `none`). */
  compression?: 'none' | 'gzip';
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
  logger?: Logger;
  /** Use this kafkajs client instead of building one from kafkaBrokers. */
  kafka?: Kafka;
}

export type ResolvedRelayOptions = Required<Omit<RelayOptions, 'logger' | 'kafka'>> & {
  logger: Logger;
  kafka: Kafka | undefined;
};

const horizonMaxWaitMs = settings.integer(
  'horizonMaxWaitMs',
  '--horizon-max-wait-ms',
  'OUTBOX_HORIZON_MAX_WAIT_MS',
  'How long rows may wait behind a transaction still open elsewhere in the database before they are claimed anyway (milliseconds).',
  60_000,
  0,
  86_400_000,
);

const leaseTtlMs = settings.integer(
  'leaseTtlMs',
  '--lease-ttl-ms',
  'OUTBOX_LEASE_TTL_MS',
  'Shard lease time to live: a relay that dies or stalls loses its shards after this long, and others take them over (milliseconds).',
  10_000,
  500,
  600_000,
);

const maxMessageBytes = settings.integer(
  'maxMessageBytes',
  '--max-message-bytes',
  'OUTBOX_MAX_MESSAGE_BYTES',
  'Largest message (key + value + headers) the relay sends; a larger row goes to the dead letters at once.',
  1_000_000,
  1_024,
  100_000_000,
);

const deadLetterPolicy = settings.choice(
  'deadLetterPolicy',
  '--dead-letter-policy',
  'OUTBOX_DEAD_LETTER_POLICY',
  "What a dead-lettered row does to its key's later rows: park (they wait, in order, for an operator) or skip (they go on).",
  'park',
  ['park', 'skip'] as const,
);

const deadLetterPolicyByTopic: settings.Setting<Record<string, DeadLetterPolicy>> = {
  option: 'deadLetterPolicyByTopic',
  flag: '--dead-letter-policy-topics',
  env: 'OUTBOX_DEAD_LETTER_POLICY_TOPICS',
  description: 'Per-topic dead-letter policies overriding the default, e.g. "audit=skip,orders=park".',
  defaultValue: {},
  parse(raw) {
    const out: Record<string, DeadLetterPolicy> = {};
    for (const part of raw.split(',').map((p) => p.trim()).filter(Boolean)) {
      const m = /^([A-Za-z0-9._-]{1,249})=(park|skip)$/.exec(part);
      if (!m) return { problem: `${JSON.stringify(part)} is not topic=park or topic=skip` };
      out[m[1]!] = m[2] as DeadLetterPolicy;
    }
    return { value: out };
  },
  check(value) {
    for (const [topic, policy] of Object.entries(value)) {
      if (policy !== 'park' && policy !== 'skip') return `policy of ${JSON.stringify(topic)} is ${JSON.stringify(policy)}, not park or skip`;
    }
    return undefined;
  },
};

const onPublish = settings.choice(
  'onPublish',
  '--on-publish',
  'OUTBOX_ON_PUBLISH',
  'After Kafka acknowledged a row: mark it sent (kept until `cleanup`) or delete it (no bloat, nothing to clean up, no history).',
  'mark',
  ['mark', 'delete'] as const,
);

const breakerFailures = settings.integer(
  'breakerFailures',
  '--breaker-failures',
  'OUTBOX_BREAKER_FAILURES',
  'Consecutive failed batches after which the relay stops claiming and probes the broker until it answers.',
  3,
  1,
  1_000,
);

/** Every setting of the relay, in the order the CLI and README list them. */
export const RELAY_SETTINGS = [
  settings.databaseUrl,
  settings.kafkaBrokers,
  settings.schema,
  settings.batchSize,
  settings.batchesInFlight,
  settings.pollIntervalMs,
  settings.shutdownTimeoutMs,
  settings.retryMaxDelayMs,
  horizonMaxWaitMs,
  leaseTtlMs,
  maxMessageBytes,
  deadLetterPolicy,
  deadLetterPolicyByTopic,
  onPublish,
  breakerFailures,
  settings.clientId,
  settings.compression,
  ...KAFKA_SECURITY_SETTINGS,
  ...METRICS_SETTINGS,
  settings.logLevel,
] as const;

/** Validate options and fill in defaults. @throws ConfigError naming the bad option */
export function resolveRelayOptions(options: RelayOptions): ResolvedRelayOptions {
  return {
    databaseUrl: settings.optionValue(settings.databaseUrl, options.databaseUrl),
    kafkaBrokers: settings.optionValue(settings.kafkaBrokers, options.kafkaBrokers),
    schema: settings.optionValue(settings.schema, options.schema),
    batchSize: settings.optionValue(settings.batchSize, options.batchSize),
    batchesInFlight: settings.optionValue(settings.batchesInFlight, options.batchesInFlight),
    pollIntervalMs: settings.optionValue(settings.pollIntervalMs, options.pollIntervalMs),
    shutdownTimeoutMs: settings.optionValue(settings.shutdownTimeoutMs, options.shutdownTimeoutMs),
    retryMaxDelayMs: settings.optionValue(settings.retryMaxDelayMs, options.retryMaxDelayMs),
    horizonMaxWaitMs: settings.optionValue(horizonMaxWaitMs, options.horizonMaxWaitMs),
    leaseTtlMs: settings.optionValue(leaseTtlMs, options.leaseTtlMs),
    maxMessageBytes: settings.optionValue(maxMessageBytes, options.maxMessageBytes),
    deadLetterPolicy: settings.optionValue(deadLetterPolicy, options.deadLetterPolicy),
    deadLetterPolicyByTopic: settings.optionValue(deadLetterPolicyByTopic, options.deadLetterPolicyByTopic),
    onPublish: settings.optionValue(onPublish, options.onPublish),
    breakerFailures: settings.optionValue(breakerFailures, options.breakerFailures),
    clientId: settings.optionValue(settings.clientId, options.clientId),
    compression: settings.optionValue(settings.compression, options.compression),
    logger: options.logger ?? silentLogger(),
    kafka: options.kafka,
  };
}
