/**
 * The partition of a key, as Java's producer computes it (DefaultPartitioner /
 * BuiltInPartitioner for keyed records): `Utils.toPositive(Utils.murmur2(keyBytes)) %
 * numPartitions`, over the key's UTF-8 bytes. kafkajs' DefaultPartitioner is the same
 * algorithm, so the relay, kafkajs and Java clients agree on a key's partition.
 *
 * The relay computes partitions itself so that it can send a batch one request per
 * partition and know, per partition, what Kafka acknowledged (./producer.ts).
 */

const SEED = 0x9747b28c;
const M = 0x5bd1e995;
const R = 24;

/** Kafka's murmur2 (org.apache.kafka.common.utils.Utils.murmur2), as a signed 32-bit int. */
export function murmur2(data: Uint8Array): number {
  const length = data.length;
  let h = (SEED ^ length) | 0;
  const length4 = length >>> 2;
  for (let i = 0; i < length4; i++) {
    const i4 = i * 4;
    let k = (data[i4]! & 0xff) | ((data[i4 + 1]! & 0xff) << 8) | ((data[i4 + 2]! & 0xff) << 16) | ((data[i4 + 3]! & 0xff) << 24);
    k = Math.imul(k, M);
    k ^= k >>> R;
    k = Math.imul(k, M);
    h = Math.imul(h, M);
    h ^= k;
  }
  const tail = length & ~3;
  const rest = length & 3;
  if (rest === 3) h ^= (data[tail + 2]! & 0xff) << 16;
  if (rest >= 2) h ^= (data[tail + 1]! & 0xff) << 8;
  if (rest >= 1) {
    h ^= data[tail]! & 0xff;
    h = Math.imul(h, M);
  }
  h ^= h >>> 13;
  h = Math.imul(h, M);
  h ^= h >>> 15;
  return h | 0;
}

/** Kafka's Utils.toPositive: clears the sign bit (not the absolute value). */
export function toPositive(n: number): number {
  return n & 0x7fffffff;
}

/** The partition of `key` in a topic of `numPartitions` partitions. */
export function partitionOf(key: string | Uint8Array, numPartitions: number): number {
  if (!Number.isInteger(numPartitions) || numPartitions < 1) throw new RangeError(`numPartitions must be a positive integer, not ${numPartitions}`);
  const bytes = typeof key === 'string' ? Buffer.from(key, 'utf8') : key;
  return toPositive(murmur2(bytes)) % numPartitions;
}

/** The messages of one (topic, partition) of a send, by their indexes in the send, in order. */
export interface PartitionGroup {
  topic: string;
  partition: number;
  indexes: number[];
}

/**
 * Group a send's messages by (topic, partition), keeping their order, for the adapters'
 * one request per partition (./producer.ts). A message whose topic has no partition count
 * (`counts` holds an error for it: missing, metadata failed) goes to `unknown` instead.
 */
export function partitionGroups(
  messages: readonly { topic: string; key: string }[],
  counts: ReadonlyMap<string, number | Error>,
  unknown: (index: number, error: Error) => void,
): PartitionGroup[] {
  const groups = new Map<string, PartitionGroup>();
  messages.forEach((m, i) => {
    const count = counts.get(m.topic);
    if (typeof count !== 'number') return unknown(i, count ?? new Error(`no partition count for topic ${m.topic}`));
    const partition = partitionOf(m.key, count);
    const id = `${m.topic}\u0000${partition}`;
    let group = groups.get(id);
    if (!group) groups.set(id, (group = { topic: m.topic, partition, indexes: [] }));
    group.indexes.push(i);
  });
  return [...groups.values()];
}
