/**
 * Confluent's wire format, the framing every Confluent serializer and deserializer
 * (Java, Go, .NET, Python) agrees on:
 *
 *   byte 0      magic byte 0
 *   bytes 1-4   the schema id, a big-endian signed 32-bit integer
 *   Protobuf only: the message indexes, the path of the message type in its .proto file
 *               (its position among the file's top-level messages, then among the nested
 *               messages of that one, ...): a zig-zag varint count then one zig-zag varint
 *               per index; the common path [0] is written as the single byte 0
 *   the rest    the body: Avro binary, Protobuf binary or JSON text
 *
 * Written here rather than taken from a registry client: the one in
 * @kafkajs/confluent-schema-registry writes no message indexes and strips zero bytes it
 * takes for them.
 */

/** The first byte of every Confluent-framed value. */
export const MAGIC_BYTE = 0;

/** Magic byte plus schema id. */
export const HEADER_BYTES = 5;

const MAX_SCHEMA_ID = 0x7fff_ffff;

/**
 * A body framed for Kafka: magic byte, schema id, and for Protobuf the message indexes.
 *
 * @param messageIndexes Protobuf only: the message type's path in its file (`[0]` for the
 *   file's first message). Leave undefined for Avro and JSON Schema.
 * @throws RangeError for an id outside 0..2^31-1 or a negative index
 */
export function frame(schemaId: number, body: Uint8Array, messageIndexes?: number[]): Buffer {
  if (!Number.isSafeInteger(schemaId) || schemaId < 0 || schemaId > MAX_SCHEMA_ID) {
    throw new RangeError(`schema id ${schemaId} is not a whole number from 0 to ${MAX_SCHEMA_ID}`);
  }
  const header = Buffer.alloc(HEADER_BYTES);
  header.writeUInt8(MAGIC_BYTE, 0);
  header.writeInt32BE(schemaId, 1);
  if (messageIndexes === undefined) return Buffer.concat([header, body]);
  return Buffer.concat([header, encodeMessageIndexes(messageIndexes), body]);
}

/**
 * The parts of a Confluent-framed value.
 *
 * @param protobuf read the message indexes after the id (only Protobuf values have them)
 * @throws Error when the value is not framed (shorter than 5 bytes, first byte not 0) or
 *   its message indexes are cut short
 */
export function unframe(value: Buffer, protobuf: boolean): { schemaId: number; messageIndexes?: number[]; body: Buffer } {
  if (!isFramed(value)) {
    throw new Error(`not a Confluent-framed value: ${value.length < HEADER_BYTES ? `${value.length} bytes` : `magic byte ${value[0]}`}`);
  }
  const schemaId = value.readInt32BE(1);
  if (schemaId < 0) throw new Error(`not a Confluent-framed value: schema id ${schemaId} is negative`);
  if (!protobuf) return { schemaId, body: value.subarray(HEADER_BYTES) };
  const { indexes, end } = decodeMessageIndexes(value, HEADER_BYTES);
  return { schemaId, messageIndexes: indexes, body: value.subarray(end) };
}

/** Whether a value can be Confluent-framed: at least 5 bytes, the first one 0. */
export function isFramed(value: Buffer): boolean {
  return value.length >= HEADER_BYTES && value[0] === MAGIC_BYTE;
}

/** The schema id of a framed value, or undefined when the value is not framed. */
export function schemaIdOf(value: Buffer): number | undefined {
  if (!isFramed(value)) return undefined;
  const id = value.readInt32BE(1);
  return id < 0 ? undefined : id;
}

/** Confluent's message-index list: [0] as the single byte 0, else count and indexes. */
export function encodeMessageIndexes(indexes: readonly number[]): Buffer {
  if (indexes.length === 0) throw new RangeError('a message-index path has at least one index');
  for (const index of indexes) {
    if (!Number.isSafeInteger(index) || index < 0 || index > MAX_SCHEMA_ID) {
      throw new RangeError(`message index ${index} is not a whole number from 0 to ${MAX_SCHEMA_ID}`);
    }
  }
  if (indexes.length === 1 && indexes[0] === 0) return Buffer.from([0]);
  const bytes: number[] = [];
  writeZigZagVarint(bytes, indexes.length);
  for (const index of indexes) writeZigZagVarint(bytes, index);
  return Buffer.from(bytes);
}

/** Reads a message-index list at `offset`; a count of 0 stands for [0]. */
export function decodeMessageIndexes(value: Buffer, offset: number): { indexes: number[]; end: number } {
  let at = offset;
  const read = (): number => {
    const result = readZigZagVarint(value, at);
    at = result.end;
    return result.value;
  };
  const count = read();
  if (count === 0) return { indexes: [0], end: at };
  // Each index takes at least one byte: a count beyond the bytes left is a corrupt value.
  if (count < 0 || count > value.length - at) {
    throw new Error(`not a Confluent Protobuf value: message-index count ${count} at byte ${offset}`);
  }
  const indexes: number[] = [];
  for (let i = 0; i < count; i++) {
    const index = read();
    if (index < 0) throw new Error(`not a Confluent Protobuf value: negative message index ${index}`);
    indexes.push(index);
  }
  return { indexes, end: at };
}

function writeZigZagVarint(out: number[], n: number): void {
  // Zig-zag on 32 bits (as Java's ByteUtils.writeVarint), by arithmetic so it holds past 2^30.
  let v = n >= 0 ? n * 2 : -n * 2 - 1;
  while (v >= 0x80) {
    out.push((v % 0x80) | 0x80);
    v = Math.floor(v / 0x80);
  }
  out.push(v);
}

function readZigZagVarint(value: Buffer, offset: number): { value: number; end: number } {
  let result = 0;
  let scale = 1;
  for (let at = offset; at < value.length && at < offset + 5; at++) {
    const byte = value[at]!;
    result += (byte & 0x7f) * scale;
    if ((byte & 0x80) === 0) {
      const decoded = result % 2 === 0 ? result / 2 : -(result + 1) / 2;
      return { value: decoded, end: at + 1 };
    }
    scale *= 0x80;
  }
  throw new Error(`not a Confluent Protobuf value: a message index is cut short at byte ${offset}`);
}
