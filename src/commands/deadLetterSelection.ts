import type pg from 'pg';
import type { DatabaseOptions } from '../shared/database.js';
import { parseTimePoint } from '../shared/durations.js';
import { ConfigError, OutboxError } from '../shared/errors.js';
import { listDeadLettersSql } from './sql/deadLetters.js';
import { openDatabase, type OpenDatabase } from './openDatabase.js';

// Which dead letters an operator command acts on: the row type, the filter (ids, topic,
// key, reason, error name, time range, policy), and the checks that a filter matched what
// it named.

/** A row the relay could never publish, as it sits in outbox_dead_letters. */
export interface DeadLetter {
  /** Its outbox id; a replay puts it back under this id. */
  id: number;
  /** The message-id header; kept across replays, so consumers deduplicate a replay. */
  messageId: string;
  topic: string;
  key: string;
  payload: unknown;
  payloadBytes: Buffer | null;
  headers: Record<string, string> | null;
  createdAt: Date;
  dedupKey: string | null;
  attempts: number;
  /** Why it cannot be published as it is. */
  reason: string;
  /** Kafka's error name (MESSAGE_TOO_LARGE) or the validation that failed (validation:empty_key). */
  errorName: string;
  /** park: its key's later rows wait for it; skip: they went on without it. */
  policy: 'park' | 'skip';
  firstFailedAt: Date;
  deadLetteredAt: Date;
  /** This dead letter is the one its key is parked behind right now. */
  parksKey: boolean;
}

/**
 * Which dead letters a command works on; every field narrows the selection (AND).
 * Times are a Date, an ISO 8601 text (no offset: UTC) or a duration ago (`2h`, `7d`).
 */
export interface DeadLetterFilter {
  ids?: readonly number[];
  topic?: string;
  key?: string;
  /** Case-insensitive substring of the reason or of the error name. */
  reason?: string;
  /** Exactly this error name (MESSAGE_TOO_LARGE, validation:empty_key). */
  errorName?: string;
  /** Dead-lettered at or after. */
  since?: Date | string;
  /** Dead-lettered before. */
  until?: Date | string;
  policy?: 'park' | 'skip';
}


/** A filter matched nothing, or ids that are not dead letters were named. Nothing changed. */
export class DeadLetterNotFoundError extends OutboxError {
  constructor(message: string, context: Record<string, unknown>) {
    super(message, { retriable: false, context });
  }
}

/** A filter checked, as the parameters of the selection query and a description for logs. */
interface ResolvedFilter {
  params: [number[] | null, string | null, string | null, string | null, Date | null, Date | null, string | null, string | null];
  text: string;
  empty: boolean;
}

/** Whether a filter's time is one people mean and Postgres takes: years 1 to 9999. */
export function inTimeRange(d: Date): boolean {
  const year = d.getUTCFullYear();
  return !Number.isNaN(d.getTime()) && year >= 1 && year <= 9_999;
}

