// Rows map to SHARD_COUNT shards by a hash of their key (the generated `shard` column of
// sql/001_outbox.sql); a shard is the unit of ownership between relays and of work
// between one relay's workers.
//
// The two splits must not line up. Relays take every n-th shard (wantedShards); had a
// relay's workers also taken every W-th, then with n = W = 2 relay 0 would own only even
// shards, all of them its worker 0's, and each relay would drain with one worker. So a
// worker takes a contiguous range instead: every relay's shards are spread over the whole
// range, so each worker gets its share of them, whatever n and W are
// (test/unit/shards.test.ts).

/** Number of shards; fixed by the outbox table's generated column. */
export const SHARD_COUNT = 256;

/** Shards relay `index` of `count` live relays wants to own: every count-th shard. */
export function wantedShards(index: number, count: number): Set<number> {
  const wanted = new Set<number>();
  for (let s = index; s < SHARD_COUNT; s += count) wanted.add(s);
  return wanted;
}

/** Shards handled by worker `index` of `count` when its relay owns them: a contiguous range. */
export function shardsOf(index: number, count: number): number[] {
  const shards: number[] = [];
  for (let s = firstShardOf(index, count); s < firstShardOf(index + 1, count); s++) shards.push(s);
  return shards;
}

/** How many shards {@link shardsOf} gives worker `index` of `count`. */
export function shardCountOf(index: number, count: number): number {
  return firstShardOf(index + 1, count) - firstShardOf(index, count);
}

function firstShardOf(index: number, count: number): number {
  return Math.ceil((index * SHARD_COUNT) / count);
}
