/**
 * The options of prewarming (prewarm.ts, prewarmer.ts), validated up front like every
 * option of the cache: a bad value, or a name that is not an option, is a ConfigError
 * naming it (`prewarm.concurrency`, `prewarmer.intervalMs`), before Redis is touched.
 */
import { ConfigError } from '../shared/errors.js';
import type { CacheLoader } from './getOrLoad.js';
import { duration, resolveGetOrLoadOptions, type GetOrLoadOptions, type ResolvedGetOrLoadOptions } from './options.js';

/**
 * How one prewarm pass loads and writes: the getOrLoad options that apply to a load
 * (`waitMs` and `onWaitTimeout` do not: a prewarm never waits for another's rebuild), and
 * its own.
 */
export interface PrewarmOptions<T = unknown> extends Omit<GetOrLoadOptions<T>, 'waitMs' | 'onWaitTimeout'> {
  /** Keys worked on at once, at most (so at most this many loader calls run at once). 1 to 256; default 4. */
  concurrency?: number;
  /**
   * A key is loaded when it has no value, or when its value has at most this long left
   * of its fresh time (a value in its stale window has none left). Must be below the
   * shortest fresh time of a fill, `ttlMs × (1 − jitter)`. Default: 0 for
   * `cache.prewarm` (only keys without a fresh value), twice `intervalMs` for a prewarmer.
   */
  refreshAheadMs?: number;
  /**
   * Stops the pass: no further key is started, a running loader's signal is aborted and
   * its key left (`unfinished`); the pass resolves once its Redis commands in flight
   * have answered or given up (`redisTimeoutMs`).
   */
  signal?: AbortSignal;
}

/**
 * The hot keys of a prewarmer: a list, or a function that returns one for each pass (a
 * query of the hottest keys, say). The function gets a signal aborted by `stop()`.
 */
export type PrewarmKeys = readonly string[] | ((context: { signal: AbortSignal }) => Promise<readonly string[]> | readonly string[]);

/** Options of {@link createPrewarmer}: what to keep warm, how often to look, and how each pass loads. */
export interface PrewarmerOptions<T = unknown> extends Omit<PrewarmOptions<T>, 'signal'> {
  /** The hot keys: a list, or a function giving the list for each pass. */
  keys: PrewarmKeys;
  /** Loads a key's value from the source of truth, as getOrLoad's loader does. */
  loader: CacheLoader<T>;
  /** Pause between the end of a pass and the start of the next. 10 ms to a year; default 5000. */
  intervalMs?: number;
}

/** A pass's settings, resolved. */
export interface ResolvedPrewarmOptions {
  load: ResolvedGetOrLoadOptions;
  concurrency: number;
  refreshAheadMs: number;
  signal: AbortSignal | undefined;
}

/** A prewarmer's settings, resolved (its passes get their signal from stop()). */
export interface ResolvedPrewarmerOptions {
  keys: PrewarmKeys;
  loader: CacheLoader<unknown>;
  intervalMs: number;
  pass: ResolvedPrewarmOptions;
}

const LOAD_OPTIONS = ['ttlMs', 'jitter', 'staleForMs', 'lockTtlMs', 'loadTimeoutMs', 'versionOf'];
const PREWARM_OPTIONS = new Set([...LOAD_OPTIONS, 'concurrency', 'refreshAheadMs', 'signal']);
const PREWARMER_OPTIONS = new Set([...LOAD_OPTIONS, 'concurrency', 'refreshAheadMs', 'keys', 'loader', 'intervalMs']);

function refuseUnknown(o: object, known: Set<string>, where: string): void {
  for (const k of Object.keys(o)) {
    if (k === 'waitMs' || k === 'onWaitTimeout') throw new ConfigError(`${where}.${k}`, "is not an option of a prewarm: a prewarm never waits for another's rebuild, it leaves the key to it (outcome busy)");
    if (!known.has(k)) throw new ConfigError(`${where}.${k}`, `is not an option (they are ${[...known].join(', ')})`);
  }
}

