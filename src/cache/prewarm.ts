/**
 * Prewarming: one pass over a list of hot keys that loads those about to lose their
 * fresh value, before a reader finds them missing.
 *
 * Per key: read the entry (one round trip, as getOrLoad does). Not due (a value with
 * more than `refreshAheadMs` of fresh time left): `fresh`. Due (no value, a tombstone,
 * or less time left, the stale window counting as none): refresh it the way getOrLoad
 * rebuilds, so that a prewarm and a reader never both load a key:
 *
 * - in this process, through the same single flight as stale serving's background
 *   refresh, and not while a reader's load of the key is in flight (`busy`);
 * - across processes, under the same rebuild lock (lock.ts): a lock held by anyone else
 *   means someone is loading it (`busy`). With the lock, the entry is read again, and a
 *   key refreshed since the first read is left (`busy`);
 * - loaded under `loadTimeoutMs`, written by the versioned fill (versionedWrite.ts), so a
 *   newer version written meanwhile stays (`superseded`); a loader's undefined is not
 *   cached (`absent`).
 *
 * A key whose loader, versionOf or Redis command fails is `failed` (its error kept) and
 * the others go on; but a Redis failure (an error, or no reply within `redisTimeoutMs`)
 * ends the pass: no further key is started (`unfinished`), since each would wait on the
 * same Redis. The pass never waits for another's rebuild. Its signal ends it the same way,
 * and aborts the loaders running.
 */
import { CacheRedisError } from './errors.js';
import { readEntry, type Entry } from './entry.js';
import { jitteredFreshMs, load, loadFlight, refreshFlight, releaseRebuildLock, type CacheLoader, type LoadContext } from './getOrLoad.js';
import { acquireLock } from './lock.js';
import { PREWARM_OUTCOMES, type PrewarmOutcome } from './metrics.js';
import type { ResolvedPrewarmOptions } from './prewarmOptions.js';
import { writeEntry } from './versionedWrite.js';

/** A failed key of a prewarm pass and why. */
export interface PrewarmFailure {
  key: string;
  /** The loader's own error, a ConfigError (`prewarm.versionOf`, `codec.encode`), CacheLoadTimeoutError, or CacheRedisError. */
  error: unknown;
}

/** What a prewarm pass did: how many keys ended each way (they add up to `keys`), and the errors of the failed ones. */
export interface PrewarmResult {
  /** Distinct keys in the pass. */
  keys: number;
  /** Loaded and written. */
  refreshed: number;
  /** Not in the refresh window: more than `refreshAheadMs` of fresh time left. */
  fresh: number;
  /** Left to another caller: a reader's load or another refresh was running (here, or holding the rebuild lock elsewhere), or had just refreshed it. */
  busy: number;
  /** Loaded, but not written: the cache held a newer version (or a tombstone of one), which stays. */
  superseded: number;
  /** The loader returned undefined (not found): nothing cached, as with getOrLoad. */
  absent: number;
  /** The loader threw or overran `loadTimeoutMs`, `versionOf` or the codec refused the value, or a Redis command failed. */
  failed: number;
  /** Not done: the pass stopped first (its signal was aborted, or Redis failed). */
  unfinished: number;
  /** The failed keys and their errors, the first {@link MAX_PREWARM_ERRORS}. */
  errors: PrewarmFailure[];
  /** Why keys were left unfinished: the pass's signal, or a Redis failure; undefined when every key was done. */
  stoppedBy: 'signal' | 'redis' | undefined;
  /** How long the pass took. */
  durationMs: number;
}

/** Errors kept per pass (every failure is counted; a Redis outage would otherwise keep one per key). */
export const MAX_PREWARM_ERRORS = 100;

/** Whether an entry is due: none, a tombstone, or at most `aheadMs` of fresh time left. */
function due(entry: Entry | undefined, aheadMs: number): boolean {
  if (entry?.value === undefined) return true;
  if (entry.pttlMs === -1) return false;
  return entry.pttlMs - entry.staleMs <= aheadMs;
}

