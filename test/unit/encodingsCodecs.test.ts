import { test } from 'node:test';
import assert from 'node:assert/strict';
import { schemaCodec } from '../../src/encodings/schemaCodec.js';

// The bodies without a registry: a row that fits encodes and decodes back to itself; a
// row that does not fit is refused with the field's path, what the schema expects there
// and what the row has.

const avro = schemaCodec('avro', JSON.stringify({
  type: 'record',
  name: 'Order',
  namespace: 'shop',
  fields: [
    { name: 'id', type: 'string' },
    { name: 'amount', type: 'double' },
    { name: 'note', type: ['null', 'string'], default: null },
    { name: 'items', type: { type: 'array', items: { type: 'record', name: 'Item', fields: [{ name: 'sku', type: 'string' }] } }, default: [] },
    { name: 'status', type: { type: 'enum', name: 'Status', symbols: ['NEW', 'PAID'] }, default: 'NEW' },
  ],
}));

const proto = (messageName?: string) =>
  schemaCodec(
    'protobuf',
    `syntax = "proto3";
package shop.v1;
import "google/protobuf/timestamp.proto";
enum Status { NEW = 0; PAID = 1; }
message Order {
  string order_id = 1; double amount = 2; int64 big = 3; Status status = 4; repeated Item items = 5;
  map<string, int32> tags = 6; bytes raw = 7; oneof pick { string a = 8; int32 b = 9; }
  google.protobuf.Timestamp at = 10;
}
message Item { string sku = 1; message Part { uint32 n = 1; } Part part = 2; }
`,
    messageName,
  );

const jsonSchema = schemaCodec('json-schema', JSON.stringify({
  $schema: 'https://json-schema.org/draft/2020-12/schema',
  title: 'Order',
  type: 'object',
  properties: { id: { type: 'string' }, amount: { type: 'number' }, items: { type: 'array', items: { type: 'object', properties: { sku: { type: 'string' } }, required: ['sku'] } } },
  required: ['id', 'amount'],
}));

const problem = (result: { body: Buffer } | { problem: string }): string => {
  assert.ok('problem' in result, 'refused');
  return result.problem;
};
const body = (result: { body: Buffer } | { problem: string }): Buffer => {
  assert.ok('body' in result, `encoded: ${'problem' in result ? result.problem : ''}`);
  return result.body;
};

test('Avro: plain JSON in (null unions unwrapped, defaults filled), plain objects out; the failing field named', () => {
  assert.equal(avro.recordName, 'shop.Order');
  const row = { id: 'o1', amount: 12.5, note: 'gift', items: [{ sku: 'a' }] };
  assert.deepEqual(avro.decode(body(avro.encode(row))), { ...row, status: 'NEW' });
  assert.deepEqual(avro.decode(body(avro.encode({ id: 'o2', amount: 1 }))), { id: 'o2', amount: 1, note: null, items: [], status: 'NEW' });
  assert.equal(problem(avro.encode({ id: 'o1', amount: 'abc' })), 'field amount: expected double, got string "abc"');
  assert.equal(problem(avro.encode({ amount: 1 })), 'field id: expected string, got nothing (the field is missing)');
  assert.equal(problem(avro.encode({ id: 'o', amount: 1, items: [{ sku: 1 }] })), 'field items[0].sku: expected string, got number 1');
  assert.equal(problem(avro.encode({ id: 'o', amount: 1, note: 5 })), 'field note: expected one of null, string, got number 5');
  assert.match(problem(avro.encode({ id: 'o', amount: 1, status: 'LOST' })), /field status: expected enum shop.Status \(one of NEW, PAID\)/);
  assert.match(problem(avro.encode([1])), /the value: expected record shop.Order, got an array/);
  assert.equal(schemaCodec('avro', '"string"').topIsString, true);
  assert.deepEqual(avro.decode(body(avro.encode({ id: 'o3', amount: 1, extra: true }))), { id: 'o3', amount: 1, note: null, items: [], status: 'NEW' }, 'a field the schema does not name is ignored');
});

