/**
 * getOrLoad: read-through with stampede protection.
 *
 * 1. Read the entry (one round trip). Fresh: a hit. In its stale window: served as it is,
 *    and one background refresh starts (per key and process; across processes only the
 *    lock holder loads, the others keep serving stale).
 * 2. Missing: single flight in the process (one promise per key; every concurrent caller
 *    joins it), and across processes through the rebuild lock (lock.ts): the holder
 *    reads again (another process may have just filled it), calls the loader under
 *    `loadTimeoutMs` with an AbortSignal, writes the value with a jittered TTL and
 *    releases the lock. The others poll the key (5 ms, doubling to 50 ms) until the value
 *    arrives, the lock goes (then they take it and rebuild), or `waitMs` passes (then they
 *    throw CacheWaitTimeoutError, or load themselves with `onWaitTimeout: 'load'`).
 * 3. Redis failing degrades to the loader, still one call per key per process.
 *
 * A loader that throws or hangs does not wedge the key: its callers get the error (or
 * CacheLoadTimeoutError), the lock is released (or expires with its TTL), and the next
 * call tries again.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { CacheLoadTimeoutError, CacheWaitTimeoutError } from './errors.js';
import { readEntry, type Entry } from './entry.js';
import { acquireLock, releaseLock } from './lock.js';
import type { CacheRecorder } from './metrics.js';
import { versionText, type CacheCodec, type ResolvedGetOrLoadOptions } from './options.js';
import type { CacheRedisClient } from './redisClient.js';
import { writeEntry } from './versionedWrite.js';

/** What a loader gets: the key (without the prefix) and a signal aborted when it overruns `loadTimeoutMs`. */
export interface CacheLoaderContext {
  key: string;
  signal: AbortSignal;
}

/** Loads a key's value from the source of truth (the database) when the cache has none. */
export type CacheLoader<T> = (context: CacheLoaderContext) => Promise<T> | T;

/** One promise per key at a time, so concurrent callers share a single rebuild. */
export class SingleFlight {
  private readonly flights = new Map<string, Promise<unknown>>();

  /** Runs `fn` unless a run for `key` is in flight, in which case its promise is shared. */
  run<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const existing = this.flights.get(key);
    if (existing) return existing as Promise<T>;
    const p = fn().finally(() => {
      if (this.flights.get(key) === p) this.flights.delete(key);
    });
    this.flights.set(key, p);
    return p;
  }

  /** Resolves once no run is in flight (failures included). */
  async idle(): Promise<void> {
    while (this.flights.size > 0) await Promise.allSettled([...this.flights.values()]);
  }
}

/** What getOrLoad needs of the cache around it. */
export interface LoadContext {
  client: CacheRedisClient;
  codec: CacheCodec;
  metrics: CacheRecorder;
  flights: SingleFlight;
  dataKey(key: string): string;
  lockKey(key: string): string;
}

/** The value at `key`, from the cache or the loader (see the module comment). */
export async function getOrLoad<T>(c: LoadContext, key: string, loader: CacheLoader<T>, o: ResolvedGetOrLoadOptions): Promise<T> {
  const dataKey = c.dataKey(key);
  let entry: Entry | undefined;
  try {
    entry = await readEntry(c.client, dataKey);
  } catch {
    c.metrics.error('read');
    c.metrics.request('miss');
    return decode<T>(c, await c.flights.run(`load:${dataKey}`, () => loadAndStore(c, key, loader, o, false)));
  }
  if (entry?.value !== undefined) {
    if (entry.fresh) {
      c.metrics.request('hit');
      return decode<T>(c, entry.value);
    }
    c.metrics.request('stale');
    // Errors are counted inside; the stale value is the answer either way.
    c.flights.run(`refresh:${dataKey}`, () => rebuild(c, key, loader, o, true)).catch(() => undefined);
    return decode<T>(c, entry.value);
  }
  c.metrics.request('miss');
  const text = await c.flights.run(`load:${dataKey}`, () => rebuild(c, key, loader, o, false));
  return decode<T>(c, text as string);
}

