import { Partitioners } from 'kafkajs';

const partitioner = Partitioners.DefaultPartitioner();

/** The partition the Java-compatible murmur2 partitioner picks for `key`. */
export function partitionOf(key: string, partitions: number): number {
  return partitioner({
    topic: 't',
    partitionMetadata: Array.from({ length: partitions }, (_, partitionId) => ({ partitionId, leader: 0, partitionErrorCode: 0, replicas: [0], isr: [0] })),
    message: { key, value: null },
  });
}
