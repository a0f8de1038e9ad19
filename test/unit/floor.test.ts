import { test } from 'node:test';
import assert from 'node:assert/strict';
import { FLOOR_RESCAN_MAX_MS, FLOOR_RESCAN_MS, advanceFloor, floorAhead, floorForClaim, newClaimFloor, noteRescan, type CommittedClaim } from '../../src/relay/floor.js';
import { Horizon } from '../../src/relay/horizon.js';

const rows = (...ids: number[]): CommittedClaim['claimed'] => ids.map((id) => ({ id, topic: 't', key: `k${id % 3}` }));

function committed(over: Partial<CommittedClaim>): CommittedClaim {
  return {
    shards: [0, 2],
    horizonResets: 0,
    generation: '5',
    watermark: 100,
    settled: 100,
    batchSize: 3,
    claimed: [],
    done: new Set(),
    parkedKeys: new Set(),
    ...over,
  };
}

test('floor: a full batch moves it to its last id, a short one to the watermark; the next claim starts there under the same generation', () => {
  const f = newClaimFloor();
  assert.deepEqual(floorForClaim(f, [2, 0], 0, 1_000), { floor: 0, generation: '-1', startedOver: true });
  advanceFloor(f, committed({ claimed: rows(10, 11, 12), done: new Set([10, 11, 12]) }));
  assert.deepEqual(floorForClaim(f, [0, 2], 0, 1_001), { floor: 12, generation: '5', startedOver: false });
  advanceFloor(f, committed({ claimed: rows(20), done: new Set([20]) }));
  assert.equal(f.floor, 100);
});

test('floor: a claimed row neither sent nor dead-lettered holds it below that row, unless its key was parked by the batch', () => {
  const f = newClaimFloor();
  floorForClaim(f, [0, 2], 0, 0);
  advanceFloor(f, committed({ claimed: rows(10, 11, 12), done: new Set([10, 12]) }));
  assert.equal(f.floor, 10, 'row 11 left unsent: the floor stays below it');
  const g = newClaimFloor();
  floorForClaim(g, [0, 2], 0, 0);
  advanceFloor(g, committed({ claimed: rows(10, 11, 12), done: new Set([10, 12]), parkedKeys: new Set([`t\u0000k${11 % 3}`]) }));
  assert.equal(g.floor, 12, "row 11 waits behind its parked key: the release bumps the generation");
});

test('floor: never above the settled id (a forced horizon release), and starts over on another shard set, a horizon reset or after FLOOR_RESCAN_MS', () => {
  const f = newClaimFloor();
  floorForClaim(f, [0, 2], 0, 0);
  advanceFloor(f, committed({ claimed: rows(10), done: new Set([10]), watermark: 100, settled: 40 }));
  assert.equal(f.floor, 40);
  assert.equal(floorForClaim(f, [0, 2], 0, 10).floor, 40);
  assert.equal(floorForClaim(f, [0, 2, 4], 0, 20).floor, 0, 'another shard set');
  advanceFloor(f, committed({ shards: [0, 2, 4], claimed: [], watermark: 100, settled: 100 }));
  assert.equal(f.floor, 100);
  assert.equal(floorForClaim(f, [0, 2, 4], 1, 30).floor, 0, 'horizon reset');
  advanceFloor(f, committed({ shards: [0, 2, 4], horizonResets: 1, claimed: [] }));
  assert.equal(floorForClaim(f, [0, 2, 4], 1, 30 + FLOOR_RESCAN_MS).floor, 0, 'periodic rescan');
});

test('floor: a result computed for a set or horizon that changed meanwhile, or without a generation, is ignored', () => {
  const f = newClaimFloor();
  floorForClaim(f, [0, 2], 1, 0);
  advanceFloor(f, committed({ horizonResets: 0, claimed: [] }));
  assert.equal(f.floor, 0);
  advanceFloor(f, committed({ horizonResets: 1, generation: undefined, claimed: [] }));
  assert.equal(f.floor, 0);
});

