import type { Command } from 'commander';
import { ConfigError, describeError } from '../shared/errors.js';
import { createLogger, type LogLevel } from '../shared/logger.js';
import { readSetting } from '../shared/settings.js';
import { databaseUrl, logLevel, schema } from '../shared/commonSettings.js';
import { EXIT } from '../commands/run.js';
import { migrate, migrationScript } from '../commands/migrate.js';
import { formatTenantStatuses, tenantStatuses } from '../commands/tenantStatus.js';
import { tenantRuleFromSettings } from '../commands/runTenants.js';
import { tenantDatabases, tenantQueryFile, tenantSchemas } from '../tenants/settings.js';
import { formatStatus, getStatus } from '../commands/status.js';
import { cleanupOutbox } from '../commands/cleanup.js';
import { cleanupBatchSize, cleanupRetention } from '../commands/options.js';
import { purgeBatchSize, purgeProcessedMessages, purgeRetention, purgeRetentionDays, resolvePurgeRetention } from '../commands/purgeProcessed.js';
import { addSettings, readOne, resolve } from './settings.js';
import { scopeOf, withOutboxFlags } from './outboxScope.js';
import { ProgressLine } from './progress.js';

// The commands that look after an outbox's tables: migrate, status, cleanup (sent outbox
// rows) and purge-processed (the consumer runtime's processed_messages).

const MIGRATE_SETTINGS = [databaseUrl, schema, logLevel] as const;
const STATUS_SETTINGS = [databaseUrl, schema] as const;
const CLEANUP_SETTINGS = [databaseUrl, schema, cleanupRetention, cleanupBatchSize, logLevel] as const;
// --retention and the deprecated --retention-days are read on their own (readPurgeRetention):
// whether each was given matters.
const PURGE_FLAGS = [databaseUrl, schema, purgeRetention, purgeRetentionDays, purgeBatchSize, logLevel] as const;
const PURGE_SETTINGS = [databaseUrl, schema, purgeBatchSize, logLevel] as const;

