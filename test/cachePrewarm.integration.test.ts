// Cache prewarming (docs/cache.md, "Prewarming") on a real Redis and a real Postgres: the
// loader reads rows with versions from a table in this file's own schema. A pass loads the
// due keys only, through the same single flight and rebuild lock as getOrLoad (so a
// prewarm and a reader, here or in another cache instance, never both load a key), writes
// with the versioned fill (a newer version written meanwhile stays), keeps to its
// concurrency, goes on past a failing key, and ends within redisTimeoutMs when Redis is
// away; a prewarmer keeps keys from a query warm so readers only hit, and stops in bounded
// time. Caches made with their own client stand for separate processes.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { Registry } from 'prom-client';
import { createClient } from 'redis';
import { createCache, type Cache } from '../src/cache/cache.js';
import { CacheLoadTimeoutError, CacheRedisError } from '../src/cache/errors.js';
import type { CacheLoader } from '../src/cache/getOrLoad.js';
import type { CacheRedisClient } from '../src/cache/redisClient.js';
import type { PrewarmResult } from '../src/cache/prewarm.js';
import { createPrewarmer } from '../src/cache/prewarmer.js';
import { DATABASE_URL, uniqueName } from './helpers/db.js';
import { metricValue } from './helpers/metrics.js';
import { startPrivateRedis, useRedis, type TestRedis } from './helpers/redis.js';
import { gate, waitFor } from './helpers/wait.js';

interface Row {
  id: string;
  name: string;
  version: number;
}

let redis: TestRedis;
let pool: pg.Pool;
const schema = uniqueName('prewarm');
const cleanups: Array<() => Promise<unknown>> = [];

before(async () => {
  redis = await useRedis();
  pool = new pg.Pool({ connectionString: DATABASE_URL, max: 10 });
  pool.on('error', () => undefined);
  await pool.query(`CREATE SCHEMA "${schema}"`);
});
after(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => undefined);
  await pool?.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => undefined);
  await pool?.end();
  await redis?.stop();
});

/** A table of `n` rows k0..k<n-1> at version 1 (hot: the first `hot` of them). */
async function rows(name: string, n: number, hot = n): Promise<string> {
  const table = `"${schema}".${name}`;
  await pool.query(`CREATE TABLE ${table} (id text PRIMARY KEY, name text NOT NULL, version bigint NOT NULL, hot boolean NOT NULL)`);
  await pool.query(`INSERT INTO ${table} SELECT 'k' || i, 'name ' || i, 1, i < $1 FROM generate_series(0, $2 - 1) AS i`, [hot, n]);
  return table;
}

/** Reads a key's row: the source of truth the cache holds copies of (undefined: no such row). */
function rowOf(table: string): (key: string) => Promise<Row | undefined> {
  return async (key) => (await pool.query<Row>(`SELECT id, name, version::int AS version FROM ${table} WHERE id = $1`, [key])).rows[0];
}

const versionOf = (r: Row | undefined): number => r!.version;

/** A loader that reads the row, then waits until the test releases it; `loading` resolves once it has read. */
function heldLoader(row: (key: string) => Promise<Row | undefined>): { loader: CacheLoader<Row | undefined>; loading: Promise<void>; release(): void; calls(): number } {
  const loading = gate();
  const released = gate();
  let calls = 0;
  const loader: CacheLoader<Row | undefined> = async ({ key }) => {
    calls++;
    const r = await row(key);
    loading.open();
    await released.promise;
    return r;
  };
  return { loader, loading: loading.promise, release: () => released.open(), calls: () => calls };
}
const keysOf = (n: number): string[] => Array.from({ length: n }, (_, i) => `k${i}`);

/** The counts of a pass, without its timing and errors. */
function counts(r: PrewarmResult): Omit<PrewarmResult, 'errors' | 'durationMs'> {
  const { errors: _errors, durationMs: _durationMs, ...rest } = r;
  return rest;
}

const NONE = { refreshed: 0, fresh: 0, busy: 0, superseded: 0, absent: 0, failed: 0, unfinished: 0, stoppedBy: undefined };

