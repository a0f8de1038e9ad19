import { Option, type Command } from 'commander';
import { ConfigError, describeError } from '../shared/errors.js';
import { formatSettingValue, readSetting, type Setting } from '../shared/settings.js';
import { databaseUrl, schema } from '../shared/commonSettings.js';
import type { OutboxDefinition } from '../shared/outboxList.js';
import { EXIT } from '../commands/run.js';

// How the CLI reads its settings: flags from commander, then the environment, then the
// defaults, each checked by its Setting as it is read; and how an error reaches the user
// (one line, naming the flag or variable they set).

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type AnySetting = Setting<any>;

/**
 * Every variable some setting of some command reads (and the `_FILE` form of secrets):
 * the outbox list's environment form must not take one of them for a typo of its own
 * OUTBOX_<NAME>_* variables (an outbox named `batch` beside OUTBOX_BATCH_SIZE).
 */
export const settingVariables = new Set<string>(['OUTBOX_OUTBOXES', 'OUTBOX_OUTBOXES_FILE']);

/** Give `command` a `--flag <value>` per setting (secrets have none). */
export function addSettings(command: Command, list: readonly AnySetting[]): Command {
  for (const s of list) {
    settingVariables.add(s.env);
    if (s.secret) settingVariables.add(`${s.env}_FILE`);
    if (!s.flag) continue;
    // The default is in the text, not option.default(): a flag left unset must stay
    // undefined so that the environment variable can still win over the default.
    const shown = formatSettingValue(s.defaultValue);
    const fallback = shown === undefined ? '' : `, default ${shown}`;
    command.addOption(new Option(`${s.flag} <value>`, `${s.description} [env ${s.env}${fallback}]`));
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
  return whereToSet(s);
}

function whereToSet(s: AnySetting): string {
  if (s.flag) return `${s.flag} or ${s.env}`;
  return s.secret ? `${s.env} or ${s.env}_FILE` : s.env;
}

/** The camelCase key commander gives a flag's value. */
function flagKey(flag: string): string {
  return flag.replace(/^--/, '').replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());
}

/** One setting's value (flag, then environment, then default), or undefined when unset without default. */
export function readOne<T>(s: Setting<T>, flags: Record<string, unknown>): T | undefined {
  const flagValue = s.flag ? (flags[flagKey(s.flag)] as string | undefined) : undefined;
  optionSources.set(s.option, sourceOf(s, flagValue));
  return readSetting(s, flagValue, process.env);
}

/**
 * Flag, then environment, then default, for each setting; checked as it is read. With
 * `outbox` (one of a list), the database URL and the schema are that outbox's.
 *
 * @throws ConfigError naming the flag or variable, for a bad or a missing value
 */
export function resolve(list: readonly AnySetting[], flags: Record<string, unknown>, outbox?: OutboxDefinition): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const s of list) {
    if (outbox && (s === databaseUrl || s === schema)) {
      optionSources.set(s.option, `outbox ${outbox.name}`);
      out[s.option] = s === databaseUrl ? outbox.databaseUrl : outbox.schema;
      continue;
    }
    const value = readOne(s, flags);
    if (value === undefined) throw new ConfigError(s.flag ?? s.env, `is required (set ${whereToSet(s)})`);
    out[s.option] = value;
  }
  return out;
}

/** A ConfigError naming a library option, renamed after the flag or variable the user set. */
function userNamed(error: unknown): unknown {
  if (!(error instanceof ConfigError)) return error;
  const source = optionSources.get(error.setting);
  if (source === undefined) return error;
  return new ConfigError(source, error.message.slice(error.setting.length + 2));
}

/** Print the error as one line and exit: 2 for a ConfigError (nothing was touched), else 1. */
export function fail(error: unknown): never {
  error = userNamed(error);
  process.stderr.write(`outbox-relay: ${describeError(error)}\n`);
  process.exit(error instanceof ConfigError ? EXIT.usage : EXIT.failure);
}
