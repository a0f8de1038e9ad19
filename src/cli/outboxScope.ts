import { ConfigError } from '../shared/errors.js';
import { readOutboxList, type OutboxDefinition } from '../shared/outboxList.js';
import { outboxesFile } from '../relay/relayGroup.js';
import type { Command } from 'commander';
import { addSettings, readOne, settingVariables } from './settings.js';

// Which outboxes a command acts on: the one of DATABASE_URL, or those of a list
// (--outboxes-file, OUTBOX_OUTBOXES_FILE or OUTBOX_OUTBOXES). Every command goes through
// scopeOf(), so the rules of a list hold for all of them alike.

/** The outboxes a command may act on. */
interface Scope {
  /** The list, when one is given; undefined for the single outbox of DATABASE_URL. */
  list: OutboxDefinition[] | undefined;
  /**
   * For a command that acts on one outbox: the one --outbox names (needed when the list
   * has several), or the list's only one; undefined without a list.
   */
  one(): OutboxDefinition | undefined;
  /** For a command that may act on each: the one --outbox names, else every outbox of the list; [undefined] without a list. */
  each(): Array<OutboxDefinition | undefined>;
}

/**
 * Read the list (if any) and check what may not go with it: DATABASE_URL (each outbox
 * names its database), --schema and OUTBOX_SCHEMA (each names its schema: a command would
 * otherwise act on the list's schema while the user named another), --outbox without a
 * list.
 *
 * @throws ConfigError naming the flag or variable
 */
export function scopeOf(flags: Record<string, unknown>): Scope {
  const file = readOne(outboxesFile, flags) || undefined;
  const fileSetting = flags.outboxesFile !== undefined ? '--outboxes-file' : 'OUTBOX_OUTBOXES_FILE';
  const list = readOutboxList(file, process.env, { fileSetting, otherVariables: settingVariables });
  const name = flags.outbox as string | undefined;
  if (!list) {
    if (name !== undefined) throw new ConfigError('--outbox', 'needs a list of outboxes (--outboxes-file, OUTBOX_OUTBOXES_FILE or OUTBOX_OUTBOXES)');
    return { list, one: () => undefined, each: () => [undefined] };
  }
  for (const variable of ['DATABASE_URL', 'DATABASE_URL_FILE']) {
    if (process.env[variable]) throw new ConfigError(variable, `and a list of outboxes are both set; the outboxes file (or OUTBOX_OUTBOXES) names each database, unset ${variable}`);
  }
  if (flags.schema !== undefined || process.env.OUTBOX_SCHEMA) {
    throw new ConfigError(flags.schema !== undefined ? '--schema' : 'OUTBOX_SCHEMA', 'is per outbox with a list of outboxes: set "schema" in the outboxes file (or OUTBOX_<NAME>_SCHEMA)');
  }
  const names = list.map((o) => o.name).join(', ');
  const named = (): OutboxDefinition | undefined => {
    if (name === undefined) return undefined;
    const found = list.find((o) => o.name === name);
    if (!found) throw new ConfigError('--outbox', `${JSON.stringify(name)} is not in the list (${names})`);
    return found;
  };
  return {
    list,
    one() {
      const found = named();
      if (found) return found;
      if (list.length > 1) throw new ConfigError('--outbox', `is required: the list has ${list.length} outboxes (${names})`);
      return list[0];
    },
    each() {
      const found = named();
      return found ? [found] : list;
    },
  };
}

/** --outbox and --outboxes-file on a command that acts on one outbox (or, where said, on each). */
export function withOutboxFlags(command: Command): Command {
  return addSettings(command.option('--outbox <name>', 'with a list of outboxes: the one to act on'), [outboxesFile]);
}
