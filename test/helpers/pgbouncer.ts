/**
 * PgBouncer for the tests: a real one (Debian's package, installed when missing) in front
 * of the tests' Postgres. The logic lives in scripts/pgbouncer.ts, which is also the CLI
 * (start/stop/restart --dir DIR) for the fault suite and for trying things by hand.
 */
import { startPgBouncer as start, type PgBouncer, type PgBouncerOptions } from '../../scripts/pgbouncer.js';
import pg from 'pg';
import { createTestSchema, DATABASE_URL, type TestSchema } from './db.js';

export type { PgBouncer, PgBouncerOptions, PoolMode } from '../../scripts/pgbouncer.js';

/**
 * Start PgBouncer in front of the Postgres the tests use (TEST_DATABASE_URL's host, port
 * and database; 127.0.0.1:5432/test by default), unless `options` say otherwise.
 */
export function startPgBouncer(options: PgBouncerOptions): Promise<PgBouncer> {
  const target = new URL(DATABASE_URL);
  return start({ pgHost: target.hostname, pgPort: Number(target.port || 5432), database: decodeURIComponent(target.pathname.slice(1)) || 'test', ...options });
}

/** A test file's own schema, a PgBouncer and the application's pool through it. */
export interface PgBouncerFixture {
  db: TestSchema;
  bouncer: PgBouncer;
  pooled: pg.Pool;
  /** End the pool, stop PgBouncer, drop the schema (each even when an earlier one failed). */
  close(): Promise<void>;
}

/** {@link PgBouncerFixture} for a test file: a schema named from `prefix`, PgBouncer started with `options`, a pool of `clients`. */
export async function pgBouncerFixture(prefix: string, options: PgBouncerOptions & { clients: number }): Promise<PgBouncerFixture> {
  const { clients, ...bouncerOptions } = options;
  const db = await createTestSchema(prefix);
  const bouncer = await startPgBouncer(bouncerOptions);
  const pooled = new pg.Pool({ connectionString: bouncer.url(), max: clients });
  pooled.on('error', () => undefined);
  return {
    db,
    bouncer,
    pooled,
    async close() {
      try {
        await pooled.end();
      } finally {
        try {
          await bouncer.stop();
        } finally {
          await db.drop();
        }
      }
    },
  };
}
