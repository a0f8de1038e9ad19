import { test } from 'node:test';
import assert from 'node:assert/strict';
import { KafkaRestart } from '../../src/consumer/kafkaRestart.js';

// The restart after kafkajs gave up on its consumer (src/consumer/kafkaRestart.ts), with
// node:test's mock timers: which start is made, when, and which is not. The give-up itself,
// on a real broker, is test/consumer.kafkaRestart.integration.test.ts.

function restart(o: { start?: () => Promise<void>; stopping?: () => boolean } = {}) {
  const announced: Array<{ attempt: number; delayMs: number }> = [];
  const failed: unknown[] = [];
  let starts = 0;
  const r = new KafkaRestart({
    retryBaseDelayMs: 100,
    retryMaxDelayMs: 1_000,
    stopping: o.stopping ?? (() => false),
    announce: (_error, attempt, delayMs) => void announced.push({ attempt, delayMs }),
    start: () => {
      starts++;
      return o.start ? o.start() : Promise.resolve();
    },
    failed: (error) => void failed.push(error),
  });
  return { r, announced, failed, starts: () => starts };
}

test('kafka restart: one start after the announced delay, however often kafkajs reports the give-up meanwhile; attempts count up until a group join resets them; the delay stays within the backoff ceiling', (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const { r, announced, starts } = restart();
  r.schedule(new Error('gave up'));
  r.schedule(new Error('gave up again'));
  assert.equal(announced.length, 1, 'one start pending, announced once');
  assert.ok(announced[0]!.attempt === 1 && announced[0]!.delayMs >= 0 && announced[0]!.delayMs <= 100);
  t.mock.timers.tick(announced[0]!.delayMs);
  assert.equal(starts(), 1);
  r.schedule(new Error('gave up'));
  assert.equal(announced[1]!.attempt, 2);
  assert.ok(announced[1]!.delayMs <= 200, 'the ceiling doubles');
  t.mock.timers.tick(announced[1]!.delayMs);
  assert.equal(starts(), 2);
  r.reset();
  r.schedule(new Error('gave up'));
  assert.equal(announced[2]!.attempt, 1, 'counted again from 1 after the group assigned partitions');
});

test('kafka restart: a start that rejects is reported and scheduled again', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const refused = new Error('run refused');
  let first = true;
  const { r, announced, failed, starts } = restart({ start: () => (first ? ((first = false), Promise.reject(refused)) : Promise.resolve()) });
  r.schedule(new Error('gave up'));
  t.mock.timers.tick(announced[0]!.delayMs);
  // The rejection's handler runs on the microtask queue, before an immediate (not mocked).
  await new Promise((resolve) => setImmediate(resolve));
  assert.deepEqual(failed, [refused]);
  assert.equal(announced.length, 2);
  assert.equal(announced[1]!.attempt, 2);
  t.mock.timers.tick(announced[1]!.delayMs);
  assert.equal(starts(), 2);
});

test('kafka restart: cancel() (stop) drops the pending start, and nothing is scheduled while stopping', (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  let stopping = false;
  const { r, announced, starts } = restart({ stopping: () => stopping });
  r.schedule(new Error('gave up'));
  r.cancel();
  t.mock.timers.tick(1_000);
  assert.equal(starts(), 0, 'no start after cancel');
  stopping = true;
  r.schedule(new Error('gave up while stopping'));
  assert.equal(announced.length, 1, 'nothing announced while stopping');
  t.mock.timers.tick(1_000);
  assert.equal(starts(), 0);
});
