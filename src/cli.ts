#!/usr/bin/env node
import { Command, CommanderError } from 'commander';
import { EXIT } from './commands/run.js';
import { fail } from './cli/settings.js';
import { addRunCommand } from './cli/run.js';
import { addMaintenanceCommands } from './cli/maintenance.js';
import { addDeadLetterCommands } from './cli/deadLetters.js';
import { addDebeziumCommands } from './cli/debezium.js';
import { addPartitionCommands } from './cli/partitions.js';
import { addConsoleCommands } from './cli/console.js';

// Only parsing and dispatch live here and in src/cli/; every command is a library
// function of src/commands/.

const program = new Command('outbox-relay')
  .description('Transactional outbox relay: PostgreSQL outbox table to Kafka, in order per key.')
  .showHelpAfterError(false)
  .exitOverride()
  .configureOutput({
    // Usage errors as one line, like every other error of this CLI.
    writeErr: (text) => process.stderr.write(`outbox-relay: ${text.replace(/^error: /, '').replace(/\s*\n\s*(?=\S)/g, ' ').trim()}\n`),
  });

addRunCommand(program);
addMaintenanceCommands(program);
addDeadLetterCommands(program);
addDebeziumCommands(program);
addPartitionCommands(program);
addConsoleCommands(program);

try {
  await program.parseAsync(process.argv);
} catch (error) {
  if (error instanceof CommanderError) {
    // Commander already printed its message (or the help text).
    process.exit(error.exitCode === 0 ? EXIT.ok : EXIT.usage);
  }
  fail(error);
}
