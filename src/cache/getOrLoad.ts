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
 * 3. Redis failing (an error, or no reply within the cache's `redisTimeoutMs`) degrades to
 *    the loader, still one call per key per process. A call that saw Redis fail does not
 *    wait on it again (no fill; the lock is released in the background), so it waits at
 *    most one `redisTimeoutMs` on a Redis that is gone or hung.
 *
 * A loader's `undefined` is handed back and never cached (the next call loads again);
 * `versionOf` runs on every loaded value (not undefined), and its failure fails the call.
 *
 * A loader that throws or hangs does not wedge the key: its callers get the error (or
 * CacheLoadTimeoutError), the lock is released (or expires with its TTL), and the next
 * call tries again.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { ConfigError } from '../shared/errors.js';
import { CacheLoadTimeoutError, CacheWaitTimeoutError } from './errors.js';
import { readEntry, type Entry } from './entry.js';
import { acquireLock, releaseLock } from './lock.js';
import type { CacheRecorder } from './metrics.js';
import { versionText, type CacheCodec, type CacheVersion, type ResolvedGetOrLoadOptions } from './options.js';
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
  private readonly background = new Set<Promise<unknown>>();

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

  /** True while a run for `key` is in flight. */
  has(key: string): boolean {
    return this.flights.has(key);
  }

  /** Keeps `p` (work nobody waits for, such as a lock release) until it settles, for {@link idle}. */
  track(p: Promise<unknown>): void {
    const kept = p.finally(() => this.background.delete(kept));
    this.background.add(kept);
  }

  /** Resolves once no run or tracked work is in flight (failures included). */
  async idle(): Promise<void> {
    while (this.flights.size + this.background.size > 0) await Promise.allSettled([...this.flights.values(), ...this.background]);
  }
}

/** What getOrLoad needs of the cache around it. */
export interface LoadContext {
  /** The client, every command bounded by `redisTimeoutMs`. */
  client: CacheRedisClient;
  codec: CacheCodec;
  metrics: CacheRecorder;
  flights: SingleFlight;
  dataKey(key: string): string;
  lockKey(key: string): string;
}

/** A loaded value: encoded, with its version; `text` undefined when the loader returned undefined. */
export interface Loaded {
  text: string | undefined;
  version: string | undefined;
}

/** The single-flight name of a missing key's load (callers join it). */
export const loadFlight = (dataKey: string): string => `load:${dataKey}`;
/** The single-flight name of a key's refresh: stale serving's background rebuild, or a prewarm. */
export const refreshFlight = (dataKey: string): string => `refresh:${dataKey}`;

/** The value at `key`, from the cache or the loader (see the module comment). */
export async function getOrLoad<T>(c: LoadContext, key: string, loader: CacheLoader<T>, o: ResolvedGetOrLoadOptions): Promise<T> {
  const dataKey = c.dataKey(key);
  let entry: Entry | undefined;
  try {
    entry = await readEntry(c.client, dataKey);
  } catch {
    c.metrics.error('read');
    c.metrics.request('miss');
    return decode<T>(c, key, await c.flights.run(loadFlight(dataKey), async () => (await load(c, key, loader, o)).text));
  }
  if (entry?.value !== undefined) {
    if (entry.fresh) {
      c.metrics.request('hit');
      return decode<T>(c, key, entry.value);
    }
    c.metrics.request('stale');
    // Errors are counted inside; the stale value is the answer either way.
    c.flights.run(refreshFlight(dataKey), () => rebuild(c, key, loader, o, true)).catch(() => undefined);
    return decode<T>(c, key, entry.value);
  }
  c.metrics.request('miss');
  return decode<T>(c, key, await c.flights.run(loadFlight(dataKey), () => rebuild(c, key, loader, o, false)));
}

function decode<T>(c: LoadContext, key: string, text: string | undefined): T {
  return (text === undefined ? undefined : decodeValue(c.codec, text, key)) as T;
}

/**
 * The codec's value for `text`. A failure is a ConfigError naming `codec.decode` (an entry
 * written by another codec or another program under this prefix) that never quotes the
 * text: a decoder's own message often does (JSON.parse quotes its first characters), and
 * cached values are user data.
 */
export function decodeValue(codec: CacheCodec, text: string, key: string): unknown {
  try {
    return codec.decode(text);
  } catch (error) {
    throw new ConfigError('codec.decode', `could not decode the entry of "${key}" (${error instanceof Error ? error.name : typeof error}); was it written with another codec, or by another program under this prefix?`);
  }
}

/**
 * Rebuilds `key` under the lock, or waits for the holder. Resolves with the encoded value
 * (undefined when the loader returned undefined); a background refresh that finds the
 * lock taken resolves with undefined at once.
 */
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
      // A background refresh has no caller to answer: with Redis failing, it gives up.
      return background ? undefined : (await load(c, key, loader, o)).text;
    }
    if (token !== undefined) {
      if (waited) c.metrics.lockWait('took_over');
      return loadHoldingLock(c, key, loader, o, token);
    }
    if (background) return undefined;
    waited = true;
    const left = deadline - Date.now();
    if (left <= 0) {
      c.metrics.lockWait('timeout');
      if (o.onWaitTimeout === 'load') return (await load(c, key, loader, o)).text;
      throw new CacheWaitTimeoutError(key, o.waitMs);
    }
    await sleep(Math.min(pause, left));
    pause = Math.min(pause * 2, 50);
    let now: Entry | undefined;
    try {
      now = await readEntry(c.client, dataKey);
    } catch {
      // Redis went away while the holder rebuilt: the loader, without the cache.
      c.metrics.error('read');
      return (await load(c, key, loader, o)).text;
    }
    if (now?.value !== undefined) {
      c.metrics.lockWait('value');
      return now.value;
    }
  }
}

