import type pg from 'pg';
import { OutboxError } from '../shared/errors.js';

/** Options of {@link lockEntity} (and of `context.lockEntity` in a handler). */
export interface EntityLockOptions {
  /** Keeps lock keys of different uses apart (default `entity`). */
  namespace?: string;
  /**
   * Give up after this many milliseconds with a transient error (SQLSTATE 55P03), so the
   * message is retried with backoff instead of holding a connection indefinitely.
   * Default: wait as long as the statement may run.
   */
  timeoutMs?: number;
}

/**
 * Lock an entity until the current transaction ends: pg_advisory_xact_lock on a 64-bit
 * hash of namespace and key. Postgres releases it on commit, on rollback, and when the
 * connection dies with the process, so a crash never leaves an orphaned lock.
 *
 * Use it to serialize work on one entity that Kafka's per-partition order does not cover
 * (two topics, or a call to another system). It narrows concurrency; it does not replace
 * idempotency. Must run inside a transaction (the consumer's handlers always are).
 */
export async function lockEntity(client: pg.ClientBase, key: string, options: EntityLockOptions = {}): Promise<void> {
  const namespace = options.namespace ?? 'entity';
  // Length-prefixed, so no namespace and key pair hashes the same text as another.
  const lockKey = `${namespace.length}:${namespace}:${key}`;
  if (options.timeoutMs === undefined) {
    await client.query('SELECT pg_advisory_xact_lock(hashtextextended($1, 0))', [lockKey]);
    return;
  }
  if (!Number.isSafeInteger(options.timeoutMs) || options.timeoutMs < 1) {
    throw new OutboxError(`lockEntity: timeoutMs ${JSON.stringify(options.timeoutMs)} is not a positive whole number`, { retriable: false });
  }
  // lock_timeout set for this statement only: restored right after, also when it fails
  // (a failed statement inside a savepoint is rolled back with the setting).
  const { rows } = await client.query<{ previous: string }>(
    "SELECT current_setting('lock_timeout') AS previous, set_config('lock_timeout', $1, true)",
    [`${options.timeoutMs}ms`],
  );
  await client.query('SELECT pg_advisory_xact_lock(hashtextextended($1, 0))', [lockKey]);
  await client.query("SELECT set_config('lock_timeout', $1, true)", [rows[0]?.previous ?? '0']);
}
