import { setTimeout as sleep } from 'node:timers/promises';
import { quoteSchema } from '../shared/identifiers.js';
import type { DatabaseOptions } from '../shared/database.js';
import { optionValue } from '../shared/settings.js';
import { listLimit, replayRate } from './options.js';
import { discardDeadLettersSql, replayDeadLettersSql } from './sql/deadLetters.js';
import { ConfigError } from '../shared/errors.js';
import { silentLogger, type Logger } from '../shared/logger.js';
import {
  dbNow,
  openDeadLetters,
  permissionDenied,
  requireChangePrivileges,
  requireMatches,
  requireSelection,
  resolveFilter,
  select,
  type DeadLetter,
  type DeadLetterFilter,
} from './deadLetterSelection.js';

// `outbox-relay dead-letters list | replay | discard`: what the relay could not publish,
// and the ways back out of outbox_dead_letters (see docs/operations-dead-letters.md).

/** Options of {@link listDeadLetters}: the database, a filter and a limit. */
export interface ListDeadLettersOptions extends DatabaseOptions, DeadLetterFilter {
  /** At most this many, lowest id first (default 100). */
  limit?: number;
}

/** Dead letters matching the filter (oldest id first) and how many match in all. */
export interface ListDeadLettersResult {
  deadLetters: DeadLetter[];
  /** How many match in all (more than deadLetters.length when the limit cut the list). */
  total: number;
}

/**
 * `outbox-relay dead-letters list`: dead letters matching a filter, lowest id first. Read-only.
 *
 * @throws DeadLetterNotFoundError when ids are given and one of them is not a dead letter
 *   (or does not match the rest of the filter); the CLI exits 1
 */
export async function listDeadLetters(options: ListDeadLettersOptions = {}): Promise<ListDeadLettersResult> {
  const limit = optionValue(listLimit, options.limit);
  const s = quoteSchema(options.schema);
  checkFilterFields(options);
  const { db, close } = await openDeadLetters(options, 'dead-letters');
  try {
    const filter = resolveFilter(options, await dbNow(db));
    const { rows, total } = await select(db, s, filter, limit);
    // Named ids must exist (docs/operations-dead-letters.md: an unknown id exits 1); a
    // filter without ids that matches nothing is an empty list, not an error.
    if (filter.params[0]) requireMatches(filter, total > rows.length ? (await select(db, s, filter, null)).rows : rows, 'listed');
    return { deadLetters: rows, total };
  } finally {
    await close();
  }
}

function checkLimit(limit: number | undefined): void {
  if (limit !== undefined && !(Number.isSafeInteger(limit) && limit >= 1)) {
    throw new ConfigError('limit', `${JSON.stringify(limit)} is not a positive whole number`);
  }
}

// Catch bad filter values before connecting, with a fixed clock for relative times (they
// are resolved again against the database's clock once connected).
function checkFilterFields(f: DeadLetterFilter): void {
  resolveFilter(f, new Date());
}

// ---------------------------------------------------------------------------------------
// replay

/** How far behind schedule a replay may catch up after a stall. */
const CATCH_UP_MS = 100;

/** Options of {@link replayDeadLetters}: the database, a filter and the pace. */
export interface ReplayDeadLettersOptions extends DatabaseOptions, DeadLetterFilter {
  /** Select every dead letter; needed when no ids and no filter are given. */
  all?: boolean;
  /** Dead letters moved per second, at most (default 10, up to 1000). */
  rate?: number;
  /** Replay at most this many of the matches, lowest id first. */
  limit?: number;
  /** Stops the replay between two rows; rows moved so far stay moved. */
  signal?: AbortSignal;
  /** Called after each dead letter is moved back (or left in place), with the time (Date.now()). */
  onProgress?: (event: ReplayProgress) => void;
  logger?: Logger;
}

/** Reported after each dead letter moved back into the outbox. */
export interface ReplayProgress {
  id: number;
  topic: string;
  key: string;
  moved: boolean;
  releasedKey: boolean;
  atMs: number;
}

/** What a replay moved back into the outbox. */
export interface ReplayResult {
  /** How many dead letters the ids/filter selected when the replay began. */
  selected: number;
  /** Moved back into the outbox, each under its original id and message id. */
  replayed: number;
  /** Ids moved back, in the order they were moved (lowest id first). */
  replayedIds: number[];
  /** Keys released: the moved dead letter was the one parking them. */
  releasedKeys: Array<{ topic: string; key: string; deadLetterId: number }>;
  /**
   * Moved back, but their key is still parked behind another dead letter (not in this
   * replay): they wait in the outbox, in order, until that one is replayed or discarded.
   */
  waiting: Array<{ id: number; parkedBehind: number }>;
  /**
   * Left in place: a row with the same id or dedup key is already in the outbox (the event
   * was enqueued again), or the dead letter was gone (replayed or discarded by someone
   * else meanwhile). Nothing was lost: each is in exactly one of the two tables.
   */
  notMoved: Array<{ id: number; why: 'conflict' | 'gone' }>;
  /** True when the signal stopped the replay before the end. */
  stopped: boolean;
  startedAt: Date;
  finishedAt: Date;
  /** Achieved rate: rows moved per second between the first move and the last. */
  ratePerSecond: number | null;
}

