import { test } from 'node:test';
import assert from 'node:assert/strict';
import { SHARD_COUNT, shardCountOf, shardsOf, wantedShards } from '../../src/relay/shards.js';

test("every relay's workers share its shards evenly, for any number of relays and workers", () => {
  for (let relays = 1; relays <= 8; relays++) {
    for (let workers = 1; workers <= 8; workers++) {
      for (let relay = 0; relay < relays; relay++) {
        const owned = wantedShards(relay, relays);
        const perWorker = Array.from({ length: workers }, (_, w) => shardsOf(w, workers).filter((s) => owned.has(s)).length);
        const what = `relay ${relay} of ${relays}, ${workers} workers: ${perWorker.join('/')}`;
        assert.equal(perWorker.reduce((a, b) => a + b, 0), owned.size, what);
        // Even to within a shard or two: never one worker idle while another has them all.
        assert.ok(Math.max(...perWorker) - Math.min(...perWorker) <= 2, what);
      }
    }
  }
});

test('the workers of a relay split the shards between them, each shard once; the relays too', () => {
  const all = Array.from({ length: SHARD_COUNT }, (_, s) => s);
  for (let count = 1; count <= 64; count++) {
    const workers = Array.from({ length: count }, (_, w) => shardsOf(w, count));
    assert.deepEqual(workers.flat().sort((a, b) => a - b), all, `${count} workers`);
    workers.forEach((shards, w) => assert.equal(shardCountOf(w, count), shards.length));
    const relays = Array.from({ length: count }, (_, r) => [...wantedShards(r, count)]);
    assert.deepEqual(relays.flat().sort((a, b) => a - b), all, `${count} relays`);
  }
});
