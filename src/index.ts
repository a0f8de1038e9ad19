// The public API of outbox-relay: what README.md and docs/ document, nothing more.
// Every CLI command is one of these functions. test/exports.test.ts pins this list and
// checks that every name carries TSDoc.

// The relay (src/relay/) and the `run` command that wraps it.
export { createRelay, Relay } from './relay/relay.js';
export type { RelayEvents, RelayResources } from './relay/relay.js';
export type { RelayOptions } from './relay/options.js';
export type { DeadLetterPolicy } from './relay/publishBatch.js';
export { runRelay, EXIT } from './commands/run.js';
export type { RunRelayOptions } from './commands/run.js';
export type { KafkaSecurityOptions, SaslMechanism } from './shared/kafkaSecurity.js';
// Several outboxes in one process (docs/outboxes.md).
export { createRelayGroup, RelayGroup } from './relay/relayGroup.js';
export type { RelayGroupOptions, RelayGroupEvents, RelayGroupOutbox, OutboxState } from './relay/relayGroup.js';
export type { OutboxDefinition } from './shared/outboxList.js';
export { runRelayGroup } from './commands/run.js';
export type { RunRelayGroupOptions } from './commands/run.js';
// Schema-registry encodings: Avro, Protobuf, JSON Schema in Confluent's wire format (docs/encodings.md).
export { IncompatibleSchemaError, RegistryRequestError, RegistryUnavailableError, RowEncodingError, UnknownSchemaError } from './encodings/index.js';
export type { EncodingFormat, EncodingOptions, EncodingRule, EncodingSpec, SchemaRegistryOptions, SchemaSource, SubjectStrategy } from './encodings/index.js';
// Many tenants found by a rule, one connection budget (docs/tenants.md).
export { createTenantRelay, TenantRelay } from './tenants/tenantRelay.js';
export type { TenantRelayEvents, TenantState, TenantStatus } from './tenants/tenantRelay.js';
export type { TenantRelayOptions, TenantRule } from './tenants/options.js';
export type { TenantNaming } from './tenants/naming.js';
export { runTenantRelay } from './commands/runTenants.js';
export type { RunTenantRelayOptions } from './commands/runTenants.js';
export { formatTenantStatuses, tenantStatuses } from './commands/tenantStatus.js';
export type { TenantOutboxStatus } from './commands/tenantStatus.js';
export { instrumentTenantRelay, serveTenantRelayMetrics } from './metrics/tenantRelayMetrics.js';
export type { TenantRelayInstrumentation, TenantRelayMetricsService } from './metrics/tenantRelayMetrics.js';

// Writing events: plain SQL, or this helper inside the application's transaction.
export { enqueue } from './enqueue.js';
export type { OutboxMessage, EnqueueOptions, EnqueueResult } from './enqueue.js';
export { HEADERS } from './shared/kafka.js';

// The consumer runtime (src/consumer/).
export { createConsumer, Consumer } from './consumer/consumer.js';
export type { ConsumerOptions } from './consumer/options.js';
export type { ConsumerEvents, ConsumerStats, ConsumedMessage, HandlerContext, MessageHandler } from './consumer/types.js';
export type { BatchContext, BatchHandler } from './consumer/types.js';
export { classifyError } from './consumer/classifyError.js';
export type { ErrorClass } from './consumer/classifyError.js';
export { DecodeError } from './consumer/decode.js';
export { MissingTopicError } from './consumer/topicWait.js';
export { AfterCommitTimeout } from './consumer/afterCommitHooks.js';
export { HandlerTimeout } from './consumer/handlerTimeout.js';
export type { ValueDecoder } from './consumer/decode.js';
export { DEAD_LETTER_HEADERS } from './consumer/deadLetterTopic.js';
export type { DeadLetterReason } from './consumer/deadLetterTopic.js';
export { advanceEntityVersion } from './consumer/versionGate.js';
export type { AdvanceVersionOptions } from './consumer/versionGate.js';
export { lockEntity } from './consumer/entityLock.js';
export type { EntityLockOptions } from './consumer/entityLock.js';
export { createConcurrencyLimit, createRateLimit, createDependencyLimit } from './consumer/limits.js';
export type { Limit, ConcurrencyLimit, RateLimit, RateLimitOptions, DependencyLimit, DependencyLimitOptions, DependencyStats } from './consumer/limits.js';

