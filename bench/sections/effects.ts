/**
 * 14. Effect guard (issue 24): what `guard.once` costs per effect, on a Redis store and on a
 * Postgres store, against the same no-op effect called without the guard, side by side in
 * one run, the arms alternating round by round (the first swapped every round):
 *
 * - one at a time: `effects` new keys, each effect awaited before the next: time per
 *   effect (p50, p99): the guard's latency, a reserve and a confirm round trip;
 * - 32 at a time: `effects` new keys through 32 concurrent callers: effects/s, and CPU per
 *   effect of this process (process.cpuUsage) and of the store's server (the redis-server
 *   listening on the store's port, or the Postgres backends of the store's pool, by
 *   application_name; /proc);
 * - a duplicate: `once` on keys already done, one at a time: time per skip (one round trip).
 *
 * The effect itself is an async no-op, so everything measured is the guard. The section
 * checks itself: every guarded effect of a new key ran and was confirmed, every duplicate
 * was skipped.
 */
import pg from 'pg';
import { createClient, type RedisClientType } from 'redis';
import { createEffectGuard, type EffectGuard } from '../../src/effects/guard.js';
import { postgresEffectStore } from '../../src/effects/postgresStore.js';
import { redisEffectStore } from '../../src/effects/redisStore.js';
// The same "6379 or a private redis-server" logic as the tests.
import { useRedis } from '../../test/helpers/redis.js';
import { DATABASE_URL, benchSchema } from '../common.js';
import { CpuMeter, backendPids, listenerPid } from '../procCpu.js';
import { row, type SectionResult } from '../report.js';
import { fmt, log, percentiles, type Percentiles } from '../util.js';

const S = '14. effect guard';
const STORE_APP = 'bench-effects-store';
const CONCURRENCY = 32;
const DAY_MS = 24 * 3600 * 1000;

export interface EffectsOptions {
  /** Effects per arm and round, in each of the one-at-a-time, concurrent and duplicate runs. */
  effects: number;
  rounds: number;
}

type Arm = 'none' | 'redis' | 'postgres';
const ARMS: Arm[] = ['none', 'redis', 'postgres'];
const LABEL: Record<Arm, string> = { none: 'unguarded no-op', redis: 'Redis guard', postgres: 'Postgres guard' };

export interface ArmFigures {
  /** One at a time: µs per effect. */
  sequentialUs: Percentiles;
  /** One at a time, a key already done: µs per skipped duplicate. */
  duplicateUs: Percentiles;
  /** 32 at a time. */
  concurrentPerSecond: number;
  /** 32 at a time: CPU µs per effect of this process and of the store's server. */
  processCpuUs: number;
  storeCpuUs: number;
}

export interface EffectsData {
  options: EffectsOptions;
  concurrency: number;
  arms: Record<Arm, ArmFigures>;
}

const noop = async (): Promise<number> => 1;

/** The effect run `n` times through `run` (one at a time when `concurrency` is 1): µs per call, sorted. */
async function drive(n: number, concurrency: number, run: (i: number) => Promise<void>): Promise<number[]> {
  const times: number[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      for (let i = next++; i < n; i = next++) {
        const started = performance.now();
        await run(i);
        times.push((performance.now() - started) * 1000);
      }
    }),
  );
  return times.sort((a, b) => a - b);
}