/**
 * `outbox-relay dead-letters replay`: move dead letters back into the outbox, one row per
 * transaction, lowest id first (so in order within each key), paced to `rate` per second.
 *
 * Each move is atomic (src/sql/deadLetters.ts): the row goes back under its original id
 * and message id (consumers deduplicate a replay by message id), the dead letter is
 * deleted, and if it was the one parking its key the key is released; the relay then
 * publishes it before the key's waiting rows, which have higher ids.
 *
 * The selection is fixed when the replay begins: a row that fails again and comes back as
 * a dead letter during the replay is not replayed a second time.
 *
 * @throws ConfigError for a bad option (nothing selected, a bad time, a rate out of range);
 *   DeadLetterNotFoundError when an id does not exist or the filter matches nothing. In
 *   both cases before anything moved.
 */
export async function replayDeadLetters(options: ReplayDeadLettersOptions): Promise<ReplayResult> {
  const rate = optionValue(replayRate, options.rate);
  checkLimit(options.limit);
  const s = quoteSchema(options.schema);
  requireSelection(resolveFilter(options, new Date()), options.all, 'replay');
  const logger = options.logger ?? silentLogger();
  const { db, close } = await openDeadLetters(options, 'dead-letters-replay');
  try {
    await requireChangePrivileges(db, s, 'replay');
    const filter = resolveFilter(options, await dbNow(db));
    const { rows } = await select(db, s, filter, options.limit ?? null);
    requireMatches(filter, rows, 'replayed');
    const sql = replayDeadLettersSql(s);
    // Up to 100 statements a second: above 100 rows/s, each statement (one transaction)
    // moves a small group of consecutive rows, so a high rate is not bounded by round trips.
    const perMove = Math.max(1, Math.floor(rate / 100));
    const intervalMs = (perMove * 1000) / rate;
    const result: ReplayResult = {
      selected: rows.length,
      replayed: 0,
      replayedIds: [],
      releasedKeys: [],
      waiting: [],
      notMoved: [],
      stopped: false,
      startedAt: new Date(),
      finishedAt: new Date(),
      ratePerSecond: null,
    };
    logger.info({ selected: rows.length, rate, filter: filter.text }, 'replaying dead letters');
    let firstMoveMs: number | undefined;
    let firstMoveRows = 0;
    let lastMoveMs = 0;
    let lastLogMs = Date.now();
    // Fixed pacing: move i starts no earlier than start + i * interval, so timers firing
    // late do not slow the replay down. A stall (a slow commit, a GC pause) is made up for
    // at most CATCH_UP_MS worth of moves, then the schedule restarts from now: no burst
    // above 10% of the rate within any second (a token bucket holding 100 ms of tokens).
    let nextMs = performance.now();
    for (let i = 0; i < rows.length; i += perMove) {
      const group = rows.slice(i, i + perMove);
      if (options.signal?.aborted) {
        result.stopped = true;
        break;
      }
      const waitMs = nextMs - performance.now();
      if (waitMs > 0) {
        try {
          await sleep(waitMs, undefined, { signal: options.signal });
        } catch {
          result.stopped = true;
          break;
        }
      }
      nextMs = Math.max(nextMs + intervalMs, performance.now() - CATCH_UP_MS);
      const { rows: out } = await db
        .query<{ id: number; topic: string; key: string; moved: boolean; released_key: boolean; parked_behind: number | null }>(sql, [group.map((d) => d.id)])
        .catch((error: unknown) => {
          throw permissionDenied(error, 'replay');
        });
      const atMs = Date.now();
      const byId = new Map(out.map((r) => [Number(r.id), r]));
      let movedHere = 0;
      for (const d of group) {
        const r = byId.get(d.id);
        if (!r) {
          result.notMoved.push({ id: d.id, why: 'gone' });
        } else if (!r.moved) {
          result.notMoved.push({ id: d.id, why: 'conflict' });
        } else {
          movedHere++;
          result.replayed++;
          result.replayedIds.push(d.id);
          if (r.released_key) result.releasedKeys.push({ topic: d.topic, key: d.key, deadLetterId: d.id });
          if (r.parked_behind !== null) result.waiting.push({ id: d.id, parkedBehind: Number(r.parked_behind) });
        }
        options.onProgress?.({ id: d.id, topic: d.topic, key: d.key, moved: r?.moved ?? false, releasedKey: r?.released_key ?? false, atMs });
      }
      if (movedHere > 0) {
        if (firstMoveMs === undefined) {
          firstMoveMs = atMs;
          firstMoveRows = movedHere;
        }
        lastMoveMs = atMs;
      }
      if (atMs - lastLogMs >= 5_000) {
        lastLogMs = atMs;
        logger.info({ replayed: result.replayed, selected: rows.length }, 'replay progress');
      }
    }
    result.finishedAt = new Date();
    // A row that waited behind a dead letter this same replay moved later is free now.
    const released = new Set(result.releasedKeys.map((k) => k.deadLetterId));
    result.waiting = result.waiting.filter((w) => !released.has(w.parkedBehind));
    if (firstMoveMs !== undefined && lastMoveMs > firstMoveMs) {
      result.ratePerSecond = ((result.replayed - firstMoveRows) * 1000) / (lastMoveMs - firstMoveMs);
    }
    logger.info(
      { replayed: result.replayed, selected: result.selected, releasedKeys: result.releasedKeys.length, notMoved: result.notMoved.length, stopped: result.stopped, ratePerSecond: result.ratePerSecond },
      'replayed dead letters',
    );
    return result;
  } finally {
    await close();
  }
}