/**
 * With the lock: reads again (another process may have filled the key between our read
 * and our lock), loads, fills, releases. Once a Redis command has failed, nothing more
 * is awaited of Redis: no fill, and the release runs in the background (the lock
 * expires with its TTL if that fails too).
 */
async function loadHoldingLock<T>(c: LoadContext, key: string, loader: CacheLoader<T>, o: ResolvedGetOrLoadOptions, token: string): Promise<string | undefined> {
  const dataKey = c.dataKey(key);
  let redisUp = true;
  try {
    let again: Entry | undefined;
    try {
      again = await readEntry(c.client, dataKey);
    } catch {
      c.metrics.error('read');
      redisUp = false;
    }
    if (again?.value !== undefined && again.fresh) return again.value;
    const loaded = await load(c, key, loader, o);
    if (redisUp && loaded.text !== undefined) {
      try {
        c.metrics.write('fill', await writeEntry(c.client, dataKey, { value: loaded.text, version: loaded.version, freshMs: jitteredFreshMs(o), staleMs: o.staleForMs, mode: 'fill' }));
      } catch {
        c.metrics.error('write');
        redisUp = false;
      }
    }
    return loaded.text;
  } finally {
    await releaseRebuildLock(c, key, token, redisUp);
  }
}

/** A fill's fresh time: `ttlMs` less a random share of at most `jitter`, so keys filled together do not expire together. */
export function jitteredFreshMs(o: Pick<ResolvedGetOrLoadOptions, 'ttlMs' | 'jitter'>): number {
  return Math.max(1, Math.round(o.ttlMs * (1 - o.jitter * Math.random())));
}

/**
 * Releases a rebuild lock held with `token`. With Redis up, awaited (bounded by
 * `redisTimeoutMs`); once a command has failed, run in the background and kept for
 * whenIdle, since waiting on a Redis that is away is what the caller must not do (the
 * lock expires with its TTL if the release fails too).
 */
export async function releaseRebuildLock(c: LoadContext, key: string, token: string, redisUp: boolean): Promise<void> {
  const release = releaseLock(c.client, c.lockKey(key), token).then(
    () => undefined,
    () => c.metrics.error('unlock'),
  );
  if (redisUp) await release;
  else c.flights.track(release);
}

/**
 * Calls the loader under its timeout; encodes the value and takes its version (unless it
 * is undefined). `stop` (a prewarm's signal) aborts the loader's signal too, and the call
 * rejects with its reason at once, whether or not the loader heeds it. A bad version is a
 * ConfigError naming `versionSetting`.
 */
export async function load<T>(c: LoadContext, key: string, loader: CacheLoader<T>, o: ResolvedGetOrLoadOptions, stop?: AbortSignal, versionSetting = 'getOrLoad.versionOf'): Promise<Loaded> {
  const value = await callLoader(c, key, loader, o, stop);
  if (value === undefined) return { text: undefined, version: undefined };
  let version: string | undefined;
  if (o.versionOf) {
    let v: CacheVersion;
    try {
      v = o.versionOf(value);
    } catch (error) {
      c.metrics.error('version');
      const e = new ConfigError(versionSetting, `threw on the value the loader returned for "${key}": ${error instanceof Error ? `${error.name}: ${error.message}` : String(error)}`);
      (e as { cause?: unknown }).cause = error;
      throw e;
    }
    try {
      version = versionText(v, versionSetting);
    } catch (error) {
      c.metrics.error('version');
      throw error;
    }
  }
  return { text: encodeValue(c.codec, value), version };
}

/** The codec's text for `value`; a codec that returns something else than a string is refused by name. */
export function encodeValue(codec: CacheCodec, value: unknown): string {
  const text: unknown = codec.encode(value);
  if (typeof text !== 'string') throw new ConfigError('codec.encode', `must return a string, got ${text === null ? 'null' : typeof text}`);
  return text;
}

async function callLoader<T>(c: LoadContext, key: string, loader: CacheLoader<T>, o: ResolvedGetOrLoadOptions, stop: AbortSignal | undefined): Promise<T> {
  if (stop?.aborted) throw stop.reason;
  const controller = new AbortController();
  const started = process.hrtime.bigint();
  const seconds = (): number => Number(process.hrtime.bigint() - started) / 1e9;
  let timer: NodeJS.Timeout | undefined;
  let onStop: (() => void) | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      const error = new CacheLoadTimeoutError(key, o.loadTimeoutMs);
      controller.abort(error);
      reject(error);
    }, o.loadTimeoutMs);
    onStop = () => {
      controller.abort(stop?.reason);
      reject(stop?.reason);
    };
    stop?.addEventListener('abort', onStop, { once: true });
  });
  try {
    const value = await Promise.race([Promise.resolve().then(() => loader({ key, signal: controller.signal })), timeout]);
    c.metrics.rebuild('ok', seconds());
    return value;
  } catch (error) {
    if (stop?.aborted) {
      // Stopped from outside: not the loader's failure.
      c.metrics.rebuild('aborted', seconds());
      throw error;
    }
    c.metrics.rebuild(error instanceof CacheLoadTimeoutError ? 'timeout' : 'error', seconds());
    c.metrics.error('loader');
    throw error;
  } finally {
    clearTimeout(timer);
    if (onStop) stop?.removeEventListener('abort', onStop);
  }
}
