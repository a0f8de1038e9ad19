import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError } from '../../src/shared/errors.js';
import { loadEncodingsFile, resolveEncodingOptions, resolveSchemaRegistryOptions } from '../../src/encodings/options.js';

// Encodings are checked once, where they come in: every bad input is a ConfigError whose
// setting is the path of the bad option, and schema files are parsed for their format.

const dir = mkdtempSync(join(tmpdir(), 'encodings-options-'));
after(() => rmSync(dir, { recursive: true, force: true }));

const write = (name: string, text: string): string => {
  writeFileSync(join(dir, name), text);
  return name;
};
const AVRO = write('order.avsc', JSON.stringify({ type: 'record', name: 'Order', namespace: 'shop', fields: [{ name: 'id', type: 'string' }] }));
const PROTO = write('order.proto', 'syntax = "proto3";\npackage shop;\nmessage Order { string id = 1; }\nmessage Refund { string id = 1; }\n');
const JSON_SCHEMA = write('order.schema.json', JSON.stringify({ $schema: 'http://json-schema.org/draft-07/schema#', title: 'Order', type: 'object', properties: { id: { type: 'string' } } }));
const UNTITLED = write('untitled.schema.json', JSON.stringify({ type: 'object', properties: { id: { type: 'string' } } }));
const registry = { url: 'http://registry.test:8081/apis/ccompat/v7/' };

/** The ConfigError `run` throws, checked to name `setting`. */
function refused(run: () => unknown, setting: string, message?: RegExp): ConfigError {
  let caught: unknown;
  try {
    run();
  } catch (error) {
    caught = error;
  }
  assert.ok(caught instanceof ConfigError, `a ConfigError for ${setting}, got ${String(caught)}`);
  assert.equal(caught.setting, setting, caught.message);
  assert.equal(caught.retriable, false);
  if (message) assert.match(caught.message, message);
  return caught;
}

const withRule = (rule: unknown, extra: Record<string, unknown> = {}): unknown => ({ schemaRegistry: registry, rules: [rule], ...extra });

test('good encodings resolve: files read and parsed, patterns compiled, defaults filled; resolving again returns them as they are', () => {
  const resolved = resolveEncodingOptions(
    {
      schemaRegistry: registry,
      rules: [
        { topic: 'orders', value: { format: 'avro', schema: { file: AVRO } } },
        { outbox: 'shop', topic: '/shop\\..+/', value: { format: 'protobuf', schema: { file: PROTO }, messageName: 'Refund' }, key: { format: 'json' } },
        { topic: 'events', value: { format: 'json-schema', schema: { file: JSON_SCHEMA, autoRegister: false }, subjectStrategy: 'RecordName' } },
        { value: { format: 'avro', schema: { version: 'latest', subject: 'shared-value' } }, key: { format: 'avro', schema: { idHeader: 'key-schema-id' } } },
        { topic: 'pinned', value: { format: 'avro', schema: { version: 3 } } },
      ],
    },
    dir,
  );
  assert.equal(resolved.schemaRegistry?.url, 'http://registry.test:8081/apis/ccompat/v7');
  assert.equal(resolved.schemaRegistry?.timeoutMs, 10_000);
  const [avro, proto, json, shared, pinned] = resolved.rules;
  assert.equal(avro!.topic, 'orders');
  assert.equal(avro!.value!.subjectStrategy, 'TopicName');
  assert.ok(avro!.value!.schema.kind === 'file' && avro!.value!.schema.autoRegister);
  assert.ok(avro!.value!.schema.kind === 'file' && avro!.value!.schema.codec.recordName === 'shop.Order');
  assert.ok(proto!.topic instanceof RegExp);
  assert.ok(proto!.topic.test('shop.refunds'));
  assert.ok(!proto!.topic.test('x.shop.refunds'), 'a pattern matches the whole topic name');
  assert.equal(proto!.key, undefined, 'json: the key goes out as it is');
  assert.ok(proto!.value!.schema.kind === 'file');
  assert.deepEqual(proto!.value!.schema.codec.messageIndexes, [1]);
  assert.equal(proto!.value!.schema.codec.recordName, 'shop.Refund');
  assert.ok(json!.value!.schema.kind === 'file' && !json!.value!.schema.autoRegister);
  assert.deepEqual(shared!.value!.schema, { kind: 'version', version: 'latest', subject: 'shared-value' });
  assert.deepEqual(shared!.key!.schema, { kind: 'idHeader', idHeader: 'key-schema-id' });
  assert.deepEqual(pinned!.value!.schema, { kind: 'version', version: 3, subject: undefined });
  assert.equal(resolveEncodingOptions(resolved, '/elsewhere'), resolved, 'already resolved');
  // Only json rules need no registry.
  assert.equal(resolveEncodingOptions({ rules: [{ topic: 't', value: { format: 'json' } }] }, dir).schemaRegistry, undefined);
});

