/**
 * What the guard needs of a store: a few atomic operations on one key's record, each
 * decided on the store's own clock (Redis' TIME, Postgres' clock_timestamp()), so the
 * clocks of the processes sharing it do not matter. A key's record is either a
 * reservation (an attempt's token and the moment it expires) or a confirmation (the effect
 * happened); both are forgotten `ttlMs` after they were last written.
 *
 * Two stores implement it: {@link redisEffectStore} and {@link postgresEffectStore}.
 */

/** What {@link EffectStore.reserve} found and did. */
export type ReserveOutcome =
  /** The key was free (never seen, released, or forgotten after its TTL): now reserved for the token. */
  | { state: 'reserved' }
  /** Another attempt's reservation had expired unconfirmed, `expiredForMs` ago: taken over for the token. */
  | { state: 'taken_over'; expiredForMs: number }
  /** Another attempt's reservation had expired unconfirmed, and `takeOver` was false: left as it is. */
  | { state: 'in_doubt'; expiredForMs: number }
  /** Another attempt holds a live reservation, for `remainingMs` more unless it renews it. */
  | { state: 'busy'; remainingMs: number }
  /** The effect is confirmed: done. */
  | { state: 'done' };

/** What {@link EffectStore.confirm} found: see there. */
export type ConfirmOutcome = 'held' | 'unheld' | 'done';

/** A key's record as {@link EffectStore.inspect} reads it. */
export type EffectRecord =
  | {
      state: 'reserved';
      /** Milliseconds until the reservation expires, on the store's clock; 0 or less once it has (then the next attempt takes it over). */
      reservedForMs: number;
      /** Milliseconds until the store forgets the record. */
      expiresInMs: number;
    }
  | {
      state: 'done';
      /** When the effect was confirmed, on the store's clock. */
      confirmedAt: Date;
      /** Milliseconds until the store forgets the record (then the effect would run again). */
      expiresInMs: number;
    };

/**
 * A place to keep effect keys, shared by every process that guards the same effects.
 * Every operation is atomic on one key; none throws for a key's state, only when the store
 * fails (or does not answer within its own timeout).
 */
export interface EffectStore {
  /** Short name for messages: `redis` or `postgres`. */
  readonly kind: string;
  /**
   * Reserves `key` for `token` for `reservationMs` when it is free, or when its
   * reservation expired and `takeOver` is true; the record then lives `ttlMs`.
   */
  reserve(key: string, token: string, o: { reservationMs: number; ttlMs: number; takeOver: boolean }): Promise<ReserveOutcome>;
  /** Extends `token`'s reservation of `key` by `reservationMs` from now; false when `token` no longer holds it. */
  renew(key: string, token: string, o: { reservationMs: number; ttlMs: number }): Promise<boolean>;
  /**
   * Records `key` as done for `ttlMs`, unless it already is: `'held'` when `token` still
   * held the reservation; `'unheld'` when it did not (the reservation expired and was taken
   * over, or was forgotten: the key is done now all the same); `'done'` when the key was
   * done already (another attempt confirmed it, or an earlier try of this confirmation
   * landed), left as it was.
   */
  confirm(key: string, token: string, o: { ttlMs: number }): Promise<ConfirmOutcome>;
  /** Drops `token`'s reservation of `key` (the effect failed: the next attempt runs it); false when `token` did not hold it. */
  release(key: string, token: string): Promise<boolean>;
  /** `key`'s record, or undefined when there is none. */
  inspect(key: string): Promise<EffectRecord | undefined>;
  /** Forgets `key`, reserved or done; true when there was a record. */
  forget(key: string): Promise<boolean>;
}

const METHODS = ['reserve', 'renew', 'confirm', 'release', 'inspect', 'forget'] as const;

/** True when `value` has every method of {@link EffectStore}. */
export function isEffectStore(value: unknown): value is EffectStore {
  if (typeof value !== 'object' || value === null) return false;
  return METHODS.every((m) => typeof (value as Record<string, unknown>)[m] === 'function');
}