// ---------------------------------------------------------------------------------------
// discard

/** Options of {@link discardDeadLetters}: the database and a filter (`yes` required to delete). */
export interface DiscardDeadLettersOptions extends DatabaseOptions, DeadLetterFilter {
  /** Select every dead letter; needed when no ids and no filter are given. */
  all?: boolean;
  /**
   * The confirmation. Without `yes: true` nothing is deleted: the result lists what would
   * be (dryRun).
   */
  yes?: boolean;
  /** Discard at most this many of the matches, lowest id first. */
  limit?: number;
}

/** What a discard deleted. */
export interface DiscardResult {
  /** True when `yes` was not given: nothing was deleted. */
  dryRun: boolean;
  /** The dead letters selected (those discarded, or those that would be). */
  matched: DeadLetter[];
  /** Deleted for good. */
  discarded: number;
  /** The ids deleted, lowest first. */
  discardedIds: number[];
  /** Listed, but gone before the delete reached them (replayed or discarded by someone else meanwhile). */
  gone: number[];
  /** Keys released: their waiting rows are published next, without the discarded row. */
  releasedKeys: Array<{ topic: string; key: string; deadLetterId: number }>;
}

const DISCARD_CHUNK = 500;

/**
 * `outbox-relay dead-letters discard`: delete dead letters for good, releasing the keys
 * they were parking (in the same transaction), so those keys' waiting rows go on without
 * them. Needs `yes: true`; without it, reports what it would delete and changes nothing.
 *
 * @throws ConfigError for a bad option; DeadLetterNotFoundError when an id does not exist
 *   or the filter matches nothing. In both cases nothing is deleted.
 */
export async function discardDeadLetters(options: DiscardDeadLettersOptions): Promise<DiscardResult> {
  if (options.yes !== undefined && typeof options.yes !== 'boolean') throw new ConfigError('yes', 'must be true or false');
  checkLimit(options.limit);
  const s = quoteSchema(options.schema);
  requireSelection(resolveFilter(options, new Date()), options.all, 'discard');
  const { db, close } = await openDeadLetters(options, 'dead-letters-discard');
  try {
    const filter = resolveFilter(options, await dbNow(db));
    const { rows } = await select(db, s, filter, options.limit ?? null);
    requireMatches(filter, rows, 'discarded');
    const result: DiscardResult = { dryRun: options.yes !== true, matched: rows, discarded: 0, discardedIds: [], gone: [], releasedKeys: [] };
    if (result.dryRun) return result;
    await requireChangePrivileges(db, s, 'discard');
    // Exactly the rows listed (not whatever matches by now), a chunk per transaction.
    const sql = discardDeadLettersSql(s);
    for (let i = 0; i < rows.length; i += DISCARD_CHUNK) {
      const ids = rows.slice(i, i + DISCARD_CHUNK).map((d) => d.id);
      const { rows: out } = await db.query<{ id: number; topic: string; key: string; released_key: boolean }>(sql, [ids]).catch((error: unknown) => {
        throw permissionDenied(error, 'discard');
      });
      result.discarded += out.length;
      const deleted = new Set(out.map((r) => Number(r.id)));
      for (const id of ids) (deleted.has(id) ? result.discardedIds : result.gone).push(id);
      for (const r of out) if (r.released_key) result.releasedKeys.push({ topic: r.topic, key: r.key, deadLetterId: Number(r.id) });
    }
    return result;
  } finally {
    await close();
  }
}
