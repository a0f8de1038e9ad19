import { SHARD_COUNT, shardsOf } from './shards.js';

// Exactly-once delivery (docs/exactly-once.md) moves shards between relays in units: a
// unit is UNIT_COUNT-th of the shards, contiguous, and one Kafka transactional id
// publishes its rows. A relay that takes a unit over starts its producer under that id,
// which fences the previous owner's producer in Kafka itself (its epoch is bumped, its
// open transaction aborted, its next commit refused). So every relay must cut the shards
// into the same units: the count is fixed here, not a setting, and the progress topic is
// created with one partition per unit (a relay refuses to start on one of another size).

/** Units of ownership in exactly-once mode; one worker of a relay handles each. */
export const UNIT_COUNT = 8;

/** Shards of unit `unit` (a contiguous range, SHARD_COUNT / UNIT_COUNT of them). */
export function unitShards(unit: number): number[] {
  return shardsOf(unit, UNIT_COUNT);
}

/** The unit shard `shard` belongs to. */
export function unitOf(shard: number): number {
  return Math.floor((shard * UNIT_COUNT) / SHARD_COUNT);
}

/** Shards relay `index` of `count` live relays wants in exactly-once mode: every unit u with u mod count = index, whole. */
export function wantedUnitShards(index: number, count: number): Set<number> {
  const wanted = new Set<number>();
  for (let u = index; u < UNIT_COUNT; u += count) for (const s of unitShards(u)) wanted.add(s);
  return wanted;
}
