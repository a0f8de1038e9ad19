import { shardsOf } from './shards.js';

// Exactly-once delivery (docs/exactly-once.md) moves shards between relays in units: a
// unit is a contiguous range of the shards (shardsOf(unit, units)), and one Kafka transactional id publishes its
// rows. A relay that takes a unit over starts its producer under that id, which fences the
// previous owner's producer in Kafka itself (its epoch is bumped, its open transaction
// aborted, its next commit refused). So every relay must cut the shards into the same
// units: the count (exactlyOnceUnits) is the progress topic's partition count, one per
// unit, and a relay started with another count is refused (exactlyOnceSetup.ts).

/** Shards relay `index` of `count` live relays wants in exactly-once mode: every unit u of `units` with u mod count = index, whole. */
export function wantedUnitShards(units: number): (index: number, count: number) => Set<number> {
  return (index, count) => {
    const wanted = new Set<number>();
    for (let u = index; u < units; u += count) for (const s of shardsOf(u, units)) wanted.add(s);
    return wanted;
  };
}
