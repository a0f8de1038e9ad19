import { test } from 'node:test';
import assert from 'node:assert/strict';
import { boundFor } from '../../src/commands/partitions.js';

// docs/partitioning.md: B is the sequence's last value plus the ids writers take, at the
// sampled rate, in twice maxWaitMs plus ten minutes, at least one partition's worth,
// rounded up to a multiple of the partition size.

test('partition bound: no writers, one partition above the sequence, rounded up', () => {
  assert.equal(boundFor(0, 0, 1_000, 300_000), 1_000);
  assert.equal(boundFor(1_500, 0, 1_000, 300_000), 3_000);
  assert.equal(boundFor(1_000_000, 0, 1_000_000, 300_000), 2_000_000);
});

test('partition bound: busy writers, their ids over twice maxWaitMs plus ten minutes, rounded up', () => {
  // 100 ids/s over 2 × 5 min + 10 min = 1,200 s: 120,000 ids.
  assert.equal(boundFor(5_000, 100, 1_000, 300_000), 125_000);
  // 2,000 ids/s over 2 × 10 s + 600 s = 620 s: 1,240,000 ids above 1,234, rounded to 1,000,000s.
  assert.equal(boundFor(1_234, 2_000, 1_000_000, 10_000), 2_000_000);
  // 1.5 ids (0.0025/s over 600 s) round up to 2, never down to 1.
  assert.equal(boundFor(0, 0.0025, 1, 0), 2);
});