function resolvePass(o: Record<string, unknown>, defaults: ResolvedGetOrLoadOptions, where: string, refreshAheadDefault: number): ResolvedPrewarmOptions {
  const loadOptions = Object.fromEntries(LOAD_OPTIONS.filter((k) => o[k] !== undefined).map((k) => [k, o[k]]));
  const load = resolveGetOrLoadOptions(loadOptions as GetOrLoadOptions<never>, defaults, where);
  const concurrency = o.concurrency ?? 4;
  if (typeof concurrency !== 'number' || !Number.isInteger(concurrency) || concurrency < 1 || concurrency > 256) {
    throw new ConfigError(`${where}.concurrency`, `must be a whole number from 1 to 256, got ${String(concurrency)}`);
  }
  const refreshAheadMs = o.refreshAheadMs === undefined ? refreshAheadDefault : duration(`${where}.refreshAheadMs`, o.refreshAheadMs, 0);
  // A fill is fresh for ttlMs less up to `jitter` of it: a window at least that long would
  // find a key due again as soon as it was written, and reload it every pass.
  const shortestFreshMs = Math.floor(load.ttlMs * (1 - load.jitter));
  if (refreshAheadMs >= shortestFreshMs) {
    throw new ConfigError(`${where}.refreshAheadMs`, `must be below the shortest fresh time of a fill, ttlMs × (1 − jitter) = ${shortestFreshMs} ms, or every pass reloads every key; got ${refreshAheadMs}${o.refreshAheadMs === undefined ? ' (the default)' : ''}`);
  }
  return { load, concurrency, refreshAheadMs, signal: undefined };
}

function asObject(options: unknown, where: string): Record<string, unknown> {
  if (typeof options !== 'object' || options === null) throw new ConfigError(where, 'options must be an object');
  return options as Record<string, unknown>;
}

/** Validates one pass's options on top of the cache's defaults; throws ConfigError naming the first bad one. */
export function resolvePrewarmOptions(options: unknown, defaults: ResolvedGetOrLoadOptions): ResolvedPrewarmOptions {
  const o = asObject(options ?? {}, 'prewarm');
  refuseUnknown(o, PREWARM_OPTIONS, 'prewarm');
  const pass = resolvePass(o, defaults, 'prewarm', 0);
  const signal = o.signal;
  if (signal !== undefined && !(signal instanceof AbortSignal)) throw new ConfigError('prewarm.signal', 'must be an AbortSignal');
  return { ...pass, signal };
}

/** Validates a prewarmer's options on top of the cache's defaults; throws ConfigError naming the first bad one. */
export function resolvePrewarmerOptions(options: unknown, defaults: ResolvedGetOrLoadOptions): ResolvedPrewarmerOptions {
  const o = asObject(options, 'prewarmer');
  refuseUnknown(o, PREWARMER_OPTIONS, 'prewarmer');
  const keys = o.keys;
  if (typeof keys !== 'function') checkKeys(keys, 'prewarmer.keys');
  if (typeof o.loader !== 'function') throw new ConfigError('prewarmer.loader', 'must be a function ({ key, signal }) => value');
  const intervalMs = o.intervalMs === undefined ? 5_000 : duration('prewarmer.intervalMs', o.intervalMs, 10);
  const pass = resolvePass(o, defaults, 'prewarmer', 2 * intervalMs);
  if (pass.refreshAheadMs <= intervalMs) {
    throw new ConfigError('prewarmer.refreshAheadMs', `must be above intervalMs (${intervalMs} ms): a key is looked at once per interval, so a shorter window can pass between two looks and the key expire unrefreshed; got ${pass.refreshAheadMs}`);
  }
  return { keys: typeof keys === 'function' ? (keys as PrewarmKeys) : [...new Set(keys as string[])], loader: o.loader as CacheLoader<unknown>, intervalMs, pass };
}

/** The distinct keys of `keys`; a ConfigError naming `setting` unless it is a list of non-empty strings. */
export function checkKeys(keys: unknown, setting: string): string[] {
  if (!Array.isArray(keys)) throw new ConfigError(setting, `must be a list of keys, got ${keys === null ? 'null' : typeof keys}`);
  keys.forEach((k: unknown, i) => {
    if (typeof k !== 'string' || k.length === 0) throw new ConfigError(setting, `must hold non-empty strings; item ${i} is ${typeof k === 'string' ? 'empty' : typeof k}`);
  });
  return [...new Set(keys as string[])];
}
