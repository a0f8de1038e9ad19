import { choice, integer, optionValue, type Setting } from '../shared/settings.js';
import { clientId } from '../shared/commonSettings.js';
import { ConfigError } from '../shared/errors.js';

// The consumer's settings, one Setting object per option: its default and range stated
// once, checked by resolveConsumerOptions (options.ts) through optionValue().

// The consumer runtime is a library only: it has no command line and reads no
// environment variable (the application passes its configuration in). Its settings are
// Setting objects so that each default and range is stated once, here, and checked by the
// same optionValue() as the relay's options; they have no flag and no environment name.
const NO_ENV = '';

function libraryInteger(d: { option: string; description: string; defaultValue: number; min: number; max: number }): Setting<number> {
  return integer({ ...d, flag: undefined, env: NO_ENV });
}

export const consumerClientId: Setting<string> = { ...clientId, flag: undefined, env: NO_ENV, defaultValue: 'outbox-relay-consumer' };

export const onMissingKey = choice({
  option: 'onMissingKey',
  flag: undefined,
  env: NO_ENV,
  description: 'What happens to a message without a usable idempotency key.',
  defaultValue: 'dead-letter',
  choices: ['dead-letter', 'process-without-dedup'] as const,
});

export const savepoints = choice({
  option: 'savepoints',
  flag: undefined,
  env: NO_ENV,
  description: 'When a message gets its own savepoint: only after a failure in its group, or always.',
  defaultValue: 'on-failure',
  choices: ['on-failure', 'always'] as const,
});

export const isolationLevel = choice({
  option: 'isolationLevel',
  flag: undefined,
  env: NO_ENV,
  description: "Which records a fetch returns: only committed Kafka transactions' (and those written outside one), or every record.",
  defaultValue: 'read_committed',
  choices: ['read_committed', 'read_uncommitted'] as const,
});

export const maxAttempts = libraryInteger({
  option: 'maxAttempts',
  description: 'Attempts at a message failing with a transient error before it is dead-lettered.',
  defaultValue: 5,
  min: 1,
  max: 1_000,
});

export const retryBaseDelayMs = libraryInteger({
  option: 'retryBaseDelayMs',
  description: 'Backoff ceiling of the first retry (milliseconds); it doubles per attempt, with full jitter.',
  defaultValue: 200,
  min: 1,
  max: 600_000,
});

export const retryMaxDelayMs = libraryInteger({
  option: 'retryMaxDelayMs',
  description: 'Upper bound of the backoff between retries of a message (milliseconds).',
  defaultValue: 30_000,
  min: 1,
  max: 3_600_000,
});

export const batchesInFlight = libraryInteger({
  option: 'batchesInFlight',
  description: 'Batches (partition transactions) handled at once, each holding one Postgres connection while it works.',
  defaultValue: 4,
  min: 1,
  max: 256,
});

// A group runs as one transaction without savepoints unless a handler fails (option
// `savepoints`); with a savepoint per message at most 64 of them are used.
export const messagesPerTransaction = libraryInteger({
  option: 'messagesPerTransaction',
  description: 'Messages of one partition handled in one Postgres transaction (at most 64 with a savepoint per message).',
  defaultValue: 100,
  min: 1,
  max: 1_000,
});

/** messagesPerTransaction's default with handleBatch (see ConsumerOptions.messagesPerTransaction). */
export const BATCH_MESSAGES_PER_TRANSACTION = 500;

export const shutdownTimeoutMs = libraryInteger({
  option: 'shutdownTimeoutMs',
  description: 'How long stop() waits for the transactions in flight before it rolls them back (milliseconds).',
  defaultValue: 15_000,
  min: 0,
  max: 600_000,
});

export const afterCommitTimeoutMs = libraryInteger({
  option: 'afterCommitTimeoutMs',
  description: 'Longest an afterCommit hook is waited for before the partition goes on without it (milliseconds).',
  defaultValue: 5_000,
  min: 1,
  max: 600_000,
});

// A handler that never settles would hold its partition (and its transaction's locks)
// until stop(): the runtime gives it up after this long.
export const handlerTimeoutMs = libraryInteger({
  option: 'handlerTimeoutMs',
  description: 'Longest one handler or batch handler call is waited for before its transaction is rolled back and the message fails (milliseconds).',
  defaultValue: 60_000,
  min: 1,
  max: 3_600_000,
});

export const missingTopicTimeoutMs = libraryInteger({
  option: 'missingTopicTimeoutMs',
  description: 'How long start() waits for consumed topics that do not exist yet (milliseconds; 0: not at all).',
  defaultValue: 60_000,
  min: 0,
  max: 3_600_000,
});

export const sessionTimeoutMs = libraryInteger({
  option: 'sessionTimeoutMs',
  description: 'Kafka group session timeout: a member silent this long is removed from the group (milliseconds).',
  defaultValue: 30_000,
  min: 1_000,
  max: 3_600_000,
});

export const heartbeatIntervalMs = libraryInteger({
  option: 'heartbeatIntervalMs',
  description: 'Kafka group heartbeat interval (milliseconds); keep it well below the session timeout.',
  defaultValue: 3_000,
  min: 100,
  max: 600_000,
});

export const rebalanceTimeoutMs = libraryInteger({
  option: 'rebalanceTimeoutMs',
  description: 'How long the group waits for members to rejoin during a rebalance (milliseconds).',
  defaultValue: 60_000,
  min: 1_000,
  max: 3_600_000,
});

export const maxWaitTimeMs = libraryInteger({
  option: 'maxWaitTimeMs',
  description: 'Longest a fetch waits on the broker for new messages (milliseconds).',
  defaultValue: 500,
  min: 0,
  max: 60_000,
});

/**
 * The value of `setting`, or of its deprecated old name when only that is given, both
 * checked by the same Setting. Both given: they must agree.
 * @throws ConfigError naming the option whose value is bad, or the old name when the two differ
 */
export function withDeprecatedName(setting: Setting<number>, value: number | undefined, oldName: string, oldValue: number | undefined): number {
  if (oldValue === undefined) return optionValue(setting, value);
  const fromOld = optionValue({ ...setting, option: oldName }, oldValue);
  if (value !== undefined && optionValue(setting, value) !== fromOld) {
    throw new ConfigError(oldName, `${fromOld} differs from ${setting.option} (${value}); ${oldName} is the deprecated name of ${setting.option}: give only ${setting.option}`);
  }
  return fromOld;
}
