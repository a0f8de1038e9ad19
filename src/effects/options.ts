/**
 * The guard's options, validated up front: {@link createEffectGuard}'s (the store, a
 * metrics registry, the replay horizon and the defaults of every call) and each call's
 * overrides. A bad value is a ConfigError naming the option; durations are milliseconds
 * and say so in their names.
 *
 * The TTL check is the point of `replayHorizonMs`: a key forgotten before the last replay
 * of its event runs the effect again, and a TTL of an hour against replays that come days
 * later is the classic way to get there. Below the horizon a TTL is refused; without a
 * horizon, a TTL under Kafka's default topic retention (7 days: a consumer group reset
 * replays that much) is warned about once.
 */
import type { Registry } from 'prom-client';
import { ConfigError } from '../shared/errors.js';
import { formatDuration } from '../shared/durations.js';
import { isEffectStore, type EffectStore } from './store.js';

/** How one key is reserved, waited for and remembered: the defaults of a guard, or one call's overrides. */
export interface EffectOptions {
  /**
   * How long a confirmed effect is remembered (ms); a duplicate within it is skipped, one
   * after it runs the effect again. Keep it at least as long as the replay horizon: the
   * longest time after which the same event can come again (the topic's retention, the
   * consumer's processed_messages retention, the oldest dead letter anyone may replay).
   * Default 1209600000 (14 days, the consumer's default purge retention).
   */
  ttlMs?: number;
  /**
   * How long a reservation lives without renewal (ms). The guard renews it every third of
   * this while the effect runs, so a slow effect keeps it; an attempt that crashes leaves
   * it to expire at most this long after its last renewal, and the next attempt takes it
   * over and runs the effect again. Default 30000.
   */
  reservationMs?: number;
  /** How long a duplicate waits for the attempt holding the key before EffectBusyError (ms). Default `reservationMs`. */
  waitMs?: number;
  /**
   * What a duplicate does while another attempt holds the key: `'wait'` (default) until
   * it is done (skipped), released or expired (reserved), or `waitMs` passes; `'skip'`
   * returns at once with `{ status: 'skipped', reason: 'in-progress' }`: only where that
   * other attempt is sure to be retried if it fails (its message will be redelivered).
   */
  onBusy?: 'wait' | 'skip';
  /**
   * What happens to a reservation that expired unconfirmed (its attempt crashed or
   * stalled mid-effect, which may or may not have happened): `'retry'` (default) takes it
   * over and runs the effect again, at least once; `'fail'` leaves it and throws
   * EffectInDoubtError (not retriable) for an operator to decide: at most once.
   */
  inDoubt?: 'retry' | 'fail';
}

/** Options of {@link createEffectGuard}. */
export interface EffectGuardOptions {
  /** Where keys are kept: {@link redisEffectStore} or {@link postgresEffectStore}. */
  store: EffectStore;
  /** The `guard` label of the metrics: lower case letters, digits and `_`, at most 40. Default `'default'`. */
  name?: string;
  /** Where the `outbox_effect_*` metrics go. Omitted: no metrics. */
  registry?: Registry;
  /**
   * The longest time after which an event can come again (ms): a replay, a consumer group
   * reset, a dead letter replayed. With it, every `ttlMs` (the defaults', each call's)
   * below it is refused with a ConfigError. Without it, a `ttlMs` under 7 days is warned
   * about (process warning `OUTBOX_EFFECT_TTL`).
   */
  replayHorizonMs?: number;
  /** Defaults of every `once` call. */
  defaults?: EffectOptions;
}

/** Every call setting, resolved. */
export type ResolvedEffectOptions = Required<EffectOptions>;

/** The guard's settings, resolved. */
export interface ResolvedGuardOptions {
  store: EffectStore;
  name: string;
  registry: Registry | undefined;
  replayHorizonMs: number | undefined;
  defaults: ResolvedEffectOptions;
}

/** Ten years: no TTL or horizon of the guard needs more. */
const MAX_MS = 10 * 365 * 24 * 3600 * 1000;
/** Kafka's default topic retention: a consumer group reset replays this much. */
const WARN_BELOW_MS = 7 * 24 * 3600 * 1000;
const DEFAULT_TTL_MS = 14 * 24 * 3600 * 1000;

function duration(setting: string, value: unknown, min: number, max = MAX_MS): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new ConfigError(setting, `must be a whole number of milliseconds from ${min} to ${max}, got ${String(value)}`);
  }
  return value;
}

function ttlBelowHorizon(setting: string, ttlMs: number, horizonMs: number): ConfigError {
  return new ConfigError(
    setting,
    `${formatDuration(ttlMs)} is shorter than replayHorizonMs (${formatDuration(horizonMs)}): an event that comes again after its key is forgotten runs its effect again; keep ttlMs at least the replay horizon`,
  );
}

