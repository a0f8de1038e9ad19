import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { createServer as createTlsServer } from 'node:tls';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError } from '../src/shared/errors.js';
import {
  createRegistryDecoder,
  createRowEncoder,
  IncompatibleSchemaError,
  RegistryRequestError,
  RegistryUnavailableError,
  resolveEncodingOptions,
  RowEncodingError,
  unframe,
  UnknownSchemaError,
  type EncodingRule,
  type RowEncoder,
} from '../src/encodings/index.js';
import { uniqueName } from './helpers/db.js';
import { schemaRegistryUrl } from './helpers/registry.js';

// The encodings library against a real Confluent-compatible registry (Apicurio's ccompat
// API): schemas registered and looked up, rows framed with the registry's ids, decoded
// back by id, and each kind of failure classified as the relay needs it. Every test uses
// subjects of its own.

let url: string;
const dir = mkdtempSync(join(tmpdir(), 'encodings-it-'));
before(async () => {
  url = await schemaRegistryUrl();
});
after(() => rmSync(dir, { recursive: true, force: true }));

const file = (name: string, text: string): string => {
  const path = join(dir, `${uniqueName('f')}-${name}`);
  writeFileSync(path, text);
  return path;
};

const avroOrder = (name = 'OrderPlaced', extra: object[] = []): string =>
  JSON.stringify({
    type: 'record',
    name,
    namespace: 'shop.events',
    fields: [
      { name: 'orderId', type: 'long' },
      { name: 'amount', type: 'double' },
      { name: 'note', type: ['null', 'string'], default: null },
      ...extra,
    ],
  });
const PROTO = 'syntax = "proto3";\npackage shop.events;\n\nmessage OrderPlaced {\n  int64 orderId = 1;\n  double amount = 2;\n  string note = 3;\n}\n\nmessage OrderCancelled {\n  int64 orderId = 1;\n  string reason = 2;\n}\n';
const jsonOrder = (title = 'OrderPlaced'): string =>
  JSON.stringify({
    $schema: 'http://json-schema.org/draft-07/schema#',
    title,
    type: 'object',
    properties: { orderId: { type: 'integer' }, amount: { type: 'number' }, note: { type: ['string', 'null'] } },
    required: ['orderId', 'amount'],
  });

