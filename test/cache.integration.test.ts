// The cache helper (src/cache/) on a real Redis: versioned writes under reordering and
// redelivery, single flight in one process, stale serving, and loaders that fail or hang.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { Registry } from 'prom-client';
import { createCache } from '../src/cache/cache.js';
import { CacheLoadTimeoutError, CacheWaitTimeoutError } from '../src/cache/errors.js';
import type { CacheRedisClient } from '../src/cache/redisClient.js';
import { useRedis, type TestRedis } from './helpers/redis.js';
import { mulberry32 } from './faults/schedule.js';
import { gate, waitFor } from './helpers/wait.js';

let redis: TestRedis;
before(async () => {
  redis = await useRedis();
});
after(async () => {
  await redis?.stop();
});

/** The fault suite's seeded generator (mulberry32), so a failing schedule can be replayed. */
const random = mulberry32;

function shuffle<T>(items: T[], rnd: () => number): T[] {
  const a = [...items];
  for (let i = a.length - 1; i > 0; i--) {
    const j = Math.floor(rnd() * (i + 1));
    [a[i], a[j]] = [a[j]!, a[i]!];
  }
  return a;
}

test('setIfNewer: out-of-order and redelivered versioned writes keep the newest', async () => {
  for (const seed of [1, 2, 3, 42, 1234]) {
    const rnd = random(seed);
    const cache = createCache({ client: redis.client, prefix: redis.prefix(`order${seed}`) });
    // Versions 1..40, each delivered 1-3 times, in a shuffled order, one after another.
    const deliveries = shuffle(Array.from({ length: 40 }, (_, i) => i + 1).flatMap((v) => Array(1 + Math.floor(rnd() * 3)).fill(v) as number[]), rnd);
    let newest = 0;
    for (const v of deliveries) {
      const wrote = await cache.setIfNewer('entity', { v }, v, 60_000);
      assert.equal(wrote, v > newest, `seed ${seed}: version ${v} after ${newest}`);
      newest = Math.max(newest, v);
      const e = await cache.peek<{ v: number }>('entity');
      assert.equal(e?.value?.v, newest);
      assert.equal(e?.version, BigInt(newest));
    }
    // And all at once: concurrent writers, the newest wins.
    const concurrent = shuffle(Array.from({ length: 60 }, (_, i) => 100 + i), rnd);
    await Promise.all(concurrent.map((v) => cache.setIfNewer('burst', { v }, v, 60_000)));
    assert.equal((await cache.peek<{ v: number }>('burst'))?.value?.v, 159, `seed ${seed}`);
  }
});

test('setIfNewer compares versions beyond 2^53 exactly, and refuses versions that are not non-negative integers', async () => {
  const cache = createCache({ client: redis.client, prefix: redis.prefix('big') });
  const base = 2n ** 63n - 10n;
  assert.equal(await cache.setIfNewer('k', 'b', base + 1n), true);
  assert.equal(await cache.setIfNewer('k', 'a', base), false);
  assert.equal(await cache.setIfNewer('k', 'c', base + 2n), true);
  assert.equal(await cache.setIfNewer('k', 'x', 9), false);
  assert.equal((await cache.peek('k'))?.value, 'c');
  await assert.rejects(cache.setIfNewer('k', 'x', -1), { name: 'ConfigError', retriable: false });
  await assert.rejects(cache.setIfNewer('k', 'x', 1.5), { name: 'ConfigError' });
});

