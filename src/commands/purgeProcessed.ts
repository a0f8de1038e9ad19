import type pg from 'pg';
import { quoteIdentifier } from '../shared/identifiers.js';
import { optionValue } from '../shared/settings.js';
import * as consumerSettings from '../consumer/options.js';
import { purgeProcessedSql } from '../consumer/sql/processedMessages.js';
import { silentLogger, type Logger } from '../shared/logger.js';
import { ConfigError } from '../shared/errors.js';
import { openDatabase } from './openDatabase.js';

export interface PurgeProcessedOptions {
  /** Connection string; ignored when `client` or `pool` is given. */
  databaseUrl?: string;
  /** A pool or connection to use instead of `databaseUrl`; left open. */
  pool?: pg.Pool;
  client?: pg.ClientBase;
  /** Schema of the processed_messages table (default `public`). */
  schema?: string;
  /**
   * Rows older than this many days are deleted (default 14). Must be longer than the
   * longest time a message can come again: redelivery after an outage, a consumer group
   * reset, a dead-letter replay. A key purged before its message comes back is handled
   * again: a double effect.
   */
  retentionDays?: number;
  /** Rows per delete transaction (default 1000): short transactions, short locks. */
  batchSize?: number;
  /** Purge only this consumer group's rows (default all groups). */
  consumerGroup?: string;
  /** Stop after this many batches (default: until no old row is left). */
  maxBatches?: number;
  logger?: Logger;
}

export interface PurgeProcessedResult {
  deleted: number;
  batches: number;
}

/**
 * Delete processed_messages rows older than the retention, in bounded batches, oldest
 * first. Each batch is its own transaction and skips rows another transaction holds, so
 * it runs beside live consumers (and other purges) without blocking or deadlocking them.
 */
export async function purgeProcessedMessages(options: PurgeProcessedOptions = {}): Promise<PurgeProcessedResult> {
  const retentionDays = optionValue(consumerSettings.retentionDays, options.retentionDays);
  const batchSize = optionValue(consumerSettings.purgeBatchSize, options.batchSize);
  const quoted = quoteIdentifier(options.schema ?? 'public', 'schema');
  if (options.maxBatches !== undefined && !(Number.isSafeInteger(options.maxBatches) && options.maxBatches >= 1)) {
    throw new ConfigError('maxBatches', `${JSON.stringify(options.maxBatches)} is not a positive whole number`);
  }
  const logger = options.logger ?? silentLogger();
  const { db, close } = await openDatabase(options, 'outbox-relay:purge-processed');
  const sql = purgeProcessedSql(quoted);
  const result: PurgeProcessedResult = { deleted: 0, batches: 0 };
  try {
    for (;;) {
      const { rowCount } = await db.query(sql, [retentionDays * 86_400, batchSize, options.consumerGroup ?? null]);
      result.batches++;
      result.deleted += rowCount ?? 0;
      if ((rowCount ?? 0) < batchSize) break;
      if (options.maxBatches !== undefined && result.batches >= options.maxBatches) break;
    }
  } finally {
    await close();
  }
  logger.info({ ...result, retentionDays, schema: options.schema ?? 'public' }, 'purged processed messages');
  return result;
}
