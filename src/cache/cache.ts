/**
 * createCache: the cache helper for services (typically Kafka consumers) that keep a
 * Redis cache of what their database holds. It ties the pieces of src/cache/ together:
 * options.ts (validated up front), entry.ts (how an entry lies in Redis), versionedWrite.ts
 * (setIfNewer and invalidate, atomic scripts), lock.ts (the rebuild lock), getOrLoad.ts
 * (single flight, stale serving, bounded waits), prewarm.ts (a pass over hot keys; the
 * periodic prewarmer is prewarmer.ts), metrics.ts (prom-client). It depends on
 * nothing of the relay or the consumer, and the consumer nothing of it.
 */
import { CacheRedisError } from './errors.js';
import { readEntry } from './entry.js';
import { decodeValue, encodeValue, getOrLoad, SingleFlight, type CacheLoader, type LoadContext } from './getOrLoad.js';
import { cacheRecorder } from './metrics.js';
import { resolveCacheOptions, resolveGetOrLoadOptions, versionText, type CacheOptions, type CacheVersion, type GetOrLoadOptions, type ResolvedGetOrLoadOptions } from './options.js';
import { prewarmPass, type PrewarmResult } from './prewarm.js';
import { checkKeys, resolvePrewarmOptions, type PrewarmOptions, type ResolvedPrewarmOptions } from './prewarmOptions.js';
import { boundedClient } from './redisClient.js';
import { deleteEntry, invalidateEntry, writeEntry } from './versionedWrite.js';

/** The rebuild lock of key `k` is `<prefix>k:rebuild-lock`. */
const LOCK_SUFFIX = ':rebuild-lock';
/**
 * Appended to a key that ends like a lock key (or like an escaped key), so that no data
 * key is ever a lock key and two keys never share a data key.
 */
const ESCAPE = '|';

/** The Redis key of an entry: `<prefix>k`, or `<prefix>k|` when `k` ends in `:rebuild-lock` or `|`. */
function dataKeyOf(prefix: string, key: string): string {
  return key.endsWith(LOCK_SUFFIX) || key.endsWith(ESCAPE) ? `${prefix}${key}${ESCAPE}` : `${prefix}${key}`;
}

/** The Redis key of an entry's rebuild lock: `<prefix>k:rebuild-lock` (never a data key). */
function lockKeyOf(prefix: string, key: string): string {
  return `${prefix}${key}${LOCK_SUFFIX}`;
}

/** What {@link Cache.peek} finds at a key. */
export interface CacheEntry<T = unknown> {
  /** The value; undefined for a tombstone (the key was invalidated at `version`). */
  value: T | undefined;
  /** The entry's version; undefined for an unversioned fill. */
  version: bigint | undefined;
  /** False in the stale window. */
  fresh: boolean;
  /** Milliseconds until Redis drops the entry (-1: never). */
  pttlMs: number;
}

/** A Redis cache with versioned writes and stampede-proof reads. Made by {@link createCache}. */
export interface Cache {
  /**
   * The value at `key`: from the cache when fresh (or stale, within `staleForMs`, while
   * one caller rebuilds it), else from `loader`, called once per key across all callers
   * of this process and, through a short Redis lock, of every process. Options override
   * the cache's defaults for this call. A loader's `undefined` (not found) is returned and
   * not cached; return `null` to cache the absence. When Redis fails or does not answer
   * within `redisTimeoutMs`, the loader is called without the cache.
   */
  getOrLoad<T>(key: string, loader: CacheLoader<T>, options?: GetOrLoadOptions<T>): Promise<T>;
  /**
   * Writes `value` at `key` unless the key holds the same or a newer version, atomically
   * in Redis; true when it wrote. Fresh for `ttlMs` (default: the cache's `ttlMs`), then
   * stale for the cache's `staleForMs`. A redelivered or out-of-order older event writes
   * nothing.
   */
  setIfNewer<T>(key: string, value: T, version: CacheVersion, ttlMs?: number): Promise<boolean>;
  /**
   * Drops the value at `key`. With a version, leaves a tombstone that remembers it for
   * `tombstoneTtlMs`, so no older value (a late event, a reader that loaded before the
   * change) can be written back; an entry already at that version or newer stays. True
   * when it removed something or left a tombstone.
   */
  invalidate(key: string, version?: CacheVersion): Promise<boolean>;
  /** The entry at `key` without loading or counting anything; undefined when there is none. */
  peek<T = unknown>(key: string): Promise<CacheEntry<T> | undefined>;
  /**
   * One prewarm pass over `keys`: each key without a value, or with at most
   * `refreshAheadMs` of fresh time left (default 0: only keys without a fresh value), is
   * loaded and written as getOrLoad would, under the same single flight and rebuild lock
   * (a key another caller is rebuilding is left to it) and with the versioned fill (a
   * newer version in the cache stays). At most `concurrency` keys at once. A key that
   * fails is counted and the others go on; a Redis failure ends the pass. Never rejects
   * but for a bad argument (ConfigError, before Redis is touched). For a pass every so
   * often, see createPrewarmer.
   */
  prewarm<T>(keys: readonly string[], loader: CacheLoader<T>, options?: PrewarmOptions<T>): Promise<PrewarmResult>;
  /** Resolves once no load or background refresh of this cache is in flight. */
  whenIdle(): Promise<void>;
}

