import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readEachWithJava, readWithJava, schemaRegistryUrl } from './helpers/registry.js';
import { schemaCodec } from '../src/encodings/schemaCodec.js';

// The test infrastructure of the schema-registry encodings, checked on bytes made by hand
// here (not by src/encodings): a real registry (Apicurio, Confluent-compatible API) hands out
// ids, and the reference reader (test/java/ConfluentWireReader.java: Apache Avro,
// protobuf-java, a JSON Schema validator) decodes Confluent's wire format with the writer
// schema it fetches by id. If these pass, a failure of an encoding test is the encoding's.
// The last test holds the relay's JSON Schema codec to the reference on the same values.

function subject(prefix: string): string {
  return `${prefix}-${Date.now().toString(36)}-${randomBytes(3).toString('hex')}-value`;
}

/** Register a schema over the Confluent REST API; its id. */
async function register(url: string, name: string, schema: string, schemaType?: 'PROTOBUF' | 'JSON'): Promise<number> {
  const response = await fetch(`${url}/subjects/${encodeURIComponent(name)}/versions`, {
    method: 'POST',
    headers: { 'content-type': 'application/vnd.schemaregistry.v1+json' },
    body: JSON.stringify(schemaType ? { schema, schemaType } : { schema }),
  });
  const body = (await response.json()) as { id?: number };
  assert.equal(response.status, 200, `register ${name}: ${JSON.stringify(body)}`);
  assert.equal(typeof body.id, 'number');
  return body.id as number;
}

/** Magic byte 0 and the schema id, big-endian. */
function header(id: number): Buffer {
  const b = Buffer.alloc(5);
  b.writeInt32BE(id, 1);
  return b;
}

function varint(n: number): Buffer {
  const out: number[] = [];
  for (let v = n >>> 0; ; v >>>= 7) {
    if (v < 0x80) return Buffer.from([...out, v]);
    out.push((v & 0x7f) | 0x80);
  }
}

/** Avro ints and longs, Avro lengths and Confluent's message-index list are zigzag varints. */
function zigzag(n: number): Buffer {
  return varint((n << 1) ^ (n >> 31));
}

const AVRO = JSON.stringify({
  type: 'record',
  name: 'Order',
  namespace: 'infra.test',
  fields: [
    { name: 'id', type: 'int' },
    { name: 'name', type: 'string' },
  ],
});

/** An Avro {id, name} record: the fields in order, an int as a zigzag varint, a string as its length and UTF-8 bytes. */
function avroOrder(id: number, name: string): Buffer {
  const utf8 = Buffer.from(name, 'utf8');
  return Buffer.concat([zigzag(id), zigzag(utf8.length), utf8]);
}

const PROTO = `syntax = "proto3";
package infra.test;

message Ignored {
  string note = 1;
}

message Shipment {
  int32 id = 1;
  string carrier = 2;
  repeated int64 parcels = 3;
}
`;

/** A Shipment: tag (field << 3 | wire type), then a varint, or a length and bytes; repeated int64 packed. */
function protoShipment(id: number, carrier: string, parcels: number[]): Buffer {
  const name = Buffer.from(carrier, 'utf8');
  const packed = Buffer.concat(parcels.map(varint));
  return Buffer.concat([Buffer.from([0x08]), varint(id), Buffer.from([0x12]), varint(name.length), name, Buffer.from([0x1a]), varint(packed.length), packed]);
}

const JSON_SCHEMA = JSON.stringify({
  $schema: 'http://json-schema.org/draft-07/schema#',
  type: 'object',
  properties: { id: { type: 'integer' }, tags: { type: 'array', items: { type: 'string' } } },
  required: ['id'],
  additionalProperties: false,
});

