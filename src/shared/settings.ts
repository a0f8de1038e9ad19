import { readFileSync } from 'node:fs';
import { ConfigError } from './errors.js';
import { LOG_LEVELS, type LogLevel } from './logger.js';

/**
 * One user-facing setting: its flag, its environment variable, how to read it from text,
 * and what values it accepts. The CLI and the README's settings table are both built from
 * these, and library options are checked by the same `check`, so the three never disagree.
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

export function integer(
  option: string,
  flag: string,
  env: string,
  description: string,
  defaultValue: number,
  min: number,
  max: number,
): Setting<number> {
  const accepts = `a whole number from ${min} to ${max}`;
  return {
    option,
    flag,
    env,
    description,
    defaultValue,
    parse(raw) {
      const trimmed = raw.trim();
      if (!/^-?\d+$/.test(trimmed)) return { problem: `${JSON.stringify(raw)} is not ${accepts}` };
      return { value: Number(trimmed) };
    },
    check(value) {
      if (!Number.isSafeInteger(value) || value < min || value > max) {
        return `${JSON.stringify(value)} is not ${accepts}`;
      }
      return undefined;
    },
  };
}

export function choice<T extends string>(
  option: string,
  flag: string,
  env: string,
  description: string,
  defaultValue: T,
  choices: readonly T[],
): Setting<T> {
  const accepts = `one of ${choices.join(', ')}`;
  return {
    option,
    flag,
    env,
    description,
    defaultValue,
    parse(raw) {
      const v = raw.trim().toLowerCase();
      return (choices as readonly string[]).includes(v)
        ? { value: v as T }
        : { problem: `${JSON.stringify(raw)} is not ${accepts}` };
    },
    check(value) {
      return choices.includes(value) ? undefined : `${JSON.stringify(value)} is not ${accepts}`;
    },
  };
}

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/;
const BROKER = /^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([A-Za-z0-9.-]{0,252})?):(\d{1,5})$/;

/** Problems with a list of `host:port` brokers, or undefined. */
export function checkBrokers(brokers: readonly string[]): string | undefined {
  if (brokers.length === 0) return 'needs at least one host:port';
  for (const broker of brokers) {
    const m = BROKER.exec(broker);
    const port = m ? Number(m[3]) : 0;
    if (!m || port < 1 || port > 65535) {
      return `${JSON.stringify(broker)} is not host:port (for example 127.0.0.1:9092)`;
    }
  }
  return undefined;
}

export const databaseUrl: Setting<string> = {
  option: 'databaseUrl',
  flag: undefined,
  env: 'DATABASE_URL',
  description:
    'PostgreSQL connection string (postgres://user@host:5432/db). A secret: environment or DATABASE_URL_FILE only, never a flag.',
  defaultValue: undefined,
  secret: true,
  parse(raw) {
    const problem = this.check(raw.trim());
    return problem ? { problem } : { value: raw.trim() };
  },
  check(value) {
    let url: URL;
    try {
      url = new URL(value);
    } catch {
      // Never echo the value: it may hold a password.
      return 'is not a URL (expected postgres://user@host:port/database)';
    }
    if (url.protocol !== 'postgres:' && url.protocol !== 'postgresql:') {
      return `has scheme ${JSON.stringify(url.protocol)}; expected postgres: or postgresql:`;
    }
    return undefined;
  },
};

export const kafkaBrokers: Setting<string[]> = {
  option: 'kafkaBrokers',
  flag: '--kafka-brokers',
  env: 'KAFKA_BROKERS',
  description: 'Comma-separated Kafka bootstrap brokers, host:port.',
  defaultValue: undefined,
  parse(raw) {
    const list = raw
      .split(',')
      .map((s) => s.trim())
      .filter((s) => s !== '');
    const problem = checkBrokers(list);
    return problem ? { problem } : { value: list };
  },
  check: checkBrokers,
};

export const schema: Setting<string> = {
  option: 'schema',
  flag: '--schema',
  env: 'OUTBOX_SCHEMA',
  description: 'Postgres schema that holds the outbox tables.',
  defaultValue: 'public',
  parse(raw) {
    const problem = this.check(raw);
    return problem ? { problem } : { value: raw };
  },
  check(value) {
    return IDENTIFIER.test(value)
      ? undefined
      : `${JSON.stringify(value)} is not a valid name (1-63 letters, digits or underscores, not starting with a digit)`;
  },
};

export const logLevel: Setting<LogLevel> = choice(
  'logLevel',
  '--log-level',
  'OUTBOX_LOG_LEVEL',
  'Log level of the JSON logs on stdout.',
  'info',
  LOG_LEVELS,
);

export const batchSize = integer(
  'batchSize',
  '--batch-size',
  'OUTBOX_BATCH_SIZE',
  'Rows claimed and published per batch (one Kafka request per batch).',
  500,
  1,
  10_000,
);

export const batchesInFlight = integer(
  'batchesInFlight',
  '--batches-in-flight',
  'OUTBOX_BATCHES_IN_FLIGHT',
  'Batches published at once. Each works on its own shards, so one key never has two batches in flight.',
  2,
  1,
  64,
);

export const pollIntervalMs = integer(
  'pollIntervalMs',
  '--poll-interval-ms',
  'OUTBOX_POLL_INTERVAL_MS',
  'How often an idle relay looks for new rows (milliseconds).',
  10,
  1,
  60_000,
);

export const shutdownTimeoutMs = integer(
  'shutdownTimeoutMs',
  '--shutdown-timeout-ms',
  'OUTBOX_SHUTDOWN_TIMEOUT_MS',
  'How long a soft stop may take to finish the batches in flight before it stops hard (milliseconds).',
  15_000,
  0,
  600_000,
);

export const retryMaxDelayMs = integer(
  'retryMaxDelayMs',
  '--retry-max-delay-ms',
  'OUTBOX_RETRY_MAX_DELAY_MS',
  'Upper bound of the backoff between retries after a failed batch (milliseconds).',
  30_000,
  10,
  3_600_000,
);

export const clientId: Setting<string> = {
  option: 'clientId',
  flag: '--client-id',
  env: 'OUTBOX_CLIENT_ID',
  description: 'Kafka client id, also the Postgres application_name prefix.',
  defaultValue: 'outbox-relay',
  parse(raw) {
    const problem = this.check(raw);
    return problem ? { problem } : { value: raw };
  },
  check(value) {
    return /^[A-Za-z0-9._-]{1,100}$/.test(value)
      ? undefined
      : `${JSON.stringify(value)} is not 1-100 letters, digits, '.', '_' or '-'`;
  },
};

export const compression = choice(
  'compression',
  '--compression',
  'OUTBOX_COMPRESSION',
  'Compression of published batches.',
  'none',
  ['none', 'gzip'] as const,
);

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
      throw new ConfigError(source, `cannot read ${file}: ${(error as Error).message}`);
    }
  } else {
    return setting.defaultValue;
  }
  const parsed = setting.parse(raw as string);
  if ('problem' in parsed) throw new ConfigError(source, parsed.problem);
  const problem = setting.check(parsed.value);
  if (problem) throw new ConfigError(source, problem);
  return parsed.value;
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