/** What createPrewarmer needs of a cache beyond its interface: its defaults, and a pass with options already resolved. */
export interface CacheInternals {
  defaults: ResolvedGetOrLoadOptions;
  prewarm(keys: readonly string[], loader: CacheLoader<unknown>, options: ResolvedPrewarmOptions): Promise<PrewarmResult>;
  /** Counts a prewarmer's keys function that failed (outbox_cache_errors_total{operation="keys"}). */
  recordKeysError(): void;
}

/** The internals of every cache createCache made (a cache object alone does not show them). */
export const cacheInternals = new WeakMap<Cache, CacheInternals>();

/**
 * Makes a {@link Cache} on a connected node-redis client. Throws ConfigError for a bad
 * option. Several caches may share a client and a registry (give them different `name`s
 * and `prefix`es).
 */
export function createCache(options: CacheOptions): Cache {
  const o = resolveCacheOptions(options);
  const metrics = cacheRecorder(o.registry, o.name);
  const flights = new SingleFlight();
  const client = boundedClient(o.client, o.redisTimeoutMs);
  const context: LoadContext = {
    client,
    codec: o.codec,
    metrics,
    flights,
    dataKey: (key) => dataKeyOf(o.prefix, key),
    lockKey: (key) => lockKeyOf(o.prefix, key),
  };
  const checkKey = (key: unknown): string => {
    if (typeof key !== 'string' || key.length === 0) throw new TypeError('cache: a key must be a non-empty string');
    return key;
  };
  const cache: Cache = {
    async getOrLoad<T>(key: string, loader: CacheLoader<T>, callOptions?: GetOrLoadOptions<T>): Promise<T> {
      checkKey(key);
      if (typeof loader !== 'function') throw new TypeError('cache: loader must be a function');
      const resolved = callOptions === undefined ? o.defaults : resolveGetOrLoadOptions(callOptions as GetOrLoadOptions<never>, o.defaults);
      return getOrLoad(context, key, loader, resolved);
    },
    async setIfNewer<T>(key: string, value: T, version: CacheVersion, ttlMs?: number): Promise<boolean> {
      checkKey(key);
      const ver = versionText(version);
      const freshMs = ttlMs === undefined ? o.defaults.ttlMs : resolveGetOrLoadOptions({ ttlMs }, o.defaults, 'setIfNewer').ttlMs;
      const text = encodeValue(o.codec, value);
      try {
        const written = await writeEntry(client, context.dataKey(key), { value: text, version: ver, freshMs, staleMs: o.defaults.staleForMs, mode: 'set' });
        metrics.write('set', written);
        return written;
      } catch (error) {
        metrics.error('write');
        throw new CacheRedisError('setIfNewer', key, error);
      }
    },
    async invalidate(key: string, version?: CacheVersion): Promise<boolean> {
      checkKey(key);
      const ver = version === undefined ? undefined : versionText(version);
      try {
        const done = ver === undefined ? await deleteEntry(client, context.dataKey(key)) : await invalidateEntry(client, context.dataKey(key), ver, o.tombstoneTtlMs);
        metrics.write('invalidate', done);
        return done;
      } catch (error) {
        metrics.error('invalidate');
        throw new CacheRedisError('invalidate', key, error);
      }
    },
    async peek<T = unknown>(key: string): Promise<CacheEntry<T> | undefined> {
      checkKey(key);
      let entry;
      try {
        entry = await readEntry(client, context.dataKey(key));
      } catch (error) {
        metrics.error('read');
        throw new CacheRedisError('read', key, error);
      }
      if (!entry) return undefined;
      return {
        value: entry.value === undefined ? undefined : (decodeValue(o.codec, entry.value, key) as T),
        version: entry.version === undefined ? undefined : BigInt(entry.version),
        fresh: entry.fresh,
        pttlMs: entry.pttlMs,
      };
    },
    async prewarm<T>(keys: readonly string[], loader: CacheLoader<T>, callOptions?: PrewarmOptions<T>): Promise<PrewarmResult> {
      const list = checkKeys(keys, 'prewarm.keys');
      if (typeof loader !== 'function') throw new TypeError('cache: loader must be a function');
      return prewarmPass(context, list, loader, resolvePrewarmOptions(callOptions, o.defaults));
    },
    whenIdle: () => flights.idle(),
  };
  cacheInternals.set(cache, {
    defaults: o.defaults,
    prewarm: (keys, loader, resolved) => prewarmPass(context, keys, loader, resolved),
    recordKeysError: () => metrics.error('keys'),
  });
  return cache;
}