test('invalidate(key, version) leaves a tombstone: no older write comes back, the same or a newer version does', async () => {
  const cache = createCache({ client: redis.client, prefix: redis.prefix('tomb') });
  await cache.setIfNewer('row', { v: 4 }, 4);
  assert.equal(await cache.invalidate('row', 5), true);
  assert.equal((await cache.peek('row'))?.value, undefined);
  assert.equal((await cache.peek('row'))?.version, 5n);
  // A late event (v4) and a reader that loaded the row before the change (v4) cannot write it back.
  assert.equal(await cache.setIfNewer('row', { v: 4 }, 4), false);
  const loaded = await cache.getOrLoad('row', () => ({ v: 4 }), { versionOf: (x) => x.v });
  assert.deepEqual(loaded, { v: 4 });
  assert.equal((await cache.peek('row'))?.value, undefined, 'the older fill was not written');
  // An unversioned fill does not replace a versioned tombstone either.
  await cache.getOrLoad('row', () => ({ v: 4 }));
  assert.equal((await cache.peek('row'))?.value, undefined);
  // The row at version 5, loaded after the change, fills it.
  await cache.getOrLoad('row', () => ({ v: 5 }), { versionOf: (x) => x.v });
  assert.deepEqual((await cache.peek('row'))?.value, { v: 5 });
  // An invalidation older than what is cached changes nothing; one without a version deletes.
  assert.equal(await cache.invalidate('row', 3), false);
  assert.equal(await cache.invalidate('row', 5), false, 'the value of version 5 is current');
  assert.equal(await cache.invalidate('row'), true);
  assert.equal(await cache.peek('row'), undefined);
});

test('200 concurrent getOrLoad on an expired hot key call the loader once in the process', async () => {
  const registry = new Registry();
  const cache = createCache({ client: redis.client, prefix: redis.prefix('hot'), registry, name: 'hot' });
  await cache.setIfNewer('hot', { n: 0 }, 1, 60_000);
  // Expire it, as its TTL would.
  await cache.invalidate('hot');
  let loads = 0;
  const release = gate();
  const results = Promise.all(
    Array.from({ length: 200 }, () =>
      cache.getOrLoad('hot', async () => {
        loads++;
        await release.promise;
        return { n: loads };
      }),
    ),
  );
  release.open();
  const values = await results;
  assert.equal(loads, 1);
  assert.ok(values.every((v) => v.n === 1));
  assert.notEqual(values[0], values[1], 'each caller gets its own copy');
  // Afterwards it is a hit.
  assert.deepEqual(await cache.getOrLoad('hot', () => assert.fail('loaded again')), { n: 1 });
  const text = await registry.metrics();
  assert.match(text, /outbox_cache_requests_total\{cache="hot",result="miss"\} 200/);
  assert.match(text, /outbox_cache_requests_total\{cache="hot",result="hit"\} 1/);
  assert.match(text, /outbox_cache_rebuilds_total\{cache="hot",outcome="ok"\} 1/);
});

test('stale while revalidate: every caller gets the stale value at once, one caller rebuilds it', async () => {
  const registry = new Registry();
  const prefix = redis.prefix('stale');
  const cache = createCache({ client: redis.client, prefix, registry, name: 'stale', defaults: { ttlMs: 60_000, staleForMs: 60_000, jitter: 0 } });
  await cache.getOrLoad('profile', () => ({ version: 1 }));
  // Move it into its stale window: its remaining lifetime below the stale window.
  await redis.client.pExpire(`${prefix}profile`, 30_000);
  assert.equal((await cache.peek('profile'))?.fresh, false);
  let loads = 0;
  const release = gate();
  const values = await Promise.all(
    Array.from({ length: 200 }, () =>
      cache.getOrLoad('profile', async () => {
        loads++;
        await release.promise;
        return { version: 2 };
      }),
    ),
  );
  assert.ok(values.every((v) => v.version === 1), 'stale value served without waiting for the loader');
  release.open();
  await cache.whenIdle();
  assert.equal(loads, 1);
  const e = await cache.peek<{ version: number }>('profile');
  assert.deepEqual(e?.value, { version: 2 });
  assert.equal(e?.fresh, true);
  assert.ok(e!.pttlMs > 60_000 && e!.pttlMs <= 120_000, `kept for ttl + staleFor (${e!.pttlMs} ms)`);
  assert.match(await registry.metrics(), /outbox_cache_requests_total\{cache="stale",result="stale"\} 200/);
});

