import { integer } from '../shared/settings.js';

// Settings of the consumer runtime and its maintenance command. Library options are
// checked with optionValue(), the CLI reads the same objects, so both accept the same values.

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
