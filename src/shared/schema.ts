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
}

