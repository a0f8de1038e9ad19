import { test } from 'node:test';
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import ts from 'typescript-api';

// The public API is what README.md and docs/ document. Adding or removing a name is a
// decision: change this list, the docs and the CHANGELOG together.
const VALUES = [
  'AfterCommitTimeout', 'ConfigError', 'ConnectionError', 'Consumer', 'DEAD_LETTER_HEADERS', 'MissingTopicError', 'DeadLetterNotFoundError', 'DecodeError', 'EXIT', 'HEADERS', 'HandlerTimeout',
  'OutboxError', 'Relay', 'SchemaError', 'advanceEntityVersion', 'classifyError', 'cleanupOutbox', 'createConcurrencyLimit',
  'createConsumer', 'createDependencyLimit', 'createLogger', 'createRateLimit', 'createRelay', 'discardDeadLetters', 'enqueue',
  'formatStatus', 'getStatus', 'instrumentConsumer', 'instrumentHandler', 'listDeadLetters', 'lockEntity', 'migrate',
  'migrationScript', 'purgeProcessedMessages', 'quoteIdentifier', 'replayDeadLetters', 'roleScript', 'runRelay',
  'serveRelayMetrics', 'startMetricsServer',
  'RelayGroup', 'createRelayGroup', 'instrumentRelayGroup', 'runRelayGroup', 'serveRelayGroupMetrics',
  'TenantRelay', 'createTenantRelay', 'runTenantRelay', 'tenantStatuses', 'formatTenantStatuses', 'instrumentTenantRelay', 'serveTenantRelayMetrics',
  'attachDebeziumOutbox', 'debeziumAttachScript', 'detachDebeziumOutbox',
  'maintainPartitions', 'partitionOutbox',
  'DeadLetterPermissionError', 'KeyNotParkedError', 'unparkKey',
  'waitForReplayed',
  'startConsole',
  'IncompatibleSchemaError', 'RegistryRequestError', 'RegistryUnavailableError', 'RowEncodingError', 'UnknownSchemaError',
];

const TYPES = [
  'BatchContext', 'BatchHandler',
  'AttachDebeziumResult', 'DebeziumOutboxOptions', 'DetachDebeziumResult',
  'MaintainPartitionsOptions', 'PartitionMaintenance', 'PartitionOutboxOptions', 'PartitionOutboxResult',
  'RelayResources', 'RunTenantRelayOptions', 'TenantOutboxStatus', 'TenantRelayInstrumentation', 'TenantRelayMetricsService', 'TenantNaming', 'TenantRelayEvents', 'TenantRelayOptions', 'TenantRule', 'TenantState', 'TenantStatus',
  'OutboxDefinition', 'OutboxState', 'RelayGroupEvents', 'RelayGroupInstrumentation', 'RelayGroupMetricsService', 'RelayGroupOptions', 'RelayGroupOutbox', 'RunRelayGroupOptions',
  'AdvanceVersionOptions', 'CleanupOptions', 'CleanupProgress', 'CleanupResult', 'ConcurrencyLimit', 'ConsumedMessage', 'ConsumerEvents',
  'ConsumerInstrumentation', 'ConsumerOptions', 'ConsumerStats', 'DatabaseOptions', 'DeadLetter', 'DeadLetterFilter',
  'DeadLetterPolicy', 'DeadLetterReason', 'DependencyLimit', 'DependencyLimitOptions', 'DependencyStats', 'DiscardDeadLettersOptions',
  'DiscardResult', 'EnqueueOptions', 'EnqueueResult', 'EntityLockOptions', 'ErrorClass', 'HandlerContext', 'InstrumentConsumerOptions',
  'KafkaSecurityOptions', 'Limit', 'ListDeadLettersOptions', 'ListDeadLettersResult', 'LogLevel', 'Logger', 'MessageHandler',
  'MetricsServer', 'MetricsServerOptions', 'MigrateOptions', 'MigrateResult', 'OutboxMessage', 'OutboxStatus',
  'PurgeProcessedOptions', 'PurgeProcessedProgress', 'PurgeProcessedResult', 'RateLimit', 'RateLimitOptions', 'RelayEvents', 'RelayMetricsService',
  'RelayOptions', 'ReplayDeadLettersOptions', 'ReplayProgress', 'ReplayResult', 'RoleScriptOptions', 'RunRelayOptions',
  'SaslMechanism', 'StatusOptions', 'ValueDecoder',
  'UnparkKeyOptions', 'UnparkResult',
  'ReplayOutcome', 'WaitForReplayedOptions',
  'ConsoleOptions', 'ConsoleRole', 'ConsoleUserOption', 'OperatorConsole',
  'EncodingFormat', 'EncodingOptions', 'EncodingRule', 'EncodingSpec', 'SchemaRegistryOptions', 'SchemaSource', 'SubjectStrategy',
];