test('a loader that fails does not wedge the key: its callers get its error, the lock is released, the next call loads', async () => {
  const prefix = redis.prefix('fail');
  const cache = createCache({ client: redis.client, prefix });
  let calls = 0;
  const failing = Promise.allSettled(
    Array.from({ length: 50 }, () =>
      cache.getOrLoad('k', async () => {
        calls++;
        throw new Error('database down');
      }),
    ),
  );
  const settled = await failing;
  assert.equal(calls, 1);
  assert.ok(settled.every((r) => r.status === 'rejected' && (r.reason as Error).message === 'database down'));
  assert.equal(await redis.client.exists(`${prefix}k:rebuild-lock`), 0, 'lock released');
  assert.equal(await cache.getOrLoad('k', () => 'ok'), 'ok');
});

test('a loader that hangs does not wedge the key: it is aborted after loadTimeoutMs, the next call loads', async () => {
  const prefix = redis.prefix('hang');
  const cache = createCache({ client: redis.client, prefix });
  let aborted: unknown;
  const hung = cache.getOrLoad(
    'k',
    ({ signal }) =>
      new Promise<string>((_, reject) => {
        signal.addEventListener('abort', () => {
          aborted = signal.reason;
          reject(signal.reason as Error);
        });
      }),
    { loadTimeoutMs: 200, lockTtlMs: 5_000 },
  );
  await assert.rejects(hung, (e: unknown) => e instanceof CacheLoadTimeoutError && e.retriable === true);
  assert.ok(aborted instanceof CacheLoadTimeoutError, 'the loader saw its signal abort');
  assert.equal(await redis.client.exists(`${prefix}k:rebuild-lock`), 0, 'lock released');
  // A loader that ignores its signal is abandoned just the same.
  await assert.rejects(cache.getOrLoad('k', () => new Promise<string>(() => undefined), { loadTimeoutMs: 100 }), CacheLoadTimeoutError);
  assert.equal(await cache.getOrLoad('k', () => 'ok'), 'ok');
});

test('a lock left by a dead process: waiters give up after waitMs (retriable), or take over once it expires', async () => {
  const registry = new Registry();
  const prefix = redis.prefix('dead');
  const cache = createCache({ client: redis.client, prefix, registry, name: 'dead' });
  // Another process took the lock and died without releasing it.
  // (Long enough to outlive the two short waits below on a loaded machine.)
  await redis.client.set(`${prefix}k:rebuild-lock`, 'someone-else', { PX: 1_500 });
  await assert.rejects(
    cache.getOrLoad('k', () => 'mine', { waitMs: 50 }),
    (e: unknown) => e instanceof CacheWaitTimeoutError && e.retriable === true,
  );
  assert.equal(await cache.getOrLoad('k', () => 'unlocked', { waitMs: 50, onWaitTimeout: 'load' }), 'unlocked');
  assert.equal(await cache.peek('k'), undefined, 'a load without the lock does not write');
  // Waiting longer than the lock lives: the lock expires and this caller rebuilds.
  const started = Date.now();
  assert.equal(await cache.getOrLoad('k', () => 'took over', { waitMs: 5_000 }), 'took over');
  assert.ok(Date.now() - started < 5_000);
  assert.equal((await cache.peek('k'))?.value, 'took over');
  const text = await registry.metrics();
  assert.match(text, /outbox_cache_lock_waits_total\{cache="dead",outcome="timeout"\} 2/);
  assert.match(text, /outbox_cache_lock_waits_total\{cache="dead",outcome="took_over"\} 1/);
});

test('Redis failing: getOrLoad still answers from the loader, once per key in the process; writes throw a retriable error', async () => {
  const down: CacheRedisClient = { sendCommand: () => Promise.reject(new Error('connect ECONNREFUSED')) };
  const registry = new Registry();
  const cache = createCache({ client: down, registry, name: 'down' });
  let loads = 0;
  const release = gate();
  const all = Promise.all(Array.from({ length: 20 }, () => cache.getOrLoad('k', async () => (loads++, await release.promise, 'v'))));
  release.open();
  assert.deepEqual(new Set(await all), new Set(['v']));
  assert.equal(loads, 1);
  await assert.rejects(cache.setIfNewer('k', 'v', 1), { name: 'CacheRedisError', retriable: true });
  assert.match(await registry.metrics(), /outbox_cache_errors_total\{cache="down",operation="read"\} 20/);
});