export async function effects(pool: pg.Pool, o: EffectsOptions): Promise<SectionResult<EffectsData>> {
  const redis = await useRedis();
  const { schema, drop } = await benchSchema(pool, 'benchfx');
  const storePool = new pg.Pool({ connectionString: DATABASE_URL, application_name: STORE_APP, max: CONCURRENCY });
  let client: RedisClientType | undefined;
  try {
    client = createClient({ url: redis.url });
    client.on('error', () => undefined);
    await client.connect();
    const redisPid = listenerPid(new URL(redis.url).port || '6379');
    const guards: Record<Exclude<Arm, 'none'>, EffectGuard> = {
      redis: createEffectGuard({ store: redisEffectStore(client, { prefix: redis.prefix('bench-effects') }), replayHorizonMs: DAY_MS, defaults: { ttlMs: DAY_MS } }),
      postgres: createEffectGuard({ store: postgresEffectStore(storePool, { schema }), replayHorizonMs: DAY_MS, defaults: { ttlMs: DAY_MS } }),
    };
    const storePids = (arm: Arm): Promise<number[]> | number[] => (arm === 'redis' ? (redisPid ? [redisPid] : []) : arm === 'postgres' ? backendPids(pool, STORE_APP) : []);
    let round = 0;
    let problems = 0;
    const once = async (arm: Arm, key: string, expect: 'ran' | 'skipped'): Promise<void> => {
      if (arm === 'none') {
        await noop();
        return;
      }
      const r = await guards[arm].once(key, noop);
      if (r.status !== expect || (r.status === 'ran' && !r.confirmed)) problems++;
    };

    // Warm up: connections, scripts, plans.
    for (const arm of ARMS) await drive(200, CONCURRENCY, (i) => once(arm, `warm:${i}`, 'ran'));

    const seq: Record<Arm, number[]> = { none: [], redis: [], postgres: [] };
    const dup: Record<Arm, number[]> = { none: [], redis: [], postgres: [] };
    const rate: Record<Arm, number[]> = { none: [], redis: [], postgres: [] };
    const processCpu: Record<Arm, number[]> = { none: [], redis: [], postgres: [] };
    const storeCpu: Record<Arm, number[]> = { none: [], redis: [], postgres: [] };
    for (let r = 0; r < o.rounds; r++) {
      for (const arm of r % 2 === 0 ? ARMS : [...ARMS].reverse()) {
        round++;
        log(`${S}, round ${r + 1}: ${LABEL[arm]}`);
        seq[arm].push(...(await drive(o.effects, 1, (i) => once(arm, `seq:${round}:${i}`, 'ran'))));
        dup[arm].push(...(await drive(o.effects, 1, (i) => once(arm, `seq:${round}:${i}`, 'skipped'))));
        const meter = new CpuMeter(() => storePids(arm));
        await meter.start();
        const cpu = process.cpuUsage();
        const started = performance.now();
        await drive(o.effects, CONCURRENCY, (i) => once(arm, `par:${round}:${i}`, 'ran'));
        const seconds = (performance.now() - started) / 1000;
        const used = process.cpuUsage(cpu);
        const store = await meter.stop();
        rate[arm].push(o.effects / seconds);
        processCpu[arm].push((used.user + used.system) / o.effects);
        storeCpu[arm].push((store * 1e6) / o.effects);
      }
    }
    if (problems > 0) throw new Error(`${problems} guarded calls did not do what the section expects (ran and confirmed for a new key, skipped for a done one)`);

    const mean = (xs: number[]): number => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);
    const data: EffectsData = { options: o, concurrency: CONCURRENCY, arms: {} as EffectsData['arms'] };
    for (const arm of ARMS) {
      data.arms[arm] = {
        sequentialUs: percentiles([...seq[arm]].sort((a, b) => a - b)),
        duplicateUs: percentiles([...dup[arm]].sort((a, b) => a - b)),
        concurrentPerSecond: mean(rate[arm]),
        processCpuUs: mean(processCpu[arm]),
        storeCpuUs: mean(storeCpu[arm]),
      };
    }
    const a = data.arms;
    const n = `${fmt(o.effects)} per arm and round, ${o.rounds} round${o.rounds > 1 ? 's' : ''}`;
    const guarded: Array<Exclude<Arm, 'none'>> = ['redis', 'postgres'];
    const rows = [
      row(S, `time per effect, one at a time (${n}), µs p50 (p99): ${ARMS.map((x) => LABEL[x]).join(' / ')}`, ARMS.map((x) => `${fmt(a[x].sequentialUs.p50, 1)} (${fmt(a[x].sequentialUs.p99, 1)})`).join(' / ')),
      // A duplicate is one read-only round trip, a new effect two writes: a skip must cost less than a run.
      row(
        S,
        `time per duplicate skipped, one at a time, µs p50 (p99): ${guarded.map((x) => LABEL[x]).join(' / ')}`,
        guarded.map((x) => `${fmt(a[x].duplicateUs.p50, 1)} (${fmt(a[x].duplicateUs.p99, 1)})`).join(' / '),
        'p50 below a new effect\'s, each store',
        guarded.every((x) => a[x].duplicateUs.p50 < a[x].sequentialUs.p50),
      ),
      row(S, `effects/s, ${CONCURRENCY} at a time: ${ARMS.map((x) => LABEL[x]).join(' / ')}`, ARMS.map((x) => fmt(a[x].concurrentPerSecond)).join(' / ')),
      row(S, `CPU µs per effect, ${CONCURRENCY} at a time, this process + the store's server: ${guarded.map((x) => LABEL[x]).join(' / ')} (unguarded: ${fmt(a.none.processCpuUs, 1)} + 0)`, guarded.map((x) => `${fmt(a[x].processCpuUs, 1)} + ${fmt(a[x].storeCpuUs, 1)}`).join(' / ')),
    ];
    return { rows, data };
  } finally {
    await client?.close().catch(() => client?.destroy());
    await storePool.end().catch(() => undefined);
    await drop().catch(() => undefined);
    await redis.stop();
  }
}
