import type pg from 'pg';
import { ConfigError, describeError } from '../shared/errors.js';
import { schemaNameProblem } from '../shared/identifiers.js';
import { connect } from '../shared/database.js';
import type { TenantRule } from './options.js';
import { DATABASES_MATCHING, HAS_OUTBOX, SCHEMAS_WITH_OUTBOX } from './sql/tenantQueries.js';

/** One tenant: an outbox in a schema of a database of the rule's server. */
export interface Tenant {
  name: string;
  /** The database's name; the same server as the rule's URL. */
  database: string;
  schema: string;
}

/** What one evaluation of the rule found: the tenants, and the rows it had to pass over (each with why). */
export interface Discovery {
  tenants: Tenant[];
  refused: Array<{ row: string; reason: string }>;
}

/** The rule's URL with another database named (same server, user, password and parameters). */
export function databaseUrlOf(ruleUrl: string, database: string): string {
  const url = new URL(ruleUrl);
  url.pathname = `/${encodeURIComponent(database)}`;
  return url.toString();
}

/** The database the rule's URL names. */
export function ruleDatabase(ruleUrl: string): string {
  return decodeURIComponent(new URL(ruleUrl).pathname.replace(/^\//, '')) || 'postgres';
}

/** An invalid regular expression (22023/2201B) is the user's configuration, not a passing fault. */
function ruleError(setting: string, error: unknown): unknown {
  const code = (error as { code?: string } | undefined)?.code;
  return code === '2201B' || code === '22023' || code === '42601' || code === '42703' || code === '42P01' ? new ConfigError(setting, `Postgres refused it: ${describeError(error)}`) : error;
}

/**
 * Evaluate the rule once, on the control connection (`query`, a connection to the rule's
 * database). A `databases` rule connects once to each matching database it has not seen
 * before (`known`) to check that it holds a migrated outbox.
 *
 * @throws ConfigError when Postgres refuses the pattern or the query itself.
 */
/** Runs one statement on the control connection. */
export type Query = <R extends pg.QueryResultRow>(sql: string, params?: unknown[]) => Promise<{ rows: R[] }>;

export async function discoverTenants(rule: TenantRule, query: Query, known: ReadonlySet<string>, applicationName = 'outbox-relay:tenant-discovery'): Promise<Discovery> {
  const here = ruleDatabase(rule.databaseUrl);
  const refused: Discovery['refused'] = [];
  if (rule.kind === 'schemas') {
    const { rows } = await query<{ schema: string }>(SCHEMAS_WITH_OUTBOX, [rule.pattern]).catch((e: unknown) => Promise.reject(ruleError('tenants.pattern', e)));
    const tenants: Tenant[] = [];
    for (const r of rows) {
      const problem = schemaNameProblem(r.schema);
      if (problem) refused.push({ row: r.schema, reason: problem });
      else tenants.push({ name: r.schema, database: here, schema: r.schema });
    }
    return { tenants, refused };
  }
  if (rule.kind === 'databases') {
    const schema = rule.schema ?? 'public';
    const { rows } = await query<{ database: string }>(DATABASES_MATCHING, [rule.pattern]).catch((e: unknown) => Promise.reject(ruleError('tenants.pattern', e)));
    const tenants: Tenant[] = [];
    for (const r of rows) {
      if (known.has(r.database)) {
        tenants.push({ name: r.database, database: r.database, schema });
        continue;
      }
      // A database seen for the first time: is its outbox there (migrated) yet?
      let other: pg.Client | undefined;
      try {
        other = r.database === here ? undefined : await connect(databaseUrlOf(rule.databaseUrl, r.database), applicationName);
        const { rows: found } = other ? await other.query<{ present: boolean }>(HAS_OUTBOX, [schema]) : await query<{ present: boolean }>(HAS_OUTBOX, [schema]);
        if (found[0]?.present) tenants.push({ name: r.database, database: r.database, schema });
        else refused.push({ row: r.database, reason: `no migrated outbox in schema ${schema} (yet)` });
      } catch (error) {
        refused.push({ row: r.database, reason: `not reachable: ${describeError(error)}` });
      } finally {
        await other?.end().catch(() => undefined);
      }
    }
    return { tenants, refused };
  }
  const { rows } = await query<{ tenant: unknown; schema: unknown; database: unknown }>(rule.sql).catch((e: unknown) => Promise.reject(ruleError('tenants.sql', e)));
  const tenants: Tenant[] = [];
  for (const r of rows) {
    if (typeof r.tenant !== 'string' || typeof r.schema !== 'string' || (r.database !== null && r.database !== undefined && typeof r.database !== 'string')) {
      refused.push({ row: JSON.stringify(r).slice(0, 200), reason: 'the query must return the text columns tenant, schema and database (NULL: this database)' });
      continue;
    }
    const problem = schemaNameProblem(r.schema);
    if (problem) refused.push({ row: r.tenant, reason: problem });
    else tenants.push({ name: r.tenant, database: (r.database as string | null) ?? here, schema: r.schema });
  }
  return { tenants, refused };
}
