import { readFileSync } from 'node:fs';
import { ConfigError, describeError } from '../shared/errors.js';
import type { Logger } from '../shared/logger.js';
import { optionValue } from '../shared/settings.js';
import { describeKafkaSecurity } from '../shared/kafkaSecurity.js';
import { metricsAddress, metricsSampleIntervalMs } from '../metrics/options.js';
import { serveTenantRelayMetrics } from '../metrics/tenantRelayMetrics.js';
import { createTenantRelay } from '../tenants/tenantRelay.js';
import type { TenantRelayOptions, TenantRule } from '../tenants/options.js';
import { runUntilSignalled, type RunRelayOptions } from './run.js';

/** Options of {@link runTenantRelay}: the tenant relay's, plus the metrics server and signal handling. */
export interface RunTenantRelayOptions extends TenantRelayOptions, Pick<RunRelayOptions, 'metricsAddress' | 'metricsSampleIntervalMs' | 'handleSignals' | 'signal'> {
  logger: Logger;
}

/**
 * The rule of `run --tenant-schemas`, `--tenant-databases` or `--tenant-query-file`: at most
 * one of them, with DATABASE_URL (the rule's database) and `--schema` (a database rule's
 * schema). Undefined when none is given.
 *
 * @throws ConfigError for two rules at once, or a query file that cannot be read (its
 *   content is never quoted).
 */
export function tenantRuleFromSettings(o: { databaseUrl?: string; schema?: string; tenantSchemas?: string; tenantDatabases?: string; tenantQueryFile?: string }): TenantRule | undefined {
  const given = (['tenantSchemas', 'tenantDatabases', 'tenantQueryFile'] as const).filter((k) => (o[k] ?? '') !== '');
  if (given.length === 0) return undefined;
  if (given.length > 1) throw new ConfigError('--tenant-schemas', `give one tenant rule, not ${given.length} (--tenant-schemas, --tenant-databases, --tenant-query-file)`);
  const databaseUrl = o.databaseUrl ?? '';
  if (o.tenantSchemas) return { kind: 'schemas', databaseUrl, pattern: o.tenantSchemas };
  if (o.tenantDatabases) return { kind: 'databases', databaseUrl, pattern: o.tenantDatabases, ...(o.schema ? { schema: o.schema } : {}) };
  let sql: string;
  try {
    sql = readFileSync(o.tenantQueryFile!, 'utf8');
  } catch (error) {
    throw new ConfigError('--tenant-query-file', `cannot read ${JSON.stringify(o.tenantQueryFile)}: ${(error as NodeJS.ErrnoException).code ?? 'unreadable'}`);
  }
  return { kind: 'query', databaseUrl, sql };
}

/**
 * `outbox-relay run` with a tenant rule: the tenant relay (docs/tenants.md) until SIGTERM
 * or SIGINT, as runRelay: the first signal drains every tenant being served, a second one
 * stops at once. SIGUSR2 evaluates the rule at once. /metrics, /healthz and /readyz as for one relay, with the tenant relay's
 * metrics (src/metrics/tenantRelayMetrics.ts).
 *
 * @returns the exit code: EXIT.ok after a soft stop, EXIT.forced after a hard one
 */
export async function runTenantRelay(options: RunTenantRelayOptions): Promise<number> {
  const relay = createTenantRelay(options);
  const address = optionValue(metricsAddress, options.metricsAddress);
  const sampleIntervalMs = optionValue(metricsSampleIntervalMs, options.metricsSampleIntervalMs);
  // SIGUSR2: evaluate the rule now (a tenant just created is served without waiting for the interval).
  const onDiscover = (): void => {
    options.logger.info('SIGUSR2: evaluating the tenant rule now');
    relay.discover().catch((error: unknown) => options.logger.warn({ err: describeError(error) }, 'tenant discovery on SIGUSR2 failed'));
  };
  if (options.handleSignals ?? true) process.on('SIGUSR2', onDiscover);
  try {
    return await runUntilSignalled(relay, options, async () => {
      options.logger.info({ kafka: describeKafkaSecurity(options), tenants: relay.tenants().length }, 'kafka connection security');
      return serveTenantRelayMetrics(relay, { address, sampleIntervalMs, logger: options.logger });
    });
  } finally {
    process.off('SIGUSR2', onDiscover);
  }
}
