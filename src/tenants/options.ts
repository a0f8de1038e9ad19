import { ConfigError } from '../shared/errors.js';
import { databaseUrlProblem } from '../shared/database.js';
import { schemaNameProblem } from '../shared/identifiers.js';
import { silentLogger, type Logger } from '../shared/logger.js';
import { resolveRelayOptions, type RelayOptions, type ResolvedRelayOptions } from '../relay/options.js';
import { tenantNamingProblem, type TenantNaming } from './naming.js';
import { tenantEncodingProblem } from './tenantEncoding.js';
import { optionValue } from '../shared/settings.js';
import { activityIntervalMs, discoveryIntervalMs, keyTemplate, sweepIntervalMs, tenantHeader, tenantIdleMs, tenantTurnMs, topicTemplate } from './settings.js';

/**
 * How the tenant relay finds its tenants. Re-evaluated every `discoveryIntervalMs` and on
 * {@link TenantRelay.discover}.
 * - `schemas`: every schema of the database `databaseUrl` names whose name matches the
 *   POSIX regular expression and that holds a migrated outbox; the tenant is the schema.
 * - `databases`: every database of that server whose name matches, with a migrated outbox
 *   in `schema` (default `public`); the tenant is the database.
 * - `query`: the rows of the user's SQL, run in the database `databaseUrl` names, with the
 *   columns `tenant`, `schema` and `database` (a database of the same server, or NULL for
 *   that one): no connection string is ever read from a table.
 */
export type TenantRule =
  | { kind: 'schemas'; databaseUrl: string; pattern: string }
  | { kind: 'databases'; databaseUrl: string; pattern: string; schema?: string }
  | { kind: 'query'; databaseUrl: string; sql: string };

/** Options of {@link createTenantRelay}: the rule, the budget, the naming, and the relay options every tenant shares. */
export interface TenantRelayOptions extends Omit<RelayOptions, 'databaseUrl' | 'schema' | 'delivery' | 'kafka'>, Partial<TenantNaming> {
  tenants: TenantRule;
  /**
   * Most Postgres connections the whole tenant relay holds at once (default 30): its
   * control connection, one for checks, and 2 × batchesInFlight + 3 per tenant being
   * served. Never exceeded: tenants wait their turn.
   */
  maxDatabaseConnections?: number;
  /** How often the rule is evaluated again, in ms (default 30000). */
  discoveryIntervalMs?: number;
  /** How often every tenant is checked for waiting rows, whatever the notifications said, in ms (default 60000). */
  sweepIntervalMs?: number;
  /** How often tenants in other databases are checked for inserts (pg_stat_database), in ms (default 500). */
  activityIntervalMs?: number;
  /** A tenant that published nothing for this long is released (its connections closed), in ms (default 2000). */
  tenantIdleMs?: number;
  /** While other tenants wait for a turn, a tenant is served this long before it gives its place up, in ms (default 1000). */
  tenantTurnMs?: number;
}

export interface ResolvedTenantRelayOptions {
  rule: TenantRule;
  naming: TenantNaming;
  maxDatabaseConnections: number;
  discoveryIntervalMs: number;
  sweepIntervalMs: number;
  activityIntervalMs: number;
  tenantIdleMs: number;
  tenantTurnMs: number;
  /** Connections one tenant's relay may hold: its pool (2 per batch in flight, the lease renewal, a spare) and its horizon probe. */
  connectionsPerTenant: number;
  /** The relay options of every tenant, resolved once against the rule's database. */
  relay: ResolvedRelayOptions;
  logger: Logger;
}

/** The tenant relay's own connections: the control connection (discovery, LISTEN) and one for checks. */
export const CONTROL_CONNECTIONS = 2;

/** Default of {@link TenantRelayOptions.maxDatabaseConnections}. */
export const DEFAULT_TENANT_CONNECTIONS = 30;

