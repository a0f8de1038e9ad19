/**
 * createEffectGuard: a per-effect idempotency guard for effects outside Postgres (an HTTP
 * call, an email), on a shared store (src/effects/redisStore.ts, postgresStore.ts).
 *
 * `once(key, effect)`: reserve the key (an owner token with an expiry), run the effect
 * while renewing the reservation, confirm it only if the token still holds the
 * reservation (a confirmation lands anyway otherwise: the effect did happen). A
 * duplicate finds the key done and skips, or finds it reserved and waits (or skips, with
 * `onBusy: 'skip'`); never do two live attempts run one key's effect at once. An effect
 * that throws releases the key, so a retry runs it. An attempt that crashes between
 * reserve and confirm leaves its reservation to expire after `reservationMs`, and the
 * next attempt takes it over: the effect is retried, never silently dropped, with the same
 * idempotency key handed downstream, which makes the retry harmless where the downstream
 * service honours it. docs/effects.md states the guarantees.
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { OutboxError } from '../shared/errors.js';
import { EffectBusyError, EffectInDoubtError, EffectStoreError } from './errors.js';
import { checkKey, downstreamKey } from './key.js';
import { effectRecorder, type EffectRecorder } from './metrics.js';
import { resolveEffectOptions, resolveGuardOptions, type EffectGuardOptions, type EffectOptions, type ResolvedEffectOptions } from './options.js';
import { HeldReservation } from './reservation.js';
import type { EffectRecord, EffectStore } from './store.js';

/** What an effect gets: its key, the form of it to send downstream, and a signal. */
export interface EffectContext {
  /** The effect's key, as given to `once`. */
  key: string;
  /**
   * The key to hand the downstream service so it can deduplicate retries (an HTTP
   * `Idempotency-Key` header, a provider's idempotency token): the key itself when it is
   * 1-255 visible ASCII characters, else `sha256:<base64url digest>`. The same on every
   * attempt at this effect.
   */
  idempotencyKey: string;
  /**
   * Aborted (reason: EffectReservationLostError) when this attempt may have lost the key's
   * reservation (it could not renew it in time, or it expired and was taken over): another
   * attempt may now run the effect. Pass it on (`fetch(url, { signal })`).
   */
  signal: AbortSignal;
  /**
   * True when this attempt took over the expired reservation of an earlier attempt that
   * neither confirmed nor released it (it crashed or stalled mid-effect): the effect may
   * have happened already, in part or in full.
   */
  tookOver: boolean;
}

/** An effect the guard runs: its value (or promise of one) is returned by `once`. */
export type Effect<T> = (context: EffectContext) => Promise<T> | T;

/** What {@link EffectGuard.once} did. */
export type EffectResult<T> =
  | {
      status: 'ran';
      /** What the effect returned. */
      value: T;
      /**
       * True when the store recorded it as done. False when the confirmation failed (the
       * store did not answer): the reservation then expires after `reservationMs`, and
       * a later attempt at the same key would run the effect again.
       */
      confirmed: boolean;
      /** True when this attempt took over an earlier, unconfirmed attempt's expired reservation. */
      tookOver: boolean;
    }
  | {
      status: 'skipped';
      /** `done`: the effect was confirmed before; `in-progress`: another attempt holds it (with `onBusy: 'skip'`). */
      reason: 'done' | 'in-progress';
    };

/** A per-effect idempotency guard. Made by {@link createEffectGuard}. */
export interface EffectGuard {
  /** The guard's name (the `guard` label of its metrics). */
  readonly name: string;
  /**
   * Runs `effect` unless the effect of `key` is done already: at most one live attempt
   * at a time per key, across every process sharing the store. Options override the
   * guard's defaults for this call.
   *
   * Resolves with `{ status: 'ran', value, confirmed, tookOver }` or `{ status: 'skipped', reason }`.
   * Rejects with the effect's own error (unwrapped; the reservation is released, so a
   * retry runs the effect), EffectBusyError (another attempt held the key for all of
   * `waitMs`; retriable), EffectStoreError (the store failed before the effect ran; it
   * did not run; retriable), EffectInDoubtError (`inDoubt: 'fail'`), EffectKeyError or
   * ConfigError (a bad key or option; nothing was touched).
   */
  once<T>(key: string, effect: Effect<T>, options?: EffectOptions): Promise<EffectResult<T>>;
  /** The key's record (reserved or done, with its times), or undefined; for operators and tests. */
  inspect(key: string): Promise<EffectRecord | undefined>;
  /**
   * Forgets the key, reserved or done, so that the next attempt runs the effect: after an
   * EffectInDoubtError was checked downstream and found not done, or to redo an effect on
   * purpose. True when there was a record.
   */
  forget(key: string): Promise<boolean>;
}

/** Store calls the guard retries once it has run the effect: its record matters then. */
const CONFIRM_ATTEMPTS = 3;

/**
 * Makes an {@link EffectGuard} on a store. Throws ConfigError for a bad option, or a
 * `ttlMs` below `replayHorizonMs`. Several guards may share a store and a registry.
 */
