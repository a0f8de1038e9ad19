import type { IncomingMessage, ServerResponse } from 'node:http';
import type pg from 'pg';
import type { Logger } from '../../shared/logger.js';
import { ConfigError, ConnectionError, SchemaError } from '../../shared/errors.js';
import { DeadLetterNotFoundError, DeadLetterPermissionError } from '../../commands/deadLetterSelection.js';
import { KeyNotParkedError } from '../../commands/parkedKeys.js';
import type { ConsoleData } from './consoleData.js';
import type { JobRegistry } from './jobs.js';
import { ReplayRunningError } from './jobs.js';
import type { LoginThrottle, Session, SessionStore } from './sessions.js';
import type { ConsoleUser } from './users.js';
import { HttpError } from './http.js';
import type { PageContext } from './layout.js';

// What every request handler of the console works with, and how errors become pages.

/** One outbox the console shows: its name in the list, its schema, its own small pool. */
export interface ConsoleOutbox {
  name: string;
  schema: string;
  pool: pg.Pool;
}

/** The console's state, shared by its handlers. */
export interface ConsoleEnv {
  prefix: string;
  publicOrigin: string;
  outboxes: ReadonlyMap<string, ConsoleOutbox>;
  users: ReadonlyMap<string, ConsoleUser>;
  data: ConsoleData;
  jobs: JobRegistry;
  sessions: SessionStore;
  throttle: LoginThrottle;
  logger: Logger;
  /** The rate a replay form offers first. */
  defaultRate: number;
}

/** One request, as a handler sees it. */
export interface ConsoleRequest {
  req: IncomingMessage;
  res: ServerResponse;
  method: 'GET' | 'HEAD' | 'POST';
  /** The path below the prefix, starting with /. */
  path: string;
  query: URLSearchParams;
  session: Session | undefined;
  /** The client's address (and what a proxy says it forwarded for), for the audit log. */
  remoteAddress: string;
}

/** The page context of a request (outbox and section set by the page). */
export function pageContext(env: ConsoleEnv, r: ConsoleRequest, outbox?: string): PageContext {
  return { prefix: env.prefix, session: r.session, outboxCount: env.outboxes.size, outbox };
}

/** SQLSTATE insufficient_privilege. */
const INSUFFICIENT_PRIVILEGE = '42501';

/** Whether an error is the database refusing this role an action. */
export function isPrivilegeError(error: unknown): boolean {
  return (error as { code?: unknown } | null)?.code === INSUFFICIENT_PRIVILEGE;
}

const CONNECTION_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ENOTFOUND', 'EAI_AGAIN', 'ETIMEDOUT', 'EHOSTUNREACH', '57P01', '57P02', '57P03', '53300']);

/** Whether an error of the driver means the database is out of reach (not a wrong query). */
function isConnectionFailure(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && (CONNECTION_CODES.has(code) || code.startsWith('08'))) return true;
  const message = error instanceof Error ? error.message : '';
  return /timeout exceeded when trying to connect|Connection terminated/i.test(message);
}

/**
 * An error as the page shows it: what happened in words an operator can act on, and the
 * status. Never the driver's text about connections (it may name the server's address);
 * a privilege error quotes Postgres (table and privilege, nothing secret).
 */
export function httpErrorOf(error: unknown, outbox: string | undefined): HttpError {
  if (error instanceof HttpError) return error;
  const where = outbox ? `outbox ${outbox}` : 'this outbox';
  if (error instanceof DeadLetterPermissionError) {
    return new HttpError(403, `The database role the console connects to ${where} with may read but not do this: ${error.message}.`, 'Not allowed by the database');
  }
  if (isPrivilegeError(error)) {
    return new HttpError(
      403,
      `The database role the console connects to ${where} with may read but not do this (Postgres says: ${(error as Error).message}). ` +
        'Nothing was changed. Acting needs a role with the operator grants of docs/console.md.',
      'Not allowed by the database',
    );
  }
  if (error instanceof DeadLetterNotFoundError) return new HttpError(409, `${error.message}. The dead letters changed since the confirmation page: look again.`, 'Nothing to do');
  if (error instanceof KeyNotParkedError) return new HttpError(409, `${error.message}.`, 'Not parked');
  if (error instanceof ReplayRunningError) return new HttpError(409, error.message, 'A replay is running');
  if (error instanceof ConfigError) return new HttpError(400, error.message, 'Not accepted');
  if (error instanceof ConnectionError || isConnectionFailure(error)) return new HttpError(503, `Cannot reach the database of ${where}; see the console's log.`, 'Database unavailable');
  if (error instanceof SchemaError) return new HttpError(503, error.message, 'Schema not ready');
  return new HttpError(500, `Something went wrong on ${where}; the console's log says what.`, 'Internal error');
}