test('a pass loads the keys without a value, in their stale window or within refreshAheadMs of it, leaves the fresh ones, and writes the rows with their versions', async () => {
  const table = await rows('basics', 10);
  const registry = new Registry();
  const cache = createCache({ client: redis.client, prefix: redis.prefix('basics'), registry, name: 'basics', defaults: { ttlMs: 60_000, staleForMs: 10_000 } });
  const row = rowOf(table);
  const loads: string[] = [];
  const loader: CacheLoader<Row | undefined> = async ({ key }) => (loads.push(key), row(key));
  for (const k of ['k0', 'k1', 'k2']) await cache.getOrLoad(k, loader, { versionOf }); // fresh for about a minute
  await cache.setIfNewer('k3', await row('k3'), 1, 500); // 500 ms of fresh time left
  await cache.setIfNewer('k4', await row('k4'), 1, 1); // in its stale window
  await cache.invalidate('k5', 1); // a tombstone of the row's version
  loads.length = 0;
  const result = await cache.prewarm([...keysOf(10), 'k3', 'nope'], loader, { refreshAheadMs: 5_000, versionOf });
  assert.deepEqual(counts(result), { ...NONE, keys: 11, refreshed: 7, fresh: 3, absent: 1 });
  assert.deepEqual(result.errors, []);
  assert.deepEqual(loads.sort(), ['k3', 'k4', 'k5', 'k6', 'k7', 'k8', 'k9', 'nope']);
  for (const k of keysOf(10).slice(3)) {
    const e = await cache.peek<Row>(k);
    assert.deepEqual(e?.value, await row(k), k);
    assert.equal(e?.version, 1n, k);
    assert.equal(e?.fresh, true, k);
    // ttlMs less at most 10 % jitter, plus the stale window.
    assert.ok(e!.pttlMs > 60_000, `${k}: ${e!.pttlMs} ms left`);
  }
  assert.equal(await cache.peek('nope'), undefined, 'a loader\'s undefined is not cached');
  assert.equal(await metricValue(registry, 'outbox_cache_prewarm_keys_total', { cache: 'basics', outcome: 'refreshed' }), 7);
  assert.equal(await metricValue(registry, 'outbox_cache_prewarm_keys_total', { cache: 'basics', outcome: 'fresh' }), 3);
  assert.equal(await metricValue(registry, 'outbox_cache_prewarm_keys_total', { cache: 'basics', outcome: 'absent' }), 1);
  assert.equal(await metricValue(registry, 'outbox_cache_writes_total', { cache: 'basics', operation: 'prewarm', result: 'written' }), 7);
  assert.equal(await metricValue(registry, 'outbox_cache_rebuilds_total', { cache: 'basics', outcome: 'ok' }), 3 + 8, 'prewarm loads are loader calls');
  assert.equal(await metricValue(registry, 'outbox_cache_prewarm_pass_duration_seconds_count', { cache: 'basics' }), 1);
  assert.equal(await metricValue(registry, 'outbox_cache_requests_total', { cache: 'basics', result: 'miss' }), 3, 'a prewarm is not a request');
  // Right after, nothing is due but the key with no row.
  loads.length = 0;
  assert.deepEqual(counts(await cache.prewarm(keysOf(10), loader, { refreshAheadMs: 5_000, versionOf })), { ...NONE, keys: 10, fresh: 10 });
  assert.deepEqual(loads, []);
});

test('three cache instances (as three processes) prewarming the same due keys at once: one loader call per key in all; the others leave each key', async () => {
  const table = await rows('instances', 20);
  const prefix = redis.prefix('instances');
  const caches = await Promise.all([0, 1, 2].map(async () => createCache({ client: await redis.newClient(), prefix })));
  const row = rowOf(table);
  const loads = new Map<string, number>();
  const loader: CacheLoader<Row | undefined> = async ({ key }) => {
    loads.set(key, (loads.get(key) ?? 0) + 1);
    await pool.query('SELECT pg_sleep(0.02)'); // a slower query: the passes overlap
    return row(key);
  };
  const results = await Promise.all(caches.map((c) => c.prewarm(keysOf(20), loader, { concurrency: 4, versionOf })));
  assert.deepEqual([...loads.keys()].sort(), keysOf(20).sort());
  assert.deepEqual([...loads.values()], Array(20).fill(1), 'one loader call per key in all');
  const sum = (f: (r: PrewarmResult) => number): number => results.reduce((n, r) => n + f(r), 0);
  assert.equal(sum((r) => r.refreshed), 20);
  assert.equal(sum((r) => r.busy + r.fresh), 40, 'each other instance found the key being loaded, or loaded');
  assert.equal(sum((r) => r.failed + r.unfinished + r.superseded), 0);
  for (const k of keysOf(20)) assert.equal((await caches[0]!.peek<Row>(k))?.value?.id, k);
});

