import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { migrate } from '../../src/commands/migrate.js';

/** Postgres the tests use; trust auth on this machine and in CI. */
export const DATABASE_URL = process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

export function uniqueName(prefix: string): string {
  return `${prefix}_${Date.now().toString(36)}_${randomBytes(3).toString('hex')}`;
}

export interface TestSchema {
  schema: string;
  databaseUrl: string;
  pool: pg.Pool;
  /** Drop the schema and close the pool. */
  drop(): Promise<void>;
}

/** A freshly migrated schema of its own, so tests never see each other's rows. */
export async function createTestSchema(prefix = 't'): Promise<TestSchema> {
  const schema = uniqueName(prefix);
  await migrate({ databaseUrl: DATABASE_URL, schema });
  const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 20 });
  pool.on('error', () => undefined);
  return {
    schema,
    databaseUrl: DATABASE_URL,
    pool,
    drop: async () => {
      await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => undefined);
      await pool.end();
    },
  };
}
