/**
 * PgBouncer for the tests: a real one (Debian's package, installed when missing) in front
 * of the tests' Postgres. The logic lives in scripts/pgbouncer.ts, which is also the CLI
 * (start/stop/restart --dir DIR) for the fault suite and for trying things by hand.
 */
import { startPgBouncer as start, type PgBouncer, type PgBouncerOptions } from '../../scripts/pgbouncer.js';
import { DATABASE_URL } from './db.js';

export type { PgBouncer, PgBouncerOptions, PoolMode } from '../../scripts/pgbouncer.js';

/**
 * Start PgBouncer in front of the Postgres the tests use (TEST_DATABASE_URL's host, port
 * and database; 127.0.0.1:5432/test by default), unless `options` say otherwise.
 */
export function startPgBouncer(options: PgBouncerOptions): Promise<PgBouncer> {
  const target = new URL(DATABASE_URL);
  return start({ pgHost: target.hostname, pgPort: Number(target.port || 5432), database: decodeURIComponent(target.pathname.slice(1)) || 'test', ...options });
}
