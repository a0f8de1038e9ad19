import type { Logger } from '../../shared/logger.js';

// The audit trail: one JSON log line per action (log in and out, replay, cancel, discard,
// unpark), saying who (user and role, and from where), what (action, outbox, the ids or
// the filter), and how many rows it touched or why it was refused. Never a password, a
// token or a connection string: the fields below are all there is.

/** One audited action. */
export interface AuditEvent {
  user: string;
  role: string;
  action: 'login' | 'logout' | 'replay.start' | 'replay' | 'replay.cancel' | 'discard' | 'unpark';
  /** ok: done; refused: not allowed or nothing to do; failed: an error. */
  outcome: 'ok' | 'refused' | 'failed';
  outbox?: string;
  /** ids, or the filter's fields, or all. */
  selection?: Record<string, unknown>;
  /** Rows the action changed (moved, deleted, released). */
  rows?: number;
  job?: string;
  /** Why it was refused or failed, for people. */
  detail?: string;
  remoteAddress?: string;
}

/** Write one audit line (info, `audit: true`, message `console audit`). */
export function audit(logger: Logger, event: AuditEvent & Record<string, unknown>): void {
  logger.info({ audit: true, ...event }, `console audit: ${event.action} ${event.outcome}`);
}
