// The cache's options are validated up front: a ConfigError names the option (no Redis needed).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Registry } from 'prom-client';
import { createCache } from '../../src/cache/cache.js';
import { CacheRedisError } from '../../src/cache/errors.js';
import type { CacheOptions } from '../../src/cache/options.js';
import { resolveCacheOptions, resolveGetOrLoadOptions } from '../../src/cache/options.js';
import { cacheMetricNames } from '../../src/cache/metrics.js';
import type { CacheRedisClient } from '../../src/cache/redisClient.js';

const client: CacheRedisClient = { sendCommand: async () => null };

test('cache options: defaults, and waitMs and loadTimeoutMs follow lockTtlMs', () => {
  const o = resolveCacheOptions({ client });
  assert.deepEqual({ ...o.defaults, versionOf: undefined }, { ttlMs: 60_000, jitter: 0.1, staleForMs: 0, lockTtlMs: 5_000, waitMs: 5_000, onWaitTimeout: 'throw', loadTimeoutMs: 5_000, versionOf: undefined });
  assert.equal(o.prefix, '');
  assert.equal(o.name, 'default');
  assert.equal(o.tombstoneTtlMs, 600_000);
  assert.equal(o.redisTimeoutMs, 1_000);
  const call = resolveGetOrLoadOptions({ lockTtlMs: 800 }, o.defaults);
  assert.equal(call.waitMs, 800);
  assert.equal(call.loadTimeoutMs, 800);
  const d = resolveCacheOptions({ client, defaults: { waitMs: 100 } }).defaults;
  assert.equal(resolveGetOrLoadOptions({ ttlMs: 5 }, d).waitMs, 100, 'a call keeps the cache-wide waitMs');
});

test('cache options: a bad value is a ConfigError naming the option', () => {
  const cases: Array<[() => unknown, string]> = [
    [() => createCache({ client: {} as CacheRedisClient }), 'client'],
    [() => createCache({ client, name: 'Has Spaces' }), 'name'],
    [() => createCache({ client, prefix: 'x'.repeat(201) }), 'prefix'],
    [() => createCache({ client, tombstoneTtlMs: 0 }), 'tombstoneTtlMs'],
    [() => createCache({ client, redisTimeoutMs: 0 }), 'redisTimeoutMs'],
    [() => createCache({ client, redisTimeoutMs: 1.5 }), 'redisTimeoutMs'],
    [() => createCache({ client, redisTimeout: 500 } as object as CacheOptions), 'redisTimeout'],
    [() => createCache({ client, ttlMs: 500 } as object as CacheOptions), 'ttlMs'],
    [() => createCache({ client, registry: {} as Registry }), 'registry'],
    [() => createCache({ client, defaults: 5 as unknown as object }), 'defaults'],
    [() => createCache({ client, defaults: { ttlMs: 0 } }), 'defaults.ttlMs'],
    [() => createCache({ client, defaults: { ttlMs: 1.5 } }), 'defaults.ttlMs'],
    [() => createCache({ client, defaults: { jitter: 1 } }), 'defaults.jitter'],
    [() => createCache({ client, defaults: { staleForMs: -1 } }), 'defaults.staleForMs'],
    [() => createCache({ client, defaults: { lockTtlMs: 5 } }), 'defaults.lockTtlMs'],
    [() => createCache({ client, defaults: { onWaitTimeout: 'later' as 'load' } }), 'defaults.onWaitTimeout'],
    [() => createCache({ client, defaults: { ttl: 5 } as object }), 'defaults.ttl'],
    [() => resolveGetOrLoadOptions({ waitMs: -5 }), 'getOrLoad.waitMs'],
    [() => resolveGetOrLoadOptions({ loadTimeoutMs: 0 }), 'getOrLoad.loadTimeoutMs'],
  ];
  for (const [make, setting] of cases) {
    assert.throws(make, (e: unknown) => (e as { name?: string }).name === 'ConfigError' && (e as { setting?: string }).setting === setting && (e as { retriable?: boolean }).retriable === false, setting);
  }
});

test('a bad per-call option rejects the call before Redis is touched', async () => {
  let sent = 0;
  const cache = createCache({ client: { sendCommand: async () => (sent++, null) } });
  await assert.rejects(cache.getOrLoad('k', () => 1, { ttlMs: -1 }), { name: 'ConfigError', setting: 'getOrLoad.ttlMs' });
  await assert.rejects(cache.setIfNewer('k', 1, 1, 0), { name: 'ConfigError', setting: 'setIfNewer.ttlMs' });
  assert.equal(sent, 0);
});

test('cache metric names are prefixed outbox_cache_', () => {
  const names = cacheMetricNames();
  assert.ok(names.length >= 6);
  for (const n of names) assert.match(n, /^outbox_cache_[a-z_]+$/);
});

test('createCache names a misspelt option and lists the real ones', () => {
  assert.throws(() => createCache({ client, redisTimeout: 500 } as object as CacheOptions), /^ConfigError: redisTimeout: is not an option of createCache \(they are client, prefix, name, registry, codec, tombstoneTtlMs, redisTimeoutMs, defaults\)$/);
});

test('a codec whose encode returns something else than a string is refused by name, before Redis is touched', async () => {
  let sent = 0;
  const cache = createCache({ client: { sendCommand: async () => (sent++, null) }, codec: { encode: () => 42 as unknown as string, decode: (t) => t } });
  await assert.rejects(cache.setIfNewer('k', 1, 1), { name: 'ConfigError', setting: 'codec.encode', message: 'codec.encode: must return a string, got number' });
  assert.equal(sent, 0);
});

test('CacheRedisError names the cause even when the client error has no message of its own', () => {
  // node-redis 6 rejects a command that timed out in its queue with a TimeoutError whose message is empty.
  class TimeoutError extends Error {
    constructor() {
      super();
      this.name = 'TimeoutError';
    }
  }
  assert.equal(new CacheRedisError('read', 'k', new TimeoutError()).message, 'cache: Redis read of "k" failed: TimeoutError (no message)');
  // A refused connection to a host with two addresses: an AggregateError with an empty message.
  const refused = (address: string): Error => Object.assign(new Error(`connect ECONNREFUSED ${address}`), { code: 'ECONNREFUSED' });
  const aggregate = Object.assign(new AggregateError([refused('::1:6379'), refused('127.0.0.1:6379')]), { code: 'ECONNREFUSED' });
  const e = new CacheRedisError('setIfNewer', 'k', aggregate);
  assert.equal(e.message, 'cache: Redis setIfNewer of "k" failed: connect ECONNREFUSED ::1:6379; connect ECONNREFUSED 127.0.0.1:6379');
  assert.equal(e.cause, aggregate);
  assert.equal(e.retriable, true);
});