/** Check a filter up front; ConfigError names the field. Relative times count back from `now`. */
export function resolveFilter(f: DeadLetterFilter, now: Date): ResolvedFilter {
  let ids: number[] | null = null;
  if (f.ids !== undefined) {
    if (!Array.isArray(f.ids) || f.ids.length === 0) throw new ConfigError('ids', 'must be a non-empty list of dead letter ids');
    for (const id of f.ids) {
      if (!Number.isSafeInteger(id) || id < 1) throw new ConfigError('ids', `${JSON.stringify(id)} is not a dead letter id (a positive whole number)`);
    }
    ids = [...new Set(f.ids)].sort((a, b) => a - b);
  }
  const text = (name: string, v: string | undefined): string | null => {
    if (v === undefined) return null;
    if (typeof v !== 'string' || v === '') throw new ConfigError(name, 'must be a non-empty string');
    return v;
  };
  const time = (name: string, v: Date | string | undefined): Date | null => {
    if (v === undefined) return null;
    if (v instanceof Date) {
      if (Number.isNaN(v.getTime())) throw new ConfigError(name, 'is an invalid Date');
      if (!inTimeRange(v)) throw new ConfigError(name, `${v.toISOString()} is out of range (years 1 to 9999)`);
      return v;
    }
    if (typeof v !== 'string') throw new ConfigError(name, `${JSON.stringify(v)} is not a time`);
    const parsed = parseTimePoint(v, now);
    if ('problem' in parsed) throw new ConfigError(name, parsed.problem);
    // 99999999d ago is no Date at all, and Postgres refuses years past 294276: checked
    // here, not left to fail as a query.
    if (!inTimeRange(parsed.value)) throw new ConfigError(name, `${JSON.stringify(v)} is out of range (years 1 to 9999)`);
    return parsed.value;
  };
  const topic = text('topic', f.topic);
  // A key may be empty (an empty key is one of the things that gets dead-lettered).
  if (f.key !== undefined && typeof f.key !== 'string') throw new ConfigError('key', 'must be a string');
  const key = f.key ?? null;
  const reason = text('reason', f.reason);
  const errorName = text('errorName', f.errorName);
  const since = time('since', f.since);
  const until = time('until', f.until);
  if (since && until && since >= until) {
    throw new ConfigError('until', `${until.toISOString()} is not after since (${since.toISOString()})`);
  }
  if (f.policy !== undefined && f.policy !== 'park' && f.policy !== 'skip') {
    throw new ConfigError('policy', `${JSON.stringify(f.policy)} is not one of park, skip`);
  }
  const policy = f.policy ?? null;
  const parts: string[] = [];
  if (ids) parts.push(`id ${ids.join(',')}`);
  if (topic !== null) parts.push(`topic ${JSON.stringify(topic)}`);
  if (key !== null) parts.push(`key ${JSON.stringify(key)}`);
  if (reason !== null) parts.push(`reason ~ ${JSON.stringify(reason)}`);
  if (errorName !== null) parts.push(`error ${JSON.stringify(errorName)}`);
  if (since) parts.push(`since ${since.toISOString()}`);
  if (until) parts.push(`until ${until.toISOString()}`);
  if (policy) parts.push(`policy ${policy}`);
  return {
    params: [ids, topic, key, reason, since, until, policy, errorName],
    text: parts.length ? parts.join(', ') : 'all dead letters',
    empty: parts.length === 0,
  };
}

export function openDeadLetters(options: DatabaseOptions, what: string): Promise<OpenDatabase> {
  return openDatabase(options, `outbox-relay:${what}`);
}

/** Now by the database's clock, which also stamped dead_lettered_at. */
export async function dbNow(db: pg.ClientBase | pg.Pool): Promise<Date> {
  return (await db.query<{ now: Date }>('SELECT now() AS now')).rows[0]!.now;
}

/** A dead letter as the queries of sql/deadLetters.ts return it. */
export interface DeadLetterRow {
  id: number;
  message_id: string;
  topic: string;
  key: string;
  payload: unknown;
  payload_bytes: Buffer | null;
  headers: Record<string, string> | null;
  created_at: Date;
  dedup_key: string | null;
  attempts: number;
  reason: string;
  error_name: string;
  policy: 'park' | 'skip';
  first_failed_at: Date;
  dead_lettered_at: Date;
  parks_key: boolean;
  total?: number;
}

export function toDeadLetter(r: DeadLetterRow): DeadLetter {
  return {
    id: Number(r.id),
    messageId: r.message_id,
    topic: r.topic,
    key: r.key,
    payload: r.payload,
    payloadBytes: r.payload_bytes,
    headers: r.headers,
    createdAt: r.created_at,
    dedupKey: r.dedup_key,
    attempts: r.attempts,
    reason: r.reason,
    errorName: r.error_name,
    policy: r.policy,
    firstFailedAt: r.first_failed_at,
    deadLetteredAt: r.dead_lettered_at,
    parksKey: r.parks_key,
  };
}

export async function select(db: pg.ClientBase | pg.Pool, s: string, filter: ResolvedFilter, limit: number | null): Promise<{ rows: DeadLetter[]; total: number }> {
  const { rows } = await db.query<DeadLetterRow>(listDeadLettersSql(s), [...filter.params, limit]);
  return { rows: rows.map(toDeadLetter), total: rows.length ? Number(rows[0]!.total ?? 0) : 0 };
}

/**
 * The chosen set must be exactly what the caller named: every id given exists (and
 * matches the rest of the filter), and a filter matches something. Otherwise nothing
 * happens and the error says why.
 */