/** One pass over `keys` (distinct, validated), at most `o.concurrency` at a time. Never rejects. */
export async function prewarmPass<T>(c: LoadContext, keys: readonly string[], loader: CacheLoader<T>, o: ResolvedPrewarmOptions): Promise<PrewarmResult> {
  const started = performance.now();
  const counts = Object.fromEntries(PREWARM_OUTCOMES.map((x) => [x, 0])) as Record<PrewarmOutcome, number>;
  const errors: PrewarmFailure[] = [];
  let redisFailed = false;
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < keys.length && !redisFailed && !o.signal?.aborted) {
      const key = keys[next++]!;
      let outcome: PrewarmOutcome;
      try {
        outcome = await prewarmKey(c, key, loader, o);
      } catch (error) {
        if (o.signal?.aborted && error === o.signal.reason) outcome = 'unfinished';
        else {
          outcome = 'failed';
          if (errors.length < MAX_PREWARM_ERRORS) errors.push({ key, error });
          if (error instanceof CacheRedisError) redisFailed = true;
        }
      }
      counts[outcome]++;
      c.metrics.prewarmKey(outcome);
    }
  };
  await Promise.all(Array.from({ length: Math.min(o.concurrency, keys.length) }, worker));
  const notStarted = keys.length - next;
  if (notStarted > 0) {
    counts.unfinished += notStarted;
    c.metrics.prewarmKey('unfinished', notStarted);
  }
  const durationMs = performance.now() - started;
  c.metrics.prewarmPass(durationMs / 1000);
  const stoppedBy = counts.unfinished === 0 ? undefined : redisFailed ? 'redis' : 'signal';
  return { keys: keys.length, ...counts, errors, stoppedBy, durationMs };
}

async function prewarmKey<T>(c: LoadContext, key: string, loader: CacheLoader<T>, o: ResolvedPrewarmOptions): Promise<PrewarmOutcome> {
  const dataKey = c.dataKey(key);
  let entry: Entry | undefined;
  try {
    entry = await readEntry(c.client, dataKey);
  } catch (error) {
    c.metrics.error('read');
    throw new CacheRedisError('read', key, error);
  }
  if (!due(entry, o.refreshAheadMs)) return 'fresh';
  // A reader's load, a stale refresh or another pass of this process has it: one flight.
  if (c.flights.has(loadFlight(dataKey)) || c.flights.has(refreshFlight(dataKey))) return 'busy';
  return c.flights.run(refreshFlight(dataKey), () => refreshUnderLock(c, key, loader, o));
}

/**
 * Takes the rebuild lock (held elsewhere: `busy`), reads again, loads and writes with the
 * versioned fill, releases. As in getOrLoad, once a Redis command has failed the release
 * runs in the background, so a Redis that is away costs the pass one `redisTimeoutMs`.
 */
async function refreshUnderLock<T>(c: LoadContext, key: string, loader: CacheLoader<T>, o: ResolvedPrewarmOptions): Promise<PrewarmOutcome> {
  const dataKey = c.dataKey(key);
  let token: string | undefined;
  try {
    token = await acquireLock(c.client, c.lockKey(key), o.load.lockTtlMs);
  } catch (error) {
    c.metrics.error('lock');
    throw new CacheRedisError('lock', key, error);
  }
  if (token === undefined) return 'busy';
  let redisUp = true;
  try {
    let again: Entry | undefined;
    try {
      again = await readEntry(c.client, dataKey);
    } catch (error) {
      c.metrics.error('read');
      redisUp = false;
      throw new CacheRedisError('read', key, error);
    }
    // Refreshed between the first read and the lock, by a reader or another process's pass.
    if (!due(again, o.refreshAheadMs)) return 'busy';
    const loaded = await load(c, key, loader, o.load, o.signal, 'prewarm.versionOf');
    if (loaded.text === undefined) return 'absent';
    let written: boolean;
    try {
      written = await writeEntry(c.client, dataKey, { value: loaded.text, version: loaded.version, freshMs: jitteredFreshMs(o.load), staleMs: o.load.staleForMs, mode: 'fill' });
    } catch (error) {
      c.metrics.error('write');
      redisUp = false;
      throw new CacheRedisError('write', key, error);
    }
    c.metrics.write('prewarm', written);
    return written ? 'refreshed' : 'superseded';
  } finally {
    await releaseRebuildLock(c, key, token, redisUp);
  }
}
