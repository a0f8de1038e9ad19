import { duration, integer, positiveNumber } from '../shared/settings.js';

// Settings of the operator commands (dead-letters, cleanup). Library options are checked
// with optionValue(), the CLI reads the same objects, so both accept the same values.

export const replayRate = positiveNumber({
  option: 'rate',
  flag: '--rate',
  env: 'OUTBOX_REPLAY_RATE',
  description: 'Dead letters moved back into the outbox per second, at most; a slow replay does not repeat the incident.',
  defaultValue: 10,
  max: 1_000,
});

export const listLimit = integer({
  option: 'limit',
  flag: '--limit',
  env: 'OUTBOX_DEAD_LETTERS_LIMIT',
  description: 'Dead letters listed at most (oldest id first).',
  defaultValue: 100,
  min: 1,
  max: 100_000,
});

export const cleanupRetention = duration({
  option: 'retention',
  flag: '--retention',
  env: 'OUTBOX_CLEANUP_RETENTION',
  description: 'Sent rows older than this (by sent_at) are deleted. Also the producer-side dedup window: a dedup key can be used again once its row is gone.',
  defaultValue: '7d',
  minMs: 0,
  maxMs: 3_650 * 86_400_000,
});

export const cleanupBatchSize = integer({
  option: 'batchSize',
  flag: '--batch-size',
  env: 'OUTBOX_CLEANUP_BATCH_SIZE',
  description: 'Rows deleted per cleanup transaction: short transactions, short locks.',
  defaultValue: 1_000,
  min: 1,
  max: 100_000,
});

export const replayWaitTimeout = duration({
  option: 'timeout',
  flag: '--wait-timeout',
  env: 'OUTBOX_REPLAY_WAIT_TIMEOUT',
  description: 'With --wait: how long to wait, after the last row is queued, for the replayed rows to be published or to fail again.',
  defaultValue: '5m',
  minMs: 1_000,
  maxMs: 86_400_000,
});
