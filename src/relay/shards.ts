// Rows map to SHARD_COUNT shards by a hash of their key (the generated `shard` column of
// sql/001_outbox.sql); a shard is the unit of ownership between relays and of work
// between one relay's workers.

/** Number of shards; fixed by the outbox table's generated column. */
export const SHARD_COUNT = 256;

/** Shards handled by worker `index` of `count`: every count-th shard. */
export function shardsOf(index: number, count: number): number[] {
  const shards: number[] = [];
  for (let s = index; s < SHARD_COUNT; s += count) shards.push(s);
  return shards;
}