function checkRule(rule: TenantRule | undefined): TenantRule {
  if (!rule || typeof rule !== 'object') throw new ConfigError('tenants', 'is required: { kind: "schemas" | "databases" | "query", databaseUrl, … }');
  const urlProblem = typeof rule.databaseUrl === 'string' ? databaseUrlProblem(rule.databaseUrl) : 'is required';
  if (urlProblem) throw new ConfigError('tenants.databaseUrl', urlProblem);
  switch (rule.kind) {
    case 'schemas':
    case 'databases':
      if (typeof rule.pattern !== 'string' || rule.pattern.length === 0 || rule.pattern.length > 200) {
        throw new ConfigError('tenants.pattern', 'is required: a POSIX regular expression (Postgres `~`) of 1-200 characters, e.g. "^tenant_"');
      }
      if (rule.kind === 'databases' && rule.schema !== undefined) {
        const p = schemaNameProblem(rule.schema);
        if (p) throw new ConfigError('tenants.schema', p);
      }
      return rule;
    case 'query':
      if (typeof rule.sql !== 'string' || rule.sql.trim().length === 0) throw new ConfigError('tenants.sql', 'is required: a query returning the columns tenant, schema and database');
      return rule;
    default:
      throw new ConfigError('tenants.kind', `${JSON.stringify((rule as { kind: unknown }).kind)} is not one of schemas, databases, query`);
  }
}

/** Validate and default the options once, at the boundary. */
export function resolveTenantRelayOptions(options: TenantRelayOptions): ResolvedTenantRelayOptions {
  const rule = checkRule(options.tenants);
  const naming: TenantNaming = {
    topicTemplate: optionValue(topicTemplate, options.topicTemplate),
    keyTemplate: optionValue(keyTemplate, options.keyTemplate),
    tenantHeader: optionValue(tenantHeader, options.tenantHeader),
  };
  const namingProblem = tenantNamingProblem(naming);
  if (namingProblem) throw new ConfigError(namingProblem.setting, namingProblem.problem);
  if ((options as { delivery?: unknown }).delivery !== undefined && (options as { delivery?: unknown }).delivery !== 'at-least-once') {
    throw new ConfigError('delivery', 'the tenant relay publishes at least once (exactly-once delivery needs transactional ids per tenant, not built)');
  }
  const { tenants: _r, maxDatabaseConnections: _m, discoveryIntervalMs: _d, sweepIntervalMs: _s, activityIntervalMs: _a, tenantIdleMs: _i, tenantTurnMs: _t, topicTemplate: _tt, keyTemplate: _kt, tenantHeader: _th, ...relayOptions } = options;
  const relay = resolveRelayOptions({
    ...relayOptions,
    batchesInFlight: relayOptions.batchesInFlight ?? 1,
    databaseUrl: rule.databaseUrl,
    delivery: 'at-least-once',
    // A relay's partition maintenance runs on a pool of two connections of its own, which a
    // tenant's share of the budget (2 × batchesInFlight + 3) does not hold: tenants'
    // partitioned outboxes are maintained by `outbox-relay maintain-partitions` (cron).
    partitionMaintenanceIntervalMs: 0,
  });
  const encodingProblem = relay.encodings && tenantEncodingProblem(relay.encodings, naming);
  if (encodingProblem) throw encodingProblem;
  const connectionsPerTenant = 2 * relay.batchesInFlight + 3;
  const maxDatabaseConnections = options.maxDatabaseConnections ?? DEFAULT_TENANT_CONNECTIONS;
  if (!Number.isSafeInteger(maxDatabaseConnections) || maxDatabaseConnections < 1 || maxDatabaseConnections > 100_000) {
    throw new ConfigError('maxDatabaseConnections', `${JSON.stringify(maxDatabaseConnections)} is not a whole number from 1 to 100000`);
  }
  if (maxDatabaseConnections < CONTROL_CONNECTIONS + connectionsPerTenant) {
    throw new ConfigError(
      'maxDatabaseConnections',
      `${maxDatabaseConnections} cannot serve one tenant: the tenant relay holds ${CONTROL_CONNECTIONS} of its own and ${connectionsPerTenant} per tenant served (2 × batchesInFlight ${relay.batchesInFlight} + 3); at least ${CONTROL_CONNECTIONS + connectionsPerTenant}`,
    );
  }
  return {
    rule,
    naming,
    maxDatabaseConnections,
    discoveryIntervalMs: optionValue(discoveryIntervalMs, options.discoveryIntervalMs),
    sweepIntervalMs: optionValue(sweepIntervalMs, options.sweepIntervalMs),
    activityIntervalMs: optionValue(activityIntervalMs, options.activityIntervalMs),
    tenantIdleMs: optionValue(tenantIdleMs, options.tenantIdleMs),
    tenantTurnMs: optionValue(tenantTurnMs, options.tenantTurnMs),
    connectionsPerTenant,
    relay,
    logger: options.logger ?? silentLogger(),
  };
}
