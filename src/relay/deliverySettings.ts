import * as settings from '../shared/settings.js';
import { ConfigError } from '../shared/errors.js';

// How the relay delivers to Kafka: which client publishes, and at-least-once or
// exactly-once with the transactional settings that mode needs (docs/exactly-once.md).
// options.ts re-exports them and resolves them with the other relay options.

export const producer = settings.choice({
  option: 'producer',
  flag: '--producer',
  env: 'OUTBOX_PRODUCER',
  description: 'Kafka client that publishes: platformatic (@platformatic/kafka, the faster) or kafkajs. Same guarantees either way. Default platformatic; kafkajs when a library caller passes a kafkajs client (kafka).',
  defaultValue: 'platformatic',
  choices: ['kafkajs', 'platformatic'] as const,
});

export const delivery = settings.choice({
  option: 'delivery',
  flag: '--delivery',
  env: 'OUTBOX_DELIVERY',
  description:
    'at-least-once, or exactly-once: each batch in a Kafka transaction with its progress, for readers with isolation.level=read_committed (docs/exactly-once.md; needs --transactional-id-prefix).',
  defaultValue: 'at-least-once',
  choices: ['at-least-once', 'exactly-once'] as const,
});

/** Kafka's legal characters for a topic name, which the prefix also starts (the progress topic). */
const TRANSACTIONAL_ID_PREFIX = /^[A-Za-z0-9._-]{1,180}$/;

export const transactionalIdPrefix = settings.checkedText({
  option: 'transactionalIdPrefix',
  flag: '--transactional-id-prefix',
  env: 'OUTBOX_TRANSACTIONAL_ID_PREFIX',
  description:
    'Exactly-once mode: start of the Kafka transactional ids, progress group and progress topic; one per database (two databases under one prefix fence each other).',
  defaultValue: '',
  check: (v) => (v === '' || TRANSACTIONAL_ID_PREFIX.test(v) ? undefined : 'must be 1-180 letters, digits, ".", "_" or "-" (it starts a Kafka topic name)'),
});

export const transactionTimeoutMs = settings.integer({
  option: 'transactionTimeoutMs',
  flag: '--transaction-timeout-ms',
  env: 'OUTBOX_TRANSACTION_TIMEOUT_MS',
  description:
    "Exactly-once mode: Kafka's transaction.timeout.ms for the relay's transactions; a relay that stops mid-transaction holds read_committed readers of its partitions back at most this long (milliseconds).",
  defaultValue: 30_000,
  min: 1_000,
  // Above Kafka's default transaction.max.timeout.ms (900000): the start-up check compares with the brokers' own.
  max: 3_600_000,
});

export const transactionIntervalMs = settings.integer({
  option: 'transactionIntervalMs',
  flag: '--transaction-interval-ms',
  env: 'OUTBOX_TRANSACTION_INTERVAL_MS',
  description:
    "Exactly-once mode: while a backlog drains, a unit's Kafka transaction keeps taking full batches for up to this long before it commits, so its fixed cost is paid once per interval; a row waits at most about this much longer for its commit. 0: one claim per transaction (milliseconds).",
  defaultValue: 100,
  min: 0,
  max: 10_000,
});

export const exactlyOnceUnits = settings.integer({
  option: 'exactlyOnceUnits',
  flag: '--exactly-once-units',
  env: 'OUTBOX_EXACTLY_ONCE_UNITS',
  description:
    "Exactly-once mode: units of shards, each with its own Kafka transactional id, worker and transaction at a time; at most this many relays publish at once. Fewer units, fewer concurrent transactions for Kafka to coordinate: at a steady rate each carries more rows and commits sooner (docs/exactly-once.md). Every relay of a prefix uses the same count (its progress topic has one partition per unit).",
  defaultValue: 2,
  min: 1,
  max: 64,
});

/** What exactly-once delivery needs of the other options (docs/exactly-once.md). */
export function checkExactlyOnce(o: { transactionalIdPrefix: string; transactionIntervalMs: number; transactionTimeoutMs: number }): void {
  if (o.transactionIntervalMs * 2 > o.transactionTimeoutMs) {
    // Kafka aborts a transaction open longer than its timeout; the interval must leave it room.
    throw new ConfigError('transactionIntervalMs', `(${o.transactionIntervalMs}) must be at most half of --transaction-timeout-ms (${o.transactionTimeoutMs})`);
  }
  if (o.transactionalIdPrefix === '') {
    throw new ConfigError(
      'transactionalIdPrefix',
      'is required with delivery exactly-once (--transactional-id-prefix, OUTBOX_TRANSACTIONAL_ID_PREFIX): one per database, since relays under one prefix fence each other and read each other\'s progress',
    );
  }
}
