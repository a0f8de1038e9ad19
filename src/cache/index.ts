// The public API of `outbox-relay/cache`: a Redis cache helper for consumers that keep
// caches (docs/cache.md). Its own entry point, so that neither the relay nor the consumer
// runtime depends on it; it takes a node-redis client the application creates.
// test/unit/exports.test.ts pins this list and checks that every name carries TSDoc.
export { createCache } from './cache.js';
export type { Cache, CacheEntry } from './cache.js';
export type { CacheOptions, GetOrLoadOptions, CacheCodec, CacheVersion } from './options.js';
export { cacheMetricNames } from './metrics.js';
export { CacheError, CacheWaitTimeoutError, CacheLoadTimeoutError, CacheRedisError } from './errors.js';
export type { CacheRedisClient } from './redisClient.js';
export type { CacheLoader, CacheLoaderContext } from './getOrLoad.js';
export { createPrewarmer } from './prewarmer.js';
export type { Prewarmer, PrewarmerEvents } from './prewarmer.js';
export type { PrewarmOptions, PrewarmerOptions, PrewarmKeys } from './prewarmOptions.js';
export type { PrewarmResult, PrewarmFailure } from './prewarm.js';
