import pg from 'pg';
import { ConnectionError } from './errors.js';
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

/** Where a connection string points, without its password: safe to log or print. */
export function describeDatabase(url: string): string {
  try {
    const u = new URL(url);
    return `${u.hostname || 'localhost'}:${u.port || '5432'}${u.pathname || '/'}`;
  } catch {
    return '(unparseable DATABASE_URL)';
  }
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
    throw new ConnectionError(
      `cannot connect to Postgres at ${describeDatabase(url)}: ${(error as Error).message}`,
      { database: describeDatabase(url) },
      error,
    );
  }
  return client;
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
  pool.on('error', (error) => logger.warn({ err: error.message }, 'idle Postgres connection failed'));
  return pool;
}

