import { readFile, readdir } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { DEFAULT_SCHEMA, quoteIdentifier } from './identifiers.js';
import { SchemaError } from './errors.js';

// The schema as this version expects it: the numbered migrations in sql/ and the check
// that a database has them all. The relay, the consumer and the operator commands all
// check the schema before they work; only `migrate` (src/commands/migrate.ts) changes it.

/** One numbered file of sql/. */
export interface Migration {
  /** The number at the start of the file name. */
  readonly id: number;
  /** File name, e.g. `001_outbox.sql`. */
  readonly name: string;
  /** SQL with the schema placeholder filled in. */
  readonly sql: string;
}

const SQL_DIR = fileURLToPath(new URL('../../sql/', import.meta.url));
const FILE = /^(\d{3,})_[a-z0-9_]+\.sql$/;

/** The migrations shipped in sql/, with `schema` filled in, in order. */
export async function loadMigrations(schema = DEFAULT_SCHEMA): Promise<Migration[]> {
  const quoted = quoteIdentifier(schema, 'schema');
  const files = (await readdir(SQL_DIR)).filter((f) => FILE.test(f)).sort();
  const migrations: Migration[] = [];
  for (const name of files) {
    const text = await readFile(SQL_DIR + name, 'utf8');
    migrations.push({
      id: Number(FILE.exec(name)?.[1]),
      name,
      sql: text.replaceAll(':"schema"', quoted),
    });
  }
  return migrations;
}

/**
 * Fail with a clear message when the schema lacks migrations this version needs, so the
 * relay does not start against a database it would misread.
 */
export async function assertMigrated(client: pg.ClientBase, schema: string): Promise<void> {
  const quoted = quoteIdentifier(schema, 'schema');
  const latest = Math.max(...(await loadMigrations(schema)).map((m) => m.id));
  let applied = 0;
  try {
    const r = await client.query<{ max: number | null }>(`SELECT max(id) AS max FROM ${quoted}.outbox_migrations`);
    applied = r.rows[0]?.max ?? 0;
  } catch (error) {
    if ((error as { code?: string }).code === '42P01' || (error as { code?: string }).code === '3F000') {
      throw new SchemaError(`schema ${quoted} has no outbox tables: run \`outbox-relay migrate\` first`, { schema });
    }
    throw error;
  }
  if (applied < latest) {
    throw new SchemaError(
      `schema ${quoted} is at migration ${applied}, this version needs ${latest}: run \`outbox-relay migrate\``,
      { schema, applied, latest },
    );
  }
  if (applied > latest) {
    // A newer version migrated this schema: its tables may mean things this version
    // would misread (graphile-worker refuses the same way). Upgrade this process instead.
    throw new SchemaError(
      `schema ${quoted} is at migration ${applied}, newer than this version knows (${latest}): upgrade outbox-relay`,
      { schema, applied, latest },
    );
  }
}


/**
 * The columns the relay reads and writes, with the types the migrations in sql/ give them
 * (as `format_type` names them). test/schemaShape.integration.test.ts checks this list
 * against a freshly migrated schema, so it cannot drift from the migrations.
 */
export const RELAY_COLUMNS: Readonly<Record<string, Readonly<Record<string, string>>>> = {
  outbox: {
    id: 'bigint',
    message_id: 'uuid',
    topic: 'text',
    key: 'text',
    payload: 'jsonb',
    payload_bytes: 'bytea',
    headers: 'jsonb',
    created_at: 'timestamp with time zone',
    shard: 'smallint',
    sent_at: 'timestamp with time zone',
    attempts: 'integer',
    last_error: 'text',
    dedup_key: 'text',
  },
  outbox_dead_letters: {
    id: 'bigint',
    message_id: 'uuid',
    topic: 'text',
    key: 'text',
    payload: 'jsonb',
    payload_bytes: 'bytea',
    headers: 'jsonb',
    created_at: 'timestamp with time zone',
    dedup_key: 'text',
    attempts: 'integer',
    reason: 'text',
    error_name: 'text',
    policy: 'text',
  },
  outbox_parked_keys: { topic: 'text', key: 'text', dead_letter_id: 'bigint' },
  outbox_shard_leases: { shard: 'smallint', owner: 'text', epoch: 'bigint', expires_at: 'timestamp with time zone' },
  outbox_relays: {
    relay_id: 'text',
    application_name: 'text',
    lease_ttl_ms: 'integer',
    heartbeat_at: 'timestamp with time zone',
    breaker_opened_at: 'timestamp with time zone',
  },
  outbox_relay_minutes: {
    minute: 'timestamp with time zone',
    relay_id: 'text',
    sent: 'bigint',
    dead_lettered: 'bigint',
    last_id: 'bigint',
  },
};

/**
 * How the relay's tables differ from what the migrations create: one line per missing
 * table, missing column or column of another type (empty when they match). Extra columns
 * and tables are fine.
 */
export async function schemaDrift(client: pg.ClientBase, schema: string): Promise<string[]> {
  const { rows } = await client.query<{ table: string; column: string; type: string }>(
    `SELECT c.relname AS table, a.attname AS column, format_type(a.atttypid, a.atttypmod) AS type
       FROM pg_catalog.pg_class AS c
       JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
       JOIN pg_catalog.pg_attribute AS a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
      WHERE n.nspname = $1 AND c.relname = ANY($2::text[]) AND c.relkind IN ('r', 'p')`,
    [schema, Object.keys(RELAY_COLUMNS)],
  );
  const found = new Map<string, Map<string, string>>();
  for (const r of rows) {
    let table = found.get(r.table);
    if (!table) found.set(r.table, (table = new Map()));
    table.set(r.column, r.type);
  }
  const problems: string[] = [];
  for (const [table, columns] of Object.entries(RELAY_COLUMNS)) {
    const have = found.get(table);
    if (!have) {
      problems.push(`table ${table} is missing`);
      continue;
    }
    for (const [column, type] of Object.entries(columns)) {
      const actual = have.get(column);
      if (actual === undefined) problems.push(`column ${table}.${column} is missing (the migrations create it as ${type})`);
      else if (actual !== type) problems.push(`column ${table}.${column} is ${actual}, the migrations create it as ${type}`);
    }
  }
  return problems;
}

/**
 * {@link assertMigrated}, and that the relay's tables still have the columns and types
 * the migrations gave them (a table altered by hand afterwards is refused, with the
 * column named).
 */
export async function assertRelaySchema(client: pg.ClientBase, schema: string): Promise<void> {
  await assertMigrated(client, schema);
  const problems = await schemaDrift(client, schema);
  if (problems.length > 0) {
    const quoted = quoteIdentifier(schema, 'schema');
    throw new SchemaError(`schema ${quoted} was changed after it was migrated: ${problems.join('; ')}`, { schema, problems });
  }
}