export function createEffectGuard(options: EffectGuardOptions): EffectGuard {
  const o = resolveGuardOptions(options);
  const metrics = effectRecorder(o.registry, o.name);
  const { store } = o;
  return {
    name: o.name,
    async once<T>(key: string, effect: Effect<T>, callOptions?: EffectOptions): Promise<EffectResult<T>> {
      checkKey(key);
      if (typeof effect !== 'function') throw new TypeError('effect guard: effect must be a function');
      const resolved = callOptions === undefined ? o.defaults : resolveEffectOptions(callOptions, o.defaults, o.replayHorizonMs, 'once');
      return reserveThenRun(store, metrics, key, effect, resolved);
    },
    inspect: (key) => storeCall('inspect', key, () => store.inspect(key)),
    forget: (key) => storeCall('forget', key, () => store.forget(key)),
  };
}

/** An operator's call on the store for `key`: the key checked, a failure as EffectStoreError. */
async function storeCall<T>(operation: string, key: string, call: () => Promise<T>): Promise<T> {
  checkKey(key);
  try {
    return await call();
  } catch (error) {
    throw new EffectStoreError(operation, key, error);
  }
}

async function reserveThenRun<T>(store: EffectStore, metrics: EffectRecorder, key: string, effect: Effect<T>, o: ResolvedEffectOptions): Promise<EffectResult<T>> {
  const token = randomUUID();
  const waitUntil = performance.now() + o.waitMs;
  let waited = false;
  let pollMs = 5;
  for (;;) {
    const sentAt = performance.now();
    let found;
    try {
      found = await store.reserve(key, token, { reservationMs: o.reservationMs, ttlMs: o.ttlMs, takeOver: o.inDoubt === 'retry' });
    } catch (error) {
      metrics.storeError('reserve');
      // A store that can never work as it is (its table not migrated: SchemaError) says so as it is.
      if (error instanceof OutboxError && !error.retriable) throw error;
      throw new EffectStoreError('reserve', key, error);
    }
    switch (found.state) {
      case 'done':
        if (waited) metrics.wait('done');
        metrics.skip('done');
        return { status: 'skipped', reason: 'done' };
      case 'reserved':
      case 'taken_over': {
        if (waited) metrics.wait('free');
        const tookOver = found.state === 'taken_over';
        metrics.reservation(tookOver ? 'taken_over' : 'new');
        return run(store, metrics, key, token, effect, o, sentAt, tookOver);
      }
      case 'in_doubt':
        metrics.reservation('in_doubt');
        throw new EffectInDoubtError(key, found.expiredForMs);
      case 'busy': {
        if (o.onBusy === 'skip') {
          metrics.skip('in_progress');
          return { status: 'skipped', reason: 'in-progress' };
        }
        const left = waitUntil - performance.now();
        if (left <= 0) {
          metrics.wait('timeout');
          throw new EffectBusyError(key, o.waitMs);
        }
        waited = true;
        // Poll: the holder's renewals push its expiry on, so the remaining time is a ceiling, not a schedule.
        await sleep(Math.max(1, Math.min(pollMs, left, found.remainingMs > 0 ? found.remainingMs : pollMs)));
        pollMs = Math.min(pollMs * 2, 100);
      }
    }
  }
}

async function run<T>(store: EffectStore, metrics: EffectRecorder, key: string, token: string, effect: Effect<T>, o: ResolvedEffectOptions, reserveSentAt: number, tookOver: boolean): Promise<EffectResult<T>> {
  const held = new HeldReservation(store, key, token, o, reserveSentAt, metrics);
  const started = performance.now();
  let value: T;
  try {
    value = await Promise.resolve().then(() => effect({ key, idempotencyKey: downstreamKey(key), signal: held.signal, tookOver }));
  } catch (error) {
    await held.stop();
    metrics.run('failed', (performance.now() - started) / 1000);
    // Released, so a retry runs it; if the release fails, the reservation expires instead.
    await store.release(key, token).catch(() => metrics.storeError('release'));
    throw error;
  }
  const seconds = (performance.now() - started) / 1000;
  await held.stop();
  for (let attempt = 1; ; attempt++) {
    try {
      const outcome = await store.confirm(key, token, { ttlMs: o.ttlMs });
      // Not held: another attempt took the key over meanwhile and may have run the effect too; the
      // confirmation stands. Done already, on a retry: most likely this confirmation's earlier try.
      if (outcome === 'unheld' || (outcome === 'done' && attempt === 1)) held.lostAtConfirm();
      metrics.run('confirmed', seconds);
      return { status: 'ran', value, confirmed: true, tookOver };
    } catch {
      metrics.storeError('confirm');
      if (attempt >= CONFIRM_ATTEMPTS) break;
      await sleep(50 * attempt);
    }
  }
  metrics.run('unconfirmed', seconds);
  return { status: 'ran', value, confirmed: false, tookOver };
}
