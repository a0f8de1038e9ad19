/**
 * The errors the effect guard throws. Each carries `retriable` (from {@link OutboxError}),
 * so the consumer runtime's default classifier retries or dead-letters them as it should:
 * a duplicate still running elsewhere, or a store that did not answer, may pass on the
 * next try; a key that cannot be built, or an effect in doubt that an operator must
 * decide on, never does. The effect's own error reaches the caller as it is, unwrapped.
 */
import { OutboxError } from '../shared/errors.js';
import { describeRedisFailure } from '../shared/redisCommands.js';

/** Base class of the effect guard's errors. */
export class EffectError extends OutboxError {}

/**
 * An effect key part that cannot make a stable key (undefined, null, NaN, an empty
 * string, a Date or another object), or a key that is empty, too long or holds NUL.
 * Never retriable: the same event gives the same bad part every time.
 */
export class EffectKeyError extends EffectError {
  constructor(part: string, problem: string) {
    super(`effect key: ${part} ${problem}`, { retriable: false, context: { part } });
  }
}

/**
 * Another attempt held the key's reservation for all of `waitMs` (it is still running the
 * effect, or it died and its reservation has not expired yet). Retriable: by the next
 * try the effect is done (the retry skips it) or the reservation has expired (the retry
 * takes it over).
 */
export class EffectBusyError extends EffectError {
  constructor(key: string, waitMs: number) {
    super(`effect "${key}": another attempt still holds its reservation after ${waitMs} ms (waitMs)`, { retriable: true, context: { key, waitMs } });
  }
}

/**
 * The store failed, or gave no reply within its `timeoutMs`, where the guard cannot go on
 * without it (taking the reservation): the effect did not run. Retriable; `cause` says why.
 */
export class EffectStoreError extends EffectError {
  constructor(operation: string, key: string, cause: unknown) {
    super(`effect "${key}": the store failed to ${operation}: ${describeRedisFailure(cause)}`, { retriable: true, context: { operation, key }, cause });
  }
}

/**
 * With `inDoubt: 'fail'`: an earlier attempt reserved the key and neither confirmed nor
 * released it before its reservation expired (it crashed or stalled mid-effect), so the
 * effect may or may not have happened. The guard does not run it again; an operator
 * checks downstream and then either leaves it (done) or calls `guard.forget(key)` so the
 * next attempt runs it. Not retriable.
 */
export class EffectInDoubtError extends EffectError {
  constructor(key: string, expiredForMs: number) {
    super(`effect "${key}": an earlier attempt reserved it and never confirmed it (its reservation expired ${Math.round(expiredForMs)} ms ago); with inDoubt: 'fail' it is not run again: check downstream, then guard.forget(key) to let it run`, {
      retriable: false,
      context: { key, expiredForMs },
    });
  }
}

/**
 * The reason of the effect's `signal` when the guard aborts it: this attempt lost the
 * key's reservation while the effect ran (no renewal reached the store before the
 * reservation expired, or another attempt took it over). Another attempt may now run the
 * effect too: stop, and let its error end this attempt. Retriable.
 */
export class EffectReservationLostError extends EffectError {
  constructor(key: string, why: string) {
    super(`effect "${key}": this attempt lost its reservation (${why}); another attempt may run the effect`, { retriable: true, context: { key, why } });
  }
}