const EFFECT_OPTIONS = new Set(['ttlMs', 'reservationMs', 'waitMs', 'onBusy', 'inDoubt']);

/** Validates a call's overrides (or the guard's defaults, with `base` undefined). */
export function resolveEffectOptions(options: EffectOptions | undefined, base: ResolvedEffectOptions | undefined, horizonMs: number | undefined, where: string): ResolvedEffectOptions {
  const o = options ?? {};
  if (typeof o !== 'object' || o === null) throw new ConfigError(where, 'options must be an object');
  for (const k of Object.keys(o)) if (!EFFECT_OPTIONS.has(k)) throw new ConfigError(`${where}.${k}`, `is not an option (they are ${[...EFFECT_OPTIONS].join(', ')})`);
  const reservationMs = o.reservationMs === undefined ? (base?.reservationMs ?? 30_000) : duration(`${where}.reservationMs`, o.reservationMs, 100, 3_600_000);
  const ttlMs = o.ttlMs === undefined ? (base?.ttlMs ?? DEFAULT_TTL_MS) : duration(`${where}.ttlMs`, o.ttlMs, 1_000);
  if (ttlMs < reservationMs) throw new ConfigError(`${where}.ttlMs`, `${ttlMs} is below reservationMs (${reservationMs}): a reservation must not be forgotten before it expires`);
  if (horizonMs !== undefined && ttlMs < horizonMs) throw ttlBelowHorizon(`${where}.ttlMs`, ttlMs, horizonMs);
  // waitMs follows reservationMs unless set (here or in the defaults): by then a dead holder's reservation has expired.
  const waitMs = o.waitMs !== undefined ? duration(`${where}.waitMs`, o.waitMs, 0, 3_600_000) : o.reservationMs !== undefined || !base ? reservationMs : base.waitMs;
  const onBusy = o.onBusy ?? base?.onBusy ?? 'wait';
  if (onBusy !== 'wait' && onBusy !== 'skip') throw new ConfigError(`${where}.onBusy`, `must be 'wait' or 'skip', got ${String(onBusy)}`);
  const inDoubt = o.inDoubt ?? base?.inDoubt ?? 'retry';
  if (inDoubt !== 'retry' && inDoubt !== 'fail') throw new ConfigError(`${where}.inDoubt`, `must be 'retry' or 'fail', got ${String(inDoubt)}`);
  return { ttlMs, reservationMs, waitMs, onBusy, inDoubt };
}

const GUARD_OPTIONS = new Set(['store', 'name', 'registry', 'replayHorizonMs', 'defaults']);

/**
 * Validates {@link EffectGuardOptions}; throws ConfigError naming the first bad option.
 * Warns (once, a process warning) when there is no replay horizon and the default TTL is
 * under 7 days.
 */
export function resolveGuardOptions(options: EffectGuardOptions): ResolvedGuardOptions {
  if (typeof options !== 'object' || options === null) throw new ConfigError('effect guard', 'options must be an object');
  for (const k of Object.keys(options)) if (!GUARD_OPTIONS.has(k)) throw new ConfigError(k, `is not an option of createEffectGuard (they are ${[...GUARD_OPTIONS].join(', ')})`);
  if (!isEffectStore(options.store)) throw new ConfigError('store', 'must be an effect store: redisEffectStore(client) or postgresEffectStore(pool)');
  const name = options.name ?? 'default';
  if (typeof name !== 'string' || !/^[a-z][a-z0-9_]{0,39}$/.test(name)) throw new ConfigError('name', `must be lower case letters, digits and _ (at most 40, a letter first), got ${JSON.stringify(name)}`);
  const registry = options.registry;
  if (registry !== undefined && typeof (registry as { getSingleMetric?: unknown } | null)?.getSingleMetric !== 'function') throw new ConfigError('registry', 'must be a prom-client Registry');
  const replayHorizonMs = options.replayHorizonMs === undefined ? undefined : duration('replayHorizonMs', options.replayHorizonMs, 1);
  const defaults = resolveEffectOptions(options.defaults, undefined, replayHorizonMs, 'defaults');
  if (replayHorizonMs === undefined && defaults.ttlMs < WARN_BELOW_MS) {
    process.emitWarning(
      `effect guard "${name}": defaults.ttlMs is ${formatDuration(defaults.ttlMs)}, under 7 days (Kafka's default topic retention, what a consumer group reset replays), and no replayHorizonMs is set: an event that comes again after its key is forgotten runs its effect again. Set replayHorizonMs to have ttlMs checked against it.`,
      { code: 'OUTBOX_EFFECT_TTL' },
    );
  }
  return { store: options.store, name, registry, replayHorizonMs, defaults };
}
