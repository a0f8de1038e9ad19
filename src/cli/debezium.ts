import type { Command } from 'commander';
import { createLogger, type LogLevel } from '../shared/logger.js';
import { databaseUrl, logLevel, schema } from '../shared/commonSettings.js';
import { DEBEZIUM_SETTINGS, debeziumTable } from '../commands/debeziumOptions.js';
import { attachDebeziumOutbox, debeziumAttachScript, detachDebeziumOutbox, type DebeziumOutboxOptions } from '../commands/debeziumOutbox.js';
import { addSettings, resolve } from './settings.js';
import { scopeOf, withOutboxFlags } from './outboxScope.js';

// `outbox-relay debezium attach | print | detach`: a Debezium outbox event router table
// feeding the outbox (src/commands/debeziumOutbox.ts, docs/debezium.md).

const ATTACH_SETTINGS = [databaseUrl, schema, ...DEBEZIUM_SETTINGS, logLevel] as const;
const DETACH_SETTINGS = [databaseUrl, schema, debeziumTable, logLevel] as const;

export function addDebeziumCommands(program: Command): void {
  const debezium = program.command('debezium').description("Attach a table shaped for Debezium's outbox event router: its inserts go into the outbox (docs/debezium.md).");
  for (const [name, description, list] of [
    ['attach', 'Put the trigger on the table (checks its columns first; again with other settings replaces them).', ATTACH_SETTINGS],
    ['print', 'Print the SQL attach would run, for a DBA (reads the catalog, changes nothing).', ATTACH_SETTINGS],
    ['detach', 'Drop the trigger: inserts stop going into the outbox.', DETACH_SETTINGS],
  ] as const) {
    addSettings(withOutboxFlags(debezium.command(name).description(description)), list).action(async (flags: Record<string, unknown>) => {
      const o = resolve(list, flags, scopeOf(flags).one());
      // logLevel is the CLI's, not a library option (the library refuses options it does not know).
      const { logLevel: level, ...settings } = o;
      const options = { ...settings, logger: createLogger(level as LogLevel) } as unknown as DebeziumOutboxOptions;
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
}
