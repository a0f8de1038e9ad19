import { connect } from '../shared/database.js';
import { ConfigError, describeError } from '../shared/errors.js';
import { checkOutboxList, MAX_OUTBOXES, type OutboxDefinition } from '../shared/outboxList.js';
import { discoverTenants, databaseUrlOf, type Discovery, type Tenant } from '../tenants/discovery.js';
import type { TenantRule } from '../tenants/options.js';
import { getStatus, type OutboxStatus } from './status.js';

/** One tenant in {@link tenantStatuses}: its outbox's status, or why it could not be read. */
export interface TenantOutboxStatus extends Tenant {
  status?: OutboxStatus;
  error?: string;
}

/** The rule evaluated once, on a connection of its own. */
async function discoverOnce(rule: TenantRule, applicationName: string): Promise<Discovery> {
  const client = await connect(rule.databaseUrl, applicationName);
  try {
    return await discoverTenants(rule, (sql, params) => client.query(sql, params), new Set());
  } finally {
    await client.end().catch(() => undefined);
  }
}

/**
 * `outbox-relay status` with a tenant rule: evaluate the rule as the tenant relay would,
 * then read each tenant's outbox (`getStatus`), one after the other, `filter` (a
 * substring of the tenant's name) narrowing the list. A tenant whose outbox cannot be
 * read is reported with the reason; the others are still read.
 */
export async function tenantStatuses(rule: TenantRule, filter = ''): Promise<{ tenants: TenantOutboxStatus[]; refused: Array<{ row: string; reason: string }> }> {
  const found = await discoverOnce(rule, 'outbox-relay:status');
  const tenants: TenantOutboxStatus[] = [];
  for (const t of found.tenants.filter((x) => x.name.includes(filter))) {
    try {
      tenants.push({ ...t, status: await getStatus({ databaseUrl: databaseUrlOf(rule.databaseUrl, t.database), schema: t.schema }) });
    } catch (error) {
      tenants.push({ ...t, error: describeError(error) });
    }
  }
  return { tenants, refused: found.refused };
}

/** One line per tenant: pending rows, the oldest one's age, dead letters, parked keys. */
export function formatTenantStatuses(list: TenantOutboxStatus[]): string {
  const rows = list.map((t) =>
    t.status
      ? [t.name, t.database, t.schema, String(t.status.pending), t.status.oldestPendingSeconds === null ? '-' : t.status.oldestPendingSeconds.toFixed(1), String(t.status.deadLetters.total), String(t.status.parkedKeys.total)]
      : [t.name, t.database, t.schema, `unavailable: ${t.error}`, '', '', ''],
  );
  const header = ['tenant', 'database', 'schema', 'pending', 'oldest pending (s)', 'dead letters', 'parked keys'];
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (i === 3 && r[4] === '' ? 0 : r[i]!.length))));
  const line = (cells: string[]): string => cells.map((c, i) => c.padEnd(widths[i]!)).join('  ').trimEnd();
  return [line(header), ...rows.map(line)].join('\n') + `\n${list.length} tenants\n`;
}

/**
 * The tenants a rule finds, narrowed by `filter` (a substring of the name), as a list of
 * outboxes for the console (`outbox-relay console --tenant-schemas …`): one entry per
 * tenant, named by the tenant.
 *
 * @throws ConfigError when more tenants match than one console shows (narrow them with
 *   `--tenant`), when none does, or when a tenant's name cannot be an outbox's.
 */
export async function tenantOutboxes(rule: TenantRule, filter = ''): Promise<OutboxDefinition[]> {
  const found = await discoverOnce(rule, 'outbox-relay:console');
  const tenants = found.tenants.filter((t) => t.name.includes(filter));
  if (tenants.length === 0) throw new ConfigError('--tenant', `no tenant of the rule${filter ? ` has ${JSON.stringify(filter)} in its name` : ''} (${found.tenants.length} found)`);
  if (tenants.length > MAX_OUTBOXES) {
    throw new ConfigError('--tenant', `${tenants.length} tenants match; one console shows at most ${MAX_OUTBOXES}: narrow them with --tenant TEXT (a part of their names)`);
  }
  return checkOutboxList(
    tenants.map((t) => ({ name: t.name, databaseUrl: databaseUrlOf(rule.databaseUrl, t.database), schema: t.schema })),
    '--tenant',
  );
}