test('the reference reader decodes hand-made Avro, Protobuf (second message) and JSON Schema values by their registered ids', async () => {
  const url = await schemaRegistryUrl();
  const avroId = await register(url, subject('infra-avro'), AVRO);
  const protoId = await register(url, subject('infra-proto'), PROTO, 'PROTOBUF');
  const jsonId = await register(url, subject('infra-json'), JSON_SCHEMA, 'JSON');
  assert.equal(new Set([avroId, protoId, jsonId]).size, 3, 'three schemas, three ids');

  const values = [
    Buffer.concat([header(avroId), avroOrder(-3, 'Zoë')]),
    // Message indexes [1]: a count of 1, then index 1, both zigzag: 0x02 0x02.
    Buffer.concat([header(protoId), zigzag(1), zigzag(1), protoShipment(300, 'dhl', [1, 150])]),
    // The single byte 0 stands for [0], the first message.
    Buffer.concat([header(protoId), Buffer.from([0x00]), Buffer.from([0x0a, 0x02]), Buffer.from('hi')]),
    Buffer.concat([header(jsonId), Buffer.from(JSON.stringify({ id: 7, tags: ['a', 'b'] }))]),
  ];
  const [avro, proto, first, json] = await readWithJava(url, values);

  assert.equal(avro?.schemaId, avroId);
  assert.equal(avro?.schemaType, 'AVRO');
  assert.deepEqual(avro?.value, { id: -3, name: 'Zoë' });

  assert.equal(proto?.schemaId, protoId);
  assert.equal(proto?.schemaType, 'PROTOBUF');
  assert.deepEqual(proto?.messageIndexes, [1]);
  assert.equal(proto?.messageType, 'infra.test.Shipment');
  // protobuf-java's JSON mapping writes 64-bit integers as strings.
  assert.deepEqual(proto?.value, { id: 300, carrier: 'dhl', parcels: ['1', '150'] });

  assert.deepEqual(first?.messageIndexes, [0]);
  assert.equal(first?.messageType, 'infra.test.Ignored');
  assert.deepEqual(first?.value, { note: 'hi' });

  assert.equal(json?.schemaId, jsonId);
  assert.equal(json?.schemaType, 'JSON');
  assert.deepEqual(json?.value, { id: 7, tags: ['a', 'b'] });
});

test('the reference reader rejects what does not match the schema its id names, value by value', async () => {
  const url = await schemaRegistryUrl();
  const avroId = await register(url, subject('infra-avro-bad'), AVRO);
  const protoId = await register(url, subject('infra-proto-bad'), PROTO, 'PROTOBUF');
  const jsonId = await register(url, subject('infra-json-bad'), JSON_SCHEMA, 'JSON');
  const results = await readEachWithJava(url, [
    Buffer.concat([header(avroId), avroOrder(1, 'a'), Buffer.from([0x00])]),
    Buffer.concat([header(protoId), zigzag(1), zigzag(2), protoShipment(1, 'x', [])]),
    Buffer.concat([header(protoId), zigzag(1), zigzag(1), Buffer.from([0x28, 0x01])]),
    Buffer.concat([header(jsonId), Buffer.from(JSON.stringify({ id: 'seven' }))]),
    Buffer.concat([Buffer.from([0x01]), header(avroId).subarray(1), avroOrder(1, 'a')]),
    Buffer.concat([header(avroId), avroOrder(2, 'still read')]),
  ]);
  const errors = results.map((r) => ('error' in r ? r.error : undefined));
  assert.match(errors[0] ?? '', /trailing bytes/);
  assert.match(errors[1] ?? '', /names no message/);
  assert.match(errors[2] ?? '', /does not declare/);
  assert.match(errors[3] ?? '', /JSON schema/);
  assert.match(errors[4] ?? '', /magic byte/);
  assert.deepEqual(results[5], { schemaId: avroId, schemaType: 'AVRO', value: { id: 2, name: 'still read' } });
});

test('JSON Schema formats: the relay\'s codec refuses what the reference validator (everit) refuses, and takes what it takes', async () => {
  const url = await schemaRegistryUrl();
  const schema = JSON.stringify({
    $schema: 'http://json-schema.org/draft-07/schema#',
    type: 'object',
    properties: { at: { type: 'string', format: 'date-time' }, mail: { type: 'string', format: 'email' }, site: { type: 'string', format: 'uri' }, ip: { type: 'string', format: 'ipv4' }, own: { type: 'string', format: 'shop-sku' } },
  });
  const id = await register(url, subject('infra-json-formats'), schema, 'JSON');
  const cases: Array<[Record<string, string>, boolean]> = [
    [{ at: '2026-12-06T10:15:30Z', mail: 'ops@example.com', site: 'https://example.com/a?b=c', ip: '10.0.0.1' }, true],
    [{ at: '2026-12-06T10:15:30.123+01:00' }, true],
    [{ own: 'any text: a format neither knows is not checked' }, true],
    [{ at: '2026-13-06T10:15:30Z' }, false],
    [{ at: 'yesterday' }, false],
    [{ mail: 'not an address' }, false],
    [{ site: 'no scheme' }, false],
    [{ ip: '10.0.0.256' }, false],
  ];
  const reference = await readEachWithJava(url, cases.map(([row]) => Buffer.concat([header(id), Buffer.from(JSON.stringify(row))])));
  const codec = schemaCodec('json-schema', schema);
  cases.forEach(([row, valid], i) => {
    assert.equal(!('error' in reference[i]!), valid, `everit on ${JSON.stringify(row)}: ${JSON.stringify(reference[i])}`);
    const ours = codec.encode(row);
    assert.equal('body' in ours && ours.body !== undefined, valid, `the codec on ${JSON.stringify(row)}: ${JSON.stringify(ours)}`);
  });
});
