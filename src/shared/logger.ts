import { pino } from 'pino';
import { logLevel as KafkaLogLevel, type logCreator } from 'kafkajs';

/** A pino logger: what every API's `logger` option takes (see {@link createLogger}). */
export type Logger = pino.Logger;

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
/** pino log levels, `silent` for none. */
export type LogLevel = (typeof LOG_LEVELS)[number];

// Paths pino blanks out wherever they appear, so a connection string or SASL password
// passed along in some context object never reaches the log.
const REDACT = [
  'password',
  'databaseUrl',
  'connectionString',
  '*.password',
  '*.databaseUrl',
  '*.connectionString',
  'sasl.password',
  '*.sasl.password',
];

/** JSON logs on stdout (or `destination`), secrets redacted. */
export function createLogger(level: LogLevel = 'info', destination?: pino.DestinationStream): Logger {
  return pino(
    { level, base: { pid: process.pid }, redact: { paths: REDACT, censor: '[redacted]' } },
    destination ?? pino.destination({ fd: 1, sync: false }),
  );
}

/** A logger that writes nothing: the default for library use, where the caller owns output. */
export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}

/** Route kafkajs' own log lines through pino, at the matching level. */
export function kafkaLogCreator(logger: Logger): logCreator {
  const child = logger.child({ component: 'kafkajs' });
  return () => ({ level, log }) => {
    const { message, ...extra } = log;
    const fields = { ...extra, namespace: log.namespace };
    switch (level) {
      case KafkaLogLevel.ERROR:
        child.error(fields, message);
        break;
      case KafkaLogLevel.WARN:
        child.warn(fields, message);
        break;
      case KafkaLogLevel.INFO:
        child.info(fields, message);
        break;
      default:
        child.debug(fields, message);
    }
  };
}

/** kafkajs filters before calling the log creator: give it the level pino would keep. */
export function kafkaLogLevel(level: string): KafkaLogLevel {
  switch (level) {
    case 'silent':
    case 'fatal':
      return KafkaLogLevel.NOTHING;
    case 'error':
      return KafkaLogLevel.ERROR;
    case 'warn':
      return KafkaLogLevel.WARN;
    case 'info':
      return KafkaLogLevel.INFO;
    default:
      return KafkaLogLevel.DEBUG;
  }
}