test('a reader that misses a key while a prewarm loads it gets the prewarm\'s value, in this process and in another; a prewarm that finds a reader loading, or a stale read\'s refresh running, leaves the key', async () => {
  const table = await rows('readers', 3);
  const prefix = redis.prefix('readers');
  const registries = [new Registry(), new Registry()];
  const here = createCache({ client: redis.client, prefix, registry: registries[0], name: 'here', defaults: { staleForMs: 60_000 } });
  const there = createCache({ client: await redis.newClient(), prefix, registry: registries[1], name: 'there', defaults: { staleForMs: 60_000 } });
  const row = rowOf(table);
  let readerLoads = 0;
  const readerLoader: CacheLoader<Row | undefined> = async ({ key }) => (readerLoads++, row(key));

  // A prewarm is loading k0 (held at a gate) when readers of both instances ask for it.
  const held = heldLoader(row);
  const pass = here.prewarm(['k0'], held.loader, { versionOf });
  await held.loading;
  const readers = [here.getOrLoad('k0', readerLoader, { versionOf }), there.getOrLoad('k0', readerLoader, { versionOf })];
  await waitFor('both readers missed k0', async () => (await metricValue(registries[0]!, 'outbox_cache_requests_total', { result: 'miss' })) === 1 && (await metricValue(registries[1]!, 'outbox_cache_requests_total', { result: 'miss' })) === 1);
  held.release();
  assert.deepEqual(await Promise.all(readers), [await row('k0'), await row('k0')]);
  assert.equal(readerLoads, 0, 'the readers waited for the prewarm\'s value');
  assert.equal(held.calls(), 1);
  assert.equal((await pass).refreshed, 1);
  // Each reader waited on the lock: it saw the value, or took the lock once the prewarm let it go and found the value under it.
  for (const r of registries) assert.equal((await metricValue(r, 'outbox_cache_lock_waits_total', { outcome: 'value' })) + (await metricValue(r, 'outbox_cache_lock_waits_total', { outcome: 'took_over' })), 1);

  // A reader is loading k1 (held at a gate) when both instances prewarm it.
  const heldReader = heldLoader(row);
  const reader = here.getOrLoad('k1', heldReader.loader, { versionOf });
  await heldReader.loading;
  let prewarmLoads = 0;
  const prewarmLoader: CacheLoader<Row | undefined> = async ({ key }) => (prewarmLoads++, row(key));
  const passes = await Promise.all([here.prewarm(['k1'], prewarmLoader, { versionOf }), there.prewarm(['k1'], prewarmLoader, { versionOf })]);
  assert.deepEqual(passes.map(counts), [{ ...NONE, keys: 1, busy: 1 }, { ...NONE, keys: 1, busy: 1 }], 'in this process by its single flight, in the other by the rebuild lock');
  heldReader.release();
  assert.deepEqual(await reader, await row('k1'));
  assert.equal(prewarmLoads, 0, 'no prewarm load of k1');

  // A stale read of k2 has started its background refresh (held at a gate) when both instances prewarm k2.
  await here.setIfNewer('k2', await row('k2'), 1, 1);
  await waitFor('k2 in its stale window', async () => (await here.peek('k2'))?.fresh === false);
  const heldRefresh = heldLoader(row);
  assert.deepEqual(await here.getOrLoad('k2', heldRefresh.loader, { versionOf }), await row('k2'), 'the stale value, at once');
  await heldRefresh.loading;
  const onStale = await Promise.all([here.prewarm(['k2'], prewarmLoader, { versionOf }), there.prewarm(['k2'], prewarmLoader, { versionOf })]);
  assert.deepEqual(onStale.map(counts), [{ ...NONE, keys: 1, busy: 1 }, { ...NONE, keys: 1, busy: 1 }], 'one refresh per key: the stale read\'s');
  heldRefresh.release();
  await here.whenIdle();
  assert.equal((await here.peek('k2'))?.fresh, true);
  assert.equal(prewarmLoads, 0, 'no prewarm load of k2');
});

