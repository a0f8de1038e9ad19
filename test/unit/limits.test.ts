import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createConcurrencyLimit, createDependencyLimit, createRateLimit } from '../../src/consumer/limits.js';

/** A manual clock: sleep() resolves when the test advances time past its deadline. */
function fakeClock() {
  let now = 0;
  const sleepers: Array<{ until: number; wake: () => void }> = [];
  return {
    now: () => now,
    sleep: (ms: number) => new Promise<void>((wake) => sleepers.push({ until: now + ms, wake })),
    async advance(ms: number) {
      now += ms;
      for (const s of sleepers.filter((x) => x.until <= now)) {
        sleepers.splice(sleepers.indexOf(s), 1);
        s.wake();
      }
      // let the woken calls run
      for (let i = 0; i < 5; i++) await Promise.resolve();
    },
    sleeping: () => sleepers.length,
  };
}

function deferred() {
  let resolve: () => void = () => undefined;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

test('concurrency limit: never more than max in flight, first come first served', async () => {
  const limit = createConcurrencyLimit(2);
  const gates = Array.from({ length: 5 }, deferred);
  const started: number[] = [];
  let maxActive = 0;
  const runs = gates.map((g, i) =>
    limit.run(async () => {
      started.push(i);
      maxActive = Math.max(maxActive, limit.active);
      await g.promise;
      return i;
    }),
  );
  await Promise.resolve();
  assert.deepEqual(started, [0, 1]);
  assert.equal(limit.waiting, 3);
  gates[1]?.resolve();
  await runs[1];
  await Promise.resolve();
  assert.deepEqual(started, [0, 1, 2]);
  for (const g of gates) g.resolve();
  assert.deepEqual(await Promise.all(runs), [0, 1, 2, 3, 4]);
  assert.equal(maxActive, 2);
  assert.equal(limit.active, 0);
});

test('concurrency limit: a failing call frees its slot', async () => {
  const limit = createConcurrencyLimit(1);
  await assert.rejects(limit.run(() => Promise.reject(new Error('boom'))), /boom/);
  assert.equal(await limit.run(() => 7), 7);
  assert.equal(limit.active, 0);
});

test('rate limit: burst at once, then one call per 1/perSecond, in arrival order', async () => {
  const clock = fakeClock();
  const rate = createRateLimit({ perSecond: 10, burst: 2, now: clock.now, sleep: clock.sleep });
  const done: number[] = [];
  const calls = Array.from({ length: 5 }, (_, i) => rate.run(() => done.push(i)));
  await clock.advance(0);
  assert.deepEqual(done, [0, 1], 'the burst goes at once');
  await clock.advance(100);
  assert.deepEqual(done, [0, 1, 2]);
  await clock.advance(100);
  assert.deepEqual(done, [0, 1, 2, 3]);
  await clock.advance(100);
  await Promise.all(calls);
  assert.deepEqual(done, [0, 1, 2, 3, 4]);
});

test('rate limit: options are checked', () => {
  assert.throws(() => createRateLimit({ perSecond: 0 }), /perSecond/);
  assert.throws(() => createRateLimit({ perSecond: 1, burst: 0 }), /burst/);
  assert.throws(() => createConcurrencyLimit(0), /maxConcurrent/);
});

test('dependency limit: concurrency and rate together, with stats', async () => {
  const clock = fakeClock();
  const dep = createDependencyLimit({ name: 'payments', maxConcurrent: 1, perSecond: 5, now: clock.now, sleep: clock.sleep });
  const gate = deferred();
  const first = dep.run(async () => {
    await gate.promise;
    return 'a';
  });
  const second = dep.run(async () => 'b');
  await clock.advance(0);
  assert.equal(dep.stats().active, 1);
  assert.equal(dep.stats().waiting, 1);
  gate.resolve();
  assert.equal(await first, 'a');
  await clock.advance(0);
  assert.equal(dep.stats().active, 0, 'the second call waits for its token, not running');
  await clock.advance(200);
  assert.equal(await second, 'b');
  const stats = dep.stats();
  assert.equal(stats.calls, 2);
  assert.equal(stats.waiting, 0);
  assert.equal(stats.waitedMs, 200);
});
