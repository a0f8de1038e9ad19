/**
 * The one thing the cache needs of a Redis client: sending a command. node-redis' client
 * (`createClient()` from `redis`, v6) fits as it is; anything else with the same
 * `sendCommand(args)` does too. The cache never imports `redis` itself, so the rest of
 * outbox-relay does not need it installed. How commands and scripts are sent, and bounded
 * by the cache's `redisTimeoutMs`, is shared with the effect guard: src/shared/redisCommands.ts.
 */
import type { RedisCommandClient } from '../shared/redisCommands.js';

export { boundedClient, describeRedisFailure, RedisNoReplyError, runScript, script, type Script } from '../shared/redisCommands.js';

/**
 * A connected Redis client as the cache uses it: node-redis' `RedisClientType` (from
 * `createClient()`) satisfies it. Connect it before use; the cache never connects, closes
 * or reconfigures it. Its `sendCommand` gets an `abortSignal` the cache aborts when it
 * gives the command up after `redisTimeoutMs` (node-redis then drops it from its queue).
 */
export interface CacheRedisClient extends RedisCommandClient {}
