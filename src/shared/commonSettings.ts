import { choice, type Setting } from './settings.js';
import { LOG_LEVELS, type LogLevel } from './logger.js';
import { DEFAULT_SCHEMA, schemaNameProblem } from './identifiers.js';
import { databaseUrlProblem } from './database.js';

// Settings that the relay, the consumer and the operator commands all read: where the
// database and the brokers are, which schema, how much to log. Each role's own settings
// live beside its options (relay/options.ts, consumer/options.ts, commands/options.ts,
// metrics/options.ts).

const BROKER = /^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([A-Za-z0-9.-]{0,252})?):(\d{1,5})$/;

/** Problems with a list of `host:port` brokers, or undefined. */
function checkBrokers(brokers: readonly string[]): string | undefined {
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
  check: databaseUrlProblem,
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
  description: 'Postgres schema that holds the outbox tables (lower-case letters, digits, _).',
  defaultValue: DEFAULT_SCHEMA,
  parse(raw) {
    const problem = this.check(raw);
    return problem ? { problem } : { value: raw };
  },
  check: schemaNameProblem,
};

export const logLevel: Setting<LogLevel> = choice({
  option: 'logLevel',
  flag: '--log-level',
  env: 'OUTBOX_LOG_LEVEL',
  description: 'Log level of the JSON logs on stdout.',
  defaultValue: 'info',
  choices: LOG_LEVELS,
});

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
