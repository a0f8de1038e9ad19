import type { Command } from 'commander';
import { createLogger, type LogLevel } from '../shared/logger.js';
import { databaseUrl, schema } from '../shared/commonSettings.js';
import type { RelayOptions } from '../relay/options.js';
import { maxDatabaseConnections, outboxesFile } from '../relay/relayGroup.js';
import { runRelay, runRelayGroup, RUN_SETTINGS, type RunRelayGroupOptions } from '../commands/run.js';
import { addSettings, resolve } from './settings.js';
import { scopeOf } from './outboxScope.js';

// `outbox-relay run`: one outbox (DATABASE_URL) or a list of them.

/** The settings `run` reads with a list of outboxes: each outbox names its database and schema. */
const GROUP_SETTINGS = [...RUN_SETTINGS.filter((s) => s !== databaseUrl && s !== schema), maxDatabaseConnections];

export function addRunCommand(program: Command): void {
  addSettings(
    program
      .command('run')
      .description('Relay outbox rows to Kafka until SIGTERM/SIGINT (a second signal stops at once). One outbox (DATABASE_URL), or several (--outboxes-file).'),
    [...RUN_SETTINGS, outboxesFile, maxDatabaseConnections],
  ).action(async (flags: Record<string, unknown>) => {
    const { list } = scopeOf(flags);
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
