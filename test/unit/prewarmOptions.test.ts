// Prewarming's options are validated up front (docs/cache.md, "Prewarming"): a bad value,
// or a name that is not an option, is a ConfigError naming it, before Redis is touched.
// A plain fake client counts the commands it is sent: none may be.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createCache, type Cache } from '../../src/cache/cache.js';
import { createPrewarmer } from '../../src/cache/prewarmer.js';
import { resolvePrewarmerOptions, resolvePrewarmOptions } from '../../src/cache/prewarmOptions.js';
import { resolveCacheOptions } from '../../src/cache/options.js';

function countingCache(defaults?: { ttlMs?: number; jitter?: number }): { cache: Cache; sent(): number } {
  let sent = 0;
  const cache = createCache({ client: { sendCommand: async () => (sent++, null) }, defaults });
  return { cache, sent: () => sent };
}

const isConfigError = (setting: string) => (e: unknown) =>
  (e as { name?: string }).name === 'ConfigError' && (e as { setting?: string }).setting === setting && (e as { retriable?: boolean }).retriable === false;

test('prewarm options: defaults (concurrency 4, refreshAheadMs 0 for a pass, 2 x intervalMs for a prewarmer) on top of the cache defaults', () => {
  const defaults = resolveCacheOptions({ client: { sendCommand: async () => null }, defaults: { ttlMs: 30_000, lockTtlMs: 700 } }).defaults;
  const pass = resolvePrewarmOptions(undefined, defaults);
  assert.equal(pass.concurrency, 4);
  assert.equal(pass.refreshAheadMs, 0);
  assert.equal(pass.load.ttlMs, 30_000);
  assert.equal(pass.load.lockTtlMs, 700);
  assert.equal(pass.load.loadTimeoutMs, 700);
  const prewarmer = resolvePrewarmerOptions({ keys: ['a', 'b', 'a'], loader: () => 1 }, defaults);
  assert.equal(prewarmer.intervalMs, 5_000);
  assert.equal(prewarmer.pass.refreshAheadMs, 10_000);
  assert.deepEqual(prewarmer.keys, ['a', 'b'], 'a key listed twice is one key');
  assert.equal(resolvePrewarmerOptions({ keys: [], loader: () => 1, intervalMs: 1_000, concurrency: 9, ttlMs: 9_000 }, defaults).pass.refreshAheadMs, 2_000);
});

test('cache.prewarm: a bad argument or option is a ConfigError naming it, before Redis is touched', async () => {
  const { cache, sent } = countingCache({ ttlMs: 10_000, jitter: 0.2 });
  const loader = (): number => 1;
  const cases: Array<[() => Promise<unknown>, string]> = [
    [() => cache.prewarm('k' as unknown as string[], loader), 'prewarm.keys'],
    [() => cache.prewarm(['a', ''], loader), 'prewarm.keys'],
    [() => cache.prewarm(['a', 5 as unknown as string], loader), 'prewarm.keys'],
    [() => cache.prewarm(['a'], loader, 5 as unknown as object), 'prewarm'],
    [() => cache.prewarm(['a'], loader, { concurrency: 0 }), 'prewarm.concurrency'],
    [() => cache.prewarm(['a'], loader, { concurrency: 2.5 }), 'prewarm.concurrency'],
    [() => cache.prewarm(['a'], loader, { concurrency: 257 }), 'prewarm.concurrency'],
    [() => cache.prewarm(['a'], loader, { refreshAheadMs: -1 }), 'prewarm.refreshAheadMs'],
    // ttlMs x (1 - jitter) = 8000 ms: a window that long would find every key due as soon as it was written.
    [() => cache.prewarm(['a'], loader, { refreshAheadMs: 8_000 }), 'prewarm.refreshAheadMs'],
    [() => cache.prewarm(['a'], loader, { ttlMs: 1_000, refreshAheadMs: 900 }), 'prewarm.refreshAheadMs'],
    [() => cache.prewarm(['a'], loader, { ttlMs: 0 }), 'prewarm.ttlMs'],
    [() => cache.prewarm(['a'], loader, { lockTtlMs: 1 }), 'prewarm.lockTtlMs'],
    [() => cache.prewarm(['a'], loader, { versionOf: 3 as unknown as () => number }), 'prewarm.versionOf'],
    [() => cache.prewarm(['a'], loader, { signal: {} as AbortSignal }), 'prewarm.signal'],
    [() => cache.prewarm(['a'], loader, { waitMs: 10 } as object), 'prewarm.waitMs'],
    [() => cache.prewarm(['a'], loader, { onWaitTimeout: 'load' } as object), 'prewarm.onWaitTimeout'],
    [() => cache.prewarm(['a'], loader, { concurency: 2 } as object), 'prewarm.concurency'],
  ];
  for (const [call, setting] of cases) await assert.rejects(call(), isConfigError(setting), setting);
  await assert.rejects(cache.prewarm(['a'], 'not a function' as unknown as () => number), TypeError);
  assert.equal(sent(), 0, 'no Redis command was sent');
  assert.equal((await cache.prewarm(['a'], loader, { refreshAheadMs: 7_999 })).keys, 1, 'just below ttlMs x (1 - jitter) is accepted');
});

