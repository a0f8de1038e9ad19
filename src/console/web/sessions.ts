import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { ConsoleRole } from './users.js';

// Login sessions, held in the console's memory: the cookie carries only a random id (256
// bits), so nothing in it can be forged or read, logging out ends the session at once, and
// a restart logs everyone out. Each session has its own CSRF token.

/** A logged-in user. */
export interface Session {
  readonly id: string;
  readonly user: string;
  readonly role: ConsoleRole;
  /** Put in every form as `_csrf`; every POST must carry it. */
  readonly csrfToken: string;
  readonly createdAtMs: number;
  lastSeenAtMs: number;
  /** A message for the next page this session sees (after a redirect), shown once. */
  flash?: Notice;
}

/** A message at the top of a page. */
export interface Notice {
  kind: 'info' | 'warn' | 'error';
  text: string;
}

/** A session ends after this long without a request. */
export const SESSION_IDLE_MS = 30 * 60_000;
/** And after this long in any case. */
export const SESSION_MAX_MS = 12 * 3_600_000;
const MAX_SESSIONS = 10_000;

/** Sessions by id (stored by the id's hash, so a timing side channel on the map tells nothing). */
export class SessionStore {
  private readonly sessions = new Map<string, Session>();

  constructor(private readonly now: () => number = Date.now) {}

  create(user: string, role: ConsoleRole): Session {
    this.sweep();
    if (this.sessions.size >= MAX_SESSIONS) {
      // The oldest go first (a Map iterates in insertion order).
      const oldest = this.sessions.keys().next().value;
      if (oldest !== undefined) this.sessions.delete(oldest);
    }
    const t = this.now();
    const session: Session = { id: randomBytes(32).toString('base64url'), user, role, csrfToken: randomBytes(32).toString('base64url'), createdAtMs: t, lastSeenAtMs: t };
    this.sessions.set(digest(session.id), session);
    return session;
  }

  /** The live session of a cookie value, its idle time renewed; undefined when unknown or expired. */
  find(id: string | undefined): Session | undefined {
    if (!id || id.length > 100) return undefined;
    const key = digest(id);
    const session = this.sessions.get(key);
    if (!session) return undefined;
    const t = this.now();
    if (t - session.lastSeenAtMs > SESSION_IDLE_MS || t - session.createdAtMs > SESSION_MAX_MS) {
      this.sessions.delete(key);
      return undefined;
    }
    session.lastSeenAtMs = t;
    return session;
  }

  end(session: Session): void {
    this.sessions.delete(digest(session.id));
  }

  clear(): void {
    this.sessions.clear();
  }

  private sweep(): void {
    const t = this.now();
    for (const [key, s] of this.sessions) {
      if (t - s.lastSeenAtMs > SESSION_IDLE_MS || t - s.createdAtMs > SESSION_MAX_MS) this.sessions.delete(key);
    }
  }
}

function digest(id: string): string {
  return createHash('sha256').update(id).digest('base64url');
}

/** Whether `given` is the session's CSRF token (constant time). */
export function csrfMatches(session: Session, given: string | undefined): boolean {
  if (typeof given !== 'string') return false;
  const a = createHash('sha256').update(given).digest();
  const b = createHash('sha256').update(session.csrfToken).digest();
  return timingSafeEqual(a, b);
}

/**
 * Failed logins per user name: after {@link MAX_FAILURES} within {@link FAILURE_WINDOW_MS},
 * the name is refused (429) until the window has passed since the last failure. Guessing
 * is slowed without letting anyone lock a name out for long.
 */
export class LoginThrottle {
  private readonly failures = new Map<string, number[]>();

  constructor(private readonly now: () => number = Date.now) {}

  /** Milliseconds until `name` may try again; 0 when it may now. */
  waitMs(name: string): number {
    const recent = this.recent(name);
    if (recent.length < MAX_FAILURES) return 0;
    return Math.max(0, recent[recent.length - 1]! + FAILURE_WINDOW_MS - this.now());
  }

  failed(name: string): void {
    if (this.failures.size > 10_000) this.failures.clear();
    this.failures.set(name, [...this.recent(name), this.now()].slice(-MAX_FAILURES));
  }

  succeeded(name: string): void {
    this.failures.delete(name);
  }

  private recent(name: string): number[] {
    const t = this.now();
    return (this.failures.get(name) ?? []).filter((at) => t - at < FAILURE_WINDOW_MS);
  }
}

export const MAX_FAILURES = 5;
export const FAILURE_WINDOW_MS = 60_000;