export function requireMatches(filter: ResolvedFilter, found: readonly DeadLetter[], verb: string): void {
  const ids = filter.params[0];
  if (ids) {
    const have = new Set(found.map((d) => d.id));
    const missing = ids.filter((id) => !have.has(id));
    if (missing.length) {
      const which = missing.length === 1 ? `dead letter ${missing[0]} does not exist` : `dead letters ${missing.join(', ')} do not exist`;
      const extra = filter.params.slice(1).some((p) => p !== null) ? ' or do not match the filter' : '';
      throw new DeadLetterNotFoundError(`${which}${extra}; nothing was ${verb}`, { missing });
    }
  }
  if (found.length === 0) throw new DeadLetterNotFoundError(`no dead letter matches ${filter.text}; nothing was ${verb}`, { filter: filter.text });
}

export function requireSelection(filter: ResolvedFilter, all: boolean | undefined, verb: string): void {
  if (all !== undefined && typeof all !== 'boolean') throw new ConfigError('all', 'must be true or false');
  if (filter.empty && !all) {
    throw new ConfigError('filter', `no dead letters named: give ids, a filter (topic, key, reason, errorName, since, until, policy) or all, to ${verb}`);
  }
  if (!filter.empty && all) throw new ConfigError('all', 'cannot be combined with ids or a filter');
}

/**
 * The database role may not change dead letters or parked keys (a read-only role, such
 * as the console's viewer of sql/roles.sql). Nothing changed. Not retriable: connect as a
 * role with the operator's grants.
 */
export class DeadLetterPermissionError extends OutboxError {
  constructor(message: string, context: Record<string, unknown>, cause?: unknown) {
    super(message, { retriable: false, context, cause });
  }
}

/** What each change needs, checked before it starts (the grants of sql/roles.sql's operator). */
const NEEDED = {
  replay: [['outbox_dead_letters', 'DELETE'], ['outbox_parked_keys', 'DELETE'], ['outbox', 'INSERT']],
  discard: [['outbox_dead_letters', 'DELETE'], ['outbox_parked_keys', 'DELETE']],
  unpark: [['outbox_parked_keys', 'DELETE'], ['outbox_dead_letters', 'UPDATE']],
} as const;

/**
 * Fail before anything changes when the connected role lacks a privilege `verb` needs,
 * with a message naming the role and the grant, instead of Postgres' bare "permission
 * denied" halfway through.
 *
 * @throws DeadLetterPermissionError
 */
export async function requireChangePrivileges(db: pg.ClientBase | pg.Pool, s: string, verb: keyof typeof NEEDED): Promise<void> {
  const needed = NEEDED[verb];
  const { rows } = await db.query<{ role: string; granted: boolean[] }>(
    `SELECT current_user AS role,
            array(SELECT CASE WHEN t.privilege = 'DELETE' THEN has_table_privilege(t.name, t.privilege)
                              ELSE has_any_column_privilege(t.name, t.privilege) END
                    FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS t(name, privilege, n) ORDER BY t.n) AS granted`,
    [needed.map(([table]) => `${s}.${table}`), needed.map(([, privilege]) => privilege)],
  );
  const missing = needed.filter((_, i) => !rows[0]!.granted[i]);
  if (missing.length > 0) throw notPermitted(rows[0]!.role, verb, missing.map(([table, privilege]) => `${privilege} on ${table}`));
}

/** Postgres' insufficient_privilege, raised by a change the up-front check let through, as a DeadLetterPermissionError. */
export function permissionDenied(error: unknown, verb: string): unknown {
  if ((error as { code?: string } | undefined)?.code !== '42501') return error;
  return notPermitted(undefined, verb, [`a privilege (${(error as Error).message})`], error);
}

function notPermitted(role: string | undefined, verb: string, missing: string[], cause?: unknown): DeadLetterPermissionError {
  return new DeadLetterPermissionError(
    `${role === undefined ? 'the connected role' : `role ${JSON.stringify(role)}`} may not change dead letters (${verb}): it lacks ${missing.join(', ')}; nothing was changed. ` +
      'Connect as a role with the operator grants of sql/roles.sql (roleScript)',
    { role, verb, missing },
    cause,
  );
}
