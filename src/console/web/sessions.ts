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
 * Bounded memory of recent failures per key. Keys still below the limit and keys at it
 * (refused) are kept apart, each evicted oldest first (by last failure): made-up keys
 * that fail once push out one another, never a key being refused, unless as many keys
 * reached the limit since.
 */
class FailureLog {
  // A Map iterates in insertion order; a key is re-inserted on each failure, so the first
  // entries are those whose last failure is oldest.
  private readonly counting = new Map<string, number[]>();
  private readonly refused = new Map<string, number[]>();

  constructor(
    private readonly limit: number,
    private readonly capacity: number,
    private readonly now: () => number,
  ) {}

  waitMs(key: string): number {
    const recent = this.recent(key);
    if (recent.length < this.limit) return 0;
    return Math.max(0, recent[recent.length - 1]! + FAILURE_WINDOW_MS - this.now());
  }

  failed(key: string): void {
    const recent = [...this.recent(key), this.now()].slice(-this.limit);
    this.forget(key);
    const into = recent.length >= this.limit ? this.refused : this.counting;
    into.set(key, recent);
    while (into.size > this.capacity) {
      const oldest = into.keys().next().value;
      if (oldest === undefined) break;
      into.delete(oldest);
    }
  }

  forget(key: string): void {
    this.counting.delete(key);
    this.refused.delete(key);
  }

  get size(): number {
    return this.counting.size + this.refused.size;
  }

  private recent(key: string): number[] {
    const t = this.now();
    return (this.refused.get(key) ?? this.counting.get(key) ?? []).filter((at) => t - at < FAILURE_WINDOW_MS);
  }
}

/**
 * Failed logins per user name and per source address (the TCP peer: a forwarded-for
 * header is the client's word). A name is refused (429) after {@link MAX_FAILURES}
 * failures within {@link FAILURE_WINDOW_MS}, an address after
 * {@link MAX_ADDRESS_FAILURES}, until the window has passed since its last failure.
 * Guessing is slowed without letting anyone lock a name out for long, and one address
 * cannot try names by the thousand. Memory is bounded ({@link THROTTLE_CAPACITY} names and
 * as many addresses, twice over: those still counting and those refused): past it the
 * entry failed longest ago is forgotten first, never the whole map. Made-up names from
 * one address stop at the address's limit; made-up names from many addresses push out
 * one another, not a name being refused.
 */
export class LoginThrottle {
  private readonly names: FailureLog;
  private readonly addresses: FailureLog;

  constructor(
    now: () => number = Date.now,
    capacity = THROTTLE_CAPACITY,
  ) {
    this.names = new FailureLog(MAX_FAILURES, capacity, now);
    this.addresses = new FailureLog(MAX_ADDRESS_FAILURES, capacity, now);
  }

  /** Milliseconds until `name` may be tried again from `address`; 0 when it may now. */
  waitMs(name: string, address: string): number {
    return Math.max(this.names.waitMs(name), this.addresses.waitMs(address));
  }

  /** Whether the wait comes from the address's limit (for the message shown). */
  addressLimited(address: string): boolean {
    return this.addresses.waitMs(address) > 0;
  }

  failed(name: string, address: string): void {
    this.names.failed(name);
    this.addresses.failed(address);
  }

  /** A good password clears its name's failures; the address's stay (one valid account must not reset guessing at others). */
  succeeded(name: string): void {
    this.names.forget(name);
  }

  /** Names and addresses remembered (for tests of the bound). */
  get size(): { names: number; addresses: number } {
    return { names: this.names.size, addresses: this.addresses.size };
  }
}

export const MAX_FAILURES = 5;
/** Failed logins one source address may make within the window, whatever the names. */
export const MAX_ADDRESS_FAILURES = 20;
export const FAILURE_WINDOW_MS = 60_000;
/** Names (and, separately, addresses) remembered at most, below the limit and again at it. */
export const THROTTLE_CAPACITY = 10_000;