test('each bad rule is refused with the path of the bad option', () => {
  const value = (spec: unknown): unknown => withRule({ topic: 'orders', value: spec });
  refused(() => resolveEncodingOptions(value({ format: 'xml' }), dir), 'encodings.rules[0].value.format', /not one of json, avro, protobuf, json-schema/);
  refused(() => resolveEncodingOptions(value({ format: 'avro' }), dir), 'encodings.rules[0].value.schema', /required/);
  refused(() => resolveEncodingOptions(value({ format: 'avro', schema: {} }), dir), 'encodings.rules[0].value.schema', /names no schema/);
  refused(() => resolveEncodingOptions(value({ format: 'avro', schema: { file: AVRO, version: 1 } }), dir), 'encodings.rules[0].value.schema', /both/);
  refused(() => resolveEncodingOptions(value({ format: 'avro', schema: { file: 'missing.avsc' } }), dir), 'encodings.rules[0].value.schema.file', /cannot read .*ENOENT/);
  refused(() => resolveEncodingOptions(value({ format: 'avro', schema: { version: 0 } }), dir), 'encodings.rules[0].value.schema.version');
  refused(() => resolveEncodingOptions(value({ format: 'avro', schema: { idHeader: '' } }), dir), 'encodings.rules[0].value.schema.idHeader');
  refused(() => resolveEncodingOptions(value({ format: 'json', schema: { file: AVRO } }), dir), 'encodings.rules[0].value.schema', /does not apply to format json/);
  refused(() => resolveEncodingOptions(value({ format: 'avro', schema: { file: AVRO }, messageName: 'Order' }), dir), 'encodings.rules[0].value.messageName');
  refused(() => resolveEncodingOptions(value({ format: 'avro', schema: { file: AVRO }, subjectStrategy: 'Topic' }), dir), 'encodings.rules[0].value.subjectStrategy');
  refused(() => resolveEncodingOptions(value({ format: 'avro', schema: { file: AVRO }, extra: 1 }), dir), 'encodings.rules[0].value.extra');
  refused(() => resolveEncodingOptions(withRule({ topic: '/(/', value: { format: 'json' } }), dir), 'encodings.rules[0].topic', /not a valid regular expression/);
  refused(() => resolveEncodingOptions(withRule({ topic: 'a topic', value: { format: 'json' } }), dir), 'encodings.rules[0].topic');
  refused(() => resolveEncodingOptions(withRule({ topic: 'orders' }), dir), 'encodings.rules[0]', /neither a value nor a key/);
  refused(() => resolveEncodingOptions({ rules: [{ topic: 't', value: { format: 'json' } }, { topic: 't', key: { format: 'avro', schema: { file: AVRO } } }] }, dir), 'encodings.schemaRegistry', /rules\[1\]\.key encodes avro/);
  refused(() => resolveEncodingOptions({ schemaRegistry: registry }, dir), 'encodings.rules');
  refused(() => resolveEncodingOptions(null, dir), 'encodings');
});

test('a schema file that does not parse for its format is refused', () => {
  const cases: Array<[string, string, RegExp]> = [
    ['avro', write('bad-json.avsc', '{ "type": "record", '), /not an Avro schema/],
    ['avro', write('bad-type.avsc', JSON.stringify({ type: 'record', name: 'X', fields: [{ name: 'a', type: 'strin' }] })), /strin/],
    ['protobuf', write('bad.proto', 'syntax = "proto3";\nmessage Order { string id = ; }\n'), /not a Protobuf schema/],
    ['protobuf', write('unresolved.proto', 'syntax = "proto3";\nmessage Order { Missing m = 1; }\n'), /Missing/],
    ['protobuf', write('reference.proto', 'syntax = "proto3";\nimport "other.proto";\nmessage Order { string id = 1; }\n'), /references are not supported/],
    ['json-schema', write('bad-type.schema.json', JSON.stringify({ type: 12 })), /not a JSON Schema schema/],
    ['json-schema', write('draft4.schema.json', JSON.stringify({ $schema: 'http://json-schema.org/draft-04/schema#', type: 'object' })), /draft-04/],
  ];
  for (const [format, file, message] of cases) {
    refused(() => resolveEncodingOptions(withRule({ topic: 't', value: { format, schema: { file } } }), dir), 'encodings.rules[0].value.schema.file', message);
  }
  refused(
    () => resolveEncodingOptions(withRule({ topic: 't', value: { format: 'protobuf', schema: { file: PROTO }, messageName: 'Nope' } }), dir),
    'encodings.rules[0].value.schema.file',
    /no message Nope/,
  );
});

