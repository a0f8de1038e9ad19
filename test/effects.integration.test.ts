// The effect guard (src/effects/) on a real Redis and a real Postgres, the same cases on
// both stores: a duplicate skipped, a failed effect retried, concurrent duplicates never
// both run, a slow effect kept reserved, a crashed attempt's reservation expiring and
// taken over, inDoubt 'fail', a lost reservation aborting the effect's signal, waits and
// TTLs bounded, the store unreachable. A "crashed attempt" here is a reservation written
// through the store by a token nobody confirms (what a SIGKILLed process leaves behind);
// test/effectsProcesses.integration.test.ts kills real processes.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { Registry } from 'prom-client';
import { createClient } from 'redis';
import { createEffectGuard, type EffectGuard } from '../src/effects/guard.js';
import { EffectBusyError, EffectInDoubtError, EffectReservationLostError, EffectStoreError } from '../src/effects/errors.js';
import { postgresEffectStore } from '../src/effects/postgresStore.js';
import { redisEffectStore } from '../src/effects/redisStore.js';
import type { EffectOptions } from '../src/effects/options.js';
import type { EffectStore } from '../src/effects/store.js';
import { ConfigError, SchemaError } from '../src/shared/errors.js';
import { createTestSchema, DATABASE_URL, uniqueName, type TestSchema } from './helpers/db.js';
import { metricValue } from './helpers/metrics.js';
import { silentServer, useRedis, type TestRedis } from './helpers/redis.js';
import { waitFor } from './helpers/wait.js';

/** Scheduling on a loaded 2-core machine, on top of a bound. */
const SLACK_MS = 700;
const DAY_MS = 24 * 3600 * 1000;

let redis: TestRedis;
let db: TestSchema;
let redisPrefix: string;
const cleanups: Array<() => Promise<unknown>> = [];

before(async () => {
  redis = await useRedis();
  redisPrefix = redis.prefix('effects');
  db = await createTestSchema('effects');
});
after(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => undefined);
  await redis?.stop();
  await db?.drop();
});

/** A store as a process of its own would have it: its own Redis connection or Postgres pool, the shared keys. */
interface Backend {
  name: 'redis' | 'postgres';
  store(): Promise<EffectStore>;
  /** Overwrites `key`'s record with another attempt's live reservation, as a takeover after a stall leaves it. */
  hijack(key: string): Promise<void>;
}

const BACKENDS: Backend[] = [
  {
    name: 'redis',
    store: async () => redisEffectStore(await redis.newClient(), { prefix: redisPrefix }),
    hijack: async (key) => {
      const time = (await redis.client.sendCommand(['TIME'])) as [string, string];
      const now = Number(time[0]) * 1000 + Math.floor(Number(time[1]) / 1000);
      await redis.client.sendCommand(['SET', redisPrefix + key, `r:${now + 60_000}:${randomUUID()}`, 'PX', String(DAY_MS)]);
    },
  },
  {
    name: 'postgres',
    store: async () => {
      const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 4 });
      pool.on('error', () => undefined);
      cleanups.push(() => pool.end());
      return postgresEffectStore(pool, { schema: db.schema });
    },
    hijack: async (key) => {
      const r = await db.pool.query(`UPDATE "${db.schema}".effect_keys SET token = gen_random_uuid(), reserved_until = clock_timestamp() + interval '60 s' WHERE key = $1`, [key]);
      assert.equal(r.rowCount, 1, 'the key had a record to take over');
    },
  },
];

async function guardOn(b: Backend, defaults: EffectOptions = {}, registry = new Registry()): Promise<{ guard: EffectGuard; registry: Registry; store: EffectStore }> {
  const store = await b.store();
  return { guard: createEffectGuard({ store, registry, name: 'test', replayHorizonMs: DAY_MS, defaults: { ttlMs: DAY_MS, ...defaults } }), registry, store };
}

const metric = (registry: Registry, name: string, labels: Record<string, string>): Promise<number> => metricValue(registry, `outbox_effect_${name}`, { guard: 'test', ...labels });