test('a key that ends like a rebuild-lock key is its own entry: it neither blocks nor breaks the key whose lock it looks like', async () => {
  const prefix = redis.prefix('collide');
  const cache = createCache({ client: redis.client, prefix });
  // The user's key "a:rebuild-lock" is filled (and stays) while "a" is missing.
  assert.equal(await cache.getOrLoad('a:rebuild-lock', () => 'user value'), 'user value');
  // "a" loads at once: it does not wait on (nor time out behind) the other key's entry.
  assert.equal(await cache.getOrLoad('a', () => 'a value', { waitMs: 50 }), 'a value');
  assert.equal((await cache.peek('a:rebuild-lock'))?.value, 'user value');
  assert.equal((await cache.peek('a'))?.value, 'a value');
  // While "b" is being rebuilt (its lock held), "b:rebuild-lock" reads, loads and writes as any key.
  const release = gate<string>();
  const b = cache.getOrLoad('b', () => release.promise);
  await waitFor('the lock of b taken', async () => (await redis.client.exists(`${prefix}b:rebuild-lock`)) === 1);
  assert.equal(await cache.getOrLoad('b:rebuild-lock', () => 'other'), 'other');
  assert.equal(await cache.setIfNewer('b:rebuild-lock', 'newer', 3), true);
  release.open('b value');
  assert.equal(await b, 'b value');
  assert.equal((await cache.peek('b'))?.value, 'b value');
  assert.equal((await cache.peek('b:rebuild-lock'))?.value, 'newer');
  // Keys that end in the escape character stay distinct from the escaped ones.
  await cache.setIfNewer('c:rebuild-lock|', 'one', 1);
  await cache.setIfNewer('c:rebuild-lock', 'two', 1);
  await cache.setIfNewer('c|', 'three', 1);
  await cache.setIfNewer('c', 'four', 1);
  assert.deepEqual(await Promise.all(['c:rebuild-lock|', 'c:rebuild-lock', 'c|', 'c'].map(async (k) => (await cache.peek(k))?.value)), ['one', 'two', 'three', 'four']);
});

test("a loader's undefined (not found) is returned to every caller and not cached; null is cached like any value", async () => {
  const prefix = redis.prefix('undef');
  const registry = new Registry();
  const cache = createCache({ client: redis.client, prefix, registry, name: 'undef' });
  let loads = 0;
  const release = gate();
  const all = Promise.all(Array.from({ length: 10 }, () => cache.getOrLoad<{ version: number } | undefined>('missing', async () => (loads++, await release.promise, undefined), { versionOf: (p) => p!.version })));
  release.open();
  assert.deepEqual(await all, Array(10).fill(undefined));
  assert.equal(loads, 1, 'one load for the concurrent callers');
  assert.equal(await cache.peek('missing'), undefined, 'nothing cached');
  assert.equal(await redis.client.exists(`${prefix}missing:rebuild-lock`), 0, 'lock released');
  // The next call loads again (the row may exist by now).
  assert.deepEqual(await cache.getOrLoad('missing', () => ({ version: 1 }), { versionOf: (p) => p.version }), { version: 1 });
  assert.equal((await cache.peek('missing'))?.version, 1n);
  // null is a value: cached, a hit afterwards.
  assert.equal(await cache.getOrLoad('none', () => null), null);
  assert.equal(await cache.getOrLoad('none', () => assert.fail('loaded again')), null);
  assert.doesNotMatch(await registry.metrics(), /outbox_cache_errors_total\{[^}]*\} [1-9]/, 'no errors counted');
});