test('Protobuf: JSON-mapping rows (either field name, int64 as text, enum names, base64) checked field by field', () => {
  const order = proto();
  assert.equal(order.recordName, 'shop.v1.Order');
  assert.deepEqual(order.messageIndexes, [0]);
  assert.deepEqual(proto('Item').messageIndexes, [1]);
  assert.deepEqual(proto('shop.v1.Item.Part').messageIndexes, [1, 0]);
  const decoded = order.decode(body(order.encode({ orderId: 'o1', amount: 2.5, big: '9007199254740993', status: 'PAID', items: [{ sku: 's', part: { n: 3 } }], tags: { x: 1 }, raw: 'AQI=', b: 4, at: { seconds: 10 } }))) as Record<string, unknown>;
  assert.equal(decoded.order_id, 'o1');
  assert.equal(decoded.status, 'PAID');
  assert.equal(decoded.raw, 'AQI=');
  assert.equal(decoded.b, 4);
  assert.deepEqual(decoded.items, [{ sku: 's', part: { n: 3 } }]);
  assert.deepEqual(decoded.tags, { x: 1 });
  assert.equal(decoded.a, undefined, 'a oneof member not set stays absent');
  const empty = order.decode(body(order.encode({}))) as Record<string, unknown>;
  assert.equal(empty.order_id, '', 'defaults filled');
  assert.equal(empty.big, 0, 'longs as numbers');
  assert.deepEqual([empty.items, empty.tags, empty.status], [[], {}, 'NEW']);
  assert.equal(problem(order.encode({ amount: 'abc' })), 'field amount: expected double, got string "abc"');
  assert.match(problem(order.encode({ big: 2 ** 60 })), /field big: expected int64/);
  assert.match(problem(order.encode({ status: 'LOST' })), /field status: expected enum Status \(one of NEW, PAID\)/);
  assert.match(problem(order.encode({ items: [{ sku: 's', part: { n: -1 } }] })), /field items\[0\]\.part\.n: expected uint32/);
  assert.match(problem(order.encode({ amout: 1 })), /field amout: message Order has no such field/);
  assert.match(problem(order.encode({ a: 'x', b: 1 })), /field b: a is set too, and only one of oneof pick may be/);
  assert.match(problem(order.encode({ tags: { x: 'y' } })), /field tags\.x: expected int32/);
  assert.match(problem(order.encode('x')), /the value: expected message shop.v1.Order/);
  // A row's message for another index decodes by the indexes given.
  const item = proto('Item');
  assert.deepEqual(order.decode(body(item.encode({ sku: 'z' })), [1]), { sku: 'z', part: null });
});

test('Protobuf: a nested message below a message with map fields has no knowable index, and is refused', () => {
  assert.throws(
    () => schemaCodec('protobuf', 'syntax = "proto3";\nmessage A { map<string, string> m = 1; message B { string x = 1; } }\n', 'A.B'),
    /ambiguous/,
  );
});

test('JSON Schema: the body is the compact JSON; the first error names the path and the keyword', () => {
  assert.equal(jsonSchema.recordName, 'Order');
  const row = { id: 'o1', amount: 1.5, items: [{ sku: 'a' }] };
  const bytes = body(jsonSchema.encode(row));
  assert.equal(bytes.toString(), JSON.stringify(row));
  assert.deepEqual(jsonSchema.decode(bytes), row);
  assert.equal(problem(jsonSchema.encode({ id: 'o1', amount: 'abc' })), 'field amount: must be number (type), got string "abc"');
  assert.equal(problem(jsonSchema.encode({ id: 'o1' })), 'field amount: is required (required), got nothing (the field is missing)');
  assert.match(problem(jsonSchema.encode({ id: 'o1', amount: 1, items: [{}] })), /^field items\[0\]\.sku: is required/);
  assert.equal(schemaCodec('json-schema', '{"$schema":"http://json-schema.org/draft-07/schema#","type":"string"}').topIsString, true);
  // The dialects docs/encodings.md names, each checking a row by its own rules.
  for (const dialect of ['http://json-schema.org/draft-06/schema#', 'https://json-schema.org/draft/2019-09/schema']) {
    const codec = schemaCodec('json-schema', JSON.stringify({ $schema: dialect, type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] }));
    assert.equal(problem(codec.encode({ n: 'x' })), 'field n: must be integer (type), got string "x"', dialect);
    assert.equal(body(codec.encode({ n: 1 })).toString(), '{"n":1}', dialect);
  }
});