/** A real client whose rebuild-lock commands (SET … NX) wait for `hold` before they go to Redis: it orders two instances' steps. */
function holdLockCommands(client: CacheRedisClient, hold: Promise<void>, asked: () => void): CacheRedisClient {
  return {
    async sendCommand(args, options) {
      if (args[0] === 'SET' && args.includes('NX')) {
        asked();
        await hold;
      }
      return client.sendCommand(args, options);
    },
  };
}

test('a pass that found a key due, and gets its lock only after another instance refreshed it, leaves the key: it reads the entry again under the lock', async () => {
  const table = await rows('reread', 1);
  const prefix = redis.prefix('reread');
  const lockAsked = gate();
  const letLockGo = gate();
  const late = createCache({ client: holdLockCommands(await redis.newClient(), letLockGo.promise, () => lockAsked.open()), prefix });
  const early = createCache({ client: await redis.newClient(), prefix });
  const row = rowOf(table);
  let loads = 0;
  const loader: CacheLoader<Row | undefined> = async ({ key }) => (loads++, row(key));
  const latePass = late.prewarm(['k0'], loader, { versionOf });
  await lockAsked.promise; // it read k0 (missing: due) and asks for the lock
  assert.deepEqual(counts(await early.prewarm(['k0'], loader, { versionOf })), { ...NONE, keys: 1, refreshed: 1 });
  letLockGo.open();
  assert.deepEqual(counts(await latePass), { ...NONE, keys: 1, busy: 1 });
  assert.equal(loads, 1, 'one load of k0');
});

test('a newer version written while a prewarm loads is never overwritten: a setIfNewer, and an invalidation\'s tombstone', async () => {
  const table = await rows('versions', 2);
  const registry = new Registry();
  const cache = createCache({ client: redis.client, prefix: redis.prefix('versions'), registry, name: 'versions' });
  const row = rowOf(table);
  const change = async (key: string): Promise<Row> => (await pool.query<Row>(`UPDATE ${table} SET version = version + 1, name = 'changed' WHERE id = $1 RETURNING id, name, version::int AS version`, [key])).rows[0]!;

  for (const [key, writeNewer] of [
    ['k0', (r: Row) => cache.setIfNewer('k0', r, r.version)],
    ['k1', (r: Row) => cache.invalidate('k1', r.version)],
  ] as const) {
    // The prewarm reads version 1; the row changes to 2 and the change reaches the cache; then the prewarm writes.
    const held = heldLoader(row);
    const pass = cache.prewarm([key], held.loader, { versionOf });
    await held.loading;
    assert.equal(await writeNewer(await change(key)), true);
    held.release();
    assert.deepEqual(counts(await pass), { ...NONE, keys: 1, superseded: 1 });
    const e = await cache.peek<Row>(key);
    assert.equal(e?.version, 2n, `${key}: version 2 stays`);
    assert.equal(e?.value?.name, key === 'k0' ? 'changed' : undefined, `${key}: the newer value (or the tombstone) stays`);
  }
  assert.equal(await metricValue(registry, 'outbox_cache_writes_total', { operation: 'prewarm', result: 'skipped' }), 2);
  assert.equal(await metricValue(registry, 'outbox_cache_prewarm_keys_total', { outcome: 'superseded' }), 2);
  // The next pass leaves k0 (fresh at version 2) and loads k1 (a tombstone: no value) at version 2.
  assert.deepEqual(counts(await cache.prewarm(['k0', 'k1'], async ({ key }) => row(key), { versionOf })), { ...NONE, keys: 2, fresh: 1, refreshed: 1 });
  assert.deepEqual((await cache.peek<Row>('k1'))?.value, { id: 'k1', name: 'changed', version: 2 });
});

