// Public API of outbox-relay. Every CLI command is one of these functions.
export { createRelay, Relay, resolveRelayOptions, RELAY_SETTINGS, SHARD_COUNT, shardsOf } from './relay.js';
export type { RelayOptions, ResolvedRelayOptions, RelayEvents } from './relay.js';
export { runRelay, EXIT } from './run.js';
export type { RunRelayOptions } from './run.js';
export { migrate, migrationScript, loadMigrations, assertMigrated } from './migrate.js';
export type { Migration, MigrateOptions, MigrateResult } from './migrate.js';
export { enqueue } from './enqueue.js';
export type { OutboxMessage, EnqueueOptions } from './enqueue.js';
export { HEADERS, toKafkaMessage } from './kafka.js';
export { Horizon } from './horizon.js';
export { OutboxError, ConfigError, SchemaError, ConnectionError, describeError } from './errors.js';
export { quoteIdentifier } from './identifiers.js';
export { backoffDelayMs } from './backoff.js';
export { createLogger, silentLogger } from './logger.js';
export type { Logger, LogLevel } from './logger.js';
