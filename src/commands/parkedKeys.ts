import type { DatabaseOptions } from '../shared/database.js';
import { ConfigError, OutboxError } from '../shared/errors.js';
import { quoteSchema } from '../shared/identifiers.js';
import { openDeadLetters, permissionDenied, requireChangePrivileges } from './deadLetterSelection.js';
import { unparkKeySql, waitingRowsSql } from './sql/deadLetters.js';

// `outbox-relay dead-letters unpark`: let a parked key's later rows go on without its
// dead letter (see docs/operations-dead-letters.md, "Unpark a key").

/** Waiting rows are counted up to this many. */
const WAITING_CAP = 10_000;

/** Options of {@link unparkKey}: the database and the key. */
export interface UnparkKeyOptions extends DatabaseOptions {
  topic: string;
  /** The entity key (may be empty: an empty key is dead-lettered too). */
  key: string;
}

/** What {@link unparkKey} released. */
export interface UnparkResult {
  topic: string;
  key: string;
  /** The dead letter the key was parked behind; it stays a dead letter (now with policy skip). */
  deadLetterId: number;
  parkedAt: Date;
  /** The key's dead letters whose policy went from park to skip (the one above among them). */
  skippedDeadLetterIds: number[];
  /** The key's unsent rows, which the relay now publishes (counted up to `waitingCapped`). */
  waiting: number;
  waitingCapped: boolean;
}

/** The key named is not parked (never was, or was released already). Nothing changed. */
export class KeyNotParkedError extends OutboxError {
  constructor(topic: string, key: string) {
    super(`key ${JSON.stringify(key)} of topic ${JSON.stringify(topic)} is not parked; nothing was changed`, { retriable: false, context: { topic, key } });
  }
}

/**
 * `outbox-relay dead-letters unpark`: release a parked key, leaving its dead letter where
 * it is. The relay then publishes the key's waiting rows, in order, without the dead
 * letter, as under the skip policy. The dead letter is kept: replaying it later publishes
 * it after the key's later events, so a consumer that orders by version sees it as stale.
 *
 * @throws ConfigError for a bad topic or key; KeyNotParkedError when the key is not
 *   parked; DeadLetterPermissionError when the role may not change parked keys. In each
 *   case nothing changed.
 */
export async function unparkKey(options: UnparkKeyOptions): Promise<UnparkResult> {
  if (typeof options.topic !== 'string' || options.topic === '') throw new ConfigError('topic', 'must be a non-empty string');
  if (typeof options.key !== 'string') throw new ConfigError('key', 'must be a string');
  const s = quoteSchema(options.schema);
  const { db, close } = await openDeadLetters(options, 'dead-letters-unpark');
  try {
    await requireChangePrivileges(db, s, 'unpark');
    const { rows } = await db
      .query<{ dead_letter_id: number; parked_at: Date; skipped_ids: number[] }>(unparkKeySql(s), [options.topic, options.key])
      .catch((error: unknown) => {
        throw permissionDenied(error, 'unpark');
      });
    const r = rows[0];
    if (!r) throw new KeyNotParkedError(options.topic, options.key);
    const waiting = (await db.query<{ waiting: number }>(waitingRowsSql(s), [options.topic, options.key, WAITING_CAP])).rows[0]!.waiting;
    return {
      topic: options.topic,
      key: options.key,
      deadLetterId: Number(r.dead_letter_id),
      parkedAt: r.parked_at,
      skippedDeadLetterIds: r.skipped_ids.map(Number),
      waiting,
      waitingCapped: waiting >= WAITING_CAP,
    };
  } finally {
    await close();
  }
}
