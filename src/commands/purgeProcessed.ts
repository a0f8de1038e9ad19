import { DEFAULT_SCHEMA, quoteSchema } from '../shared/identifiers.js';
import type { DatabaseOptions } from '../shared/database.js';
import { duration, integer, optionValue, type Setting } from '../shared/settings.js';
import { parseDuration } from '../shared/durations.js';
import { purgeProcessedSql } from '../consumer/sql/processedMessages.js';
import { purgeEstimateSql } from './sql/purgeProcessed.js';
import { plannedRows } from './plannedRows.js';
import { silentLogger, type Logger } from '../shared/logger.js';
import { ConfigError } from '../shared/errors.js';
import { openDatabase } from './openDatabase.js';

// `outbox-relay purge-processed`: the consumer runtime's retention of processed_messages.
// Its settings live here; the CLI (src/cli/maintenance.ts) reads the same objects.

const DAY_MS = 86_400_000;

export const purgeRetention = duration({
  option: 'retention',
  flag: '--retention',
  env: 'OUTBOX_PROCESSED_RETENTION',
  description: 'Rows of processed_messages older than this are deleted (14d, 36h; at least 1d). Must outlast the longest redelivery and replay horizon.',
  defaultValue: '14d',
  minMs: DAY_MS,
  maxMs: 3_650 * DAY_MS,
});

/**
 * @deprecated The old, whole-days form of {@link purgeRetention}. Read only when given: it
 * has no default of its own (the retention's default applies).
 */
export const purgeRetentionDays: Setting<number> = {
  ...integer({
    option: 'retentionDays',
    flag: '--retention-days',
    env: 'OUTBOX_PROCESSED_RETENTION_DAYS',
    description: 'Deprecated: use --retention (e.g. 14d). Retention in whole days.',
    defaultValue: 1, // replaced just below
    min: 1,
    max: 3_650,
  }),
  defaultValue: undefined,
};

export const purgeBatchSize = integer({
  option: 'batchSize',
  flag: '--batch-size',
  env: 'OUTBOX_PURGE_BATCH_SIZE',
  description: 'Rows deleted per purge transaction.',
  defaultValue: 1_000,
  min: 1,
  max: 100_000,
});

/** Where the database is (`client`, `pool` or `databaseUrl`; `schema` holds processed_messages), and what to purge. */
export interface PurgeProcessedOptions extends DatabaseOptions {
  /**
   * Rows older than this are deleted: `14d` (default), `36h`, `2w`; at least a day. Must
   * be longer than the longest time a message can come again: redelivery after an outage,
   * a consumer group reset, a dead-letter replay. A key purged before its message comes
   * back is handled again: a double effect.
   */
  retention?: string;
  /**
   * @deprecated The retention in whole days; use `retention` (`'14d'`). Still accepted;
   * giving both with different values is a ConfigError.
   */
  retentionDays?: number;
  /** Rows per delete transaction (default 1000): short transactions, short locks. */
  batchSize?: number;
  /** Purge only this consumer group's rows (default all groups). */
  consumerGroup?: string;
  /** Stop after this many batches (default: until no old row is left). */
  maxBatches?: number;
  /**
   * Called once before the first batch (deleted 0) and after each batch: what a progress
   * line shows. Only when given does the purge ask the planner for its estimate.
   */
  onProgress?: (event: PurgeProcessedProgress) => void;
  logger?: Logger;
}

/** Reported by {@link purgeProcessedMessages} before its first batch and after each one. */
export interface PurgeProcessedProgress {
  /** Rows deleted so far. */
  deleted: number;
  /** Batches run so far. */
  batches: number;
  /**
   * The planner's estimate, taken before the first batch, of the rows to delete (EXPLAIN:
   * nothing read). A guide, not a count. Null when the plan gave none.
   */
  estimatedTotal: number | null;
  /** When (Date.now()). */
  atMs: number;
}

/** What {@link purgeProcessedMessages} did. */
export interface PurgeProcessedResult {
  /** Rows deleted. */
  deleted: number;
  /** Delete transactions run (the last one found fewer rows than the batch size). */
  batches: number;
}

/**
 * The retention from `retention` or its deprecated whole-days form, each checked by its
 * Setting; the default when neither is given.
 *
 * @param names what to call the two in an error (the CLI passes its flags)
 * @throws ConfigError when a value is out of range, or both are given and differ
 */
export function resolvePurgeRetention(
  given: { retention?: string | undefined; retentionDays?: number | undefined },
  names: { retention: string; retentionDays: string } = { retention: 'retention', retentionDays: 'retentionDays' },
): string {
  if (given.retentionDays === undefined) return optionValue(purgeRetention, given.retention);
  const days = optionValue(purgeRetentionDays, given.retentionDays);
  if (given.retention === undefined) return `${days}d`;
  const retention = optionValue(purgeRetention, given.retention);
  if (durationMs(retention) !== days * DAY_MS) {
    throw new ConfigError(
      names.retentionDays,
      `${days} days differs from ${names.retention} ${retention}; ${names.retentionDays} is the deprecated form of ${names.retention}: give only ${names.retention}`,
    );
  }
  return retention;
}

function durationMs(checked: string): number {
  return (parseDuration(checked) as { value: number }).value;
}

/**
 * Delete processed_messages rows older than the retention, in bounded batches, oldest
 * first. Each batch is its own transaction and skips rows another transaction holds, so
 * it runs beside live consumers (and other purges) without blocking or deadlocking them.
 */
export async function purgeProcessedMessages(options: PurgeProcessedOptions = {}): Promise<PurgeProcessedResult> {
  const retention = resolvePurgeRetention(options);
  const batchSize = optionValue(purgeBatchSize, options.batchSize);
  const schema = options.schema ?? DEFAULT_SCHEMA;
  const quoted = quoteSchema(schema);
  if (options.maxBatches !== undefined && !(Number.isSafeInteger(options.maxBatches) && options.maxBatches >= 1)) {
    throw new ConfigError('maxBatches', `${JSON.stringify(options.maxBatches)} is not a positive whole number`);
  }
  const logger = options.logger ?? silentLogger();
  const { db, close } = await openDatabase(options, 'outbox-relay:purge-processed');
  const sql = purgeProcessedSql(quoted);
  const result: PurgeProcessedResult = { deleted: 0, batches: 0 };
  try {
    const onProgress = options.onProgress;
    const estimatedTotal = onProgress ? await plannedRows(db, purgeEstimateSql(quoted), [durationMs(retention) / 1000, options.consumerGroup ?? null]) : null;
    onProgress?.({ ...result, estimatedTotal, atMs: Date.now() });
    for (;;) {
      const { rowCount } = await db.query(sql, [durationMs(retention) / 1000, batchSize, options.consumerGroup ?? null]);
      result.batches++;
      result.deleted += rowCount ?? 0;
      onProgress?.({ ...result, estimatedTotal, atMs: Date.now() });
      if ((rowCount ?? 0) < batchSize) break;
      if (options.maxBatches !== undefined && result.batches >= options.maxBatches) break;
    }
  } finally {
    await close();
  }
  logger.info({ ...result, retention, schema }, 'purged processed messages');
  return result;
}
