/**
 * The cache's options, validated up front: {@link createCache}'s options (the client, a
 * key prefix, a metrics registry and the defaults of every call) and each call's
 * overrides. A bad value is a ConfigError naming the option; durations are milliseconds
 * and say so in their names.
 */
import type { Registry } from 'prom-client';
import { ConfigError } from '../shared/errors.js';
import type { CacheRedisClient } from './redisClient.js';

/** An entry's version: a non-negative integer (a row version, an outbox id, an event sequence). */
export type CacheVersion = number | bigint;

/** How values become Redis strings and back. The default is JSON. */
export interface CacheCodec {
  encode(value: unknown): string;
  decode(text: string): unknown;
}

/** How a key is read, loaded and kept: the defaults of a cache, or one call's overrides. */
export interface GetOrLoadOptions<T = unknown> {
  /** How long a loaded value is fresh, at most (the jitter shortens it). Default 60000. */
  ttlMs?: number;
  /** Fraction of `ttlMs` taken off at random, 0 ≤ jitter < 1, so hot keys do not expire together. Default 0.1. */
  jitter?: number;
  /**
   * How long after its fresh time a value is still served while one caller rebuilds it.
   * The entry stays in Redis for ttl + staleForMs. Default 0 (no stale serving).
   */
  staleForMs?: number;
  /** Lifetime of the rebuild lock: a holder that dies or hangs loses it after this long. Default 5000. */
  lockTtlMs?: number;
  /** How long a caller that finds a key missing and locked waits for the holder's value. Default `lockTtlMs`. */
  waitMs?: number;
  /** What a caller does when `waitMs` passes: `'throw'` a retriable CacheWaitTimeoutError (default) or `'load'` itself, without the lock. */
  onWaitTimeout?: 'throw' | 'load';
  /** A loader still running after this long is aborted and its callers get CacheLoadTimeoutError. Default `lockTtlMs`. */
  loadTimeoutMs?: number;
  /**
   * The version of a loaded value (for example its row's version column). With it, a fill
   * is a versioned write: it never replaces a newer entry or a newer invalidation. Without
   * it, a fill never replaces an entry or an invalidation that carries a version.
   */
  versionOf?: (value: T) => CacheVersion;
}

/** Options of {@link createCache}. */
export interface CacheOptions {
  /** A connected node-redis client (or anything with its `sendCommand`). */
  client: CacheRedisClient;
  /** Prefix of every Redis key this cache writes, e.g. `'app:profiles:'`. Default `''`. */
  prefix?: string;
  /** The `cache` label of the metrics: lower case letters, digits and `_`, at most 40. Default `'default'`. */
  name?: string;
  /** Where the `outbox_cache_*` metrics go. Omitted: no metrics. */
  registry?: Registry;
  /** Values to Redis strings and back. Default JSON. */
  codec?: CacheCodec;
  /** How long `invalidate(key, version)` remembers the version it invalidated at. Default 600000 (10 minutes). */
  tombstoneTtlMs?: number;
  /**
   * How long the cache waits for any one Redis reply, whatever the client's own timeouts
   * and reconnect settings: past it the command counts as failed (getOrLoad calls the
   * loader without the cache; setIfNewer, invalidate and peek throw CacheRedisError).
   * Default 1000.
   */
  redisTimeoutMs?: number;
  /** Defaults of every getOrLoad call. */
  defaults?: Omit<GetOrLoadOptions, 'versionOf'>;
}

/** Every getOrLoad setting, resolved. */
export interface ResolvedGetOrLoadOptions {
  ttlMs: number;
  jitter: number;
  staleForMs: number;
  lockTtlMs: number;
  waitMs: number;
  onWaitTimeout: 'throw' | 'load';
  loadTimeoutMs: number;
  versionOf: ((value: unknown) => CacheVersion) | undefined;
}

/** The cache's settings, resolved. */
export interface ResolvedCacheOptions {
  client: CacheRedisClient;
  prefix: string;
  name: string;
  registry: Registry | undefined;
  codec: CacheCodec;
  tombstoneTtlMs: number;
  redisTimeoutMs: number;
  defaults: ResolvedGetOrLoadOptions;
}

const JSON_CODEC: CacheCodec = {
  encode: (value) => {
    const text = JSON.stringify(value);
    if (text === undefined) throw new TypeError('cache: the value has no JSON form (undefined, a function or a symbol); to drop an entry use invalidate(key, version)');
    return text;
  },
  decode: (text) => JSON.parse(text) as unknown,
};

/** A year: no duration of the cache needs more. */
const MAX_MS = 365 * 24 * 3600 * 1000;

/** A whole number of milliseconds from `min` to a year, or a ConfigError naming `setting`. */
export function duration(setting: string, value: unknown, min: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > MAX_MS) {
    throw new ConfigError(setting, `must be a whole number of milliseconds from ${min} to ${MAX_MS}, got ${String(value)}`);
  }
  return value;
}