for (const b of BACKENDS) {
  test(`${b.name}: once runs the effect and confirms it; a duplicate is skipped; the record says done for ttlMs`, async () => {
    const { guard, registry } = await guardOn(b);
    const key = uniqueName('notif:u1:welcome');
    const seen: Array<{ key: string; idempotencyKey: string; tookOver: boolean; aborted: boolean }> = [];
    const first = await guard.once(key, (ctx) => {
      seen.push({ key: ctx.key, idempotencyKey: ctx.idempotencyKey, tookOver: ctx.tookOver, aborted: ctx.signal.aborted });
      return 42;
    });
    assert.deepEqual(first, { status: 'ran', value: 42, confirmed: true, tookOver: false });
    assert.deepEqual(seen, [{ key, idempotencyKey: key, tookOver: false, aborted: false }]);
    const again = await guard.once(key, () => assert.fail('a confirmed effect must not run again'));
    assert.deepEqual(again, { status: 'skipped', reason: 'done' });
    const record = await guard.inspect(key);
    assert.equal(record?.state, 'done');
    assert.ok(record.expiresInMs > DAY_MS - 60_000 && record.expiresInMs <= DAY_MS, `expires in ${record.expiresInMs} ms`);
    assert.ok(Math.abs(record.confirmedAt.getTime() - Date.now()) < 60_000);
    assert.equal(await metric(registry, 'runs_total', { outcome: 'confirmed' }), 1);
    assert.equal(await metric(registry, 'skips_total', { reason: 'done' }), 1);
    assert.equal(await metric(registry, 'reservations_total', { result: 'new' }), 1);
    assert.equal(await metric(registry, 'duration_seconds_count', {}), 1);
  });

  test(`${b.name}: an effect that throws releases its key: its own error comes back, and the retry runs it`, async () => {
    const { guard, registry } = await guardOn(b);
    const key = uniqueName('charge:o1:1');
    const boom = new Error('downstream 503');
    await assert.rejects(guard.once(key, async () => Promise.reject(boom)), (e) => e === boom);
    assert.equal(await guard.inspect(key), undefined, 'released');
    assert.equal(await metric(registry, 'runs_total', { outcome: 'failed' }), 1);
    // A synchronous throw too.
    await assert.rejects(guard.once(key, () => { throw boom; }), (e) => e === boom);
    const retry = await guard.once(key, () => 'ok');
    assert.equal(retry.status, 'ran');
  });

  test(`${b.name}: concurrent duplicates from four processes: one runs, the others wait and skip; with onBusy 'skip' they return at once`, async () => {
    const registry = new Registry();
    const guards = await Promise.all(Array.from({ length: 4 }, () => guardOn(b, {}, registry).then((g) => g.guard)));
    const key = uniqueName('notif:u2:receipt:7');
    let running = 0;
    let most = 0;
    let runs = 0;
    const effect = async (): Promise<string> => {
      runs++;
      most = Math.max(most, ++running);
      await new Promise((r) => setTimeout(r, 200));
      running--;
      return 'sent';
    };
    const results = await Promise.all(Array.from({ length: 20 }, (_, i) => guards[i % 4]!.once(key, effect)));
    assert.equal(runs, 1);
    assert.equal(most, 1);
    assert.equal(results.filter((r) => r.status === 'ran').length, 1);
    assert.deepEqual(results.filter((r) => r.status === 'skipped').map((r) => r.status === 'skipped' && r.reason), Array(19).fill('done'));
    assert.equal(await metric(registry, 'skips_total', { reason: 'done' }), 19);
    // Those that came while it ran waited for it (a call that got its turn later found it done at once).
    const waited = await metric(registry, 'waits_total', { outcome: 'done' });
    assert.ok(waited >= 1 && waited <= 19, `${waited} waited`);

    const other = uniqueName('notif:u2:receipt:8');
    runs = 0;
    const started = performance.now();
    const skipping = await Promise.all(Array.from({ length: 10 }, (_, i) => guards[i % 4]!.once(other, effect, { onBusy: 'skip' })));
    assert.equal(runs, 1);
    assert.equal(skipping.filter((r) => r.status === 'skipped' && r.reason === 'in-progress').length, 9);
    assert.ok(performance.now() - started < 200 + SLACK_MS);
    assert.equal(await metric(registry, 'skips_total', { reason: 'in_progress' }), 9);
  });

  test(`${b.name}: a slow effect keeps its reservation: a duplicate that waits longer than reservationMs never runs it`, async () => {
    // Renewals every 200 ms, each with 400 ms to land (300 left 200 ms, tight under CI's load).
    const [a, c] = [await guardOn(b, { reservationMs: 600 }), await guardOn(b, { reservationMs: 600 })];
    const key = uniqueName('export:report:3');
    let runs = 0;
    const slow = a.guard.once(key, async ({ signal }) => {
      runs++;
      await new Promise((r) => setTimeout(r, 2_400)); // four reservation lifetimes
      return signal.aborted;
    });
    await waitFor('the first attempt holding the key', async () => (await c.guard.inspect(key))?.state === 'reserved', { intervalMs: 10 });
    const started = performance.now();
    const duplicate = await c.guard.once(key, () => runs++, { waitMs: 10_000 });
    assert.deepEqual(duplicate, { status: 'skipped', reason: 'done' });
    assert.ok(performance.now() - started > 1_800, 'the duplicate waited for the slow effect');
    assert.deepEqual(await slow, { status: 'ran', value: false, confirmed: true, tookOver: false }, 'never aborted: every renewal landed');
    assert.equal(runs, 1);
  });

  test(`${b.name}: a crashed attempt's reservation expires after reservationMs and the next attempt takes it over`, async () => {
    const { guard, registry, store } = await guardOn(b, { reservationMs: 800 });
    const key = uniqueName('notif:u3:welcome:1');
    // What a process SIGKILLed between reserve and confirm leaves behind.
    const crashedAt = Date.now();
    assert.deepEqual(await store.reserve(key, randomUUID(), { reservationMs: 800, ttlMs: DAY_MS, takeOver: true }), { state: 'reserved' });
    const record = await guard.inspect(key);
    assert.equal(record?.state, 'reserved');
    assert.ok(record.reservedForMs > 0 && record.reservedForMs <= 800, `reserved for ${record.reservedForMs} ms`);
    await assert.rejects(guard.once(key, () => assert.fail('must not run while reserved'), { waitMs: 0 }), (e) => e instanceof EffectBusyError && e.retriable);

    let ranAt = 0;
    const result = await guard.once(key, (ctx) => {
      ranAt = Date.now();
      return ctx.tookOver;
    });
    assert.deepEqual(result, { status: 'ran', value: true, confirmed: true, tookOver: true });
    const after = ranAt - crashedAt;
    console.log(`measured: ${b.name}: taken over ${after} ms after the crashed reservation (reservationMs 800)`);
    assert.ok(after >= 800 - 50, `not before the reservation expired (${after} ms)`);
    assert.ok(after <= 800 + SLACK_MS, `soon after it expired (${after} ms)`);
    assert.equal(await metric(registry, 'reservations_total', { result: 'taken_over' }), 1);
    assert.equal(await metric(registry, 'waits_total', { outcome: 'free' }), 1);
    assert.equal(await metric(registry, 'waits_total', { outcome: 'timeout' }), 1);
  });

  test(`${b.name}: inDoubt 'fail' leaves an expired unconfirmed reservation alone (not retriable); forget lets the next attempt run`, async () => {
    const { guard, registry, store } = await guardOn(b, { reservationMs: 100, inDoubt: 'fail' });
    const key = uniqueName('sms:u4:otp:9');
    await store.reserve(key, randomUUID(), { reservationMs: 100, ttlMs: DAY_MS, takeOver: true });
    await waitFor('the crashed reservation expired', async () => {
      const r = await guard.inspect(key);
      return r?.state === 'reserved' && r.reservedForMs <= 0;
    }, { intervalMs: 20 });
    await assert.rejects(guard.once(key, () => assert.fail('in doubt: must not run')), (e) => e instanceof EffectInDoubtError && !e.retriable);
    assert.equal(await metric(registry, 'reservations_total', { result: 'in_doubt' }), 1);
    assert.equal(await guard.forget(key), true);
    assert.equal((await guard.once(key, () => 'sent')).status, 'ran');
  });

  test(`${b.name}: an attempt that loses its reservation mid-effect gets its signal aborted, and its release leaves the new holder alone`, async () => {
    // Renewals every 500 ms, each with a second to land before the local deadline: under
    // CI's load a renewal at reservationMs 300 could miss its 200 ms, and the attempt gave
    // the key up (and released it) before the take-over this test makes.
    const { guard, registry } = await guardOn(b, { reservationMs: 1_500 });
    const key = uniqueName('webhook:o5:2');
    const outcome = guard.once(key, async ({ signal }) => {
      await new Promise<void>((resolve, reject) => {
        signal.addEventListener('abort', () => reject(signal.reason as Error), { once: true });
        setTimeout(resolve, 10_000);
      });
    });
    await waitFor('the attempt holding the key', async () => (await guard.inspect(key))?.state === 'reserved', { intervalMs: 10 });
    await b.hijack(key);
    const started = performance.now();
    await assert.rejects(outcome, (e) => e instanceof EffectReservationLostError && e.retriable);
    assert.ok(performance.now() - started < 500 + SLACK_MS, 'noticed at the next renewal');
    assert.equal(await metric(registry, 'reservations_total', { result: 'lost' }), 1);
    assert.equal((await guard.inspect(key))?.state, 'reserved', "the new holder's reservation stands");

    // An effect that ignores the signal and completes: the confirmation lands (the effect did happen).
    const other = uniqueName('webhook:o5:3');
    const done = guard.once(other, async ({ signal }) => {
      await waitFor('the abort', () => signal.aborted, { intervalMs: 10 });
      return 'finished anyway';
    });
    await waitFor('the attempt holding the key', async () => (await guard.inspect(other))?.state === 'reserved', { intervalMs: 10 });
    await b.hijack(other);
    assert.deepEqual(await done, { status: 'ran', value: 'finished anyway', confirmed: true, tookOver: false });
    assert.equal((await guard.inspect(other))?.state, 'done');
    assert.equal(await metric(registry, 'reservations_total', { result: 'lost' }), 2);
  });

  test(`${b.name}: a key past its ttlMs is forgotten and its effect runs again; a TTL under 7 days without replayHorizonMs is warned about`, async () => {
    const warnings: Error[] = [];
    const onWarning = (w: Error): void => void warnings.push(w);
    process.on('warning', onWarning);
    let guard: EffectGuard;
    try {
      guard = createEffectGuard({ store: await b.store(), defaults: { ttlMs: 1_000, reservationMs: 100 } });
      await new Promise((r) => setImmediate(r));
    } finally {
      process.off('warning', onWarning);
    }
    assert.equal(warnings.filter((w) => (w as Error & { code?: string }).code === 'OUTBOX_EFFECT_TTL').length, 1, 'warned once');
    assert.match(warnings[0]!.message, /defaults\.ttlMs is 1s, under 7 days/);
    const key = uniqueName('notif:u6:digest:1');
    let runs = 0;
    await guard.once(key, () => runs++);
    assert.deepEqual(await guard.once(key, () => runs++), { status: 'skipped', reason: 'done' });
    await waitFor('the key forgotten', async () => (await guard.inspect(key)) === undefined, { intervalMs: 50, timeoutMs: 5_000 });
    assert.equal((await guard.once(key, () => runs++)).status, 'ran');
    assert.equal(runs, 2);
  });
}

