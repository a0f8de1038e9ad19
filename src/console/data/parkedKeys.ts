import type pg from 'pg';
import { quoteSchema } from '../../shared/identifiers.js';
import { ConfigError } from '../../shared/errors.js';
import type { ParkedKeyPage } from '../model.js';
import { parkedKeyOfSql, parkedKeyPageSql } from '../sql/parkedKeys.js';
import { checkCount } from './capped.js';

/** Rows waiting behind a page's keys are counted among the first this many unsent rows. */
export const WAITING_SCAN = 50_000;
const MAX_PAGE = 1_000;

/**
 * One page of parked keys, parked longest first, after `after` (keyset paging on
 * parked_at, topic, key), each with why (its dead letter's reason and error name), since
 * when, and its unsent rows waiting. Those are counted among the first
 * {@link WAITING_SCAN} unsent rows (in id order, where a parked key's held rows are, as
 * they are older than what flows past them): `waiting.capped` means the backlog is longer
 * and there may be more. Read-only.
 */
export async function listParkedKeys(
  pool: pg.Pool,
  schema: string,
  page: { after: { parkedAt: Date; topic: string; key: string } | null; limit: number },
): Promise<ParkedKeyPage> {
  const s = quoteSchema(schema);
  const limit = checkCount('limit', page.limit, MAX_PAGE);
  const a = page.after;
  if (a !== null && !(a.parkedAt instanceof Date && !Number.isNaN(a.parkedAt.getTime()) && typeof a.topic === 'string' && typeof a.key === 'string')) {
    throw new ConfigError('after', 'must be a parked key (parkedAt, topic, key) of a page shown before');
  }
  const { rows } = await pool.query<{
    topic: string;
    key: string;
    dead_letter_id: number;
    parked_at: Date;
    reason: string;
    error_name: string;
    waiting: number;
    scanned: number;
  }>(parkedKeyPageSql(s), [a?.parkedAt ?? null, a?.topic ?? null, a?.key ?? null, limit + 1, WAITING_SCAN]);
  const shown = rows.slice(0, limit);
  const last = shown[shown.length - 1];
  return {
    parkedKeys: shown.map((r) => ({
      topic: r.topic,
      key: r.key,
      deadLetterId: Number(r.dead_letter_id),
      reason: r.reason,
      errorName: r.error_name,
      parkedAt: r.parked_at,
      // The whole backlog was looked at unless the scan stopped at its cap.
      waiting: { count: Number(r.waiting), capped: Number(r.scanned) >= WAITING_SCAN },
    })),
    next: rows.length > limit && last ? { parkedAt: last.parked_at, topic: last.topic, key: last.key } : null,
  };
}

/**
 * The key parked behind a dead letter (topic and key whole, since when), or null when that dead
 * letter parks none (any more). Pages name a parked key by its dead letter's id: a key
 * may be thousands of characters, too long for a URL. Read-only.
 */
export async function parkedKeyOf(pool: pg.Pool, schema: string, deadLetterId: number): Promise<{ topic: string; key: string; parkedAt: Date } | null> {
  if (!Number.isSafeInteger(deadLetterId) || deadLetterId < 1) return null;
  const { rows } = await pool.query<{ topic: string; key: string; parked_at: Date }>(parkedKeyOfSql(quoteSchema(schema)), [deadLetterId]);
  const r = rows[0];
  return r ? { topic: r.topic, key: r.key, parkedAt: r.parked_at } : null;
}
