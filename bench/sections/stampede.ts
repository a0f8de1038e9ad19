/**
 * 8. Cache stampede: a hot key expires and N readers ask for it at once, spread over W
 * workers (each its own Redis connection and cache instance, as separate processes would
 * be), on a real Redis (6379, or a private redis-server). The loader is a 20 ms Postgres
 * query (`pg_sleep`) on the bench pool, standing for the database the cache protects.
 * Four arms, alternating round by round, side by side in one run:
 *
 * - naive cache-aside: GET; on a miss, load and SET with a TTL (what is usually written);
 * - the helper (src/cache/): getOrLoad, single flight per worker, a rebuild lock across them;
 * - the helper with staleForMs: the key is in its stale window instead of gone, readers
 *   get the stale value while one rebuilds;
 * - the helper with a prewarmer on every worker (createPrewarmer, the hot key as its list):
 *   the key is filled with a short TTL, and the readers come at the moment it would have
 *   expired; meanwhile the prewarmers have refreshed it ahead of time.
 *
 * Per arm: loader calls per expiry (for the prewarmer: from the fill to the moment it
 * would have expired, readers included), and read latency (p50, p99) of the readers at
 * expiry; for the prewarmer also how many readers missed or got a stale value.
 */
import type pg from 'pg';
import { createClient, type RedisClientType } from 'redis';
import { Registry } from 'prom-client';
import { createCache, type Cache } from '../../src/cache/cache.js';
import { createPrewarmer } from '../../src/cache/prewarmer.js';
// The same "6379 or a private redis-server" logic as the tests.
import { useRedis } from '../../test/helpers/redis.js';
import { row, type SectionResult } from '../report.js';
import { fmt, mean, percentiles, sleep, type Percentiles } from '../util.js';

export interface StampedeOptions {
  /** Concurrent readers per expiry. */
  readers: number;
  /** Workers the readers are spread over. */
  workers: number;
  /** Expiries measured per arm. */
  rounds: number;
  /** Loader time (a Postgres pg_sleep), ms. */
  loaderMs: number;
}

type Arm = 'naive' | 'helper' | 'stale' | 'prewarm';
const ARMS: Arm[] = ['naive', 'helper', 'stale', 'prewarm'];
const LABEL: Record<Arm, string> = { naive: 'naive cache-aside', helper: 'getOrLoad', stale: 'getOrLoad + staleForMs', prewarm: 'getOrLoad + prewarmer' };

export interface StampedeData {
  options: StampedeOptions;
  arms: Record<Arm, { loaderCallsPerExpiry: number; latencyMs: Percentiles; errors: number }>;
  /** Prewarmer arm: readers at the would-be expiry that did not get a fresh value (miss or stale). */
  prewarmNotFresh: number;
}

const TTL_MS = 60_000;
/**
 * The prewarmer arm: a short TTL, so that a round lasts one; the key is due 1 s before its
 * expiry and looked at every 200 ms. No jitter: the moment it would have expired is known.
 */
const PREWARM = { ttlMs: 2_000, refreshAheadMs: 1_000, intervalMs: 200 };