test('redis: the store unreachable (a server that accepts and never answers): reserve fails within timeoutMs, retriable, and the effect does not run', async () => {
  const server = await silentServer();
  cleanups.push(() => server.close());
  const client = createClient({ url: `redis://127.0.0.1:${server.port}` });
  client.on('error', () => undefined);
  client.connect().catch(() => undefined);
  cleanups.push(async () => client.destroy());
  const registry = new Registry();
  const guard = createEffectGuard({ store: redisEffectStore(client, { timeoutMs: 300 }), registry, name: 'test', replayHorizonMs: DAY_MS });
  const started = performance.now();
  await assert.rejects(guard.once('notif:u7:x:1', () => assert.fail('must not run without its reservation')), (e) => {
    assert.ok(e instanceof EffectStoreError && e.retriable, String(e));
    assert.match(e.message, /no reply to \S+ within 300 ms \(redisEffectStore\.timeoutMs\)/);
    return true;
  });
  assert.ok(performance.now() - started < 300 + SLACK_MS);
  assert.equal(await metric(registry, 'store_errors_total', { operation: 'reserve' }), 1);
});

test('postgres: the store unreachable (a server that accepts and never answers): reserve fails within timeoutMs, retriable, and the effect does not run', async () => {
  const server = await silentServer();
  cleanups.push(() => server.close());
  const pool = new pg.Pool({ connectionString: `postgres://postgres@127.0.0.1:${server.port}/test`, max: 2 });
  pool.on('error', () => undefined);
  const guard = createEffectGuard({ store: postgresEffectStore(pool, { timeoutMs: 300 }), replayHorizonMs: DAY_MS });
  const started = performance.now();
  await assert.rejects(guard.once('notif:u8:x:1', () => assert.fail('must not run without its reservation')), (e) => {
    assert.ok(e instanceof EffectStoreError && e.retriable, String(e));
    assert.match(e.message, /no reply within 300 ms \(postgresEffectStore\.timeoutMs\)/);
    return true;
  });
  assert.ok(performance.now() - started < 300 + SLACK_MS);
  await server.close();
  await pool.end().catch(() => undefined);
});

