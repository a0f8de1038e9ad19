import { DEFAULT_SCHEMA, quoteSchema } from '../shared/identifiers.js';
import type { DatabaseOptions } from '../shared/database.js';
import { optionValue } from '../shared/settings.js';
import { cleanupBatchSize, cleanupRetention } from './options.js';
import { parseDuration } from '../shared/durations.js';
import { cleanupBatchSql, cleanupEstimateSql } from './sql/cleanup.js';
import { plannedRows } from './plannedRows.js';
import { silentLogger, type Logger } from '../shared/logger.js';
import { ConfigError } from '../shared/errors.js';
import { openDatabase } from './openDatabase.js';

/** Options of {@link cleanupOutbox}: the database, the retention and the batch size. */
export interface CleanupOptions extends DatabaseOptions {
  /**
   * Sent rows whose sent_at is older than this are deleted: `7d` (default), `12h`, `30m`.
   * It is also the producer-side dedup window: once a row is gone, its dedup key can be
   * enqueued again.
   */
  retention?: string;
  /** Rows per delete transaction (default 1000). */
  batchSize?: number;
  /** Stop after this many batches (default: until no sent row past the retention is left). */
  maxBatches?: number;
  /**
   * Called once before the first batch (deleted 0) and after each batch: what a progress
   * line shows. Only when given does the cleanup ask the planner for its estimate.
   */
  onProgress?: (event: CleanupProgress) => void;
  logger?: Logger;
}

/** Reported by {@link cleanupOutbox} before its first batch and after each one. */
export interface CleanupProgress {
  /** Rows deleted so far. */
  deleted: number;
  /** Batches run so far. */
  batches: number;
  /**
   * The planner's estimate, taken before the first batch, of the rows to delete (EXPLAIN:
   * no scan). A guide, not a count: stale statistics make it wrong either way. Null when
   * the plan gave none.
   */
  estimatedTotal: number | null;
  /** When (Date.now()). */
  atMs: number;
}

/** What a cleanup deleted. */
export interface CleanupResult {
  deleted: number;
  batches: number;
}

/**
 * `outbox-relay cleanup`: delete sent outbox rows older than the retention, in bounded
 * batches, lowest id first. Pending rows (sent_at NULL) are never touched, whatever
 * their age. Each batch is its own short transaction and skips rows another transaction
 * holds, so it runs beside live relays without blocking them.
 *
 * With the relay's delete-on-publish mode there is nothing left for it to do.
 */
export async function cleanupOutbox(options: CleanupOptions = {}): Promise<CleanupResult> {
  const retention = optionValue(cleanupRetention, options.retention);
  const retentionMs = (parseDuration(retention) as { value: number }).value;
  const batchSize = optionValue(cleanupBatchSize, options.batchSize);
  const quoted = quoteSchema(options.schema);
  if (options.maxBatches !== undefined && !(Number.isSafeInteger(options.maxBatches) && options.maxBatches >= 1)) {
    throw new ConfigError('maxBatches', `${JSON.stringify(options.maxBatches)} is not a positive whole number`);
  }
  const logger = options.logger ?? silentLogger();
  const { db, close } = await openDatabase(options, 'outbox-relay:cleanup');
  const result: CleanupResult = { deleted: 0, batches: 0 };
  try {
    const sql = cleanupBatchSql(quoted);
    let after = 0;
    const onProgress = options.onProgress;
    const estimatedTotal = onProgress ? await plannedRows(db, cleanupEstimateSql(quoted), [retentionMs / 1000]) : null;
    onProgress?.({ ...result, estimatedTotal, atMs: Date.now() });
    for (;;) {
      const { rows } = await db.query<{ id: number }>(sql, [retentionMs / 1000, batchSize, after]);
      result.batches++;
      result.deleted += rows.length;
      for (const r of rows) after = Math.max(after, Number(r.id));
      onProgress?.({ ...result, estimatedTotal, atMs: Date.now() });
      if (rows.length < batchSize) break;
      if (options.maxBatches !== undefined && result.batches >= options.maxBatches) break;
    }
  } finally {
    await close();
  }
  logger.info({ ...result, retention, schema: options.schema ?? DEFAULT_SCHEMA }, 'cleaned up sent outbox rows');
  return result;
}
