import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { Partitioners } from 'kafkajs';
import { murmur2, partitionOf, toPositive } from '../../src/relay/partitioner.js';

test("murmur2 matches Kafka's own test vectors (UtilsTest.testMurmur2)", () => {
  const cases: Array<[Uint8Array, number]> = [
    [Buffer.from('21'), -973932308],
    [Buffer.from('foobar'), -790332482],
    [Buffer.from('a-little-bit-long-string'), -985981536],
    [Buffer.from('a-little-bit-longer-string'), -1486304829],
    [Buffer.from('lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8'), -58897971],
    [Buffer.from([0x61, 0x62, 0x63]), 479470107],
  ];
  for (const [bytes, expected] of cases) assert.equal(murmur2(bytes), expected, Buffer.from(bytes).toString());
  assert.equal(toPositive(-1), 0x7fffffff);
});

test("partitionOf agrees with kafkajs' DefaultPartitioner (Java-compatible) on random keys, multi-byte ones included", () => {
  const partitioner = Partitioners.DefaultPartitioner();
  for (const numPartitions of [1, 3, 7, 12, 100]) {
    const partitionMetadata = Array.from({ length: numPartitions }, (_, partitionId) => ({ partitionId, leader: 1, partitionErrorCode: 0, replicas: [1], isr: [1] }));
    for (let i = 0; i < 500; i++) {
      const key = i % 3 === 0 ? `order-${i}-ü-日本` : randomBytes(1 + (i % 17)).toString('base64');
      const expected = partitioner({ topic: 't', partitionMetadata, message: { key, value: null } });
      assert.equal(partitionOf(key, numPartitions), expected, `${key} in ${numPartitions}`);
    }
  }
  assert.throws(() => partitionOf('k', 0), RangeError);
});
