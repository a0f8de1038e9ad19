import { readFileSync } from 'node:fs';
import { ConfigError } from './errors.js';
import { formatDuration, parseDuration } from './durations.js';

/**
 * One user-facing setting: its flag, its environment variable, how to read it from text,
 * and what values it accepts. The CLI is built from these, docs/configuration.md's settings
 * table is checked against them (test/unit/readme.test.ts), and library options are checked
 * by the same `check`, so the three never disagree.
 */
export interface Setting<T> {
  /** Property name in the library's options object. */
  readonly option: string;
  /** Command-line flag, or undefined for secrets, which never come from argv. */
  readonly flag: string | undefined;
  readonly env: string;
  readonly description: string;
  /** Value when neither flag nor environment sets it; undefined means required. */
  readonly defaultValue: T | undefined;
  /** Text to value; returns a problem description instead when the text is not acceptable. */
  parse(raw: string): { value: T } | { problem: string };
  /** Problem with a typed value (range, shape), or undefined when it is fine. */
  check(value: T): string | undefined;
  /** Secrets may also be read from the file named by `${env}_FILE` and are never logged. */
  readonly secret?: boolean;
}

/** What every setting descriptor states: where it is read from and what it is for. */
export interface SettingDescriptor {
  /** Property name in the library's options object. */
  option: string;
  /** Command-line flag; undefined for secrets, which never come from argv. */
  flag: string | undefined;
  env: string;
  description: string;
}

/** A whole number in [min, max]. */
export function integer(d: SettingDescriptor & { defaultValue: number; min: number; max: number }): Setting<number> {
  const accepts = `a whole number from ${d.min} to ${d.max}`;
  return {
    option: d.option,
    flag: d.flag,
    env: d.env,
    description: d.description,
    defaultValue: d.defaultValue,
    parse(raw) {
      const trimmed = raw.trim();
      if (!/^-?\d+$/.test(trimmed)) return { problem: `${JSON.stringify(raw)} is not ${accepts}` };
      return { value: Number(trimmed) };
    },
    check(value) {
      if (!Number.isSafeInteger(value) || value < d.min || value > d.max) {
        return `${JSON.stringify(value)} is not ${accepts}`;
      }
      return undefined;
    },
  };
}

/** One of a fixed list of words (case-insensitive on the command line). */
export function choice<T extends string>(d: SettingDescriptor & { defaultValue: T; choices: readonly T[] }): Setting<T> {
  const accepts = `one of ${d.choices.join(', ')}`;
  return {
    option: d.option,
    flag: d.flag,
    env: d.env,
    description: d.description,
    defaultValue: d.defaultValue,
    parse(raw) {
      const v = raw.trim().toLowerCase();
      return (d.choices as readonly string[]).includes(v)
        ? { value: v as T }
        : { problem: `${JSON.stringify(raw)} is not ${accepts}` };
    },
    check(value) {
      return d.choices.includes(value) ? undefined : `${JSON.stringify(value)} is not ${accepts}`;
    },
  };
}

/** Free text up to 4096 characters; '' means "not set". A secret keeps its inner spaces. */
export function text(d: SettingDescriptor & { secret?: boolean }): Setting<string> {
  const secret = d.secret === true;
  return {
    option: d.option,
    flag: d.flag,
    env: d.env,
    description: d.description,
    // '' is "not set": the CLI requires a value for every setting.
    defaultValue: '',
    ...(secret ? { secret: true } : {}),
    parse(raw) {
      return { value: secret ? raw.replace(/\r?\n$/, '') : raw.trim() };
    },
    check(value) {
      if (typeof value !== 'string') return 'is not text';
      if (value.length > 4096) return 'is longer than 4096 characters';
      return undefined;
    },
  };
}

/**
 * Text with a rule of its own (a name, a pattern): trimmed, mapped by `normalize` when
 * given (`none` to ''), then checked by `check`. `defaultValue` undefined: required.
 */
export function checkedText(
  d: SettingDescriptor & {
    defaultValue: string | undefined;
    check: (value: string) => string | undefined;
    normalize?: (trimmed: string) => string;
  },
): Setting<string> {
  return {
    option: d.option,
    flag: d.flag,
    env: d.env,
    description: d.description,
    defaultValue: d.defaultValue,
    parse(raw) {
      const value = d.normalize ? d.normalize(raw.trim()) : raw.trim();
      const problem = d.check(value);
      return problem ? { problem } : { value };
    },
    check: d.check,
  };
}

/** A duration written as text (`7d`, `12h`); the value stays text so help shows `7d`. */
export function duration(d: SettingDescriptor & { defaultValue: string; minMs: number; maxMs: number }): Setting<string> {
  const accepts = `a duration from ${formatDuration(d.minMs)} to ${formatDuration(d.maxMs)} (45s, 30m, 12h, 7d)`;
  return {
    option: d.option,
    flag: d.flag,
    env: d.env,
    description: d.description,
    defaultValue: d.defaultValue,
    parse(raw) {
      const problem = this.check(raw);
      return problem ? { problem } : { value: raw.trim() };
    },
    check(value) {
      if (typeof value !== 'string') return `${JSON.stringify(value)} is not ${accepts}`;
      const parsed = parseDuration(value);
      if ('problem' in parsed) return parsed.problem;
      if (parsed.value < d.minMs || parsed.value > d.maxMs) return `${JSON.stringify(value)} is not ${accepts}`;
      return undefined;
    },
  };
}

