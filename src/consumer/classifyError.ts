import { DecodeError } from './decode.js';

/** What the consumer does with a handler error: retry the message, or dead-letter it. */
export type ErrorClass = 'transient' | 'permanent';

// SQLSTATE classes and codes that say "try again": connection exceptions (08),
// transaction rollbacks such as serialization failures and deadlocks (40), insufficient
// resources (53), lock not available (55P03, e.g. lock_timeout), operator intervention
// such as an admin shutdown or a statement timeout (57).
const TRANSIENT_SQLSTATE = /^(08|40|53|57)|^55P03$/;
// Data exceptions (22), integrity constraint violations (23), syntax or access rule
// violations (42): the same statement with the same data fails the same way again.
const PERMANENT_SQLSTATE = /^(22|23|42)/;
const PERMANENT_NAMES = new Set(['DecodeError', 'SyntaxError', 'ValidationError', 'ZodError']);

/**
 * The default error classifier.
 *
 * Permanent: {@link DecodeError} and other invalid-payload errors (SyntaxError from
 * JSON.parse, errors named ValidationError or ZodError), errors whose `retriable` flag is
 * false (OutboxError, kafkajs), and Postgres data, constraint and syntax errors.
 * Transient: errors whose `retriable` flag is true, Postgres connection, serialization,
 * deadlock, lock-timeout and resource errors, and anything unknown, because retries are
 * bounded by maxAttempts and a message that never succeeds is dead-lettered anyway.
 */
export function classifyError(error: unknown): ErrorClass {
  if (error instanceof DecodeError) return 'permanent';
  if (error instanceof Error && PERMANENT_NAMES.has(error.name)) return 'permanent';
  const retriable = (error as { retriable?: unknown } | null)?.retriable;
  if (typeof retriable === 'boolean') return retriable ? 'transient' : 'permanent';
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code)) {
    if (TRANSIENT_SQLSTATE.test(code)) return 'transient';
    if (PERMANENT_SQLSTATE.test(code)) return 'permanent';
  }
  return 'transient';
}