const CACHE_VALUES = ['CacheError', 'CacheLoadTimeoutError', 'CacheRedisError', 'CacheWaitTimeoutError', 'cacheMetricNames', 'createCache', 'createPrewarmer'];
const CACHE_TYPES = [
  'Cache', 'CacheCodec', 'CacheEntry', 'CacheLoader', 'CacheLoaderContext', 'CacheOptions', 'CacheRedisClient', 'CacheVersion', 'GetOrLoadOptions',
  'PrewarmFailure', 'PrewarmKeys', 'PrewarmOptions', 'PrewarmResult', 'Prewarmer', 'PrewarmerEvents', 'PrewarmerOptions',
];

const EFFECTS_VALUES = [
  'EffectBusyError', 'EffectError', 'EffectInDoubtError', 'EffectKeyError', 'EffectReservationLostError', 'EffectStoreError',
  'createEffectGuard', 'effectKey', 'effectMetricNames', 'postgresEffectStore', 'redisEffectStore',
];
const EFFECTS_TYPES = [
  'ConfirmOutcome', 'Effect', 'EffectContext', 'EffectGuard', 'EffectGuardOptions', 'EffectKeyPart', 'EffectKeyParts', 'EffectOptions', 'EffectRecord', 'EffectResult',
  'EffectStore', 'PostgresEffectStore', 'PostgresEffectStoreOptions', 'RedisCommandClient', 'RedisEffectStoreOptions', 'ReserveOutcome',
];

const INDEX = fileURLToPath(new URL('../../src/index.ts', import.meta.url));
const CACHE_INDEX = fileURLToPath(new URL('../../src/cache/index.ts', import.meta.url));
const EFFECTS_INDEX = fileURLToPath(new URL('../../src/effects/index.ts', import.meta.url));

function exportedSymbols(file = INDEX): { checker: ts.TypeChecker; symbols: ts.Symbol[] } {
  const program = ts.createProgram([file], { module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext, strict: true, noEmit: true });
  const checker = program.getTypeChecker();
  const source = program.getSourceFile(file);
  assert.ok(source, `${file} is part of the program`);
  const module = checker.getSymbolAtLocation(source);
  assert.ok(module, 'src/index.ts is a module');
  return { checker, symbols: checker.getExportsOfModule(module) };
}

test('the package exports exactly the documented values', async () => {
  const api = await import('../../src/index.js');
  assert.deepEqual(Object.keys(api).sort(), [...VALUES].sort());
  const cache = await import('../../src/cache/index.js');
  assert.deepEqual(Object.keys(cache).sort(), [...CACHE_VALUES].sort());
  const effects = await import('../../src/effects/index.js');
  assert.deepEqual(Object.keys(effects).sort(), [...EFFECTS_VALUES].sort());
});

for (const [entry, file, values, types] of [
  ['outbox-relay', INDEX, VALUES, TYPES],
  ['outbox-relay/cache', CACHE_INDEX, CACHE_VALUES, CACHE_TYPES],
  ['outbox-relay/effects', EFFECTS_INDEX, EFFECTS_VALUES, EFFECTS_TYPES],
] as const) {
test(`${entry} exports exactly the documented types, and every export carries TSDoc`, () => {
  const { checker, symbols } = exportedSymbols(file);
  const names = symbols.map((s) => s.getName()).sort();
  assert.deepEqual(names, [...values, ...types].sort());
  const undocumented: string[] = [];
  for (const symbol of symbols) {
    const target = symbol.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(symbol) : symbol;
    const documented = target.getDocumentationComment(checker).length > 0 || target.getJsDocTags(checker).length > 0;
    if (!documented) undocumented.push(symbol.getName());
  }
  assert.deepEqual(undocumented, [], `exports without TSDoc: ${undocumented.join(', ')}`);
});
}

test('DEAD_LETTER_HEADERS names exactly the headers docs/consumer.md documents', async () => {
  const { DEAD_LETTER_HEADERS } = await import('../../src/index.js');
  assert.deepEqual(Object.values(DEAD_LETTER_HEADERS).sort(), [
    'dead-letter-at', 'dead-letter-attempts', 'dead-letter-consumer-group', 'dead-letter-error', 'dead-letter-error-code',
    'dead-letter-error-constraint', 'dead-letter-error-name', 'dead-letter-original-offset', 'dead-letter-original-partition',
    'dead-letter-original-timestamp', 'dead-letter-original-topic', 'dead-letter-reason',
  ]);
});