test('concurrency bounds the loads in flight: never more than `concurrency` at once, and that many are used', async () => {
  for (const concurrency of [1, 3, 5]) {
    const table = await rows(`concurrency${concurrency}`, 16);
    const cache = createCache({ client: redis.client, prefix: redis.prefix(`concurrency${concurrency}`) });
    const row = rowOf(table);
    let inFlight = 0;
    let most = 0;
    // The first loads wait until `concurrency` of them run: an unbounded pass would start more meanwhile.
    const full = gate();
    const loader: CacheLoader<Row | undefined> = async ({ key }) => {
      inFlight++;
      most = Math.max(most, inFlight);
      if (inFlight === concurrency) full.open();
      try {
        await full.promise;
        return await row(key);
      } finally {
        inFlight--;
      }
    };
    const result = await cache.prewarm(keysOf(16), loader, { concurrency, versionOf });
    assert.equal(result.refreshed, 16, `concurrency ${concurrency}`);
    assert.equal(most, concurrency, `at most ${concurrency} loads at once, and that many`);
  }
});

test('a key whose loader throws, overruns loadTimeoutMs or gives a bad version fails alone: the others are refreshed, the failures counted and reported, their locks released', async () => {
  const table = await rows('failures', 8);
  const registry = new Registry();
  const prefix = redis.prefix('failures');
  const cache = createCache({ client: redis.client, prefix, registry, name: 'failures' });
  const row = rowOf(table);
  const loader: CacheLoader<Row | undefined> = async ({ key }) => {
    if (key === 'k1') throw new Error('row k1 is corrupt');
    if (key === 'k2') return new Promise<never>(() => undefined); // hangs, and ignores its signal
    const r = await row(key);
    return key === 'k3' ? { ...r!, version: -1 } : r;
  };
  const result = await cache.prewarm(keysOf(8), loader, { versionOf, loadTimeoutMs: 300, concurrency: 2 });
  assert.deepEqual(counts(result), { ...NONE, keys: 8, refreshed: 5, failed: 3 });
  const byKey = new Map(result.errors.map((f) => [f.key, f.error]));
  assert.deepEqual([...byKey.keys()].sort(), ['k1', 'k2', 'k3']);
  assert.equal((byKey.get('k1') as Error).message, 'row k1 is corrupt', 'the loader\'s own error');
  assert.ok(byKey.get('k2') instanceof CacheLoadTimeoutError);
  assert.equal((byKey.get('k2') as CacheLoadTimeoutError).retriable, true);
  assert.equal((byKey.get('k3') as { setting?: string }).setting, 'prewarm.versionOf');
  for (const k of ['k0', 'k4', 'k5', 'k6', 'k7']) assert.equal((await cache.peek<Row>(k))?.value?.id, k);
  for (const k of ['k1', 'k2', 'k3']) {
    assert.equal(await cache.peek(k), undefined, `${k}: nothing written`);
    assert.equal(await redis.client.exists(`${prefix}${k}:rebuild-lock`), 0, `${k}: its rebuild lock released`);
  }
  assert.equal(await metricValue(registry, 'outbox_cache_prewarm_keys_total', { outcome: 'failed' }), 3);
  assert.equal(await metricValue(registry, 'outbox_cache_errors_total', { operation: 'loader' }), 2);
  assert.equal(await metricValue(registry, 'outbox_cache_errors_total', { operation: 'version' }), 1);
});

/** The cache's bound on Redis replies in the outage test, and scheduling slack on a loaded 2-core machine. */
const REDIS_TIMEOUT_MS = 300;
const SLACK_MS = 700;

async function timed<T>(fn: () => Promise<T>): Promise<{ value: T; ms: number }> {
  const started = performance.now();
  const value = await fn();
  return { value, ms: performance.now() - started };
}