/** A registry call of the test's own (setting compatibility, reading subjects). */
async function rest<T>(method: string, path: string, body?: unknown): Promise<T> {
  const response = await fetch(`${url}${path}`, {
    method,
    headers: { 'content-type': 'application/vnd.schemaregistry.v1+json' },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  assert.ok(response.ok, `${method} ${path}: HTTP ${response.status} ${await response.clone().text()}`);
  return (await response.json()) as T;
}

function encoderFor(rules: EncodingRule[], registry: Record<string, unknown> = { url }): RowEncoder {
  return createRowEncoder(resolveEncodingOptions({ schemaRegistry: registry, rules }, dir), { outbox: 'orders' });
}

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  assert.fail('expected a rejection');
}

test('integration: each format auto-registers its file, frames rows with the registry id, decodes back by id; a row that does not fit names its field', async () => {
  const topics = { avro: uniqueName('enc-avro'), protobuf: uniqueName('enc-proto'), 'json-schema': uniqueName('enc-json') };
  const encoder = encoderFor([
    { topic: topics.avro, value: { format: 'avro', schema: { file: file('order.avsc', avroOrder()) } }, key: { format: 'avro', schema: { file: file('key.avsc', '"string"') } } },
    { topic: topics.protobuf, value: { format: 'protobuf', schema: { file: file('order.proto', PROTO) }, messageName: 'OrderCancelled' } },
    { topic: topics['json-schema'], value: { format: 'json-schema', schema: { file: file('order.schema.json', jsonOrder()) } } },
  ]);
  const decoder = createRegistryDecoder({ url });
  try {
    await encoder.start();
    const subjects = await rest<string[]>('GET', '/subjects');
    for (const topic of Object.values(topics)) assert.ok(subjects.includes(`${topic}-value`), `${topic}-value registered at start`);
    assert.ok(subjects.includes(`${topics.avro}-key`));

    const rows = {
      avro: { orderId: 1001, amount: 12.5, note: 'gift' },
      protobuf: { orderId: '1002', reason: 'changed mind' },
      'json-schema': { orderId: 1003, amount: 3, note: null },
    };
    const values: Buffer[] = [];
    for (const [format, topic] of Object.entries(topics) as Array<[keyof typeof topics, string]>) {
      const { id } = await rest<{ id: number }>('GET', `/subjects/${topic}-value/versions/latest`);
      const parts = await encoder.encode({ topic, key: 'k1', value: JSON.stringify(rows[format]), headers: {} });
      assert.ok(parts && Buffer.isBuffer(parts.value), `${format}: encoded`);
      assert.equal(parts.valueSchemaId, id);
      const framed = unframe(parts.value, format === 'protobuf');
      assert.equal(parts.value[0], 0, 'magic byte');
      assert.equal(framed.schemaId, id, `${format}: the registry's id of ${topic}-value`);
      if (format === 'protobuf') assert.deepEqual(framed.messageIndexes, [1], 'OrderCancelled is the second message');
      if (format === 'json-schema') assert.equal(framed.body.toString(), JSON.stringify(rows[format]));
      if (format === 'avro') {
        assert.ok(Buffer.isBuffer(parts.key), 'the key is encoded as an Avro string');
        assert.equal(parts.keySchemaId, (await rest<{ id: number }>('GET', `/subjects/${topic}-key/versions/latest`)).id);
      } else {
        assert.equal(parts.key, 'k1', 'no key encoding: the key text as it is');
      }
      values.push(parts.value);
    }
    await decoder.prefetch([...values, null, Buffer.from('{"json":true}')]);
    assert.deepEqual(decoder.decode(values[0]!)?.value, rows.avro);
    assert.deepEqual(decoder.decode(values[1]!)?.value, { orderId: 1002, reason: 'changed mind' });
    assert.deepEqual(decoder.decode(values[2]!)?.value, rows['json-schema']);
    assert.equal(decoder.decode(Buffer.from('{"json":true}')), undefined, 'not framed');

    for (const [format, topic] of Object.entries(topics)) {
      const bad = format === 'protobuf' ? { orderId: 'x1', reason: 'r' } : { orderId: 1, amount: 'abc' };
      const error = await rejection(encoder.encode({ topic, key: 'k', value: JSON.stringify(bad), headers: {} }));
      assert.ok(error instanceof RowEncodingError, `${format}: ${String(error)}`);
      assert.equal(error.retriable, false);
      assert.equal(error.errorName, `encoding:${format}`);
      assert.match(error.message, format === 'protobuf' ? /field orderId: expected int64/ : /field amount: /);
      assert.match(error.message, new RegExp(`${format} schema \\d+, subject ${topic}-value`));
      const notJson = await rejection(encoder.encode({ topic, key: 'k', value: 'not json', headers: {} }));
      assert.ok(notJson instanceof RowEncodingError && /value: not JSON/.test(notJson.message));
      assert.deepEqual(await encoder.encode({ topic, key: 'k', value: null, headers: {} }).then((p) => p?.value), null, 'a tombstone stays null');
    }
    assert.equal(await encoder.encode({ topic: uniqueName('other'), key: 'k', value: '{}', headers: {} }), undefined, 'no rule: as it is');
  } finally {
    await encoder.close();
    await decoder.close();
  }
});

test('integration: a key encoded with a record schema is parsed as JSON, and a key that is not JSON is the row\'s error naming the key', async () => {
  const topic = uniqueName('enc-key');
  const keySchema = file('key.avsc', JSON.stringify({ type: 'record', name: 'OrderKey', namespace: `k.${uniqueName('n')}`, fields: [{ name: 'id', type: 'long' }] }));
  const encoder = encoderFor([{ topic, value: { format: 'json' }, key: { format: 'avro', schema: { file: keySchema } } }]);
  try {
    const parts = await encoder.encode({ topic, key: '{"id":7}', value: '{"any":"json"}', headers: {} });
    assert.equal(parts?.value, '{"any":"json"}', 'value json: as it is');
    assert.ok(Buffer.isBuffer(parts?.key));
    const error = await rejection(encoder.encode({ topic, key: 'order-7', value: '{}', headers: {} }));
    assert.ok(error instanceof RowEncodingError);
    assert.match(error.message, /^key: not JSON/);
  } finally {
    await encoder.close();
  }
});

test("integration: version sources: a pinned version and 'latest'; a version that does not exist or of another format is a ConfigError", async () => {
  const topic = uniqueName('enc-ver');
  const subject = `${topic}-value`;
  const v1 = await rest<{ id: number }>('POST', `/subjects/${subject}/versions`, { schema: avroOrder() });
  const v2 = await rest<{ id: number }>('POST', `/subjects/${subject}/versions`, { schema: avroOrder('OrderPlaced', [{ name: 'channel', type: 'string', default: 'web' }]) });
  assert.notEqual(v1.id, v2.id);
  const encoder = encoderFor([
    { topic, value: { format: 'avro', schema: { version: 1 } } },
    { topic: `/${topic}-latest/`, value: { format: 'avro', schema: { version: 'latest', subject } } },
  ]);
  try {
    await encoder.start();
    const row = JSON.stringify({ orderId: 1, amount: 2 });
    assert.equal((await encoder.encode({ topic, key: 'k', value: row, headers: {} }))?.valueSchemaId, v1.id);
    assert.equal((await encoder.encode({ topic: `${topic}-latest`, key: 'k', value: row, headers: {} }))?.valueSchemaId, v2.id);
  } finally {
    await encoder.close();
  }
  const missing = encoderFor([{ topic, value: { format: 'avro', schema: { version: 9 } } }]);
  const notThere = await rejection(missing.start());
  await missing.close();
  assert.ok(notThere instanceof ConfigError && notThere.setting === 'encodings.rules[0].value.schema.version', String(notThere));
  assert.match(notThere.message, new RegExp(`subject ${subject} has no version 9`));
  const otherFormat = encoderFor([{ topic, value: { format: 'protobuf', schema: { version: 'latest' } } }]);
  const wrong = await rejection(otherFormat.start());
  await otherFormat.close();
  assert.ok(wrong instanceof ConfigError && /is protobuf, but version 2 .* is AVRO/.test(wrong.message), String(wrong));
});

test('integration: idHeader: each row names its schema id; a missing, non-numeric or unknown id, or a schema of another format, is the row\'s error', async () => {
  const topic = uniqueName('enc-hdr');
  const avro = await rest<{ id: number }>('POST', `/subjects/${topic}-a/versions`, { schema: avroOrder() });
  const proto = await rest<{ id: number }>('POST', `/subjects/${topic}-p/versions`, { schemaType: 'PROTOBUF', schema: PROTO });
  const encoder = encoderFor([{ topic, value: { format: 'avro', schema: { idHeader: 'schema-id' } } }]);
  const row = JSON.stringify({ orderId: 5, amount: 1.5 });
  try {
    await encoder.start();
    const parts = await encoder.encode({ topic, key: 'k', value: row, headers: { 'schema-id': String(avro.id) } });
    assert.equal(parts?.valueSchemaId, avro.id);
    assert.equal(unframe(parts!.value as Buffer, false).schemaId, avro.id);
    const cases: Array<[Record<string, string>, RegExp]> = [
      [{}, /no header schema-id/],
      [{ 'schema-id': 'seven' }, /header schema-id is "seven", not a schema id/],
      [{ 'schema-id': '2000000000' }, /names schema 2000000000, which the schema registry does not know/],
      [{ 'schema-id': String(proto.id) }, new RegExp(`names schema ${proto.id}, a PROTOBUF schema, and the rule encodes avro`)],
    ];
    for (const [headers, message] of cases) {
      const error = await rejection(encoder.encode({ topic, key: 'k', value: row, headers }));
      assert.ok(error instanceof RowEncodingError, String(error));
      assert.match(error.message, message);
    }
  } finally {
    await encoder.close();
  }
});

test('integration: RecordName and TopicRecordName subjects; a topic pattern registers at its first row', async () => {
  const topic = uniqueName('enc-rec');
  const record = `R${uniqueName('r').replace(/_/g, '')}`;
  const encoder = encoderFor([
    { topic, value: { format: 'avro', schema: { file: file('r.avsc', avroOrder(record)) }, subjectStrategy: 'RecordName' } },
    { topic: `${topic}-2`, value: { format: 'json-schema', schema: { file: file('r.json', jsonOrder(record)) }, subjectStrategy: 'TopicRecordName' } },
    { topic: `/${topic}-p-.*/`, value: { format: 'protobuf', schema: { file: file('r.proto', PROTO) } } },
  ]);
  try {
    await encoder.start();
    let subjects = await rest<string[]>('GET', '/subjects');
    assert.ok(subjects.includes(`shop.events.${record}`), 'RecordName: the Avro full name');
    assert.ok(subjects.includes(`${topic}-2-${record}`), 'TopicRecordName: topic and JSON Schema title');
    assert.ok(!subjects.some((s) => s.startsWith(`${topic}-p-`)), 'a pattern registers nothing at start');
    await encoder.encode({ topic: `${topic}-p-eu`, key: 'k', value: '{"orderId":1}', headers: {} });
    subjects = await rest<string[]>('GET', '/subjects');
    assert.ok(subjects.includes(`${topic}-p-eu-value`), 'registered at the first row of a matching topic');
  } finally {
    await encoder.close();
  }
});

test('integration: autoRegister false finds a registered file by content, and refuses one not registered', async () => {
  const topic = uniqueName('enc-noauto');
  const registered = await rest<{ id: number }>('POST', `/subjects/${topic}-value/versions`, { schema: avroOrder() });
  const found = encoderFor([{ topic, value: { format: 'avro', schema: { file: file('a.avsc', avroOrder()), autoRegister: false } } }]);
  try {
    await found.start();
    assert.equal((await found.encode({ topic, key: 'k', value: '{"orderId":1,"amount":1}', headers: {} }))?.valueSchemaId, registered.id);
  } finally {
    await found.close();
  }
  const other = encoderFor([{ topic, value: { format: 'avro', schema: { file: file('b.avsc', avroOrder('Other')), autoRegister: false } } }]);
  const error = await rejection(other.start());
  await other.close();
  assert.ok(error instanceof ConfigError && /is not registered under subject .*autoRegister is false/.test(error.message), String(error));
});

test('integration: an incompatible new version under BACKWARD is an IncompatibleSchemaError naming the subject', async () => {
  const topic = uniqueName('enc-compat');
  const subject = `${topic}-value`;
  const v1 = encoderFor([{ topic, value: { format: 'avro', schema: { file: file('v1.avsc', avroOrder()) } } }]);
  await v1.start();
  await v1.close();
  await rest('PUT', `/config/${subject}`, { compatibility: 'BACKWARD' });
  // A new field without default: readers of v2 cannot read what v1 wrote.
  const v2 = encoderFor([{ topic, value: { format: 'avro', schema: { file: file('v2.avsc', avroOrder('OrderPlaced', [{ name: 'channel', type: 'string' }])) } } }]);
  const error = await rejection(v2.start());
  await v2.close();
  assert.ok(error instanceof IncompatibleSchemaError, String(error));
  assert.equal(error.subject, subject);
  assert.equal(error.retriable, false);
  assert.match(error.message, new RegExp(`incompatible with subject ${subject}`));
});

/** A local HTTP server that records each request's headers and answers as `answer` says. */
async function stubServer(answer: (headers: IncomingHttpHeaders, respond: (status: number, body: unknown) => void) => void): Promise<{ url: string; seen: IncomingHttpHeaders[]; server: Server }> {
  const seen: IncomingHttpHeaders[] = [];
  const server = createServer((request, response) => {
    seen.push(request.headers);
    request.resume();
    answer(request.headers, (status, body) => {
      response.writeHead(status, { 'content-type': 'application/json' });
      response.end(JSON.stringify(body));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen, server };
}

const closeServer = (server: Server): Promise<void> => {
  server.closeAllConnections();
  return new Promise((resolve) => server.close(() => resolve()));
};

test('integration: a registry nobody listens on, one that never answers, one answering 503: RegistryUnavailableError, retriable', async () => {
  const { url: deadUrl, server: dead } = await stubServer(() => {});
  await closeServer(dead);
  const topic = uniqueName('enc-down');
  const rules: EncodingRule[] = [{ topic, value: { format: 'avro', schema: { file: file('d.avsc', avroOrder()) } } }];

  const refused = encoderFor(rules, { url: deadUrl });
  const down = await rejection(refused.start());
  assert.ok(down instanceof RegistryUnavailableError && down.retriable, String(down));
  assert.match(down.message, /unreachable.*ECONNREFUSED/);
  const rowWaits = await rejection(refused.encode({ topic, key: 'k', value: '{"orderId":1,"amount":1}', headers: {} }));
  assert.ok(rowWaits instanceof RegistryUnavailableError, 'a row waits; a failed lookup is not kept');
  await refused.close();
  const decoder = createRegistryDecoder({ url: deadUrl });
  const prefetch = await rejection(decoder.prefetch([Buffer.from([0, 0, 0, 0, 1, 2])]));
  assert.ok(prefetch instanceof RegistryUnavailableError);
  assert.throws(() => decoder.decode(Buffer.from([0, 0, 0, 0, 1, 2])), /schema 1/);
  await decoder.close();

  const silent = await stubServer(() => {});
  const slow = encoderFor(rules, { url: silent.url, timeoutMs: 300 });
  const startedAt = Date.now();
  const timedOut = await rejection(slow.start());
  assert.ok(timedOut instanceof RegistryUnavailableError && /did not answer within 300 ms/.test(timedOut.message), String(timedOut));
  assert.ok(Date.now() - startedAt < 5_000, 'the timeout is enforced');
  await slow.close();
  await closeServer(silent.server);

  const busy = await stubServer((_, respond) => respond(503, { error_code: 50301, message: 'busy' }));
  const overloaded = encoderFor(rules, { url: busy.url });
  const unavailable = await rejection(overloaded.start());
  assert.ok(unavailable instanceof RegistryUnavailableError && /HTTP 503/.test(unavailable.message), String(unavailable));
  assert.equal(busy.seen.length, 1, 'no retries inside a call');
  await overloaded.close();
  await closeServer(busy.server);
});

test('integration: basic auth and bearer token are sent; refused credentials are not retriable and the message has no secret', async () => {
  const stub = await stubServer((_, respond) => respond(401, { error_code: 40101, message: 'Unauthorized' }));
  const topic = uniqueName('enc-auth');
  const rules: EncodingRule[] = [{ topic, value: { format: 'avro', schema: { file: file('x.avsc', avroOrder()) } } }];
  try {
    const basic = encoderFor(rules, { url: stub.url, username: 'relay', password: 'hunter2' });
    const error = await rejection(basic.start());
    await basic.close();
    assert.ok(error instanceof RegistryRequestError && error.status === 401 && !error.retriable, String(error));
    assert.match(error.message, /refused the credentials/);
    assert.doesNotMatch(error.message, /hunter2/);
    assert.equal(stub.seen[0]!.authorization, `Basic ${Buffer.from('relay:hunter2').toString('base64')}`);

    const bearer = encoderFor(rules, { url: stub.url, bearerToken: 'tok-123' });
    await rejection(bearer.start());
    await bearer.close();
    assert.equal(stub.seen[1]!.authorization, 'Bearer tok-123');

    const decoder = createRegistryDecoder({ url: stub.url, bearerToken: 'tok-123' });
    const refused = await rejection(decoder.prefetch([Buffer.from([0, 0, 0, 0, 1, 2])]));
    assert.ok(refused instanceof RegistryRequestError, 'refused credentials stop the chunk, they are no message\'s fault');
    await decoder.close();
  } finally {
    await closeServer(stub.server);
  }
});

test('integration: the decoder reports an id the registry does not know as UnknownSchemaError, then asks again', async () => {
  const decoder = createRegistryDecoder({ url });
  try {
    const value = Buffer.from([0, 0x77, 0x35, 0x94, 0x00, 1, 2]);
    const error = await rejection(decoder.prefetch([value]));
    assert.ok(error instanceof UnknownSchemaError && error.schemaId === 0x77359400, String(error));
    assert.throws(() => decoder.decode(value), UnknownSchemaError);
    assert.ok((await rejection(decoder.prefetch([value]))) instanceof UnknownSchemaError, 'not cached: asked again');
  } finally {
    await decoder.close();
  }
});

test('integration: an https registry: its certificate authority from caFile is trusted; without it the certificate is refused, naming caFile', async () => {
  // TLS in front of the real registry: a self-signed certificate for 127.0.0.1, made here
  // by openssl, and a TLS server that passes each connection on to the registry.
  const key = join(dir, uniqueName('tls-key'));
  const cert = join(dir, uniqueName('tls-cert'));
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', key, '-out', cert, '-days', '1', '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1'], { stdio: 'ignore' });
  const upstream = new URL(url);
  const open = new Set<Socket>();
  const proxy = createTlsServer({ key: readFileSync(key), cert: readFileSync(cert) }, (socket) => {
    const to = connect(Number(upstream.port), upstream.hostname);
    open.add(socket).add(to);
    socket.on('error', () => to.destroy());
    to.on('error', () => socket.destroy());
    socket.pipe(to).pipe(socket);
  });
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  const httpsUrl = `https://127.0.0.1:${(proxy.address() as AddressInfo).port}${upstream.pathname.replace(/\/$/, '')}`;
  const topic = uniqueName('enc-tls');
  const rules: EncodingRule[] = [{ topic, value: { format: 'avro', schema: { file: file('tls.avsc', avroOrder()) } } }];
  try {
    const untrusted = encoderFor(rules, { url: httpsUrl });
    const refused = await rejection(untrusted.start());
    await untrusted.close();
    assert.ok(refused instanceof RegistryUnavailableError, String(refused));
    assert.match(refused.message, /self-signed certificate.*caFile/);

    const trusted = encoderFor(rules, { url: httpsUrl, caFile: cert });
    const decoder = createRegistryDecoder({ url: httpsUrl, caFile: cert });
    try {
      await trusted.start();
      const parts = await trusted.encode({ topic, key: 'k', value: JSON.stringify({ orderId: 7, amount: 1.5, note: null }), headers: {} });
      assert.equal(parts!.valueSchemaId, (await rest<{ id: number }>('GET', `/subjects/${topic}-value/versions/latest`)).id);
      await decoder.prefetch([parts!.value as Buffer]);
      assert.deepEqual(decoder.decode(parts!.value as Buffer)?.value, { orderId: 7, amount: 1.5, note: null });
    } finally {
      await trusted.close();
      await decoder.close();
    }
  } finally {
    for (const socket of open) socket.destroy();
    await new Promise((resolve) => proxy.close(resolve));
  }
});
