import { test } from 'node:test';
import assert from 'node:assert/strict';
import { frame, unframe, isFramed, schemaIdOf } from '../../src/encodings/wireFormat.js';

// Confluent's wire format, byte for byte as its Java serializers write it: magic byte 0,
// the schema id as a big-endian int32, for Protobuf the message indexes (zig-zag varints,
// [0] as the single byte 0), then the body.

const body = Buffer.from([0x0a, 0x03, 0x61, 0x62, 0x63]);

test('Avro and JSON Schema: magic byte, big-endian id, body', () => {
  const framed = frame(7, body);
  assert.deepEqual(framed, Buffer.from([0, 0, 0, 0, 7, ...body]));
  assert.deepEqual(unframe(framed, false), { schemaId: 7, body });
});

test("Protobuf's message indexes: [0] is one 0 byte, [1] is 0x02 0x02, [2, 0] is 0x04 0x04 0x00", () => {
  assert.deepEqual(frame(1, body, [0]), Buffer.from([0, 0, 0, 0, 1, 0x00, ...body]));
  assert.deepEqual(frame(1, body, [1]), Buffer.from([0, 0, 0, 0, 1, 0x02, 0x02, ...body]));
  assert.deepEqual(frame(1, body, [2, 0]), Buffer.from([0, 0, 0, 0, 1, 0x04, 0x04, 0x00, ...body]));
  for (const indexes of [[0], [1], [2, 0], [0, 3, 1], [64], [300, 70_000]]) {
    const back = unframe(frame(12, body, indexes), true);
    assert.deepEqual(back, { schemaId: 12, messageIndexes: indexes, body }, `indexes ${indexes.join(',')}`);
  }
});

test('an index of 64 and more takes two varint bytes (zig-zag doubles it past 127)', () => {
  // count 1 -> 0x02; 64 -> zig-zag 128 -> 0x80 0x01
  assert.deepEqual(frame(1, body, [64]).subarray(5, 8), Buffer.from([0x02, 0x80, 0x01]));
});

test('a body that starts with zero bytes keeps them (the library we did not take strips them)', () => {
  const zeros = Buffer.from([0, 0, 8, 1]);
  assert.deepEqual(unframe(frame(3, zeros, [0]), true).body, zeros);
  assert.deepEqual(unframe(frame(3, zeros), false).body, zeros);
});

test('big ids, up to 2^31-1, round-trip; ids outside that range are refused', () => {
  for (const id of [0, 255, 256, 65_536, 16_777_216, 2 ** 31 - 1]) {
    assert.equal(unframe(frame(id, body), false).schemaId, id);
    assert.equal(schemaIdOf(frame(id, body)), id);
  }
  assert.deepEqual(frame(0x01020304, Buffer.alloc(0)), Buffer.from([0, 1, 2, 3, 4]));
  for (const id of [-1, 2 ** 31, 1.5, Number.NaN]) assert.throws(() => frame(id, body), RangeError);
  assert.throws(() => frame(1, body, []), RangeError);
  assert.throws(() => frame(1, body, [-1]), RangeError);
});

test('values that are not framed: too short, another magic byte, cut-short indexes', () => {
  assert.equal(isFramed(Buffer.from('{"a":1}')), false);
  assert.equal(isFramed(Buffer.from([0, 0, 0, 1])), false);
  assert.equal(schemaIdOf(Buffer.from([1, 0, 0, 0, 1])), undefined);
  assert.throws(() => unframe(Buffer.from([0, 0, 0]), false), /not a Confluent-framed value: 3 bytes/);
  assert.throws(() => unframe(Buffer.from('{"a":1}'), false), /magic byte 123/);
  // count 2, then one index only
  assert.throws(() => unframe(Buffer.from([0, 0, 0, 0, 1, 0x04, 0x02]), true), /cut short|count/);
  // a varint whose continuation bit never ends
  assert.throws(() => unframe(Buffer.from([0, 0, 0, 0, 1, 0x80, 0x80]), true), /cut short/);
  // an empty Protobuf body after [0] is a valid (empty) message
  assert.deepEqual(unframe(Buffer.from([0, 0, 0, 0, 9, 0]), true), { schemaId: 9, messageIndexes: [0], body: Buffer.alloc(0) });
});
