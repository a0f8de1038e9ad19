#!/usr/bin/env node
import { Command, CommanderError, Option } from 'commander';
import { ConfigError, describeError } from './shared/errors.js';
import { createLogger, type LogLevel } from './shared/logger.js';
import { formatSettingValue, readSetting, type Setting } from './shared/settings.js';
import { databaseUrl, logLevel, schema } from './shared/commonSettings.js';
import { runRelay, EXIT, RUN_SETTINGS, type RunRelayOptions } from './commands/run.js';
import { migrate, migrationScript } from './commands/migrate.js';
import { formatStatus, getStatus } from './commands/status.js';
import { runRelayGroup, type RunRelayGroupOptions } from './commands/run.js';
import { maxDatabaseConnections, outboxesFile } from './relay/relayGroup.js';
import { readOutboxList, type OutboxDefinition } from './shared/outboxList.js';

// Only parsing and dispatch live here; every command is a library function.

type AnySetting = Setting<any>; // eslint-disable-line @typescript-eslint/no-explicit-any

function addSettings(command: Command, list: readonly AnySetting[]): Command {
  for (const s of list) {
    if (!s.flag) continue;
    // The default is in the text, not option.default(): a flag left unset must stay
    // undefined so that the environment variable can still win over the default.
    const shown = formatSettingValue(s.defaultValue);
    const fallback = shown === undefined ? '' : `, default ${shown}`;
    const option = new Option(`${s.flag} <value>`, `${s.description} [env ${s.env}${fallback}]`);
    command.addOption(option);
  }
  return command;
}

/**
 * Where each resolved option's value came from, as the user would name it: the flag or
 * variable they set, or (for a default) the flag and the variable that would set it.
 * Library errors name options (`kafkaSaslUsername`); fail() renames them with this.
 */
const optionSources = new Map<string, string>();

function sourceOf(s: AnySetting, flagValue: string | undefined): string {
  if (flagValue !== undefined && s.flag) return s.flag;
  if (process.env[s.env] !== undefined && process.env[s.env] !== '') return s.env;
  if (s.secret && process.env[`${s.env}_FILE`]) return `${s.env}_FILE`;
  if (s.flag) return `${s.flag} or ${s.env}`;
  return s.secret ? `${s.env} or ${s.env}_FILE` : s.env;
}

/**
 * The outbox an operator command acts on when an outboxes file (or OUTBOX_OUTBOXES) lists
 * several: chosen with --outbox, it supplies the database URL and the schema.
 */
let selectedOutbox: OutboxDefinition | undefined;

/** The outboxes listed by --outboxes-file / OUTBOX_OUTBOXES_FILE / OUTBOX_OUTBOXES, if any. */
function outboxList(flags: Record<string, unknown>): OutboxDefinition[] | undefined {
  const list = readOutboxList((flags.outboxesFile as string | undefined) || undefined, process.env);
  if (list && process.env.DATABASE_URL) throw new ConfigError('DATABASE_URL', 'and a list of outboxes are both set; the outboxes file (or OUTBOX_OUTBOXES) names each database, unset DATABASE_URL');
  return list;
}

/**
 * For a command that acts on one outbox: with a list of outboxes, --outbox picks one
 * (needed when the list has several); without a list, --outbox is refused.
 */
function selectOutbox(flags: Record<string, unknown>, list = outboxList(flags)): void {
  const name = flags.outbox as string | undefined;
  if (!list) {
    if (name !== undefined) throw new ConfigError('--outbox', 'needs a list of outboxes (--outboxes-file, OUTBOX_OUTBOXES_FILE or OUTBOX_OUTBOXES)');
    return;
  }
  if (name === undefined && list.length > 1) throw new ConfigError('--outbox', `is required: the list has ${list.length} outboxes (${list.map((o) => o.name).join(', ')})`);
  const found = name === undefined ? list[0] : list.find((o) => o.name === name);
  if (!found) throw new ConfigError('--outbox', `${JSON.stringify(name)} is not in the list (${list.map((o) => o.name).join(', ')})`);
  selectedOutbox = found;
}

/** --outbox and --outboxes-file on a command that acts on one outbox (or, where said, on each). */
function withOutboxFlags(command: Command): Command {
  return command
    .option('--outbox <name>', 'with a list of outboxes: the one to act on')
    .option('--outboxes-file <path>', 'JSON file listing the outboxes (instead of DATABASE_URL) [env OUTBOX_OUTBOXES_FILE]');
}

