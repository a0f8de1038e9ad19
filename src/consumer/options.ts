import { integer } from '../shared/settings.js';

// Settings of the consumer runtime and its maintenance command. Library options are
// checked with optionValue(), the CLI reads the same objects, so both accept the same values.

export const maxAttempts = integer(
  'maxAttempts',
  '--max-attempts',
  'OUTBOX_CONSUMER_MAX_ATTEMPTS',
  'Attempts at a message failing with a transient error before it is dead-lettered.',
  5,
  1,
  1_000,
);

export const retryBaseDelayMs = integer(
  'retryBaseDelayMs',
  '--retry-base-delay-ms',
  'OUTBOX_CONSUMER_RETRY_BASE_DELAY_MS',
  'Backoff ceiling of the first retry (milliseconds); it doubles per attempt, with full jitter.',
  200,
  1,
  600_000,
);

export const consumerRetryMaxDelayMs = integer(
  'retryMaxDelayMs',
  '--retry-max-delay-ms',
  'OUTBOX_CONSUMER_RETRY_MAX_DELAY_MS',
  'Upper bound of the backoff between retries of a message (milliseconds).',
  30_000,
  1,
  3_600_000,
);

export const partitionsConcurrency = integer(
  'partitionsConcurrency',
  '--partitions-concurrency',
  'OUTBOX_CONSUMER_PARTITIONS_CONCURRENCY',
  'Partitions handled at once (each holds one Postgres connection while it works).',
  4,
  1,
  256,
);

// A group runs as one transaction without savepoints unless a handler fails (consumer
// option `savepoints`); with a savepoint per message at most 64 of them are used.
export const messagesPerTransaction = integer(
  'messagesPerTransaction',
  '--messages-per-transaction',
  'OUTBOX_CONSUMER_MESSAGES_PER_TRANSACTION',
  'Messages of one partition handled in one Postgres transaction (at most 64 with a savepoint per message).',
  100,
  1,
  1_000,
);

export const stopTimeoutMs = integer(
  'stopTimeoutMs',
  '--stop-timeout-ms',
  'OUTBOX_CONSUMER_STOP_TIMEOUT_MS',
  'How long stop() waits for the transactions in flight before it rolls them back (milliseconds).',
  15_000,
  0,
  600_000,
);

export const sessionTimeoutMs = integer(
  'sessionTimeoutMs',
  '--session-timeout-ms',
  'OUTBOX_CONSUMER_SESSION_TIMEOUT_MS',
  'Kafka group session timeout: a member silent this long is removed from the group (milliseconds).',
  30_000,
  1_000,
  3_600_000,
);

export const heartbeatIntervalMs = integer(
  'heartbeatIntervalMs',
  '--heartbeat-interval-ms',
  'OUTBOX_CONSUMER_HEARTBEAT_INTERVAL_MS',
  'Kafka group heartbeat interval (milliseconds); keep it well below the session timeout.',
  3_000,
  100,
  600_000,
);

export const rebalanceTimeoutMs = integer(
  'rebalanceTimeoutMs',
  '--rebalance-timeout-ms',
  'OUTBOX_CONSUMER_REBALANCE_TIMEOUT_MS',
  'How long the group waits for members to rejoin during a rebalance (milliseconds).',
  60_000,
  1_000,
  3_600_000,
);

export const maxWaitTimeMs = integer(
  'maxWaitTimeMs',
  '--max-wait-time-ms',
  'OUTBOX_CONSUMER_MAX_WAIT_TIME_MS',
  'Longest a fetch waits on the broker for new messages (milliseconds).',
  500,
  0,
  60_000,
);

export const retentionDays = integer(
  'retentionDays',
  '--retention-days',
  'OUTBOX_PROCESSED_RETENTION_DAYS',
  'Keep processed_messages rows this many days; must outlast the longest redelivery and replay horizon.',
  14,
  1,
  3_650,
);

export const purgeBatchSize = integer(
  'batchSize',
  '--batch-size',
  'OUTBOX_PURGE_BATCH_SIZE',
  'Rows deleted per purge transaction.',
  1_000,
  1,
  100_000,
);