// Operator commands (src/commands/).
export { migrate, migrationScript } from './commands/migrate.js';
export type { MigrateOptions, MigrateResult } from './commands/migrate.js';
export { getStatus, formatStatus } from './commands/status.js';
export type { OutboxStatus, StatusOptions } from './commands/status.js';
export { listDeadLetters, replayDeadLetters, discardDeadLetters } from './commands/deadLetters.js';
export { DeadLetterNotFoundError, DeadLetterPermissionError } from './commands/deadLetterSelection.js';
export { unparkKey, KeyNotParkedError } from './commands/parkedKeys.js';
export type { UnparkKeyOptions, UnparkResult } from './commands/parkedKeys.js';
export { waitForReplayed } from './commands/replayWait.js';
export type { ReplayOutcome, WaitForReplayedOptions } from './commands/replayWait.js';
export type { DeadLetter, DeadLetterFilter } from './commands/deadLetterSelection.js';
export type { ListDeadLettersOptions, ListDeadLettersResult, ReplayDeadLettersOptions, ReplayProgress, ReplayResult, DiscardDeadLettersOptions, DiscardResult } from './commands/deadLetters.js';
export { cleanupOutbox } from './commands/cleanup.js';
export type { CleanupOptions, CleanupProgress, CleanupResult } from './commands/cleanup.js';
export { partitionOutbox, maintainPartitions } from './commands/partitions.js';
export type { PartitionOutboxOptions, PartitionOutboxResult, MaintainPartitionsOptions, PartitionMaintenance } from './commands/partitions.js';
export { purgeProcessedMessages } from './commands/purgeProcessed.js';
export type { PurgeProcessedOptions, PurgeProcessedProgress, PurgeProcessedResult } from './commands/purgeProcessed.js';
export { roleScript } from './commands/roles.js';
export type { RoleScriptOptions } from './commands/roles.js';
export { attachDebeziumOutbox, detachDebeziumOutbox, debeziumAttachScript } from './commands/debeziumOutbox.js';
export type { DebeziumOutboxOptions, AttachDebeziumResult, DetachDebeziumResult } from './commands/debeziumOutbox.js';
export type { DatabaseOptions } from './shared/database.js';

// The operator console in a browser (src/console/, docs/console.md).
export { startConsole } from './console/console.js';
export type { ConsoleOptions, ConsoleUserOption, OperatorConsole } from './console/console.js';
export type { ConsoleRole } from './console/web/users.js';

// Metrics and health (src/metrics/).
export { instrumentConsumer, instrumentHandler } from './metrics/consumerMetrics.js';
export type { ConsumerInstrumentation, InstrumentConsumerOptions } from './metrics/consumerMetrics.js';
export { startMetricsServer, serveRelayMetrics } from './metrics/server.js';
export type { MetricsServer, MetricsServerOptions, RelayMetricsService } from './metrics/server.js';
export { instrumentRelayGroup, serveRelayGroupMetrics } from './metrics/relayGroupMetrics.js';
export type { RelayGroupInstrumentation, RelayGroupMetricsService } from './metrics/relayGroupMetrics.js';

// Shared: errors, logging, identifiers.
export { OutboxError, ConfigError, SchemaError, ConnectionError } from './shared/errors.js';
export { createLogger } from './shared/logger.js';
export type { Logger, LogLevel } from './shared/logger.js';
export { quoteIdentifier } from './shared/identifiers.js';