export async function stampede(pool: pg.Pool, o: StampedeOptions): Promise<SectionResult<StampedeData>> {
  const redis = await useRedis();
  const clients: RedisClientType[] = [];
  try {
    for (let i = 0; i < o.workers; i++) {
      const c: RedisClientType = createClient({ url: redis.url });
      c.on('error', () => undefined);
      await c.connect();
      clients.push(c);
    }
    const prefix = redis.prefix('bench-stampede');
    const key = 'hot';
    const caches: Cache[] = clients.map((client) => createCache({ client, prefix, defaults: { ttlMs: TTL_MS, lockTtlMs: 5_000 } }));
    const staleCaches: Cache[] = clients.map((client) => createCache({ client, prefix: `${prefix}stale:`, defaults: { ttlMs: TTL_MS, staleForMs: 60_000, lockTtlMs: 5_000 } }));
    let loads = 0;
    const loader = async (): Promise<{ at: number; pad: string }> => {
      loads++;
      await pool.query('SELECT pg_sleep($1::float8 / 1000)', [o.loaderMs]);
      return { at: Date.now(), pad: 'x'.repeat(500) };
    };
    const naiveKey = `${prefix}naive:${key}`;
    const naiveRead = async (client: RedisClientType): Promise<unknown> => {
      const text = await client.get(naiveKey);
      if (text !== null) return JSON.parse(text) as unknown;
      const value = await loader();
      await client.set(naiveKey, JSON.stringify(value), { PX: TTL_MS });
      return value;
    };
    // One expiry: expire the key (gone, or into its stale window), then N readers at once.
    const expiry = async (arm: Arm): Promise<{ loads: number; latencies: number[]; errors: number }> => {
      if (arm === 'naive') await clients[0]!.del(naiveKey);
      else if (arm === 'helper') await caches[0]!.invalidate(key);
      else {
        await staleCaches[0]!.getOrLoad(key, loader);
        await clients[0]!.pExpire(`${prefix}stale:${key}`, 30_000); // fresh time over, stale window left
      }
      loads = 0;
      let errors = 0;
      const latencies = await Promise.all(
        Array.from({ length: o.readers }, async (_, i) => {
          const w = i % o.workers;
          const started = performance.now();
          try {
            if (arm === 'naive') await naiveRead(clients[w]!);
            else await (arm === 'helper' ? caches : staleCaches)[w]!.getOrLoad(key, loader);
          } catch {
            errors++;
          }
          return performance.now() - started;
        }),
      );
      // The stale arm's rebuild runs in the background, after its readers have their answer.
      await Promise.all([...caches, ...staleCaches].map((c) => c.whenIdle()));
      return { loads, latencies, errors };
    };
    const prewarmRegistry = new Registry();
    const prewarmCaches: Cache[] = clients.map((client) =>
      createCache({ client, prefix: `${prefix}prewarm:`, registry: prewarmRegistry, name: 'bench_prewarm', defaults: { ttlMs: PREWARM.ttlMs, jitter: 0, lockTtlMs: 5_000 } }),
    );
    const notFresh = async (): Promise<number> => {
      const { values } = await prewarmRegistry.getSingleMetric('outbox_cache_requests_total')!.get();
      return values.filter((v) => v.labels.result !== 'hit').reduce((n, v) => n + v.value, 0);
    };
    // One would-be expiry: the prewarmers fill the key, the readers come when its TTL ends.
    const prewarmExpiry = async (): Promise<{ loads: number; latencies: number[]; errors: number; notFresh: number }> => {
      await prewarmCaches[0]!.invalidate(key);
      const prewarmers = prewarmCaches.map((cache) => createPrewarmer(cache, { keys: [key], loader, ...PREWARM, jitter: 0 }));
      for (const p of prewarmers) p.start();
      let entry = await prewarmCaches[0]!.peek(key);
      while (entry?.value === undefined) {
        await sleep(5);
        entry = await prewarmCaches[0]!.peek(key);
      }
      const wouldExpireAt = performance.now() + entry.pttlMs;
      loads = 0;
      const before = await notFresh();
      await sleep(Math.max(0, wouldExpireAt - performance.now()));
      let errors = 0;
      const latencies = await Promise.all(
        Array.from({ length: o.readers }, async (_, i) => {
          const started = performance.now();
          try {
            await prewarmCaches[i % o.workers]!.getOrLoad(key, loader);
          } catch {
            errors++;
          }
          return performance.now() - started;
        }),
      );
      const windowLoads = loads;
      await Promise.all(prewarmers.map((p) => p.stop()));
      await Promise.all(prewarmCaches.map((c) => c.whenIdle()));
      return { loads: windowLoads, latencies, errors, notFresh: (await notFresh()) - before };
    };
    const run = (arm: Arm): Promise<{ loads: number; latencies: number[]; errors: number; notFresh?: number }> => (arm === 'prewarm' ? prewarmExpiry() : expiry(arm));
    // Warm up the connections and the scripts once per arm.
    for (const arm of ARMS) await run(arm);
    const calls: Record<Arm, number[]> = { naive: [], helper: [], stale: [], prewarm: [] };
    const latencies: Record<Arm, number[]> = { naive: [], helper: [], stale: [], prewarm: [] };
    const errors: Record<Arm, number> = { naive: 0, helper: 0, stale: 0, prewarm: 0 };
    let prewarmNotFresh = 0;
    for (let r = 0; r < o.rounds; r++) {
      for (const arm of r % 2 === 0 ? ARMS : [...ARMS].reverse()) {
        const x = await run(arm);
        prewarmNotFresh += x.notFresh ?? 0;
        calls[arm].push(x.loads);
        latencies[arm].push(...x.latencies);
        errors[arm] += x.errors;
      }
    }
    const data: StampedeData = { options: o, arms: {} as StampedeData['arms'], prewarmNotFresh };
    for (const arm of ARMS) {
      data.arms[arm] = { loaderCallsPerExpiry: mean(calls[arm]), latencyMs: percentiles([...latencies[arm]].sort((a, b) => a - b)), errors: errors[arm] };
    }
    const a = data.arms;
    const what = `${o.readers} readers on ${o.workers} workers, ${o.loaderMs} ms loader, ${o.rounds} expiries`;
    const prewarmWhat = `a prewarmer per worker, ttl ${PREWARM.ttlMs} ms, refreshed ${PREWARM.refreshAheadMs} ms ahead, looked at every ${PREWARM.intervalMs} ms`;
    const helpers: Arm[] = ['helper', 'stale', 'prewarm'];
    const rows = [
      row(
        'stampede',
        `loader calls per expiry (${what}; prewarmer: from the fill to the would-be expiry): ${ARMS.map((x) => LABEL[x]).join(' / ')}`,
        ARMS.map((x) => fmt(a[x].loaderCallsPerExpiry, 1)).join(' / '),
        'getOrLoad, prewarmer: 1',
        helpers.every((x) => a[x].loaderCallsPerExpiry === 1 && a[x].errors === 0),
      ),
      row('stampede', `read latency p50 at expiry (prewarmer: at the would-be expiry), ms: ${ARMS.map((x) => LABEL[x]).join(' / ')}`, ARMS.map((x) => fmt(a[x].latencyMs.p50, 1)).join(' / ')),
      row('stampede', `read latency p99 at expiry (prewarmer: at the would-be expiry), ms: ${ARMS.map((x) => LABEL[x]).join(' / ')}`, ARMS.map((x) => fmt(a[x].latencyMs.p99, 1)).join(' / '), 'getOrLoad below naive', a.helper.latencyMs.p99 < a.naive.latencyMs.p99),
      row('stampede', `prewarmer: readers at the would-be expiry without a fresh value (${prewarmWhat}; ${o.rounds} expiries of ${o.readers} readers)`, fmt(prewarmNotFresh), '0', prewarmNotFresh === 0),
      row('stampede', 'prewarmer: read latency p99 at the would-be expiry below getOrLoad\'s at expiry, ms', `${fmt(a.prewarm.latencyMs.p99, 1)} vs ${fmt(a.helper.latencyMs.p99, 1)}`, 'below', a.prewarm.latencyMs.p99 < a.helper.latencyMs.p99),
    ];
    return { rows, data };
  } finally {
    await Promise.all(clients.map((c) => c.close().catch(() => c.destroy())));
    await redis.stop();
  }
}