test('Avro decimals are exact: numbers or decimal strings in, decimal strings with the scale\'s digits out; more digits than the scale or the precision allow are refused, never rounded', () => {
  const codec = schemaCodec('avro', JSON.stringify({
    type: 'record',
    name: 'Money',
    fields: [
      { name: 'amount', type: { type: 'bytes', logicalType: 'decimal', precision: 6, scale: 2 } },
      { name: 'fee', type: ['null', { type: 'fixed', name: 'Fee', size: 2, logicalType: 'decimal', precision: 4, scale: 1 }], default: null },
      { name: 'blobs', type: { type: 'map', values: 'bytes' }, default: {} },
      { name: 'tag', type: { type: 'fixed', name: 'Tag', size: 2 }, default: '\u0000\u0000' },
    ],
  }));
  const roundTrip = (row: object) => {
    const out = codec.encode(row);
    assert.ok('body' in out && out.body, `${JSON.stringify(row)}: ${'problem' in out ? out.problem : ''}`);
    return codec.decode(out.body);
  };
  assert.deepEqual(roundTrip({ amount: 12.5, fee: '-3.0', blobs: { a: 'AQI=' }, tag: 'q80=' }), { amount: '12.50', fee: '-3.0', blobs: { a: 'AQI=' }, tag: 'q80=' });
  assert.deepEqual(roundTrip({ amount: '-9999.99', fee: 999.9 }), { amount: '-9999.99', fee: '999.9', blobs: {}, tag: 'AAA=' });
  assert.deepEqual(roundTrip({ amount: '0.500' }), { amount: '0.50', fee: null, blobs: {}, tag: 'AAA=' }, 'zeros past the scale are no digits');
  // Two's complement, fewest bytes: -1 cent is one byte ff; 128 cents two bytes 00 80.
  assert.equal((codec.encode({ amount: '-0.01' }) as { body: Buffer }).body.subarray(0, 2).toString('hex'), '02ff');
  assert.equal((codec.encode({ amount: '1.28' }) as { body: Buffer }).body.subarray(0, 3).toString('hex'), '040080');
  for (const [row, why] of [
    [{ amount: 12.345 }, 'a digit past the scale'],
    [{ amount: 0.1 + 0.2 }, 'a float that is not the decimal it looks like'],
    [{ amount: '10000.00' }, 'seven digits at precision 6'],
    [{ amount: '1e3' }, 'an exponent'],
    [{ amount: 'twelve' }, 'not a number'],
    [{ amount: 1, fee: '3276.8' }, 'a fixed of 2 bytes holds at most 3276.7'],
  ] as const) {
    const out = codec.encode(row);
    assert.ok('problem' in out && /expected (one of null, )?decimal \(precision \d, scale \d/.test(out.problem!), `${why}: ${JSON.stringify(out)}`);
  }
  const notBase64 = codec.encode({ amount: 1, blobs: { a: 'not base64' } });
  assert.ok('problem' in notBase64 && /^field blobs\.a: expected bytes \(base64 text\), got string "not base64"$/.test(notBase64.problem!), JSON.stringify(notBase64));
  const shortFixed = codec.encode({ amount: 1, tag: 'AQ==' });
  assert.ok('problem' in shortFixed && /^field tag: expected fixed Tag of 2 bytes \(base64 text\), got 1 bytes$/.test(shortFixed.problem!), JSON.stringify(shortFixed));
});
