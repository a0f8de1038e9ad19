/**
 * Base class of every error outbox-relay throws on purpose.
 *
 * `retriable` tells a caller whether the same operation may succeed if tried again
 * (a broker that is down, a dropped connection) or never will (bad configuration, a
 * payload the broker rejects). `context` carries the facts an operator needs, and never
 * secrets or payloads.
 */
export class OutboxError extends Error {
  readonly retriable: boolean;
  readonly context: Readonly<Record<string, unknown>>;

  constructor(
    message: string,
    options: { retriable: boolean; context?: Record<string, unknown>; cause?: unknown },
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.retriable = options.retriable;
    this.context = Object.freeze({ ...(options.context ?? {}) });
  }
}

/** A setting has a value it does not accept. Never retriable: fix the setting. */
export class ConfigError extends OutboxError {
  /** The setting's name as the user wrote it (flag or environment variable). */
  readonly setting: string;

  constructor(setting: string, message: string) {
    super(`${setting}: ${message}`, { retriable: false, context: { setting } });
    this.setting = setting;
  }
}

/** The database is missing the outbox schema, or is too old for this version. */
export class SchemaError extends OutboxError {
  constructor(message: string, context?: Record<string, unknown>) {
    super(message, { retriable: false, context });
  }
}

/** Could not reach a server (Postgres or Kafka) that a command needs. */
export class ConnectionError extends OutboxError {
  constructor(message: string, context: Record<string, unknown>, cause?: unknown) {
    super(message, { retriable: true, context, cause });
  }
}

/** One line for a human: the message, plus the cause's message when it adds something. */
export function describeError(error: unknown): string {
  if (error instanceof ConfigError || error instanceof SchemaError) return error.message;
  if (error instanceof Error) {
    const cause = error.cause instanceof Error ? error.cause.message : undefined;
    const own = error.message || error.name;
    return cause && !own.includes(cause) ? `${own}: ${cause}` : own;
  }
  return String(error);
}