test('RecordName and TopicRecordName need a record name: a version source without subject, a JSON Schema without title are refused', () => {
  for (const strategy of ['RecordName', 'TopicRecordName']) {
    refused(
      () => resolveEncodingOptions(withRule({ topic: 't', value: { format: 'avro', schema: { version: 'latest' }, subjectStrategy: strategy } }), dir),
      'encodings.rules[0].value.schema.subject',
    );
  }
  refused(
    () => resolveEncodingOptions(withRule({ topic: 't', value: { format: 'json-schema', schema: { file: UNTITLED }, subjectStrategy: 'RecordName' } }), dir),
    'encodings.rules[0].value.subjectStrategy',
    /no "title"/,
  );
  // With a subject, the version source is fine whatever the strategy.
  resolveEncodingOptions(withRule({ topic: 't', value: { format: 'avro', schema: { version: 'latest', subject: 's' }, subjectStrategy: 'RecordName' } }), dir);
});

test('registry options: URL, credentials that go together, timeout, CA file', () => {
  refused(() => resolveSchemaRegistryOptions({}, 'r'), 'r.url');
  refused(() => resolveSchemaRegistryOptions({ url: 'ftp://x' }, 'r'), 'r.url', /http or https/);
  const withCredentials = refused(() => resolveSchemaRegistryOptions({ url: 'http://user:hunter2@x' }, 'r'), 'r.url', /carries credentials/);
  assert.doesNotMatch(withCredentials.message, /hunter2/);
  refused(() => resolveSchemaRegistryOptions({ url: 'http://x', username: 'u' }, 'r'), 'r.password');
  refused(() => resolveSchemaRegistryOptions({ url: 'http://x', username: 'u', password: 'p', bearerToken: 't' }, 'r'), 'r.bearerToken');
  refused(() => resolveSchemaRegistryOptions({ url: 'http://x', timeoutMs: 5 }, 'r'), 'r.timeoutMs');
  refused(() => resolveSchemaRegistryOptions({ url: 'https://x', caFile: join(dir, 'none.pem') }, 'r'), 'r.caFile', /ENOENT/);
  refused(() => resolveSchemaRegistryOptions({ url: 'http://x', caFile: join(dir, AVRO) }, 'r'), 'r.caFile', /https/);
  refused(() => resolveSchemaRegistryOptions({ url: 'http://x', user: 'u' }, 'r'), 'r.user');
  const ok = resolveSchemaRegistryOptions({ url: 'https://x/', username: 'u', password: 'p', caFile: join(dir, AVRO), timeoutMs: 2_000 });
  assert.equal(ok.url, 'https://x');
  assert.equal(ok.timeoutMs, 2_000);
  assert.ok(ok.ca?.includes('shop'), 'the CA file is read once');
  assert.equal(resolveSchemaRegistryOptions(ok), ok);
});

test('an encodings file: relative schema files from its folder, secrets only from the environment', () => {
  const file = join(dir, 'encodings.json');
  writeFileSync(file, JSON.stringify({ schemaRegistry: { ...registry, username: 'relay' }, rules: [{ topic: 'orders', value: { format: 'avro', schema: { file: AVRO } } }] }));
  const secretFile = join(dir, 'password.txt');
  writeFileSync(secretFile, 's3cret\n');
  const fromEnv = loadEncodingsFile(file, { OUTBOX_SCHEMA_REGISTRY_PASSWORD: 'pw' });
  assert.equal(fromEnv.schemaRegistry?.password, 'pw');
  assert.ok(fromEnv.rules[0]!.value!.schema.kind === 'file' && fromEnv.rules[0]!.value!.schema.file === join(dir, AVRO));
  assert.equal(loadEncodingsFile(file, { OUTBOX_SCHEMA_REGISTRY_PASSWORD_FILE: secretFile }).schemaRegistry?.password, 's3cret');
  refused(() => loadEncodingsFile(file, { OUTBOX_SCHEMA_REGISTRY_PASSWORD: 'a', OUTBOX_SCHEMA_REGISTRY_PASSWORD_FILE: secretFile }), 'OUTBOX_SCHEMA_REGISTRY_PASSWORD', /both set/);
  refused(() => loadEncodingsFile(file, {}), 'encodings.schemaRegistry.password', /required/);

  const token = join(dir, 'token.json');
  writeFileSync(token, JSON.stringify({ schemaRegistry: registry, rules: [{ topic: 'orders', value: { format: 'avro', schema: { file: AVRO } } }] }));
  assert.equal(loadEncodingsFile(token, { OUTBOX_SCHEMA_REGISTRY_TOKEN: 'tok' }).schemaRegistry?.bearerToken, 'tok');

  for (const secret of ['password', 'bearerToken']) {
    const inFile = join(dir, `${secret}-in-file.json`);
    writeFileSync(inFile, JSON.stringify({ schemaRegistry: { ...registry, username: 'relay', [secret]: 'hunter2' }, rules: [] }));
    const error = refused(() => loadEncodingsFile(inFile, {}), `encodings.schemaRegistry.${secret}`, /is a secret and is not read from/);
    assert.doesNotMatch(error.message, /hunter2/);
  }
  const notJson = join(dir, 'not.json');
  writeFileSync(notJson, '{ "rules": [ hunter2 ');
  const error = refused(() => loadEncodingsFile(notJson, {}), 'encodingsFile', /is not JSON/);
  assert.doesNotMatch(error.message, /hunter2/, 'the file text is not quoted');
  refused(() => loadEncodingsFile(join(dir, 'none.json'), {}), 'encodingsFile', /ENOENT/);
});