export function addMaintenanceCommands(program: Command): void {
  addSettings(
    withOutboxFlags(
      program
        .command('migrate')
        .description('Create or upgrade the outbox tables (of every outbox of a list, or the one --outbox names). Safe to run from several processes at once.')
        .option('--print', 'print the SQL for a DBA instead of applying it (needs no database)')
        .option('--notify-on-insert', "also create the outbox's insert trigger, which wakes the tenant relay (docs/tenants.md)"),
    ),
    MIGRATE_SETTINGS,
  ).action(async (flags: Record<string, unknown>) => {
    const scope = scopeOf(flags);
    if (flags.print) {
      // The schema alone: --print connects to nothing, so DATABASE_URL is not required.
      for (const target of scope.each()) {
        if (target) process.stdout.write(`-- outbox ${target.name}\n`);
        process.stdout.write(await migrationScript(target ? target.schema : (readOne(schema, flags) as string), { notifyOnInsert: flags.notifyOnInsert === true }));
      }
      return;
    }
    for (const target of scope.each()) {
      const o = resolve(MIGRATE_SETTINGS, flags, target);
      const logger = createLogger(o.logLevel as LogLevel);
      const result = await migrate({ databaseUrl: o.databaseUrl as string, schema: o.schema as string, notifyOnInsert: flags.notifyOnInsert === true, logger });
      process.stdout.write(
        (target ? `outbox ${target.name}: ` : '') +
          (result.applied.length ? `applied ${result.applied.join(', ')}\n` : `schema ${o.schema as string} is up to date (${result.alreadyApplied.length} migrations)\n`),
      );
    }
  });

  addSettings(
    withOutboxFlags(
      program
        .command('status')
        .description('Backlog, oldest pending age, and which relay owns which shards (of every outbox of a list, or the one --outbox names; or one line per tenant of a tenant rule, --tenant narrowing it).')
        .option('--json', 'print JSON instead of a table')
        .option('--tenant <text>', 'with a tenant rule: only the tenants whose name holds this text'),
    ),
    [...STATUS_SETTINGS, tenantSchemas, tenantDatabases, tenantQueryFile],
  ).action(async (flags: Record<string, unknown>) => {
    const scope = scopeOf(flags);
    const ruleFlags = resolve([tenantSchemas, tenantDatabases, tenantQueryFile], flags);
    if (ruleFlags.tenantSchemas || ruleFlags.tenantDatabases || ruleFlags.tenantQueryFile) {
      const o = resolve([...STATUS_SETTINGS, tenantSchemas, tenantDatabases, tenantQueryFile], flags);
      const { tenants, refused } = await tenantStatuses(tenantRuleFromSettings(o as never)!, (flags.tenant as string | undefined) ?? '');
      process.stdout.write(flags.json ? `${JSON.stringify({ tenants, refused }, null, 2)}\n` : formatTenantStatuses(tenants));
      if (tenants.some((t) => t.error)) process.exit(EXIT.failure);
      return;
    }
    if (flags.tenant !== undefined) throw new ConfigError('--tenant', 'applies with a tenant rule only (--tenant-schemas, --tenant-databases or --tenant-query-file)');
    if (scope.list && flags.outbox === undefined) {
      // Every outbox; one that cannot be read is reported and the others still shown.
      const results: Array<{ outbox: string; status?: unknown; error?: string }> = [];
      let failed = false;
      for (const target of scope.list) {
        try {
          const status = await getStatus({ databaseUrl: target.databaseUrl, schema: target.schema });
          results.push({ outbox: target.name, status });
          if (!flags.json) process.stdout.write(`== outbox ${target.name} (${target.schema})\n${formatStatus(status)}\n`);
        } catch (error) {
          failed = true;
          results.push({ outbox: target.name, error: describeError(error) });
          if (!flags.json) process.stdout.write(`== outbox ${target.name} (${target.schema})\nunavailable: ${describeError(error)}\n\n`);
        }
      }
      if (flags.json) process.stdout.write(`${JSON.stringify(results, null, 2)}\n`);
      if (failed) process.exit(EXIT.failure);
      return;
    }
    const o = resolve(STATUS_SETTINGS, flags, scope.one());
    const status = await getStatus({ databaseUrl: o.databaseUrl as string, schema: o.schema as string });
    process.stdout.write(flags.json ? `${JSON.stringify(status, null, 2)}\n` : formatStatus(status));
  });

  addSettings(
    withOutboxFlags(
      program
        .command('cleanup')
        .description('Delete sent outbox rows older than the retention, in bounded batches of short transactions. Pending rows are never touched. Safe beside running relays.'),
    ),
    CLEANUP_SETTINGS,
  ).action(async (flags: Record<string, unknown>) => {
    const o = resolve(CLEANUP_SETTINGS, flags, scopeOf(flags).one());
    const progress = new ProgressLine('deleted');
    const logger = createLogger(o.logLevel as LogLevel, progress.logDestination());
    const result = await cleanupOutbox({
      databaseUrl: o.databaseUrl as string,
      schema: o.schema as string,
      retention: o.retention as string,
      batchSize: o.batchSize as number,
      onProgress: progress.enabled ? (e) => progress.withTotal(e.estimatedTotal, true).update(e.deleted) : undefined,
      logger,
    }).finally(() => progress.end());
    logger.flush();
    process.stdout.write(`deleted ${result.deleted} sent rows older than ${o.retention as string} (${result.batches} batches)\n`);
  });

  addSettings(
    withOutboxFlags(
      program
        .command('purge-processed')
        .description('Delete processed_messages rows older than the retention, in bounded batches. Safe beside running consumers.'),
    ),
    PURGE_FLAGS,
  ).action(async (flags: Record<string, unknown>) => {
    const o = resolve(PURGE_SETTINGS, flags, scopeOf(flags).one());
    const retention = resolvePurgeRetention(
      {
        // Without its default, so that a --retention-days given alone is not compared with it.
        retention: readSetting({ ...purgeRetention, defaultValue: undefined }, flags.retention as string | undefined, process.env),
        retentionDays: readSetting(purgeRetentionDays, flags.retentionDays as string | undefined, process.env),
      },
      { retention: '--retention', retentionDays: '--retention-days' },
    );
    const progress = new ProgressLine('deleted');
    const logger = createLogger(o.logLevel as LogLevel, progress.logDestination());
    const result = await purgeProcessedMessages({
      databaseUrl: o.databaseUrl as string,
      schema: o.schema as string,
      retention,
      batchSize: o.batchSize as number,
      onProgress: progress.enabled ? (e) => progress.withTotal(e.estimatedTotal, true).update(e.deleted) : undefined,
      logger,
    }).finally(() => progress.end());
    logger.flush();
    process.stdout.write(`deleted ${result.deleted} processed_messages rows older than ${retention} (${result.batches} batches)\n`);
  });
}
