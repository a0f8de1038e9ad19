import { test } from 'node:test';
import assert from 'node:assert/strict';
import { newWorker, type Worker } from '../../src/relay/batch.js';
import { shardsOf, SHARD_COUNT } from '../../src/relay/shards.js';
import { SMALL_BATCHES_BEFORE_HANDOVER, handBack, handOverIfQuiet, holdsOthersShards, noteBatch } from '../../src/relay/workerShards.js';

function workers(count: number): Worker[] {
  return Array.from({ length: count }, (_, index) => ({ ...newWorker(index, count), drainedTo: 500 }));
}

/** Every shard held by exactly one worker. */
function partitionOfShards(ws: Worker[]): void {
  const all = ws.flatMap((w) => w.shards).sort((a, b) => a - b);
  assert.deepEqual(all, Array.from({ length: SHARD_COUNT }, (_, s) => s));
}

test('a worker hands its shards to worker 0 only after enough small batches in a row; a full batch starts the count over', () => {
  const ws = workers(3);
  const w = ws[2]!;
  for (let i = 0; i < SMALL_BATCHES_BEFORE_HANDOVER - 1; i++) noteBatch(w, i % 2 ? 0 : 499, 500);
  assert.equal(handOverIfQuiet(ws, w), false);
  noteBatch(w, 500, 500);
  assert.equal(w.smallBatches, 0);
  for (let i = 0; i < SMALL_BATCHES_BEFORE_HANDOVER; i++) noteBatch(w, 3, 500);
  assert.equal(handOverIfQuiet(ws, w), true);
  assert.deepEqual(w.shards, []);
  assert.deepEqual(ws[0]!.shards, [...shardsOf(0, 3), ...shardsOf(2, 3)].sort((a, b) => a - b));
  assert.equal(ws[0]!.drainedTo, 0, 'worker 0 claims the shards it took at once');
  assert.equal(holdsOthersShards(ws[0]!, 3), true);
  partitionOfShards(ws);
  assert.equal(handOverIfQuiet(ws, w), false, 'nothing left to hand over');
});

test('no handover with a batch claimed ahead, from worker 0, or in a relay of one worker', () => {
  const ws = workers(2);
  for (const w of ws) for (let i = 0; i < SMALL_BATCHES_BEFORE_HANDOVER; i++) noteBatch(w, 0, 500);
  ws[1]!.ahead = {} as Worker['ahead'];
  assert.equal(handOverIfQuiet(ws, ws[1]!), false);
  assert.equal(handOverIfQuiet(ws, ws[0]!), false);
  const one = workers(1);
  for (let i = 0; i < SMALL_BATCHES_BEFORE_HANDOVER; i++) noteBatch(one[0]!, 0, 500);
  assert.equal(handOverIfQuiet(one, one[0]!), false);
  assert.equal(holdsOthersShards(one[0]!, 1), false);
  partitionOfShards(ws);
});

test('handing back gives every worker its own shards and makes each claim at once', () => {
  const ws = workers(3);
  for (const w of ws.slice(1)) {
    for (let i = 0; i < SMALL_BATCHES_BEFORE_HANDOVER; i++) noteBatch(w, 1, 500);
    assert.equal(handOverIfQuiet(ws, w), true);
  }
  assert.equal(ws[0]!.shards.length, SHARD_COUNT);
  handBack(ws);
  for (const w of ws) {
    assert.deepEqual(w.shards, shardsOf(w.index, 3));
    assert.equal(w.drainedTo, 0);
    assert.equal(w.smallBatches, 0);
  }
  assert.equal(holdsOthersShards(ws[0]!, 3), false);
  partitionOfShards(ws);
});
