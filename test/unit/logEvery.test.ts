import { test } from 'node:test';
import assert from 'node:assert/strict';
import { LogEvery } from '../../src/shared/logEvery.js';

test('LogEvery: one line per condition per interval, each line counting those held back since the last', () => {
  let now = 0;
  const every = new LogEvery(60_000, () => now);
  assert.equal(every.take('forced'), 0, 'the first goes out');
  for (let i = 0; i < 79; i++) {
    now += 500;
    assert.equal(every.take('forced'), undefined, 'held back within the minute');
  }
  assert.equal(every.take('other'), 0, 'another condition has its own minute');
  now = 60_000;
  assert.equal(every.take('forced'), 79, 'a minute after the first: out, counting the 79 held back');
  now = 60_001;
  assert.equal(every.take('forced'), undefined);
  now = 200_000;
  assert.equal(every.take('forced'), 1);
});