test('horizon: settled stays at the last pair released properly after a forced release, and catches up once the waited-for transactions are gone', () => {
  let now = 0;
  const h = new Horizon('"s"', 1_000, () => now);
  h.advance(50n, 5, 60n);
  h.advance(61n, 5, null);
  assert.equal(h.watermark, 5);
  assert.equal(h.settled, 5);
  h.advance(61n, 9, 70n); // a transaction below 70 stays open
  now = 2_000;
  h.advance(65n, 9, null);
  assert.equal(h.watermark, 9, 'released by force');
  assert.equal(h.settled, 5, 'not settled');
  h.advance(71n, 9, null);
  assert.equal(h.settled, 9, 'settled once xmin passed the forced pair');
});

test('floor: the rescan from 0 comes later when a claim from 0 was slow (a long-held horizon), bounded by FLOOR_RESCAN_MAX_MS, and sooner again once it is cheap', () => {
  const f = newClaimFloor();
  floorForClaim(f, [0], 0, 0);
  advanceFloor(f, committed({ shards: [0], claimed: [], watermark: 100, settled: 100 }));
  // A walk of 2 s from the lowest id: the next comes 100 s later, not 10 s.
  noteRescan(f, 2_000);
  assert.equal(floorForClaim(f, [0], 0, FLOOR_RESCAN_MS).floor, 100, 'not yet: the walk was slow');
  assert.equal(floorForClaim(f, [0], 0, 99_999).floor, 100);
  assert.equal(floorForClaim(f, [0], 0, 100_000).floor, 0, 'due after 50 x the walk');
  // Slower still: capped.
  noteRescan(f, 60_000);
  assert.equal(f.rescanEveryMs, FLOOR_RESCAN_MAX_MS);
  // Cheap again (the horizon moved on, vacuum removed the entries): back to FLOOR_RESCAN_MS.
  noteRescan(f, 3);
  assert.equal(f.rescanEveryMs, FLOOR_RESCAN_MS);
  advanceFloor(f, committed({ shards: [0], claimed: [], watermark: 200, settled: 200 }));
  assert.equal(floorForClaim(f, [0], 0, 100_000 + FLOOR_RESCAN_MS).floor, 0);
});

test('floor: it starts over at the low-water mark, under the generation the mark was found in, when the mark holds for the horizon; at 0 otherwise; a claim ahead takes it too', () => {
  const f = newClaimFloor();
  const mark = { id: 70, generation: '9', horizonResets: 0 };
  assert.deepEqual(floorForClaim(f, [0, 2], 0, 0, mark), { floor: 70, generation: '9', startedOver: true }, 'first claim: from the mark');
  advanceFloor(f, committed({ claimed: rows(71, 72, 73), done: new Set([71, 72, 73]), generation: '9' }));
  assert.deepEqual(floorForClaim(f, [0, 2], 0, 10, mark), { floor: 73, generation: '9', startedOver: false }, 'not due: the floor as it stands');
  assert.deepEqual(floorForClaim(f, [0, 2], 0, 10 + FLOOR_RESCAN_MS, mark), { floor: 70, generation: '9', startedOver: true }, 'the rescan: from the mark');
  assert.deepEqual(floorForClaim(f, [0, 2], 1, 20 + FLOOR_RESCAN_MS, mark), { floor: 0, generation: '-1', startedOver: true }, 'a mark of an earlier horizon (a restart) is not taken');
  // Ahead of a full batch, when the rescan falls due: the mark too.
  const g = newClaimFloor();
  floorForClaim(g, [0], 0, 0);
  const previous = { shards: [0], horizonResets: 0, generation: '9', lastId: 500, settled: 600 };
  assert.deepEqual(floorAhead(g, previous, 5, mark), { floor: 500, generation: '9', startedOver: false });
  assert.deepEqual(floorAhead(g, previous, FLOOR_RESCAN_MS, mark), { floor: 70, generation: '9', startedOver: true });
});