/** Validates a call's overrides on top of `base` (the cache's defaults, or the built-in ones). */
export function resolveGetOrLoadOptions(options: GetOrLoadOptions<never> | undefined, base?: ResolvedGetOrLoadOptions, where = 'getOrLoad'): ResolvedGetOrLoadOptions {
  const o = (options ?? {}) as GetOrLoadOptions;
  if (typeof o !== 'object' || o === null) throw new ConfigError(where, 'options must be an object');
  const known = new Set(['ttlMs', 'jitter', 'staleForMs', 'lockTtlMs', 'waitMs', 'onWaitTimeout', 'loadTimeoutMs', 'versionOf']);
  for (const k of Object.keys(o)) if (!known.has(k)) throw new ConfigError(`${where}.${k}`, 'is not an option');
  const ttlMs = o.ttlMs === undefined ? (base?.ttlMs ?? 60_000) : duration(`${where}.ttlMs`, o.ttlMs, 1);
  const jitter = o.jitter === undefined ? (base?.jitter ?? 0.1) : o.jitter;
  if (typeof jitter !== 'number' || !(jitter >= 0 && jitter < 1)) throw new ConfigError(`${where}.jitter`, `must be a number from 0 to below 1, got ${String(jitter)}`);
  const staleForMs = o.staleForMs === undefined ? (base?.staleForMs ?? 0) : duration(`${where}.staleForMs`, o.staleForMs, 0);
  const lockTtlMs = o.lockTtlMs === undefined ? (base?.lockTtlMs ?? 5_000) : duration(`${where}.lockTtlMs`, o.lockTtlMs, 10);
  // waitMs and loadTimeoutMs follow lockTtlMs unless set (here or in the defaults).
  const lockChanged = o.lockTtlMs !== undefined;
  const waitMs = o.waitMs !== undefined ? duration(`${where}.waitMs`, o.waitMs, 0) : lockChanged || !base ? lockTtlMs : base.waitMs;
  const loadTimeoutMs = o.loadTimeoutMs !== undefined ? duration(`${where}.loadTimeoutMs`, o.loadTimeoutMs, 1) : lockChanged || !base ? lockTtlMs : base.loadTimeoutMs;
  const onWaitTimeout = o.onWaitTimeout ?? base?.onWaitTimeout ?? 'throw';
  if (onWaitTimeout !== 'throw' && onWaitTimeout !== 'load') throw new ConfigError(`${where}.onWaitTimeout`, `must be 'throw' or 'load', got ${String(onWaitTimeout)}`);
  if (o.versionOf !== undefined && typeof o.versionOf !== 'function') throw new ConfigError(`${where}.versionOf`, 'must be a function');
  return { ttlMs, jitter, staleForMs, lockTtlMs, waitMs, onWaitTimeout, loadTimeoutMs, versionOf: o.versionOf ?? base?.versionOf };
}

const CACHE_OPTIONS = new Set(['client', 'prefix', 'name', 'registry', 'codec', 'tombstoneTtlMs', 'redisTimeoutMs', 'defaults']);

/** Validates {@link CacheOptions}; throws ConfigError naming the first bad option. */
export function resolveCacheOptions(options: CacheOptions): ResolvedCacheOptions {
  if (typeof options !== 'object' || options === null) throw new ConfigError('cache', 'options must be an object');
  for (const k of Object.keys(options)) if (!CACHE_OPTIONS.has(k)) throw new ConfigError(k, `is not an option of createCache (they are ${[...CACHE_OPTIONS].join(', ')})`);
  const { client } = options;
  if (typeof client !== 'object' || client === null || typeof (client as { sendCommand?: unknown }).sendCommand !== 'function') {
    throw new ConfigError('client', 'must be a connected Redis client with sendCommand (node-redis createClient())');
  }
  const prefix = options.prefix ?? '';
  if (typeof prefix !== 'string' || prefix.length > 200) throw new ConfigError('prefix', 'must be a string of at most 200 characters');
  const name = options.name ?? 'default';
  if (typeof name !== 'string' || !/^[a-z][a-z0-9_]{0,39}$/.test(name)) throw new ConfigError('name', `must be lower case letters, digits and _ (at most 40, a letter first), got ${JSON.stringify(name)}`);
  const codec = options.codec ?? JSON_CODEC;
  if (typeof codec?.encode !== 'function' || typeof codec?.decode !== 'function') throw new ConfigError('codec', 'must have encode and decode functions');
  const registry = options.registry;
  if (registry !== undefined && typeof (registry as { getSingleMetric?: unknown } | null)?.getSingleMetric !== 'function') throw new ConfigError('registry', 'must be a prom-client Registry');
  const tombstoneTtlMs = options.tombstoneTtlMs === undefined ? 600_000 : duration('tombstoneTtlMs', options.tombstoneTtlMs, 1);
  const redisTimeoutMs = options.redisTimeoutMs === undefined ? 1_000 : duration('redisTimeoutMs', options.redisTimeoutMs, 1);
  const d = options.defaults as GetOrLoadOptions | undefined;
  if (d !== undefined && (typeof d !== 'object' || d === null)) throw new ConfigError('defaults', 'must be an object');
  if (d && 'versionOf' in d) throw new ConfigError('defaults.versionOf', 'is per call (it depends on the value loaded)');
  const defaults = resolveGetOrLoadOptions(d, undefined, 'defaults');
  return { client, prefix, name, registry, codec, tombstoneTtlMs, redisTimeoutMs, defaults };
}

/** The decimal form of a version; throws ConfigError unless it is a non-negative integer. */
export function versionText(version: CacheVersion, setting = 'version'): string {
  if (typeof version === 'bigint' && version >= 0n) return version.toString();
  if (typeof version === 'number' && Number.isSafeInteger(version) && version >= 0) return String(version);
  throw new ConfigError(setting, `must be a non-negative integer (a safe integer or a bigint), got ${String(version)}`);
}
