import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { migrate } from '../../src/commands/migrate.js';
import { partitionOutbox } from '../../src/commands/partitions.js';

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

/**
 * OUTBOX_TEST_PARTITIONED=1 runs the suites on a partitioned outbox (docs/partitioning.md):
 * every test schema's outbox is converted right after migrating.
 */
export const TEST_PARTITIONED = process.env.OUTBOX_TEST_PARTITIONED === '1';

/** A freshly migrated schema of its own, so tests never see each other's rows. */
export async function createTestSchema(prefix = 't'): Promise<TestSchema> {
  const schema = uniqueName(prefix);
  await migrate({ databaseUrl: DATABASE_URL, schema });
  if (TEST_PARTITIONED) await partitionOutbox({ databaseUrl: DATABASE_URL, schema, partitionSizeIds: 100_000 });
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