/** Flag, then environment, then default, for each setting; checked as it is read. */
function resolve(list: readonly AnySetting[], flags: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const s of list) {
    if (selectedOutbox && (s === databaseUrl || s === schema)) {
      optionSources.set(s.option, `outbox ${selectedOutbox.name}`);
      out[s.option] = s === databaseUrl ? selectedOutbox.databaseUrl : selectedOutbox.schema;
      continue;
    }
    const flagValue = s.flag ? (flags[camel(s.flag)] as string | undefined) : undefined;
    optionSources.set(s.option, sourceOf(s, flagValue));
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

/** A ConfigError naming a library option, renamed after the flag or variable the user set. */
function userNamed(error: unknown): unknown {
  if (!(error instanceof ConfigError)) return error;
  const source = optionSources.get(error.setting);
  if (source === undefined) return error;
  return new ConfigError(source, error.message.slice(error.setting.length + 2));
}

function fail(error: unknown): never {
  error = userNamed(error);
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
    .description('Relay outbox rows to Kafka until SIGTERM/SIGINT (a second signal stops at once). One outbox (DATABASE_URL), or several (--outboxes-file).'),
  [...RUN_SETTINGS, outboxesFile, maxDatabaseConnections],
).action(async (flags: Record<string, unknown>) => {
  const outboxes = outboxList(flags);
  if (outboxes) {
    if (flags.schema !== undefined || process.env.OUTBOX_SCHEMA) throw new ConfigError(flags.schema !== undefined ? '--schema' : 'OUTBOX_SCHEMA', 'is per outbox with a list of outboxes: set "schema" in the outboxes file (or OUTBOX_<NAME>_SCHEMA)');
    const o = resolve([...RUN_SETTINGS.filter((s) => s !== databaseUrl && s !== schema), maxDatabaseConnections], flags);
    const logger = createLogger(o.logLevel as LogLevel);
    const code = await runRelayGroup({ ...(o as unknown as RunRelayGroupOptions), outboxes, logger });
    logger.flush();
    process.exit(code);
  }
  const o = resolve(RUN_SETTINGS, flags);
  const logger = createLogger(o.logLevel as LogLevel);
  const code = await runRelay({ ...(o as unknown as RunRelayOptions), logger });
  logger.flush();
  process.exit(code);
});

const MIGRATE_SETTINGS = [databaseUrl, schema, logLevel] as const;
addSettings(
  withOutboxFlags(
    program
      .command('migrate')
      .description('Create or upgrade the outbox tables (of every outbox of a list, or the one --outbox names). Safe to run from several processes at once.')
      .option('--print', 'print the SQL for a DBA instead of applying it (needs no database)'),
  ),
  MIGRATE_SETTINGS,
).action(async (flags: Record<string, unknown>) => {
  if (flags.print) {
    const name = readSetting(schema, flags.schema as string | undefined, process.env) as string;
    process.stdout.write(await migrationScript(name));
    return;
  }
  const list = outboxList(flags);
  const targets = list && flags.outbox === undefined ? list : [undefined];
  for (const target of targets) {
    if (target) selectedOutbox = target;
    else selectOutbox(flags, list);
    const o = resolve(MIGRATE_SETTINGS, flags);
    const logger = createLogger(o.logLevel as LogLevel);
    const result = await migrate({ databaseUrl: o.databaseUrl as string, schema: o.schema as string, logger });
    const prefix = selectedOutbox ? `outbox ${selectedOutbox.name}: ` : '';
    process.stdout.write(
      prefix +
        (result.applied.length
          ? `applied ${result.applied.join(', ')}\n`
          : `schema ${o.schema as string} is up to date (${result.alreadyApplied.length} migrations)\n`),
    );
  }
});

const STATUS_SETTINGS = [databaseUrl, schema] as const;
addSettings(
  withOutboxFlags(
    program
      .command('status')
      .description('Backlog, oldest pending age, and which relay owns which shards (of every outbox of a list, or the one --outbox names).')
      .option('--json', 'print JSON instead of a table'),
  ),
  STATUS_SETTINGS,
).action(async (flags: Record<string, unknown>) => {
  const list = outboxList(flags);
  if (list && flags.outbox === undefined) {
    // Every outbox; one that cannot be read is reported and the others still shown.
    const results: Array<{ outbox: string; status?: unknown; error?: string }> = [];
    let failed = false;
    for (const target of list) {
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
  selectOutbox(flags, list);
  const o = resolve(STATUS_SETTINGS, flags);
  const status = await getStatus({ databaseUrl: o.databaseUrl as string, schema: o.schema as string });
  process.stdout.write(flags.json ? `${JSON.stringify(status, null, 2)}\n` : formatStatus(status));
});

// purge-processed: the consumer runtime's retention (src/commands/purgeProcessed.ts).
// Imported here, in its own block, so the command stays one self-contained piece.
const purge = await import('./commands/purgeProcessed.js');
const PURGE_FLAGS = [databaseUrl, schema, purge.purgeRetention, purge.purgeRetentionDays, purge.purgeBatchSize, logLevel] as const;
// Read by resolve(); --retention and the deprecated --retention-days are read on their
// own, since whether each was given matters.
const PURGE_SETTINGS = [databaseUrl, schema, purge.purgeBatchSize, logLevel] as const;
addSettings(
  withOutboxFlags(
    program
      .command('purge-processed')
      .description('Delete processed_messages rows older than the retention, in bounded batches. Safe beside running consumers.'),
  ),
  PURGE_FLAGS,
).action(async (flags: Record<string, unknown>) => {
  selectOutbox(flags);
  const o = resolve(PURGE_SETTINGS, flags);
  const retention = purge.resolvePurgeRetention(
    {
      // Without its default, so that a --retention-days given alone is not compared with it.
      retention: readSetting({ ...purge.purgeRetention, defaultValue: undefined }, flags.retention as string | undefined, process.env),
      retentionDays: readSetting(purge.purgeRetentionDays, flags.retentionDays as string | undefined, process.env),
    },
    { retention: '--retention', retentionDays: '--retention-days' },
  );
  const logger = createLogger(o.logLevel as LogLevel);
  const result = await purge.purgeProcessedMessages({
    databaseUrl: o.databaseUrl as string,
    schema: o.schema as string,
    retention,
    batchSize: o.batchSize as number,
    logger,
  });
  logger.flush();
  process.stdout.write(`deleted ${result.deleted} processed_messages rows older than ${retention} (${result.batches} batches)\n`);
});

// dead-letters and cleanup: the operator side of rows that could not be published
// (src/commands/deadLetters.ts, src/commands/cleanup.ts, docs/operations-dead-letters.md).
// Imported here, in its own block, so the commands stay one self-contained piece.
const ops = await import('./commands/options.js');
const deadLetters = await import('./commands/deadLetters.js');
const { deadLetterJson, formatDeadLetters } = await import('./commands/deadLetterFormat.js');

/** Library option name to the flag the user typed, for ConfigErrors of the filter. */
const FILTER_FLAGS: Record<string, string> = { ids: 'id', topic: '--topic', key: '--key', reason: '--reason', since: '--since', until: '--until', policy: '--policy', all: '--all', yes: '--yes' };

async function namingFlags<T>(run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (error) {
    if (error instanceof ConfigError && error.setting === 'filter') {
      throw new ConfigError('dead-letters', 'no dead letters named: give ids, a filter (--topic, --key, --reason, --since, --until, --policy) or --all');
    }
    const flag = error instanceof ConfigError ? FILTER_FLAGS[error.setting] : undefined;
    if (error instanceof ConfigError && flag) throw new ConfigError(flag, error.message.slice(error.setting.length + 2));
    throw error;
  }
}

function withFilterFlags(command: Command): Command {
  return withOutboxFlags(command)
    .argument('[ids...]', 'dead letter ids (space- or comma-separated)')
    .option('--topic <topic>', 'only this topic')
    .option('--key <key>', 'only this key')
    .option('--reason <text>', 'only where the reason or the error name contains this (case-insensitive)')
    .option('--since <time>', 'dead-lettered at or after: ISO 8601 time (UTC unless an offset is given) or a duration ago (30m, 2h, 7d)')
    .option('--until <time>', 'dead-lettered before: ISO 8601 time or a duration ago')
    .option('--policy <policy>', 'park or skip');
}

function filterFrom(ids: string[], flags: Record<string, unknown>): import('./commands/deadLetterSelection.js').DeadLetterFilter {
  const list = ids.flatMap((a) => a.split(',')).map((a) => a.trim()).filter((a) => a !== '');
  for (const a of list) if (!/^\d+$/.test(a) || Number(a) < 1) throw new ConfigError('id', `${JSON.stringify(a)} is not a dead letter id (a positive whole number)`);
  return {
    ids: list.length ? list.map(Number) : undefined,
    topic: flags.topic as string | undefined,
    key: flags.key as string | undefined,
    reason: flags.reason as string | undefined,
    since: flags.since as string | undefined,
    until: flags.until as string | undefined,
    policy: flags.policy as 'park' | 'skip' | undefined,
  };
}

const deadLettersCommand = program
  .command('dead-letters')
  .description('Rows the relay could never publish: list them, replay them (throttled) once the cause is fixed, or discard them.');

const DL_LIST_SETTINGS = [databaseUrl, schema, ops.listLimit] as const;
addSettings(
  withFilterFlags(deadLettersCommand.command('list').description('List dead letters, lowest id first. Read-only.')).option('--json', 'print JSON instead of a table'),
  DL_LIST_SETTINGS,
).action(async (ids: string[], flags: Record<string, unknown>) => {
  selectOutbox(flags);
  const o = resolve(DL_LIST_SETTINGS, flags);
  const result = await namingFlags(() =>
    deadLetters.listDeadLetters({ ...filterFrom(ids, flags), databaseUrl: o.databaseUrl as string, schema: o.schema as string, limit: o.limit as number }),
  );
  process.stdout.write(
    flags.json
      ? `${JSON.stringify({ total: result.total, deadLetters: result.deadLetters.map(deadLetterJson) }, null, 2)}\n`
      : formatDeadLetters(result.deadLetters, result.total),
  );
});

const DL_REPLAY_SETTINGS = [databaseUrl, schema, ops.replayRate, logLevel] as const;
addSettings(
  withFilterFlags(
    deadLettersCommand
      .command('replay')
      .description('Move dead letters back into the outbox under their original id and message id, one row per transaction, lowest id first, at --rate rows per second. Fix the cause first.'),
  ).option('--all', 'replay every dead letter (needed when no ids and no filter are given)'),
  DL_REPLAY_SETTINGS,
).action(async (ids: string[], flags: Record<string, unknown>) => {
  selectOutbox(flags);
  const o = resolve(DL_REPLAY_SETTINGS, flags);
  const logger = createLogger(o.logLevel as LogLevel);
  // A signal stops the replay between two rows: what moved stays moved, the rest stay dead letters.
  const abort = new AbortController();
  const stop = (): void => abort.abort();
  process.once('SIGINT', stop).once('SIGTERM', stop);
  const r = await namingFlags(() =>
    deadLetters.replayDeadLetters({
      ...filterFrom(ids, flags),
      all: flags.all === true ? true : undefined,
      databaseUrl: o.databaseUrl as string,
      schema: o.schema as string,
      rate: o.rate as number,
      signal: abort.signal,
      logger,
    }),
  );
  logger.flush();
  const seconds = (r.finishedAt.getTime() - r.startedAt.getTime()) / 1000;
  let line = `replayed ${r.replayed} of ${r.selected} dead letters in ${seconds.toFixed(1)} s` + (r.ratePerSecond === null ? '' : ` (${r.ratePerSecond.toFixed(1)}/s)`);
  line += `; released ${r.releasedKeys.length} parked ${r.releasedKeys.length === 1 ? 'key' : 'keys'}`;
  if (r.waiting.length) line += `; ${r.waiting.length} wait behind keys still parked by dead letters ${[...new Set(r.waiting.map((w) => w.parkedBehind))].join(', ')}`;
  process.stdout.write(`${line}\n`);
  if (r.stopped) fail(new Error(`replay stopped by a signal after ${r.replayed} of ${r.selected}; the others are still dead letters`));
  if (r.notMoved.length) {
    const conflicts = r.notMoved.filter((n) => n.why === 'conflict').map((n) => n.id);
    const gone = r.notMoved.filter((n) => n.why === 'gone').map((n) => n.id);
    fail(
      new Error(
        `${r.notMoved.length} not replayed` +
          (conflicts.length ? `; still dead letters, a row with the same id or dedup key is in the outbox: ${conflicts.join(', ')}` : '') +
          (gone.length ? `; replayed or discarded by someone else meanwhile: ${gone.join(', ')}` : ''),
      ),
    );
  }
});

const DL_DISCARD_SETTINGS = [databaseUrl, schema] as const;
addSettings(
  withFilterFlags(
    deadLettersCommand
      .command('discard')
      .description('Delete dead letters for good, releasing the keys they park. Without --yes, lists what it would delete and exits 2.'),
  )
    .option('--all', 'discard every dead letter (needed when no ids and no filter are given)')
    .option('--yes', 'confirm: really delete them'),
  DL_DISCARD_SETTINGS,
).action(async (ids: string[], flags: Record<string, unknown>) => {
  selectOutbox(flags);
  const o = resolve(DL_DISCARD_SETTINGS, flags);
  const r = await namingFlags(() =>
    deadLetters.discardDeadLetters({
      ...filterFrom(ids, flags),
      all: flags.all === true ? true : undefined,
      yes: flags.yes === true,
      databaseUrl: o.databaseUrl as string,
      schema: o.schema as string,
    }),
  );
  if (r.dryRun) {
    process.stdout.write(formatDeadLetters(r.matched));
    fail(new ConfigError('--yes', `is required to discard these ${r.matched.length} dead letters; nothing was discarded`));
  }
  const released = r.releasedKeys.length;
  process.stdout.write(
    `discarded ${r.discarded} dead letters (ids ${r.matched.slice(0, 50).map((d) => d.id).join(', ')}${r.matched.length > 50 ? ', …' : ''}); released ${released} parked ${released === 1 ? 'key' : 'keys'}\n`,
  );
});

const CLEANUP_SETTINGS = [databaseUrl, schema, ops.cleanupRetention, ops.cleanupBatchSize, logLevel] as const;
addSettings(
  withOutboxFlags(
    program
      .command('cleanup')
      .description('Delete sent outbox rows older than the retention, in bounded batches of short transactions. Pending rows are never touched. Safe beside running relays.'),
  ),
  CLEANUP_SETTINGS,
).action(async (flags: Record<string, unknown>) => {
  selectOutbox(flags);
  const o = resolve(CLEANUP_SETTINGS, flags);
  const { cleanupOutbox } = await import('./commands/cleanup.js');
  const logger = createLogger(o.logLevel as LogLevel);
  const result = await cleanupOutbox({
    databaseUrl: o.databaseUrl as string,
    schema: o.schema as string,
    retention: o.retention as string,
    batchSize: o.batchSize as number,
    logger,
  });
  logger.flush();
  process.stdout.write(`deleted ${result.deleted} sent rows older than ${o.retention as string} (${result.batches} batches)\n`);
});

// debezium: a Debezium outbox event router table feeding the outbox
// (src/commands/debeziumOutbox.ts, docs/debezium.md).
const dbz = await import('./commands/debeziumOptions.js');
const DEBEZIUM_ATTACH_SETTINGS = [databaseUrl, schema, ...dbz.DEBEZIUM_SETTINGS, logLevel] as const;
const DEBEZIUM_DETACH_SETTINGS = [databaseUrl, schema, dbz.debeziumTable, logLevel] as const;
const debezium = program.command('debezium').description("Attach a table shaped for Debezium's outbox event router: its inserts go into the outbox (docs/debezium.md).");
for (const [name, description, list] of [
  ['attach', 'Put the trigger on the table (checks its columns first; again with other settings replaces them).', DEBEZIUM_ATTACH_SETTINGS],
  ['print', 'Print the SQL attach would run, for a DBA (reads the catalog, changes nothing).', DEBEZIUM_ATTACH_SETTINGS],
  ['detach', 'Drop the trigger: inserts stop going into the outbox.', DEBEZIUM_DETACH_SETTINGS],
] as const) {
  addSettings(withOutboxFlags(debezium.command(name).description(description)), list).action(async (flags: Record<string, unknown>) => {
    selectOutbox(flags);
    const o = resolve(list, flags);
    const { attachDebeziumOutbox, debeziumAttachScript, detachDebeziumOutbox } = await import('./commands/debeziumOutbox.js');
    const { logLevel: level, ...settings } = o;
    const options = { ...settings, logger: createLogger(level as LogLevel) } as unknown as import('./commands/debeziumOutbox.js').DebeziumOutboxOptions;
    if (name === 'print') {
      process.stdout.write(await debeziumAttachScript(options));
    } else if (name === 'attach') {
      const r = await attachDebeziumOutbox(options);
      process.stdout.write(`${r.replaced ? 'replaced the settings of' : 'attached'} ${r.trigger} on ${r.table}\n`);
    } else {
      const r = await detachDebeziumOutbox(options);
      process.stdout.write(r.detached ? `detached ${r.table}\n` : `${r.table} was not attached\n`);
    }
  });
}

try {
  await program.parseAsync(process.argv);
} catch (error) {
  if (error instanceof CommanderError) {
    // Commander already printed its message (or the help text).
    process.exit(error.exitCode === 0 ? EXIT.ok : EXIT.usage);
  }
  fail(error);
}