test("a rule naming an outbox applies to that outbox's rows only; a topic no rule matches goes out as it is, the registry untouched", async () => {
  const { createRowEncoder } = await import('../../src/encodings/rowEncoder.js');
  // Nothing listens at registry.test: any request to it would fail the encode.
  const options = resolveEncodingOptions({ schemaRegistry: registry, rules: [{ outbox: 'shop', topic: 'orders', value: { format: 'avro', schema: { file: AVRO } } }] }, dir);
  const billing = createRowEncoder(options, { outbox: 'billing' });
  await billing.start();
  assert.equal(await billing.encode({ topic: 'orders', key: 'k', value: '{"id":"1"}', headers: {} }), undefined, "another outbox's rows are not encoded");
  const shop = createRowEncoder(options, { outbox: 'shop' });
  assert.equal(await shop.encode({ topic: 'refunds', key: 'k', value: '{"id":"1"}', headers: {} }), undefined, 'a topic no rule matches');
  await Promise.all([billing.close(), shop.close()]);
});

test('the encodings packages are optional peers: one not installed is a ConfigError saying what to install; another failure of a package is not hidden', async () => {
  const { requireOptional } = await import('../../src/encodings/libraries.js');
  const error = refused(() => requireOptional('no-such-package-for-outbox-relay'), 'encodings');
  assert.match(error.message, /no-such-package-for-outbox-relay is not installed: npm install @kafkajs\/confluent-schema-registry@\^4\.1\.0 avsc@\^5\.7\.0 protobufjs@\^8\.0\.0 ajv@\^8\.17\.0 ajv-formats@\^3\.0\.1$/);
  const broken = Object.assign(new Error("Cannot find module 'long'"), { code: 'MODULE_NOT_FOUND' });
  assert.throws(() => requireOptional('protobufjs', () => { throw broken; }), (e) => e === broken, "a package's own missing dependency is its error, not a missing peer");
  assert.equal(typeof (requireOptional('avsc') as { Type: unknown }).Type, 'function');
});

test("docs/encodings.md's example encodings file loads as it is shown, with schema files of the names it gives", () => {
  const page = readFileSync(new URL('../../docs/encodings.md', import.meta.url), 'utf8');
  const example = /```json\n([\s\S]*?)```/.exec(page.slice(page.indexOf('## Settings')))?.[1];
  assert.ok(example, 'the Settings section shows an encodings file');
  const root = mkdtempSync(join(tmpdir(), 'encodings-example-'));
  try {
    mkdirSync(join(root, 'schemas'));
    writeFileSync(join(root, 'schemas/order.avsc'), JSON.stringify({ type: 'record', name: 'Order', namespace: 'shop', fields: [{ name: 'id', type: 'string' }] }));
    writeFileSync(join(root, 'schemas/payment.proto'), 'syntax = "proto3";\npackage shop;\nmessage Payment { string id = 1; }\n');
    writeFileSync(join(root, 'schemas/invoice-key.avsc'), JSON.stringify('string'));
    writeFileSync(join(root, 'encodings.json'), example);
    const options = loadEncodingsFile(join(root, 'encodings.json'), { OUTBOX_SCHEMA_REGISTRY_PASSWORD: 'from-the-environment' });
    assert.equal(options.rules.length, 4);
    assert.equal(options.schemaRegistry?.password, 'from-the-environment');
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});
