import type pg from 'pg';
import { quoteSchema } from '../../shared/identifiers.js';
import { ConfigError } from '../../shared/errors.js';
import { dbNow, resolveFilter, toDeadLetter, type DeadLetter, type DeadLetterRow } from '../../commands/deadLetterSelection.js';
import type { CappedCount, ConsoleDeadLetterFilter, DeadLetterDetail, DeadLetterPage } from '../model.js';
import { deadLetterMatchesSql, deadLetterMatchIdsSql, deadLetterPageSql, deadLetterSql, timeRangeIdsSql } from '../sql/deadLetters.js';
import { capped, checkCount } from './capped.js';

/** Matches of a page's filter are counted up to this many. */
export const MATCHING_CAP = 10_000;
/** A time range holding up to this many dead letters is searched between its lowest and highest id. */
const TIME_RANGE_BOUNDED = 500_000;
/** Largest page. */
const MAX_PAGE = 1_000;
/** Largest cap of {@link countDeadLetters}. */
const MAX_CAP = 1_000_000;

/**
 * The filter's query parameters ($1-$8 of the CLI's filter), resolved as the CLI resolves
 * it: relative times count back from the database's clock.
 *
 * @throws ConfigError naming the field
 */
async function filterParams(pool: pg.Pool, s: string, filter: ConsoleDeadLetterFilter): Promise<unknown[] | 'none'> {
  resolveFilter(filter, new Date()); // bad values fail before any query
  const needsClock = typeof filter.since === 'string' || typeof filter.until === 'string';
  const params = resolveFilter(filter, needsClock ? await dbNow(pool) : new Date()).params;
  const [since, until] = [params[4], params[5]];
  if (since === null && until === null) return [...params, null, null];
  // A time range: the ids its rows lie between (see timeRangeIdsSql); none, no match.
  const { rows } = await pool.query<{ count: number; first_id: number | null; last_id: number | null }>(timeRangeIdsSql(s), [since, until, TIME_RANGE_BOUNDED + 1]);
  const r = rows[0]!;
  if (r.count === 0) return 'none';
  return r.count > TIME_RANGE_BOUNDED ? [...params, null, null] : [...params, r.first_id, r.last_id];
}

/**
 * One page of the dead letters matching `filter` (the CLI's filter and an exact error
 * name), lowest id first, after `afterId` (keyset paging: a page costs the same however
 * deep it is), with how many match in all, capped at {@link MATCHING_CAP}. Read-only.
 *
 * @throws ConfigError for a bad filter field or page
 */
export async function searchDeadLetters(
  pool: pg.Pool,
  schema: string,
  filter: ConsoleDeadLetterFilter,
  page: { afterId: number | null; limit: number },
): Promise<DeadLetterPage> {
  const s = quoteSchema(schema);
  if (page.afterId !== null && !(Number.isSafeInteger(page.afterId) && page.afterId >= 0)) {
    throw new ConfigError('afterId', `${JSON.stringify(page.afterId)} is not a dead letter id`);
  }
  const limit = checkCount('limit', page.limit, MAX_PAGE);
  const params = await filterParams(pool, s, filter);
  if (params === 'none') return { deadLetters: [], nextAfterId: null, matching: { count: 0, capped: false } };
  const [rows, matching] = await Promise.all([
    // One more than the page: whether there is a next one.
    pool.query<DeadLetterRow>(deadLetterPageSql(s), [...params, page.afterId, limit + 1]),
    pool.query<{ count: number }>(deadLetterMatchesSql(s), [...params, MATCHING_CAP + 1]),
  ]);
  const deadLetters = rows.rows.slice(0, limit).map(toDeadLetter);
  return {
    deadLetters,
    nextAfterId: rows.rows.length > limit ? deadLetters[deadLetters.length - 1]!.id : null,
    matching: capped(matching.rows[0]!.count, MATCHING_CAP),
  };
}

/**
 * How many dead letters match `filter`, counted up to `cap`: the dry run a console
 * shows before a replay or a discard of a filter. Read-only.
 *
 * @throws ConfigError for a bad filter field
 */
export async function countDeadLetters(pool: pg.Pool, schema: string, filter: ConsoleDeadLetterFilter, cap: number): Promise<CappedCount> {
  const s = quoteSchema(schema);
  checkCount('cap', cap, MAX_CAP);
  const params = await filterParams(pool, s, filter);
  if (params === 'none') return { count: 0, capped: false };
  const { rows } = await pool.query<{ count: number }>(deadLetterMatchesSql(s), [...params, cap + 1]);
  return capped(rows[0]!.count, cap);
}

/**
 * The ids of the dead letters matching `filter`, lowest first, at most `cap`, and whether
 * more match: the set a confirmation shows and its action then takes, exactly. Read-only.
 *
 * @throws ConfigError for a bad filter field
 */
export async function matchingIds(pool: pg.Pool, schema: string, filter: ConsoleDeadLetterFilter, cap: number): Promise<{ ids: number[]; capped: boolean }> {
  const s = quoteSchema(schema);
  checkCount('cap', cap, MAX_CAP);
  const params = await filterParams(pool, s, filter);
  if (params === 'none') return { ids: [], capped: false };
  const { rows } = await pool.query<{ id: string }>(deadLetterMatchIdsSql(s), [...params, cap + 1]);
  return { ids: rows.slice(0, cap).map((r) => Number(r.id)), capped: rows.length > cap };
}

/**
 * One dead letter, whole (payload and payload_bytes as the table holds them), or null;
 * `payloadText` is its JSON payload as Postgres writes it, for a page to print without
 * recursion (a payload may nest 10,000 deep: JSON.stringify overflows the stack on it,
 * JSON.parse does not). Read-only.
 */
export async function readDeadLetter(pool: pg.Pool, schema: string, id: number): Promise<DeadLetterDetail | null> {
  const s = quoteSchema(schema);
  if (!Number.isSafeInteger(id) || id < 1) return null;
  const { rows } = await pool.query<Omit<DeadLetterRow, 'payload'> & { payload_text: string | null }>(deadLetterSql(s), [id]);
  const row = rows[0];
  if (!row) return null;
  const payloadText = row.payload_text;
  return { ...toDeadLetter({ ...row, payload: payloadText === null ? null : JSON.parse(payloadText) }), payloadText };
}
