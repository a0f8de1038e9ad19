import pg from 'pg';
import { DEFAULT_SCHEMA, quoteSchema } from '../shared/identifiers.js';
import { ConfigError, OutboxError, SchemaError } from '../shared/errors.js';
import { loadMigrations, schemaDrift } from '../shared/schema.js';
import { silentLogger, type Logger } from '../shared/logger.js';
import { connect } from '../shared/database.js';
import { insertNotifySql } from '../tenants/sql/tenantQueries.js';

/** Options of {@link migrate}: where to connect and which schema. */
export interface MigrateOptions {
  /** Connection string; ignored when `client` is given. */
  databaseUrl?: string;
  /** An open connection to use instead of `databaseUrl`; left open. */
  client?: pg.ClientBase;
  /** Schema to create the tables in (default `public`). */
  schema?: string;
  /**
   * Also create (or replace) the outbox's insert trigger, which notifies the tenant relay
   * at commit so that it can leave idle tenants alone (docs/tenants.md). Off by default:
   * a notifying transaction takes a lock shared by the whole server while it commits.
   */
  notifyOnInsert?: boolean;
  logger?: Logger;
}

/** Which migrations a {@link migrate} call applied and which were there already. */
export interface MigrateResult {
  /** Migrations applied by this call, in order. */
  applied: string[];
  /** Migrations that were already there. */
  alreadyApplied: string[];
}

/**
 * The SQL `migrate` would run, as one script a DBA can read and apply with psql.
 * It includes the bookkeeping statements, so applying it by hand and running `migrate`
 * afterwards is a no-op.
 */
export async function migrationScript(schema = DEFAULT_SCHEMA, options: { notifyOnInsert?: boolean } = {}): Promise<string> {
  const quoted = quoteSchema(schema);
  const parts = [`-- outbox-relay schema for ${quoted}; each block runs in its own transaction.`];
  parts.push(`CREATE SCHEMA IF NOT EXISTS ${quoted};\n${bookkeepingTable(quoted)};`);
  for (const m of await loadMigrations(schema)) {
    parts.push(
      `-- ${m.name}\nBEGIN;\n${m.sql.trim()}\n` +
        `INSERT INTO ${quoted}.outbox_migrations (id, name) VALUES (${m.id}, '${m.name}');\nCOMMIT;`,
    );
  }
  if (options.notifyOnInsert) parts.push(`-- the insert trigger (--notify-on-insert); may be applied again\nBEGIN;\n${insertNotifySql(quoted)}\nCOMMIT;`);
  return parts.join('\n\n') + '\n';
}

function bookkeepingTable(quoted: string): string {
  return `CREATE TABLE IF NOT EXISTS ${quoted}.outbox_migrations (
  id integer PRIMARY KEY,
  name text NOT NULL,
  applied_at timestamptz NOT NULL DEFAULT now()
)`;
}

/**
 * Apply the migrations of sql/ that the schema does not have yet.
 *
 * Each migration runs in its own transaction under a transaction-scoped advisory lock
 * keyed by the schema, so several relays starting at once apply each exactly once: the
 * others wait, then find it recorded and skip it.
 *
 * @throws SchemaError when the relay's tables no longer have the columns and types the
 *   migrations created (altered by hand afterwards): the schema is not up to date then.
 */
export async function migrate(options: MigrateOptions): Promise<MigrateResult> {
  const schema = options.schema ?? DEFAULT_SCHEMA;
  const quoted = quoteSchema(schema);
  const logger = options.logger ?? silentLogger();
  const migrations = await loadMigrations(schema);
  const client = options.client ?? (await connect(requireUrl(options.databaseUrl), 'outbox-relay:migrate'));
  const result: MigrateResult = { applied: [], alreadyApplied: [] };
  try {
    for (const m of migrations) {
      await client.query('BEGIN');
      try {
        await client.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`outbox-relay:migrate:${schema}`]);
        await client.query(`CREATE SCHEMA IF NOT EXISTS ${quoted}`);
        await client.query(bookkeepingTable(quoted));
        const seen = await client.query(`SELECT 1 FROM ${quoted}.outbox_migrations WHERE id = $1`, [m.id]);
        if (seen.rowCount) {
          await client.query('COMMIT');
          result.alreadyApplied.push(m.name);
          continue;
        }
        await client.query(m.sql);
        await client.query(`INSERT INTO ${quoted}.outbox_migrations (id, name) VALUES ($1, $2)`, [m.id, m.name]);
        await client.query('COMMIT');
        result.applied.push(m.name);
        logger.info({ migration: m.name, schema }, 'applied migration');
      } catch (error) {
        await client.query('ROLLBACK').catch(() => undefined);
        throw new OutboxError(`migration ${m.name} failed: ${(error as Error).message}`, {
          retriable: false,
          context: { migration: m.name, schema },
          cause: error,
        });
      }
    }
    if (options.notifyOnInsert) {
      await client.query('BEGIN');
      try {
        await client.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`outbox-relay:migrate:${schema}`]);
        await client.query(insertNotifySql(quoted));
        await client.query('COMMIT');
      } catch (error) {
        await client.query('ROLLBACK').catch(() => undefined);
        throw new OutboxError(`the insert trigger could not be created: ${(error as Error).message}`, { retriable: false, context: { schema }, cause: error });
      }
    }
    // Applied is not the same as intact: a table altered by hand after its migration
    // would be called up to date while the relay cannot read it.
    const problems = await schemaDrift(client, schema);
    if (problems.length > 0) {
      throw new SchemaError(
        `schema ${quoted} was changed after it was migrated: ${problems.join('; ')}. Restore these columns (see \`outbox-relay migrate --print\`)`,
        { schema, problems },
      );
    }
  } finally {
    if (!options.client) await (client as pg.Client).end().catch(() => undefined);
  }
  return result;
}

function requireUrl(url: string | undefined): string {
  if (!url) throw new ConfigError('databaseUrl', 'is required (environment DATABASE_URL)');
  return url;
}
