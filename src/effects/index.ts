// The public API of `outbox-relay/effects`: a per-effect idempotency guard for side
// effects outside Postgres (docs/effects.md). Its own entry point, so that neither the
// relay nor the consumer runtime loads it; its Redis store takes a node-redis client the
// application creates, its Postgres store a pg.Pool.
// test/unit/exports.test.ts pins this list and checks that every name carries TSDoc.
export { createEffectGuard } from './guard.js';
export type { Effect, EffectContext, EffectGuard, EffectResult } from './guard.js';
export type { EffectGuardOptions, EffectOptions } from './options.js';
export { effectKey } from './key.js';
export type { EffectKeyPart, EffectKeyParts } from './key.js';
export { redisEffectStore } from './redisStore.js';
export type { RedisEffectStoreOptions } from './redisStore.js';
export { postgresEffectStore } from './postgresStore.js';
export type { PostgresEffectStore, PostgresEffectStoreOptions } from './postgresStore.js';
export type { ConfirmOutcome, EffectRecord, EffectStore, ReserveOutcome } from './store.js';
export { effectMetricNames } from './metrics.js';
export { EffectError, EffectBusyError, EffectInDoubtError, EffectKeyError, EffectReservationLostError, EffectStoreError } from './errors.js';
export type { RedisCommandClient } from '../shared/redisCommands.js';