test('createPrewarmer: a bad option is a ConfigError naming it, when it is made', () => {
  const { cache, sent } = countingCache({ ttlMs: 10_000, jitter: 0 });
  const ok = { keys: ['a'], loader: () => 1 };
  const cases: Array<[() => unknown, string]> = [
    [() => createPrewarmer({} as Cache, ok), 'prewarmer.cache'],
    [() => createPrewarmer(cache, 5 as unknown as typeof ok), 'prewarmer'],
    [() => createPrewarmer(cache, { ...ok, keys: 'a' as unknown as string[] }), 'prewarmer.keys'],
    [() => createPrewarmer(cache, { ...ok, keys: ['a', ''] }), 'prewarmer.keys'],
    [() => createPrewarmer(cache, { keys: ['a'] } as typeof ok), 'prewarmer.loader'],
    [() => createPrewarmer(cache, { ...ok, intervalMs: 5 }), 'prewarmer.intervalMs'],
    [() => createPrewarmer(cache, { ...ok, intervalMs: 100.5 }), 'prewarmer.intervalMs'],
    // A key looked at every 1000 ms can lose its fresh value between two looks if the window is not longer.
    [() => createPrewarmer(cache, { ...ok, intervalMs: 1_000, refreshAheadMs: 1_000 }), 'prewarmer.refreshAheadMs'],
    // The default window, 2 x intervalMs = 12000 ms, is not below the 10000 ms fresh time.
    [() => createPrewarmer(cache, { ...ok, intervalMs: 6_000 }), 'prewarmer.refreshAheadMs'],
    [() => createPrewarmer(cache, { ...ok, concurrency: 0 }), 'prewarmer.concurrency'],
    [() => createPrewarmer(cache, { ...ok, jitter: 1 }), 'prewarmer.jitter'],
    [() => createPrewarmer(cache, { ...ok, signal: new AbortController().signal } as object as typeof ok), 'prewarmer.signal'],
    [() => createPrewarmer(cache, { ...ok, waitMs: 5 } as object as typeof ok), 'prewarmer.waitMs'],
    [() => createPrewarmer(cache, { ...ok, interval: 5 } as object as typeof ok), 'prewarmer.interval'],
  ];
  for (const [make, setting] of cases) assert.throws(make, isConfigError(setting), setting);
  assert.equal(sent(), 0);
  assert.doesNotThrow(() => createPrewarmer(cache, { ...ok, intervalMs: 1_000, refreshAheadMs: 1_001 }));
});

test('a prewarmer whose keys function fails or returns no list of keys reports the pass as failed, touching no Redis, and goes on', async () => {
  const { cache, sent } = countingCache();
  const answers: unknown[] = [Promise.reject(new Error('query failed')), 'not a list', ['ok', 7]];
  let calls = 0;
  const prewarmer = createPrewarmer(cache, { keys: () => answers[calls++] as Promise<string[]>, loader: () => 1, intervalMs: 10 });
  const failures: unknown[] = [];
  const three = new Promise<void>((resolve) =>
    prewarmer.on('passFailed', ({ error }) => {
      failures.push(error);
      if (failures.length === 3) resolve();
    }),
  );
  prewarmer.start();
  await three;
  await prewarmer.stop();
  assert.equal((failures[0] as Error).message, 'query failed');
  assert.ok(isConfigError('prewarmer.keys')(failures[1]), String(failures[1]));
  assert.ok(isConfigError('prewarmer.keys')(failures[2]), String(failures[2]));
  assert.match(String(failures[2]), /item 1 is number/);
  assert.equal(sent(), 0);
});

test('prewarmer.start() twice runs one loop: the keys function is called once for the first pass', async () => {
  const { cache } = countingCache();
  let calls = 0;
  const prewarmer = createPrewarmer(cache, { keys: () => (calls++, new Promise<string[]>(() => undefined)), loader: () => 1, intervalMs: 10 });
  prewarmer.start();
  prewarmer.start();
  // Both loops would have called it within the microtasks before the next turn of the event loop.
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(calls, 1);
  assert.equal(prewarmer.running, true);
  // The keys function never settles: stop() does not wait for it.
  await prewarmer.stop();
  await prewarmer.stop();
  assert.equal(prewarmer.running, false);
});
