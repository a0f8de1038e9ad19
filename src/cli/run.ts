import type { Command } from 'commander';
import { createLogger, type LogLevel } from '../shared/logger.js';
import { databaseUrl, schema } from '../shared/commonSettings.js';
import type { RelayOptions } from '../relay/options.js';
import { maxDatabaseConnections, outboxesFile } from '../relay/relayGroup.js';
import { runRelay, runRelayGroup, RUN_SETTINGS, type RunRelayGroupOptions } from '../commands/run.js';
import { runTenantRelay, tenantRuleFromSettings, type RunTenantRelayOptions } from '../commands/runTenants.js';
import { TENANT_SETTINGS } from '../tenants/settings.js';
import { ConfigError } from '../shared/errors.js';
import { addSettings, resolve } from './settings.js';
import { scopeOf } from './outboxScope.js';

// `outbox-relay run`: one outbox (DATABASE_URL), a list of them, or the tenants a rule finds.

/** The settings `run` reads with a list of outboxes: each outbox names its database and schema. */
const GROUP_SETTINGS = [...RUN_SETTINGS.filter((s) => s !== databaseUrl && s !== schema), maxDatabaseConnections];

export function addRunCommand(program: Command): void {
  addSettings(
    program
      .command('run')
      .description('Relay outbox rows to Kafka until SIGTERM/SIGINT (a second signal stops at once). One outbox (DATABASE_URL), several (--outboxes-file), or the tenants a rule finds (--tenant-schemas, --tenant-databases, --tenant-query-file).'),
    [...RUN_SETTINGS, outboxesFile, maxDatabaseConnections, ...TENANT_SETTINGS],
  ).action(async (flags: Record<string, unknown>) => {
    const { list } = scopeOf(flags);
    const ruleFlags = resolve(TENANT_SETTINGS, flags);
    if (!ruleFlags.tenantSchemas && !ruleFlags.tenantDatabases && !ruleFlags.tenantQueryFile) {
      // A tenant setting without a rule would be ignored: refused instead.
      const stray = TENANT_SETTINGS.find((s) => ruleFlags[s.option] !== s.defaultValue);
      if (stray) throw new ConfigError(stray.flag ?? stray.env, 'applies to tenants only: give a rule (--tenant-schemas, --tenant-databases or --tenant-query-file; docs/tenants.md)');
    } else {
      if (list) throw new ConfigError('--tenant-schemas', 'a tenant rule and a list of outboxes (--outboxes-file, OUTBOX_OUTBOXES) exclude each other');
      const t = resolve([...RUN_SETTINGS, maxDatabaseConnections, ...TENANT_SETTINGS], flags);
      const logger = createLogger(t.logLevel as LogLevel);
      // 0, the relay group's "no bound", is no budget for tenants: the tenant relay's default then.
      const maxConnections = (t.maxDatabaseConnections as number) || undefined;
      const { databaseUrl: _u, schema: _s, tenantSchemas: _ts, tenantDatabases: _td, tenantQueryFile: _tq, ...rest } = t;
      const tenants = tenantRuleFromSettings(t as never)!;
      // A tenant served takes 2 connections per batch in flight: one each unless asked for more.
      const batchesGiven = flags.batchesInFlight !== undefined || process.env.OUTBOX_BATCHES_IN_FLIGHT !== undefined;
      const code = await runTenantRelay({ ...(rest as unknown as RunTenantRelayOptions), ...(batchesGiven ? {} : { batchesInFlight: undefined }), tenants, maxDatabaseConnections: maxConnections, logger });
      logger.flush();
      process.exit(code);
    }
    if (list) {
      const o = resolve(GROUP_SETTINGS, flags);
      const logger = createLogger(o.logLevel as LogLevel);
      const code = await runRelayGroup({ ...(o as unknown as RunRelayGroupOptions), outboxes: list, logger });
      logger.flush();
      process.exit(code);
    }
    // Read although one outbox has no use for it: a bad value is refused either way.
    const o = resolve([...RUN_SETTINGS, maxDatabaseConnections], flags);
    const logger = createLogger(o.logLevel as LogLevel);
    // The relay's options are resolved once, by createRelay inside runRelay, before anything
    // connects (a bad value, an unreadable TLS file: ConfigError, exit 2); resolving them
    // here as well would check and read everything twice.
    const code = await runRelay({ ...(o as unknown as RelayOptions), logger });
    logger.flush();
    process.exit(code);
  });
}
