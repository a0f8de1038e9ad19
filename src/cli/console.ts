import type { Command } from 'commander';
import { ConfigError } from '../shared/errors.js';
import { createLogger, type LogLevel } from '../shared/logger.js';
import { databaseUrl, logLevel, schema } from '../shared/commonSettings.js';
import { replayRate } from '../commands/options.js';
import { EXIT } from '../commands/run.js';
import { startConsole } from '../console/console.js';
import { CONSOLE_SETTINGS, parseListen } from '../console/web/options.js';
import { hashPassword } from '../console/web/passwords.js';
import { roleProblem, userNameProblem } from '../console/web/users.js';
import { addSettings, resolve } from './settings.js';
import { scopeOf, withOutboxFlags } from './outboxScope.js';
import { readPassword } from './readPassword.js';
import { tenantOutboxes } from '../commands/tenantStatus.js';
import { tenantRuleFromSettings } from '../commands/runTenants.js';
import { tenantDatabases, tenantQueryFile, tenantSchemas } from '../tenants/settings.js';

// `outbox-relay console`: the operator console (src/console/), over the same outbox or
// list of outboxes as `run`; and `outbox-relay console-user`, which prints a users-file
// line with a password hash (the password read from the terminal or stdin, never argv).

const OWN_SETTINGS = [...CONSOLE_SETTINGS, replayRate, logLevel] as const;

export function addConsoleCommands(program: Command): void {
  addSettings(
    withOutboxFlags(
      program
        .command('console')
        .description(
          'Serve the operator console in a browser until SIGTERM/SIGINT: backlog, flow, relays, dead letters (filter, replay at a rate, discard), parked keys. Loopback by default; a login is required (OUTBOX_CONSOLE_USERS_FILE).',
        )
        .option('--tenant <text>', 'with a tenant rule: only the tenants whose name holds this text (64 at most)'),
    ),
    [databaseUrl, schema, ...OWN_SETTINGS, tenantSchemas, tenantDatabases, tenantQueryFile],
  ).action(async (flags: Record<string, unknown>) => {
    // Every outbox of a list, or the one --outbox names; the tenants of a rule; else the one of DATABASE_URL.
    const scope = scopeOf(flags);
    const rule = resolve([tenantSchemas, tenantDatabases, tenantQueryFile], flags);
    const hasRule = Boolean(rule.tenantSchemas || rule.tenantDatabases || rule.tenantQueryFile);
    if (hasRule && scope.list) throw new ConfigError('--tenant-schemas', 'a tenant rule and a list of outboxes (--outboxes-file, OUTBOX_OUTBOXES) exclude each other');
    if (!hasRule && flags.tenant !== undefined) throw new ConfigError('--tenant', 'applies with a tenant rule only (--tenant-schemas, --tenant-databases or --tenant-query-file)');
    const chosen = hasRule
      ? await tenantOutboxes(tenantRuleFromSettings(resolve([databaseUrl, schema, tenantSchemas, tenantDatabases, tenantQueryFile], flags) as never)!, (flags.tenant as string | undefined) ?? '')
      : scope.list
        ? scope.each().filter((x) => x !== undefined)
        : undefined;
    const o = resolve(chosen ? OWN_SETTINGS : [databaseUrl, schema, ...OWN_SETTINGS], flags);
    const { host, port } = parseListen(o.listen as string);
    const logger = createLogger(o.logLevel as LogLevel);
    const console_ = await startConsole({
      ...(chosen ? { outboxes: chosen } : { databaseUrl: o.databaseUrl as string, schema: o.schema as string }),
      users: o.users as string,
      host,
      port,
      pathPrefix: o.pathPrefix as string,
      publicOrigin: o.publicOrigin as string,
      replayRate: o.rate as number,
      logger,
    });
    process.stderr.write(`outbox-relay console: listening on ${console_.url}\n`);
    await new Promise<void>((resolveStop) => {
      process.once('SIGINT', resolveStop).once('SIGTERM', resolveStop);
    });
    await console_.close();
    logger.flush();
    process.exit(EXIT.ok);
  });

  program
    .command('console-user')
    .description('Print a line for the console users file (name:role:scrypt hash): the password is read from the terminal (asked twice) or from stdin, never from the command line.')
    .argument('<name>', 'user name (letters, digits, . _ @ -)')
    .argument('<role>', 'viewer (reads) or operator (also replays, discards, unparks)')
    .action(async (name: string, role: string) => {
      const problem = userNameProblem(name);
      if (problem) throw new ConfigError('name', problem);
      const bad = roleProblem(role);
      if (bad) throw new ConfigError('role', bad);
      const password = await readPassword();
      if (password.length < 8) throw new ConfigError('password', 'is shorter than 8 characters');
      process.stdout.write(`${name}:${role}:${await hashPassword(password)}\n`);
    });
}