/** true or false (also 1/0, yes/no, on/off, any case). */
export function boolean(d: SettingDescriptor & { defaultValue: boolean }): Setting<boolean> {
  return {
    option: d.option,
    flag: d.flag,
    env: d.env,
    description: d.description,
    defaultValue: d.defaultValue,
    parse(raw) {
      const v = raw.trim().toLowerCase();
      if (['true', '1', 'yes', 'on'].includes(v)) return { value: true };
      if (['false', '0', 'no', 'off'].includes(v)) return { value: false };
      return { problem: `${JSON.stringify(raw)} is not true or false` };
    },
    check(value) {
      return typeof value === 'boolean' ? undefined : `${JSON.stringify(value)} is not true or false`;
    },
  };
}

/** A number above 0 with decimals (a rate). */
export function positiveNumber(d: SettingDescriptor & { defaultValue: number; max: number }): Setting<number> {
  const accepts = `a number above 0 and at most ${d.max}`;
  return {
    option: d.option,
    flag: d.flag,
    env: d.env,
    description: d.description,
    defaultValue: d.defaultValue,
    parse(raw) {
      const t = raw.trim();
      if (!/^-?(\d+(\.\d*)?|\.\d+)$/.test(t)) return { problem: `${JSON.stringify(raw)} is not ${accepts}` };
      return { value: Number(t) };
    },
    check(value) {
      return typeof value === 'number' && Number.isFinite(value) && value > 0 && value <= d.max
        ? undefined
        : `${JSON.stringify(value)} is not ${accepts}`;
    },
  };
}

/**
 * A setting's default as the user would write it (for help texts): lists joined by
 * commas, maps as `key=value,...`, and undefined for "no default" (undefined, '', an
 * empty list or map).
 */
export function formatSettingValue(value: unknown): string | undefined {
  if (value === undefined || value === null || value === '') return undefined;
  if (Array.isArray(value)) return value.length ? value.map((v) => formatSettingValue(v) ?? '').join(',') : undefined;
  if (value instanceof Map) value = Object.fromEntries(value);
  if (typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>);
    return entries.length ? entries.map(([k, v]) => `${k}=${formatSettingValue(v) ?? ''}`).join(',') : undefined;
  }
  return String(value);
}

/**
 * Read one setting: flag, then environment (then `${env}_FILE` for secrets), then default.
 *
 * @returns the value, or undefined when unset and without default
 * @throws ConfigError naming the flag or variable the bad value came from
 */
export function readSetting<T>(
  setting: Setting<T>,
  flagValue: string | undefined,
  env: NodeJS.ProcessEnv,
): T | undefined {
  let raw: string | undefined;
  let source: string;
  if (flagValue !== undefined && setting.flag !== undefined) {
    raw = flagValue;
    source = setting.flag;
  } else if (env[setting.env] !== undefined && env[setting.env] !== '') {
    raw = env[setting.env];
    source = setting.env;
  } else if (setting.secret && env[`${setting.env}_FILE`]) {
    source = `${setting.env}_FILE`;
    const file = env[source] as string;
    try {
      raw = readFileSync(file, 'utf8').trim();
    } catch (error) {
      throw new ConfigError(source, `cannot read ${file}: ${(error as NodeJS.ErrnoException).code ?? 'unreadable'}`);
    }
  } else {
    return setting.defaultValue;
  }
  const parsed = setting.parse(raw as string);
  if ('problem' in parsed) throw new ConfigError(source, withoutSecret(setting, parsed.problem, raw as string));
  const problem = setting.check(parsed.value);
  if (problem) throw new ConfigError(source, withoutSecret(setting, problem, raw as string));
  return parsed.value;
}

/** A secret's problem text with the value blanked out, should a check ever quote it. */
function withoutSecret(setting: Setting<unknown>, problem: string, raw: string): string {
  const value = raw.trim();
  if (!setting.secret || value === '') return problem;
  return problem.split(JSON.stringify(value)).join('(the value, not shown)').split(value).join('(the value, not shown)');
}

/**
 * Check a library option: apply the default, reject bad values with a ConfigError that
 * names the option.
 */
export function optionValue<T>(setting: Setting<T>, value: T | undefined): T {
  if (value === undefined) {
    if (setting.defaultValue === undefined) {
      throw new ConfigError(setting.option, `is required (environment ${setting.env})`);
    }
    return setting.defaultValue;
  }
  const problem = setting.check(value);
  if (problem) throw new ConfigError(setting.option, problem);
  return value;
}
