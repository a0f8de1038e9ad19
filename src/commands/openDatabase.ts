import pg from 'pg';
import { ConfigError } from '../shared/errors.js';
import { DEFAULT_SCHEMA } from '../shared/identifiers.js';
import { connect, type DatabaseOptions } from '../shared/database.js';
import { assertMigrated } from '../shared/schema.js';

/** The database a command works on, and how to let go of it. */
export interface OpenDatabase {
  db: pg.ClientBase | pg.Pool;
  /** Ends the connection if this call opened it; a given client or pool stays open. */
  close(): Promise<void>;
}

/**
 * Resolve a command's client, pool or URL, and check that the schema is migrated.
 *
 * @throws ConfigError without any of the three; ConnectionError; SchemaError
 */
export async function openDatabase(options: DatabaseOptions, applicationName: string): Promise<OpenDatabase> {
  const schema = options.schema ?? DEFAULT_SCHEMA;
  let own: pg.Client | undefined;
  let db: pg.ClientBase | pg.Pool;
  if (options.client) db = options.client;
  else if (options.pool) db = options.pool;
  else {
    if (!options.databaseUrl) throw new ConfigError('databaseUrl', 'is required (environment DATABASE_URL)');
    db = own = await connect(options.databaseUrl, applicationName);
  }
  const close = async (): Promise<void> => {
    await own?.end().catch(() => undefined);
  };
  try {
    if (db instanceof pg.Pool) {
      const c = await db.connect();
      try {
        await assertMigrated(c, schema);
      } finally {
        c.release();
      }
    } else {
      await assertMigrated(db, schema);
    }
  } catch (error) {
    await close();
    throw error;
  }
  return { db, close };
}
