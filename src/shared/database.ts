import pg from 'pg';
import { ConnectionError, describeError } from './errors.js';
import type { Logger } from './logger.js';

// bigint columns (ids, counts) arrive as strings by default; every bigint we read fits in
// a double far beyond any outbox's lifetime (2^53 ids), and numbers are what callers want.
pg.types.setTypeParser(pg.types.builtins.INT8, (v) => Number(v));

/** How an operator command reaches Postgres: a client, a pool, or a URL to connect to. */
export interface DatabaseOptions {
  /** An open connection to use; left open. */
  client?: pg.ClientBase;
  /** A pool to use; left open. */
  pool?: pg.Pool;
  /** Connection string, used when neither `client` nor `pool` is given. */
  databaseUrl?: string;
  /** Schema of the outbox tables (default `public`). */
  schema?: string;
}

/**
 * What is wrong with a connection string, or undefined. Never quotes the value: it may
 * hold a password. Refuses an `@` after the host, the mark of a password with an
 * unescaped `/`, `?` or `#`, which URL parsing (ours and pg's) would otherwise read as
 * host and port, putting the rest of the password into the database name.
 */
export function databaseUrlProblem(value: string): string | undefined {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return 'is not a URL (expected postgres://user@host:port/database; percent-encode a password holding / ? # @ or %)';
  }
  if (url.protocol !== 'postgres:' && url.protocol !== 'postgresql:') {
    return `has scheme ${JSON.stringify(url.protocol)}; expected postgres: or postgresql:`;
  }
  if (/@/.test(url.pathname + url.search + url.hash)) {
    return "has an '@' after the host: percent-encode a password holding / ? # @ or % (the value is not shown)";
  }
  return undefined;
}

/** Where a connection string points, without its user info: safe to log or print. */
export function describeDatabase(url: string): string {
  if (databaseUrlProblem(url) !== undefined) return '(malformed DATABASE_URL, not shown)';
  const u = new URL(url);
  return `${u.hostname || 'localhost'}:${u.port || '5432'}${u.pathname || '/'}`;
}

/**
 * `text` with every piece of the connection string's user info blanked out, however the
 * URL is malformed: for error messages of the driver, which may quote what it parsed as
 * a host or a database name.
 */
export function redactDatabaseUrl(text: string, url: string | undefined): string {
  if (!url) return text;
  const start = url.indexOf('://');
  const at = url.lastIndexOf('@');
  if (start < 0 || at <= start) return text;
  const userInfo = url.slice(start + 3, at);
  const secrets = new Set<string>([userInfo]);
  const colon = userInfo.indexOf(':');
  if (colon >= 0) secrets.add(userInfo.slice(colon + 1));
  for (const piece of userInfo.split(/[:/@?#]/)) if (piece.length >= 3) secrets.add(piece);
  for (const s of [...secrets]) {
    try {
      secrets.add(decodeURIComponent(s));
    } catch {
      // not percent-encoded text: the raw piece is enough
    }
  }
  let out = text;
  for (const s of [...secrets].filter((x) => x.length > 0).sort((a, b) => b.length - a.length)) out = out.split(s).join('[redacted]');
  return out;
}

/** A ConnectionError for `url` whose message names the server, never the user info. */
export function connectionError(url: string | undefined, error: unknown): ConnectionError {
  const where = url ? describeDatabase(url) : 'the given pool';
  const why = redactDatabaseUrl(describeError(error), url);
  // The driver's error stays the cause, but redacted too: whoever prints the cause (the
  // CLI's one-line errors do) must not find the user info there either.
  const cause = Object.assign(new Error(why), { code: (error as { code?: string } | undefined)?.code });
  return new ConnectionError(`cannot connect to Postgres at ${where}: ${why}`, { database: where }, cause);
}

/** Open one connection, failing with a one-line ConnectionError that names the server. */
export async function connect(url: string, applicationName: string): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: url, application_name: applicationName, connectionTimeoutMillis: 10_000 });
  // An error on an idle client (server restart) must not crash the process; the next
  // query on it fails and the caller handles that.
  client.on('error', () => undefined);
  try {
    await client.connect();
  } catch (error) {
    await client.end().catch(() => undefined);
    throw connectionError(url, error);
  }
  return client;
}

/**
 * End a pool and resolve once each of its connections has closed. pg-pool's own end()
 * resolves as soon as it has let go of them, with their sockets still closing: a caller
 * that counts connections (the tenant relay's budget) would hand their room on early.
 */
export function endPool(pool: pg.Pool): Promise<void> {
  let open = pool.totalCount;
  const closed = new Promise<void>((resolve) => {
    if (open === 0) return resolve();
    pool.on('remove', () => {
      if (--open <= 0) resolve();
    });
  });
  return pool.end().then(() => closed);
}

/** A pool whose idle-client errors are logged instead of crashing the process. */
export function createPool(url: string, applicationName: string, max: number, logger: Logger): pg.Pool {
  const pool = new pg.Pool({
    connectionString: url,
    application_name: applicationName,
    max,
    connectionTimeoutMillis: 10_000,
    idleTimeoutMillis: 30_000,
  });
  return guardPoolClients(pool, logger);
}

/**
 * Log a pool's idle-client errors, and give each of its clients an 'error' listener for
 * its whole life, so a dropped connection is never an uncaught exception.
 *
 * pg-pool listens on a client only while it is idle. Handing a client to a waiting
 * `connect()`, it removes that listener and resolves a promise, and the caller's own
 * listener comes a microtask later. The hand-over can happen inside the parser's loop
 * (a new client's ReadyForQuery, a `pool.query` callback releasing its client to a
 * waiter); when the same read also holds the server's error (a terminated backend, 57P01),
 * it is emitted in that gap with nobody listening. Under load, two writes of the server
 * arrive as one read (test/poolClientErrors.integration.test.ts). What the error means
 * still reaches the caller: the client is no longer queryable, so its next query fails.
 */
export function guardPoolClients(pool: pg.Pool, logger: Logger, context: Record<string, unknown> = {}): pg.Pool {
  pool.on('error', (error) => logger.warn({ ...context, err: error.message }, 'idle Postgres connection failed'));
  // 'connect' is emitted for a new client before it is handed out, so this listener is
  // there before any gap.
  pool.on('connect', (client) => client.on('error', () => undefined));
  return pool;
}

