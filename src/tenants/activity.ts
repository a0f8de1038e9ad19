import type pg from 'pg';
import { connect } from '../shared/database.js';
import { quoteIdentifier } from '../shared/identifiers.js';
import type { Logger } from '../shared/logger.js';
import type { ControlConnection } from './controlConnection.js';
import { databaseUrlOf, type Tenant } from './discovery.js';
import type { ResolvedTenantRelayOptions } from './options.js';
import { backlogSql, INSERTS_PER_DATABASE, INSERTS_PER_SCHEMA, SCHEMAS_NOTIFYING, schemasWithUnsent, unsentExists } from './sql/tenantQueries.js';

/** Schemas checked for waiting rows by one statement. */
const SWEEP_CHUNK = 200;

/**
 * How the tenant relay learns that an idle tenant has rows, without asking each tenant:
 * - tenants of the rule's database whose outbox has the insert trigger notify the
 *   control connection (LISTEN; nothing to do here);
 * - the other tenants of that database are watched through the statistics of their
 *   outbox (`pg_stat_user_tables.n_tup_ins`), tenants of other databases through their
 *   database's (`pg_stat_database.tup_inserted`): one statement per `activityIntervalMs`
 *   on the control connection, whatever the number of tenants. Postgres publishes a
 *   backend's counts at most about once a second, so these tenants wait up to ~1 s more.
 * - the sweep (every `sweepIntervalMs`, at start, after the control connection came back)
 *   asks every idle tenant's outbox itself, for whatever the others missed.
 */
export class TenantActivity {
  /** Schemas of the rule's database whose outbox notifies (refreshed by each sweep). */
  private notifying = new Set<string>();
  private readonly lastInserted = new Map<string, string>();
  /** Tenants already named in the no-trigger warning. */
  private readonly warned = new Set<string>();

  constructor(
    private readonly control: ControlConnection,
    private readonly here: string,
    private readonly options: ResolvedTenantRelayOptions,
    private readonly logger: Logger,
    private readonly wake: (t: Tenant) => void,
    private readonly idleTenants: () => Tenant[],
    private readonly withCheckSlot: <T>(work: () => Promise<T>) => Promise<T>,
  ) {}

  /** Ask every idle tenant's outbox whether rows wait, and wake those that have some. */
  async sweep(): Promise<void> {
    const { rows } = await this.control.query<{ schema: string }>(SCHEMAS_NOTIFYING);
    const notifying = new Set(rows.map((r) => r.schema));
    const byDatabase = new Map<string, Tenant[]>();
    for (const t of this.idleTenants()) byDatabase.set(t.database, [...(byDatabase.get(t.database) ?? []), t]);
    for (const t of byDatabase.get(this.here) ?? []) {
      if (notifying.has(t.schema) || this.warned.has(t.name)) continue;
      this.warned.add(t.name);
      this.logger.warn({ tenant: t.name, schema: t.schema }, 'tenant relay: this outbox has no insert trigger (outbox-relay migrate --notify-on-insert): it is watched through the statistics, up to about a second later');
    }
    this.notifying = notifying;
    for (const [database, tenants] of byDatabase) {
      if (database === this.here) {
        for (let i = 0; i < tenants.length; i += SWEEP_CHUNK) await this.wakeWithRows(tenants.slice(i, i + SWEEP_CHUNK), (sql) => this.control.query<{ i: number }>(sql));
      } else {
        await this.inDatabase(database, (client) => this.wakeWithRows(tenants, (sql) => client.query<{ i: number }>(sql))).catch((error: unknown) => this.logger.warn({ database, err: (error as Error).message }, 'tenant relay: could not sweep a database'));
      }
    }
  }

  private async wakeWithRows(tenants: Tenant[], query: (sql: string) => Promise<{ rows: Array<{ i: number }> }>): Promise<void> {
    const { rows } = await query(schemasWithUnsent(tenants.map((t) => quoteIdentifier(t.schema, 'schema'))));
    for (const r of rows) this.wake(tenants[r.i]!);
  }

  /** One look at the statistics of the tenants that do not notify: wake those whose count of inserts moved. */
  async poll(): Promise<void> {
    const idle = this.idleTenants();
    const quiet = idle.filter((t) => t.database === this.here && !this.notifying.has(t.schema));
    const elsewhere = idle.filter((t) => t.database !== this.here);
    if (quiet.length > 0) {
      const { rows } = await this.control.query<{ schema: string; inserted: string }>(INSERTS_PER_SCHEMA, [quiet.map((t) => t.schema)]);
      const bySchema = new Map(rows.map((r) => [r.schema, r.inserted]));
      for (const t of quiet) this.moved(`${t.database}/${t.schema}`, bySchema.get(t.schema), t);
    }
    if (elsewhere.length > 0) {
      const { rows } = await this.control.query<{ database: string; inserted: string }>(INSERTS_PER_DATABASE, [[...new Set(elsewhere.map((t) => t.database))]]);
      const byDatabase = new Map(rows.map((r) => [r.database, r.inserted]));
      for (const t of elsewhere) this.moved(`${t.database}/${t.schema}`, byDatabase.get(t.database), t);
    }
  }

  /** A counter read for the first time only sets the baseline (the sweep covers what came before). */
  private moved(key: string, inserted: string | undefined, t: Tenant): void {
    if (inserted === undefined) return;
    const before = this.lastInserted.get(key);
    this.lastInserted.set(key, inserted);
    if (before !== undefined && before !== inserted) this.wake(t);
  }

  /** Rows waiting in each of `tenants`, counted up to `cap`. */
  async backlogs(tenants: Tenant[], cap: number): Promise<Map<string, number>> {
    const out = new Map<string, number>();
    for (const t of tenants) {
      const sql = backlogSql(quoteIdentifier(t.schema, 'schema'));
      const count = async (query: (sql: string, params: unknown[]) => Promise<{ rows: Array<{ n: number }> }>): Promise<void> => {
        out.set(t.name, (await query(sql, [cap])).rows[0]?.n ?? 0);
      };
      if (t.database === this.here) await count((q, p) => this.control.query<{ n: number }>(q, p)).catch(() => undefined);
      else await this.inDatabase(t.database, (client) => count((q, p) => client.query<{ n: number }>(q, p))).catch(() => undefined);
    }
    return out;
  }

  /** Run `work` on a short connection to another database of the server, in the check slot. */
  private inDatabase<T>(database: string, work: (client: pg.ClientBase) => Promise<T>): Promise<T> {
    return this.withCheckSlot(async () => {
      const client = await connect(databaseUrlOf(this.options.rule.databaseUrl, database), `${this.options.relay.clientId}:tenant-check`);
      try {
        return await work(client);
      } finally {
        await client.end().catch(() => undefined);
      }
    });
  }

  /** Whether one tenant has rows waiting (asked as its relay is released). */
  async hasRows(t: Tenant): Promise<boolean> {
    const sql = unsentExists(quoteIdentifier(t.schema, 'schema'));
    if (t.database === this.here) return (await this.control.query<{ exists: boolean }>(sql)).rows[0]?.exists === true;
    return this.inDatabase(t.database, async (client) => (await client.query<{ exists: boolean }>(sql)).rows[0]?.exists === true);
  }
}