test('Redis away: a pass ends within redisTimeoutMs whether Redis hangs during a load, hangs before the pass or is gone; its keys failed or unfinished, no loader called', async () => {
  const server = await startPrivateRedis();
  cleanups.push(() => server.stop('SIGKILL'));
  // The quick start's client: default connect and retry settings.
  const client = createClient({ url: server.url });
  client.on('error', () => undefined);
  cleanups.push(async () => client.destroy());
  await client.connect();
  const cache = createCache({ client, prefix: 'away:', redisTimeoutMs: REDIS_TIMEOUT_MS });
  const table = await rows('away', 40);
  const row = rowOf(table);

  // Hung while a key loads: the fill gives up within the bound and the key fails.
  const held = heldLoader(row);
  const pass = cache.prewarm(['k0'], held.loader, { versionOf });
  await held.loading;
  server.pause();
  const hungInLoad = await timed(async () => {
    held.release();
    return pass;
  });
  console.log(`measured: prewarm, Redis hung during the load: ${Math.round(hungInLoad.ms)} ms after the load (bound ${REDIS_TIMEOUT_MS} ms)`);
  assert.ok(hungInLoad.ms <= REDIS_TIMEOUT_MS + SLACK_MS, `${Math.round(hungInLoad.ms)} ms`);
  assert.deepEqual(counts(hungInLoad.value), { ...NONE, keys: 1, failed: 1 });
  assert.ok(hungInLoad.value.errors[0]!.error instanceof CacheRedisError);
  assert.match(String((hungInLoad.value.errors[0]!.error as Error).message), /Redis write of "k0" failed: no reply to EVALSHA within 300 ms/);

  let loads = 0;
  const counting: CacheLoader<Row | undefined> = async ({ key }) => (loads++, row(key));
  for (const [state, makeAway] of [
    ['hung', () => undefined],
    ['killed', () => server.stop('SIGKILL')],
  ] as const) {
    await makeAway();
    const r = await timed(() => cache.prewarm(keysOf(40), counting, { concurrency: 4, versionOf }));
    console.log(`measured: prewarm of 40 keys, Redis ${state}: ${Math.round(r.ms)} ms (bound ${REDIS_TIMEOUT_MS} ms)`);
    assert.ok(r.ms <= REDIS_TIMEOUT_MS + SLACK_MS, `Redis ${state}: ${Math.round(r.ms)} ms`);
    assert.ok(r.value.failed >= 1 && r.value.failed <= 4, `Redis ${state}: ${r.value.failed} failed, one per worker at most`);
    assert.equal(r.value.unfinished, 40 - r.value.failed, `Redis ${state}: no key started after the failure`);
    assert.equal(r.value.stoppedBy, 'redis');
    for (const f of r.value.errors) {
      assert.ok(f.error instanceof CacheRedisError, String(f.error));
      assert.equal(f.error.retriable, true);
    }
    assert.equal(loads, 0, `Redis ${state}: no loader call`);
  }
});

test('two prewarmers (as two processes) keep the hot keys of a query warm: readers on both only hit, and each key is loaded once per refresh window', async () => {
  const table = await rows('periodic', 6, 4); // k0-k3 hot
  const TTL_MS = 3_000;
  const AHEAD_MS = 2_000;
  const registries = [new Registry(), new Registry()];
  // One prefix, a client each: two processes of one service.
  const prefix = redis.prefix('periodic');
  const instances = await Promise.all(registries.map(async (registry, i) => createCache({ client: await redis.newClient(), prefix, registry, name: `instance${i}` })));
  const row = rowOf(table);
  const loadTimes = new Map<string, number[]>();
  const loader: CacheLoader<Row | undefined> = async ({ key }) => {
    loadTimes.set(key, [...(loadTimes.get(key) ?? []), Date.now()]);
    return row(key);
  };
  const hotKeys = async (): Promise<string[]> => (await pool.query<{ id: string }>(`SELECT id FROM ${table} WHERE hot ORDER BY id`)).rows.map((r) => r.id);
  const passes: PrewarmResult[] = [];
  const prewarmers = instances.map((cache) =>
    createPrewarmer(cache, { keys: hotKeys, loader, intervalMs: 250, refreshAheadMs: AHEAD_MS, ttlMs: TTL_MS, jitter: 0, concurrency: 2, versionOf }).on('pass', (r) => passes.push(r)),
  );
  cleanups.push(() => Promise.all(prewarmers.map((p) => p.stop())));
  for (const p of prewarmers) p.start();
  const hot = await hotKeys();
  await waitFor('the hot keys are warm', async () => (await Promise.all(hot.map((k) => instances[0]!.peek(k)))).every((e) => e?.fresh));

  let readerLoads = 0;
  const readerLoader: CacheLoader<Row | undefined> = async ({ key }) => (readerLoads++, row(key));
  let reading = true;
  const readers = instances.map(async (cache) => {
    while (reading) {
      await Promise.all(hot.map((k) => cache.getOrLoad(k, readerLoader, { ttlMs: TTL_MS, jitter: 0, versionOf })));
      await new Promise((r) => setTimeout(r, 5)); // the readers' pace
    }
  });
  // Four loads of every key: each outlived at least three would-be expiries, with readers reading throughout.
  await waitFor('every hot key loaded four times', () => hot.every((k) => (loadTimes.get(k)?.length ?? 0) >= 4), { timeoutMs: 60_000 });
  reading = false;
  await Promise.all(readers);
  await Promise.all(prewarmers.map((p) => p.stop()));

  assert.equal(readerLoads, 0, 'no reader loaded');
  for (const [i, registry] of registries.entries()) {
    assert.equal(await metricValue(registry, 'outbox_cache_requests_total', { cache: `instance${i}`, result: 'miss' }), 0, `instance ${i}: no miss`);
    assert.equal(await metricValue(registry, 'outbox_cache_requests_total', { cache: `instance${i}`, result: 'stale' }), 0, `instance ${i}: nothing stale`);
    assert.ok((await metricValue(registry, 'outbox_cache_requests_total', { cache: `instance${i}`, result: 'hit' })) > 0, `instance ${i}: hits`);
  }
  assert.deepEqual([...loadTimes.keys()].sort(), hot, 'the cold rows are not loaded');
  // A key written at t is due from t + (ttl - refreshAhead): no two loads of a key come closer, whichever instance made them.
  for (const [k, times] of loadTimes) {
    for (let i = 1; i < times.length; i++) assert.ok(times[i]! - times[i - 1]! >= TTL_MS - AHEAD_MS - 50, `${k}: loads ${times[i]! - times[i - 1]!} ms apart`);
  }
  assert.equal(passes.reduce((n, r) => n + r.failed, 0), 0);
  assert.ok(passes.some((r) => r.busy + r.fresh > 0), 'passes found keys fresh or taken by the other instance');
});