test('postgres: the store refuses a client (a handler transaction would roll its records back) and names a schema without effect_keys', async () => {
  const client = await db.pool.connect();
  try {
    assert.throws(() => postgresEffectStore(client as unknown as pg.Pool), (e) => e instanceof ConfigError && /not a client/.test(e.message));
  } finally {
    client.release();
  }
  assert.throws(() => postgresEffectStore(new pg.Client({ connectionString: DATABASE_URL }) as unknown as pg.Pool), ConfigError);
  const bare = uniqueName('noeffects');
  await db.pool.query(`CREATE SCHEMA "${bare}"`);
  cleanups.push(() => db.pool.query(`DROP SCHEMA "${bare}" CASCADE`));
  const guard = createEffectGuard({ store: postgresEffectStore(db.pool, { schema: bare }), replayHorizonMs: DAY_MS });
  await assert.rejects(guard.once('k', () => 1), (e) => e instanceof SchemaError && /effect_keys does not exist: run `outbox-relay migrate`/.test(e.message));
});

test('postgres: purgeExpired deletes the rows past their TTL in batches, and no live record', async () => {
  const store = postgresEffectStore(db.pool, { schema: db.schema });
  const guard = createEffectGuard({ store, replayHorizonMs: 1_000 });
  const short = Array.from({ length: 7 }, (_, i) => uniqueName(`purge:short:${i}`));
  for (const k of short) await guard.once(k, () => 1, { ttlMs: 1_000, reservationMs: 100 });
  const live = uniqueName('purge:live');
  await guard.once(live, () => 1);
  const held = uniqueName('purge:held');
  await store.reserve(held, randomUUID(), { reservationMs: 100, ttlMs: DAY_MS, takeOver: true });
  await waitFor('the short keys forgotten', async () => (await Promise.all(short.map((k) => guard.inspect(k)))).every((r) => r === undefined), { intervalMs: 100, timeoutMs: 5_000 });
  const purged = await store.purgeExpired({ batchSize: 3 });
  assert.ok(purged >= short.length, `purged ${purged}`);
  const { rows } = await db.pool.query<{ key: string }>(`SELECT key FROM "${db.schema}".effect_keys WHERE key = ANY($1)`, [[...short, live, held]]);
  assert.deepEqual(rows.map((r) => r.key).sort(), [live, held].sort());
});
