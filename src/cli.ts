#!/usr/bin/env node
import { Command, CommanderError, Option } from 'commander';
import { ConfigError, describeError } from './errors.js';
import { createLogger, type LogLevel } from './logger.js';
import { readSetting, type Setting } from './settings.js';
import * as settings from './settings.js';
import { RELAY_SETTINGS, type RelayOptions } from './relay.js';
import { runRelay, EXIT } from './run.js';
import { migrate, migrationScript } from './migrate.js';
import { formatStatus, getStatus } from './status.js';

// Only parsing and dispatch live here; every command is a library function.

type AnySetting = Setting<any>; // eslint-disable-line @typescript-eslint/no-explicit-any

function addSettings(command: Command, list: readonly AnySetting[]): Command {
  for (const s of list) {
    if (!s.flag) continue;
    // The default is in the text, not option.default(): a flag left unset must stay
    // undefined so that the environment variable can still win over the default.
    const fallback = s.defaultValue === undefined ? '' : `, default ${String(s.defaultValue)}`;
    const option = new Option(`${s.flag} <value>`, `${s.description} [env ${s.env}${fallback}]`);
    command.addOption(option);
  }
  return command;
}

/** Flag, then environment, then default, for each setting; checked as it is read. */
function resolve(list: readonly AnySetting[], flags: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const s of list) {
    const flagValue = s.flag ? (flags[camel(s.flag)] as string | undefined) : undefined;
    const value = readSetting(s, flagValue, process.env);
    if (value === undefined) {
      const where = s.flag ? `${s.flag} or ${s.env}` : s.secret ? `${s.env} or ${s.env}_FILE` : s.env;
      throw new ConfigError(s.flag ?? s.env, `is required (set ${where})`);
    }
    out[s.option] = value;
  }
  return out;
}

function camel(flag: string): string {
  return flag.replace(/^--/, '').replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());
}

function fail(error: unknown): never {
  process.stderr.write(`outbox-relay: ${describeError(error)}\n`);
  process.exit(error instanceof ConfigError ? EXIT.usage : EXIT.failure);
}

const program = new Command('outbox-relay')
  .description('Transactional outbox relay: PostgreSQL outbox table to Kafka, in order per key.')
  .showHelpAfterError(false)
  .exitOverride()
  .configureOutput({
    // Usage errors as one line, like every other error of this CLI.
    writeErr: (text) => process.stderr.write(`outbox-relay: ${text.replace(/^error: /, '').replace(/\s*\n\s*(?=\S)/g, ' ').trim()}\n`),
  });

addSettings(
  program
    .command('run')
    .description('Relay outbox rows to Kafka until SIGTERM/SIGINT (a second signal stops at once).'),
  RELAY_SETTINGS,
).action(async (flags: Record<string, unknown>) => {
  const o = resolve(RELAY_SETTINGS, flags);
  const logger = createLogger(o.logLevel as LogLevel);
  const code = await runRelay({ ...(o as unknown as RelayOptions), logger });
  logger.flush();
  process.exit(code);
});

const MIGRATE_SETTINGS = [settings.databaseUrl, settings.schema, settings.logLevel] as const;
addSettings(
  program
    .command('migrate')
    .description('Create or upgrade the outbox tables. Safe to run from several processes at once.')
    .option('--print', 'print the SQL for a DBA instead of applying it (needs no database)'),
  MIGRATE_SETTINGS,
).action(async (flags: Record<string, unknown>) => {
  if (flags.print) {
    const schema = readSetting(settings.schema, flags.schema as string | undefined, process.env) as string;
    process.stdout.write(await migrationScript(schema));
    return;
  }
  const o = resolve(MIGRATE_SETTINGS, flags);
  const logger = createLogger(o.logLevel as LogLevel);
  const result = await migrate({ databaseUrl: o.databaseUrl as string, schema: o.schema as string, logger });
  process.stdout.write(
    result.applied.length
      ? `applied ${result.applied.join(', ')}\n`
      : `schema ${o.schema as string} is up to date (${result.alreadyApplied.length} migrations)\n`,
  );
});

const STATUS_SETTINGS = [settings.databaseUrl, settings.schema] as const;
addSettings(
  program
    .command('status')
    .description('Backlog, oldest pending age, and which relay owns which shards.')
    .option('--json', 'print JSON instead of a table'),
  STATUS_SETTINGS,
).action(async (flags: Record<string, unknown>) => {
  const o = resolve(STATUS_SETTINGS, flags);
  const status = await getStatus({ databaseUrl: o.databaseUrl as string, schema: o.schema as string });
  process.stdout.write(flags.json ? `${JSON.stringify(status, null, 2)}\n` : formatStatus(status));
});

// purge-processed: the consumer runtime's retention (src/processedMessages.ts). Imported
// here, in its own block, so the command stays one self-contained piece.
const consumerSettings = await import('./consumerSettings.js');
const PURGE_SETTINGS = [settings.databaseUrl, settings.schema, consumerSettings.retentionDays, consumerSettings.purgeBatchSize, settings.logLevel] as const;
addSettings(
  program
    .command('purge-processed')
    .description('Delete processed_messages rows older than the retention, in bounded batches. Safe beside running consumers.'),
  PURGE_SETTINGS,
).action(async (flags: Record<string, unknown>) => {
  const o = resolve(PURGE_SETTINGS, flags);
  const { purgeProcessedMessages } = await import('./processedMessages.js');
  const logger = createLogger(o.logLevel as LogLevel);
  const result = await purgeProcessedMessages({
    databaseUrl: o.databaseUrl as string,
    schema: o.schema as string,
    retentionDays: o.retentionDays as number,
    batchSize: o.batchSize as number,
    logger,
  });
  logger.flush();
  process.stdout.write(`deleted ${result.deleted} processed_messages rows older than ${o.retentionDays as number} days (${result.batches} batches)\n`);
});

try {
  await program.parseAsync(process.argv);
} catch (error) {
  if (error instanceof CommanderError) {
    // Commander already printed its message (or the help text).
    process.exit(error.exitCode === 0 ? EXIT.ok : EXIT.usage);
  }
  fail(error);
}