test('a versionOf that throws fails the call with a ConfigError naming getOrLoad.versionOf and carrying the error; nothing is written', async () => {
  const prefix = redis.prefix('verthrow');
  const registry = new Registry();
  const cache = createCache({ client: redis.client, prefix, registry, name: 'verthrow' });
  const bug = new TypeError("Cannot read properties of undefined (reading 'version')");
  const settled = await Promise.allSettled(
    Array.from({ length: 5 }, () =>
      cache.getOrLoad('k', () => ({ id: 'k' }), {
        versionOf: () => {
          throw bug;
        },
      }),
    ),
  );
  for (const r of settled) {
    assert.equal(r.status, 'rejected');
    const e = (r as PromiseRejectedResult).reason as { name: string; setting: string; retriable: boolean; message: string; cause: unknown };
    assert.equal(e.name, 'ConfigError');
    assert.equal(e.setting, 'getOrLoad.versionOf');
    assert.equal(e.retriable, false);
    assert.match(e.message, /^getOrLoad\.versionOf: threw on the value the loader returned for "k": TypeError: Cannot read properties of undefined/);
    assert.equal(e.cause, bug);
  }
  assert.equal(await cache.peek('k'), undefined, 'nothing written');
  assert.equal(await redis.client.exists(`${prefix}k:rebuild-lock`), 0, 'lock released');
  assert.match(await registry.metrics(), /outbox_cache_errors_total\{cache="verthrow",operation="version"\} 1/);
  // A versionOf that returns no version is refused by name too.
  await assert.rejects(cache.getOrLoad('j', () => ({}), { versionOf: () => 1.5 }), { name: 'ConfigError', setting: 'getOrLoad.versionOf' });
  // And when Redis is failing (no fill), versionOf still runs: the bug does not hide behind an outage.
  const down = createCache({ client: { sendCommand: () => Promise.reject(new Error('connect ECONNREFUSED 127.0.0.1:6379')) } });
  await assert.rejects(down.getOrLoad('k', () => ({}), { versionOf: () => { throw bug; } }), { name: 'ConfigError', setting: 'getOrLoad.versionOf' });
});

test('a stale value is served when Redis refuses the rebuild lock, and no background load runs for nobody', async () => {
  const prefix = redis.prefix('stalefail');
  const registry = new Registry();
  // The real Redis, except that SET (the lock) fails, as on a replica that went read-only.
  const client: CacheRedisClient = {
    sendCommand: (args, options) => (args[0] === 'SET' ? Promise.reject(new Error("READONLY You can't write against a read only replica.")) : redis.client.sendCommand([...args], options)),
  };
  const cache = createCache({ client, prefix, registry, name: 'stalefail', defaults: { ttlMs: 60_000, staleForMs: 60_000, jitter: 0 } });
  await cache.setIfNewer('k', 'old', 1);
  await redis.client.pExpire(`${prefix}k`, 30_000); // into its stale window
  let loads = 0;
  assert.equal(await cache.getOrLoad('k', () => (loads++, 'new')), 'old');
  await cache.whenIdle();
  assert.equal(loads, 0, 'the refresh could not lock: it loaded nothing');
  assert.match(await registry.metrics(), /outbox_cache_errors_total\{cache="stalefail",operation="lock"\} 1/);
});

test('an entry the codec cannot decode fails with a ConfigError naming codec.decode that does not quote the entry', async () => {
  const prefix = redis.prefix('undecodable');
  const cache = createCache({ client: redis.client, prefix });
  // Another program wrote under this prefix, not in JSON.
  await redis.client.hSet(`${prefix}k`, { v: 'Password123 of someone', s: '0' });
  await redis.client.pExpire(`${prefix}k`, 60_000);
  for (const call of [() => cache.getOrLoad('k', () => 'never'), () => cache.peek('k')]) {
    await assert.rejects(call(), (e: unknown) => {
      const err = e as { name: string; setting: string; message: string; cause?: unknown };
      assert.equal(err.name, 'ConfigError');
      assert.equal(err.setting, 'codec.decode');
      assert.match(err.message, /^codec\.decode: could not decode the entry of "k" \(SyntaxError\)/);
      assert.doesNotMatch(`${err.message} ${String(err.cause)}`, /Password|someone/);
      return true;
    });
  }
});