test('prewarmer.stop() ends a pass whose loader never settles within redisTimeoutMs, aborts its signal and releases its lock; stop() again is a no-op; start() runs it again', async () => {
  const registry = new Registry();
  const prefix = redis.prefix('stop');
  const cache: Cache = createCache({ client: redis.client, prefix, registry, name: 'stop', redisTimeoutMs: REDIS_TIMEOUT_MS });
  const signals: AbortSignal[] = [];
  let called = gate();
  const prewarmer = createPrewarmer(cache, {
    keys: ['k0', 'k1', 'k2'],
    loader: ({ signal }) => {
      signals.push(signal);
      called.open();
      return new Promise<never>(() => undefined); // never settles, ignores its signal
    },
    intervalMs: 50,
    refreshAheadMs: 100,
    concurrency: 1,
  });
  const passes: PrewarmResult[] = [];
  prewarmer.on('pass', (r) => passes.push(r));
  await prewarmer.stop(); // before start: nothing to stop
  prewarmer.start();
  await called.promise;
  const stop = await timed(() => prewarmer.stop());
  console.log(`measured: prewarmer.stop() with a loader that never settles: ${Math.round(stop.ms)} ms`);
  assert.ok(stop.ms <= REDIS_TIMEOUT_MS + SLACK_MS, `${Math.round(stop.ms)} ms`);
  assert.equal(prewarmer.running, false);
  assert.equal(signals.length, 1);
  assert.equal(signals[0]!.aborted, true, 'the loader\'s signal is aborted');
  assert.equal(passes.length, 1);
  assert.deepEqual(counts(passes[0]!), { ...NONE, keys: 3, unfinished: 3, stoppedBy: 'signal' });
  assert.equal(await redis.client.exists(`${prefix}k0:rebuild-lock`), 0, 'the lock is released');
  assert.equal(await metricValue(registry, 'outbox_cache_rebuilds_total', { outcome: 'aborted' }), 1);
  assert.equal(await metricValue(registry, 'outbox_cache_errors_total', { operation: 'loader' }), 0, 'a stop is no loader error');
  const again = await timed(() => prewarmer.stop());
  assert.ok(again.ms < 100, `a second stop() returns at once (${Math.round(again.ms)} ms)`);
  called = gate();
  prewarmer.start();
  await called.promise;
  assert.equal(signals.length, 2, 'started again');
  await prewarmer.stop();
  assert.equal(signals[1]!.aborted, true);
});
