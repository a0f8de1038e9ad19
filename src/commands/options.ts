import { integer, type Setting } from '../shared/settings.js';
import { formatDuration, parseDuration } from '../shared/durations.js';

// Settings of the operator commands (dead-letters, cleanup). Library options are checked
// with optionValue(), the CLI reads the same objects, so both accept the same values.

/** A duration written as text (`7d`, `12h`); the value stays text so help shows `7d`. */
export function duration(
  option: string,
  flag: string,
  env: string,
  description: string,
  defaultValue: string,
  minMs: number,
  maxMs: number,
): Setting<string> {
  const accepts = `a duration from ${formatDuration(minMs)} to ${formatDuration(maxMs)} (45s, 30m, 12h, 7d)`;
  return {
    option,
    flag,
    env,
    description,
    defaultValue,
    parse(raw) {
      const problem = this.check(raw);
      return problem ? { problem } : { value: raw.trim() };
    },
    check(value) {
      if (typeof value !== 'string') return `${JSON.stringify(value)} is not ${accepts}`;
      const parsed = parseDuration(value);
      if ('problem' in parsed) return parsed.problem;
      if (parsed.value < minMs || parsed.value > maxMs) return `${JSON.stringify(value)} is not ${accepts}`;
      return undefined;
    },
  };
}

/** A positive number with decimals (a rate). */
export function positiveNumber(
  option: string,
  flag: string,
  env: string,
  description: string,
  defaultValue: number,
  max: number,
): Setting<number> {
  const accepts = `a number above 0 and at most ${max}`;
  return {
    option,
    flag,
    env,
    description,
    defaultValue,
    parse(raw) {
      const t = raw.trim();
      if (!/^-?(\d+(\.\d*)?|\.\d+)$/.test(t)) return { problem: `${JSON.stringify(raw)} is not ${accepts}` };
      return { value: Number(t) };
    },
    check(value) {
      return typeof value === 'number' && Number.isFinite(value) && value > 0 && value <= max
        ? undefined
        : `${JSON.stringify(value)} is not ${accepts}`;
    },
  };
}

export const replayRate = positiveNumber(
  'rate',
  '--rate',
  'OUTBOX_REPLAY_RATE',
  'Dead letters moved back into the outbox per second, at most; a slow replay does not repeat the incident.',
  10,
  1_000,
);

export const listLimit = integer(
  'limit',
  '--limit',
  'OUTBOX_DEAD_LETTERS_LIMIT',
  'Dead letters listed at most (oldest id first).',
  100,
  1,
  100_000,
);

export const cleanupRetention = duration(
  'retention',
  '--retention',
  'OUTBOX_CLEANUP_RETENTION',
  'Sent rows older than this (by sent_at) are deleted. Also the producer-side dedup window: a dedup key can be used again once its row is gone.',
  '7d',
  0,
  3_650 * 86_400_000,
);

export const cleanupBatchSize = integer(
  'batchSize',
  '--batch-size',
  'OUTBOX_CLEANUP_BATCH_SIZE',
  'Rows deleted per cleanup transaction: short transactions, short locks.',
  1_000,
  1,
  100_000,
);
