/**
 * The errors the cache throws. Each carries `retriable` (from {@link OutboxError}): a
 * wait that timed out, a loader that overran its time or Redis unreachable may all work
 * on the next try; a bad option never does (that is a ConfigError, thrown up front).
 * A loader's own error reaches the caller as it is, unwrapped.
 */
import { OutboxError } from '../shared/errors.js';
import { describeRedisFailure } from './redisClient.js';

/** Base class of the cache's errors. */
export class CacheError extends OutboxError {}

/**
 * Another process held the rebuild lock of a missing key for longer than `waitMs`, and
 * `onWaitTimeout` is `'throw'` (the default). Retriable: the value is usually there a
 * moment later, or the lock has expired.
 */
export class CacheWaitTimeoutError extends CacheError {
  constructor(key: string, waitMs: number) {
    super(`cache: waited ${waitMs} ms for another process to rebuild "${key}"`, { retriable: true, context: { key, waitMs } });
  }
}

/**
 * The loader did not settle within `loadTimeoutMs`. Its AbortSignal was aborted and the
 * rebuild lock released; every caller waiting on that load gets this error. Retriable.
 */
export class CacheLoadTimeoutError extends CacheError {
  constructor(key: string, loadTimeoutMs: number) {
    super(`cache: the loader of "${key}" did not finish within ${loadTimeoutMs} ms`, { retriable: true, context: { key, loadTimeoutMs } });
  }
}

/**
 * A Redis command failed (connection lost, server error) or gave no reply within
 * `redisTimeoutMs`, where the cache cannot carry on without it: `setIfNewer`,
 * `invalidate`, `peek`. Retriable; `cause` is the client's error, or a RedisNoReplyError
 * saying what the client knew of its connection. (`getOrLoad` does not throw it: without
 * Redis it calls the loader, one call per key per process.)
 */
export class CacheRedisError extends CacheError {
  constructor(operation: string, key: string, cause: unknown) {
    super(`cache: Redis ${operation} of "${key}" failed: ${describeRedisFailure(cause)}`, {
      retriable: true,
      context: { operation, key },
      cause,
    });
  }
}