function decode<T>(c: LoadContext, text: string): T {
  return c.codec.decode(text) as T;
}

/**
 * Rebuilds `key` under the lock, or waits for the holder. Resolves with the encoded value;
 * a background refresh that finds the lock taken resolves with undefined at once.
 */
async function rebuild<T>(c: LoadContext, key: string, loader: CacheLoader<T>, o: ResolvedGetOrLoadOptions, background: true): Promise<string | undefined>;
async function rebuild<T>(c: LoadContext, key: string, loader: CacheLoader<T>, o: ResolvedGetOrLoadOptions, background: false): Promise<string>;
async function rebuild<T>(c: LoadContext, key: string, loader: CacheLoader<T>, o: ResolvedGetOrLoadOptions, background: boolean): Promise<string | undefined> {
  const dataKey = c.dataKey(key);
  const lockKey = c.lockKey(key);
  const deadline = Date.now() + o.waitMs;
  let waited = false;
  let pause = 5;
  for (;;) {
    let token: string | undefined;
    try {
      token = await acquireLock(c.client, lockKey, o.lockTtlMs);
    } catch {
      c.metrics.error('lock');
      return loadAndStore(c, key, loader, o, false);
    }
    if (token !== undefined) {
      if (waited) c.metrics.lockWait('took_over');
      try {
        // Another process may have filled it between our read and our lock.
        const again = await readEntry(c.client, dataKey).catch(() => undefined);
        if (again?.value !== undefined && again.fresh) return again.value;
        return await loadAndStore(c, key, loader, o, true);
      } finally {
        await releaseLock(c.client, lockKey, token).catch(() => c.metrics.error('unlock'));
      }
    }
    if (background) return undefined;
    waited = true;
    const left = deadline - Date.now();
    if (left <= 0) {
      c.metrics.lockWait('timeout');
      if (o.onWaitTimeout === 'load') return loadAndStore(c, key, loader, o, false);
      throw new CacheWaitTimeoutError(key, o.waitMs);
    }
    await sleep(Math.min(pause, left));
    pause = Math.min(pause * 2, 50);
    const now = await readEntry(c.client, dataKey).catch(() => undefined);
    if (now?.value !== undefined) {
      c.metrics.lockWait('value');
      return now.value;
    }
  }
}

/** Calls the loader under its timeout, writes the result (unless Redis fails) and returns it encoded. */
async function loadAndStore<T>(c: LoadContext, key: string, loader: CacheLoader<T>, o: ResolvedGetOrLoadOptions, write: boolean): Promise<string> {
  const value = await callLoader(c, key, loader, o);
  const text = c.codec.encode(value);
  if (write) {
    const freshMs = Math.max(1, Math.round(o.ttlMs * (1 - o.jitter * Math.random())));
    try {
      const version = o.versionOf ? versionText(o.versionOf(value), 'versionOf()') : undefined;
      c.metrics.write('fill', await writeEntry(c.client, c.dataKey(key), { value: text, version, freshMs, staleMs: o.staleForMs, mode: 'fill' }));
    } catch (error) {
      if (error instanceof Error && error.name === 'ConfigError') throw error;
      c.metrics.error('write');
    }
  }
  return text;
}

async function callLoader<T>(c: LoadContext, key: string, loader: CacheLoader<T>, o: ResolvedGetOrLoadOptions): Promise<T> {
  const controller = new AbortController();
  const started = process.hrtime.bigint();
  const seconds = (): number => Number(process.hrtime.bigint() - started) / 1e9;
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      const error = new CacheLoadTimeoutError(key, o.loadTimeoutMs);
      controller.abort(error);
      reject(error);
    }, o.loadTimeoutMs);
  });
  try {
    const value = await Promise.race([Promise.resolve().then(() => loader({ key, signal: controller.signal })), timeout]);
    c.metrics.rebuild('ok', seconds());
    return value;
  } catch (error) {
    c.metrics.rebuild(error instanceof CacheLoadTimeoutError ? 'timeout' : 'error', seconds());
    c.metrics.error('loader');
    throw error;
  } finally {
    clearTimeout(timer);
  }
}
