import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { createRelay } from '../src/relay/relay.js';
import { createRelayGroup } from '../src/relay/relayGroup.js';
import type { RelayOptions } from '../src/relay/options.js';
import type { EncodingOptions } from '../src/encodings/index.js';
import { createConsumer } from '../src/consumer/consumer.js';
import type { ConsumedMessage } from '../src/consumer/types.js';
import { HEADERS } from '../src/shared/kafka.js';
import { createTestSchema, uniqueName, type TestSchema } from './helpers/db.js';
import { createTopic, readTopic, testBrokers, type ReadMessage } from './helpers/kafka.js';
import { waitFor } from './helpers/wait.js';
import { TEST_PRODUCER } from './helpers/producer.js';
import { writeCommitted, sentCount } from './helpers/outbox.js';
import { readWithJava, schemaRegistryUrl, startOwnRegistry } from './helpers/registry.js';
import { readCommittedWithKafka } from './helpers/committedReader.js';

// The relay's encodings end to end on a real Apicurio registry (Confluent's API): rows
// written as JSON go out in Confluent's wire format, a Java reader with Apache Avro and
// protobuf-java fetches each schema by id and decodes them field by field, a row that does
// not fit its schema is dead-lettered alone, and the consumer runtime decodes them too.

const FIXTURES = fileURLToPath(new URL('./fixtures/encodings/', import.meta.url));

let db: TestSchema;
let registryUrl: string;
before(async () => {
  db = await createTestSchema('encodings');
  registryUrl = await schemaRegistryUrl();
});
after(async () => {
  await db.drop();
});

const relayOptions = (encodings: EncodingOptions, extra: Partial<RelayOptions> = {}): RelayOptions => ({
  producer: TEST_PRODUCER,
  databaseUrl: db.databaseUrl,
  kafkaBrokers: testBrokers(),
  schema: db.schema,
  encodings,
  ...extra,
});

const order = (n: number): Record<string, unknown> => ({
  orderId: 1_000 + n,
  customer: `customer-${n}`,
  amount: n + 0.25,
  express: n % 2 === 0,
  note: n % 3 === 0 ? null : `note ${n}`,
  items: Array.from({ length: n % 3 }, (_, i) => `sku-${n}-${i}`),
});

/**
 * What each reference reader gives for an order: Avro's GenericData renders the record as
 * the row was (unions unwrapped); protobuf-java's JsonFormat (printing fields without
 * presence too) gives every proto3 field, its default where the row had none, int64 as text.
 */
function expectedAs(format: 'AVRO' | 'PROTOBUF' | 'JSON', o: Record<string, unknown>): Record<string, unknown> {
  if (format !== 'PROTOBUF') return o;
  return { ...o, orderId: String(o.orderId), note: o.note ?? '' };
}

test('integration: Avro, Protobuf and JSON Schema rows go out in Confluent wire format, read by Apache Avro and protobuf-java by schema id; a row that does not fit is dead-lettered alone', async () => {
  const [avroTopic, protoTopic, jsonTopic, plainTopic] = await Promise.all(['enc-avro', 'enc-proto', 'enc-json', 'enc-plain'].map((p) => createTopic(2, testBrokers(), p)));
  const encodings: EncodingOptions = {
    schemaRegistry: { url: registryUrl },
    rules: [
      { topic: avroTopic!, value: { format: 'avro', schema: { file: `${FIXTURES}order.avsc` } } },
      { topic: protoTopic!, value: { format: 'protobuf', schema: { file: `${FIXTURES}order.proto` }, messageName: 'shop.events.OrderPlaced' } },
      { topic: jsonTopic!, value: { format: 'json-schema', schema: { file: `${FIXTURES}order.schema.json` } } },
    ],
  };
  const orders = [1, 2, 3, 4].map(order);
  const bad = { ...order(9), amount: 'nine' };
  const rows = [avroTopic!, protoTopic!, jsonTopic!].flatMap((topic) => [
    ...orders.slice(0, 2).map((payload, i) => ({ topic, key: `k${i}`, payload })),
    { topic, key: 'k-bad', payload: bad },
    ...orders.slice(2).map((payload, i) => ({ topic, key: `k${i}`, payload })),
  ]);
  await writeCommitted(db, [...rows, { topic: plainTopic!, key: 'p', payload: { plain: true } }]);

  const relay = createRelay(relayOptions(encodings));
  await relay.start();
  try {
    const deadLetters = await waitFor('the three bad rows dead-lettered', async () => {
      const { rows: dead } = await db.pool.query<{ topic: string; key: string; error_name: string; reason: string }>(
        `SELECT topic, key, error_name, reason FROM "${db.schema}".outbox_dead_letters ORDER BY id`,
      );
      return dead.length === 3 ? dead : undefined;
    });
    for (const d of deadLetters) {
      assert.equal(d.key, 'k-bad');
      assert.match(d.error_name, /^encoding:/);
      assert.match(d.reason, /amount/, `the reason names the field: ${d.reason}`);
    }
    await waitFor('every other row sent', async () => (await sentCount(db)) === rows.length - 3 + 1);

    // Per topic, per key in order (k0 had orders 1 and 3, k1 orders 2 and 4); one JVM reads them all.
    const formats = [[avroTopic!, 'AVRO'], [protoTopic!, 'PROTOBUF'], [jsonTopic!, 'JSON']] as const;
    const inOrder: ReadMessage[] = [];
    for (const [topic] of formats) {
      const read = await readTopic(topic, (m) => m.length >= 4);
      assert.equal(read.length, 4, `${topic}: the bad row is not on the topic`);
      for (const m of read) {
        assert.equal(m.value![0], 0, 'the magic byte');
        assert.equal(m.headers[HEADERS.contentType], undefined, 'no JSON content-type on encoded bytes');
      }
      const byKey = (k: string): typeof read => read.filter((m) => m.key === k).sort((a, b) => Number(a.offset) - Number(b.offset));
      inOrder.push(...byKey('k0'), ...byKey('k1'));
    }
    const decoded = await readWithJava(registryUrl, inOrder.map((m) => m.value!));
    const want = [orders[0]!, orders[2]!, orders[1]!, orders[3]!];
    decoded.forEach((d, i) => {
      const format = formats[Math.floor(i / 4)]![1];
      assert.equal(d.schemaType, format);
      assert.equal(d.schemaId, inOrder[i]!.value!.readInt32BE(1), 'the id the Java reader fetched is the framed one');
      assert.deepEqual(d.value, expectedAs(format, want[i % 4]!), `${format} message ${i % 4}`);
      if (format === 'PROTOBUF') assert.deepEqual(d.messageIndexes, [0], 'OrderPlaced is the first message of the file');
    });
    const [plain] = await readTopic(plainTopic!, (m) => m.length >= 1);
    assert.deepEqual(JSON.parse(plain!.value!.toString()), { plain: true }, 'a topic without a rule goes out as JSON');
    assert.equal(plain!.headers[HEADERS.contentType], 'application/json');
  } finally {
    await relay.stop();
  }

  // The consumer runtime decodes them by schema id: the handler gets the value and the id.
  const seen: Array<ConsumedMessage<Record<string, unknown>>> = [];
  const consumer = createConsumer<Record<string, unknown>>({
    kafkaBrokers: testBrokers(),
    groupId: uniqueName('enc-consumer'),
    topics: [avroTopic!, protoTopic!, jsonTopic!],
    databaseUrl: db.databaseUrl,
    schema: db.schema,
    schemaRegistry: { url: registryUrl },
    handler: async (message) => void seen.push(message),
  });
  await consumer.start();
  try {
    await waitFor('12 messages handled', () => seen.length >= 12);
  } finally {
    await consumer.stop();
  }
  for (const m of seen) {
    assert.equal(typeof m.schemaId, 'number');
    assert.equal(m.schemaId, m.rawValue!.readInt32BE(1));
    const n = Number(m.value.orderId) - 1_000;
    assert.deepEqual({ ...m.value, orderId: Number(m.value.orderId) }, m.topic === protoTopic ? { ...order(n), note: order(n).note ?? '' } : order(n));
  }
});

test('integration: the registry killed mid-stream: cached schemas go on, rows needing it wait (nothing dead-lettered), and go out in order once it is back', async () => {
  const registry = await startOwnRegistry();
  const relay = createRelay(relayOptions({
    schemaRegistry: { url: registry.url, timeoutMs: 2_000 },
    // A pattern: each topic's schema is registered at its first row, so a new topic needs the registry.
    rules: [{ topic: '/encoutage_.*/', value: { format: 'avro', schema: { file: `${FIXTURES}order.avsc` } } }],
  }, { retryMaxDelayMs: 500 }));
  try {
    const [cached, fresh] = await Promise.all([createTopic(2, testBrokers(), 'encoutage'), createTopic(2, testBrokers(), 'encoutage')]);
    await relay.start();
    const rowsOf = (topic: string, from: number) => Array.from({ length: 12 }, (_, i) => ({ topic, key: `k${i % 3}`, payload: order(from + i) }));
    await writeCommitted(db, rowsOf(cached!, 0));
    await waitFor('the first rows sent', async () => (await sentCount(db, cached!)) === 12);

    registry.kill();
    // kill() returns before the JVM is gone: the rows below are written once it answers no more.
    await waitFor('the registry down', () => fetch(`${registry.url}/subjects`).then(() => false, () => true));
    await writeCommitted(db, [...rowsOf(cached!, 12), ...rowsOf(fresh!, 100)]);
    await waitFor("the cached topic's rows sent with the registry down", async () => (await sentCount(db, cached!)) === 24);
    // The relay tried the new topic's rows and left them waiting, for the registry.
    await waitFor('attempts on the new topic recorded', async () => {
      const { rows } = await db.pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM "${db.schema}".outbox WHERE topic = $1 AND sent_at IS NULL AND attempts > 0 AND last_error LIKE '%schema registry%'`,
        [fresh!],
      );
      return rows[0]!.n === 12;
    });
    assert.equal(await sentCount(db, fresh!), 0);

    await registry.start();
    await waitFor("the new topic's rows sent once the registry is back", async () => (await sentCount(db, fresh!)) === 12);
    const { rows: dead } = await db.pool.query(`SELECT id FROM "${db.schema}".outbox_dead_letters WHERE topic = ANY($1)`, [[cached!, fresh!]]);
    assert.deepEqual(dead, [], 'nothing dead-lettered for the outage');

    const read = await readTopic(fresh!, (m) => m.length >= 12);
    assert.equal(read.length, 12);
    for (const key of ['k0', 'k1', 'k2']) {
      const ofKey = read.filter((m) => m.key === key).sort((a, b) => Number(a.offset) - Number(b.offset));
      const ids = ofKey.map((m) => Number(m.headers[HEADERS.outboxId]));
      assert.deepEqual(ids, [...ids].sort((a, b) => a - b), `key ${key} in outbox order`);
    }
    // Every id framed in the messages is one the restarted registry still serves.
    const decoded = await readWithJava(registry.url, read.map((m) => m.value!));
    assert.deepEqual(decoded.map((d) => Number((d.value as { orderId: number }).orderId)).sort((a, b) => a - b), Array.from({ length: 12 }, (_, i) => 1_100 + i));
  } finally {
    await relay.stop();
    await registry.stop();
  }
});

test('integration: a schema the registry refuses as incompatible fails the relay start, naming the subject', async () => {
  const topic = await createTopic(1, testBrokers(), 'enc-incompatible');
  const subject = `${topic}-value`;
  const v1 = { type: 'record', name: 'Thing', fields: [{ name: 'id', type: 'long' }, { name: 'name', type: 'string' }] };
  await fetch(`${registryUrl}/subjects/${subject}/versions`, { method: 'POST', headers: { 'content-type': 'application/vnd.schemaregistry.v1+json' }, body: JSON.stringify({ schema: JSON.stringify(v1) }) });
  const config = await fetch(`${registryUrl}/config/${subject}`, { method: 'PUT', headers: { 'content-type': 'application/vnd.schemaregistry.v1+json' }, body: JSON.stringify({ compatibility: 'BACKWARD' }) });
  assert.equal(config.status, 200);
  // A new required field without a default: readers of the new schema cannot read old records.
  const { writeFileSync, mkdtempSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const dir = mkdtempSync(`${tmpdir()}/enc-`);
  writeFileSync(`${dir}/v2.avsc`, JSON.stringify({ ...v1, fields: [...v1.fields, { name: 'price', type: 'double' }] }));
  const relay = createRelay(relayOptions({ schemaRegistry: { url: registryUrl }, rules: [{ topic, value: { format: 'avro', schema: { file: `${dir}/v2.avsc` } } }] }));
  await assert.rejects(relay.start(), (error: Error) => {
    assert.equal(error.name, 'IncompatibleSchemaError');
    assert.match(error.message, new RegExp(subject));
    return true;
  });
  await relay.stop();

  // Under a topic pattern the subject is known at the topic's first row: its rows are
  // dead-lettered with the refusal, and the relay goes on with the others.
  const other = await createTopic(1, testBrokers(), 'enc-compatible');
  await writeCommitted(db, [{ topic, key: 'k', payload: { id: 1, name: 'x', price: 1.5 } }, { topic: other, key: 'k', payload: { ok: true } }]);
  const patterned = createRelay(relayOptions({ schemaRegistry: { url: registryUrl }, rules: [{ topic: `/${topic}/`, value: { format: 'avro', schema: { file: `${dir}/v2.avsc` } } }] }));
  await patterned.start();
  try {
    const [dead] = await waitFor('the row dead-lettered with the refusal', async () => {
      const { rows } = await db.pool.query<{ error_name: string; reason: string }>(`SELECT error_name, reason FROM "${db.schema}".outbox_dead_letters WHERE topic = $1`, [topic]);
      return rows.length === 1 ? rows : undefined;
    });
    assert.equal(dead!.error_name, 'encoding:IncompatibleSchemaError');
    assert.match(dead!.reason, new RegExp(subject));
    await waitFor('the other topic\'s row sent', async () => (await sentCount(db, other)) === 1);
  } finally {
    await patterned.stop();
  }
});

test('integration: the consumer retries a value whose schema id the registry does not know, then dead-letters it as undecodable, naming the id', async () => {
  const topic = await createTopic(1, testBrokers(), 'enc-unknown');
  const { produce } = await import('./helpers/consumer.js');
  const unknownId = 2_000_000_000;
  const value = Buffer.concat([Buffer.from([0]), Buffer.alloc(4), Buffer.from([2, 4])]);
  value.writeInt32BE(unknownId, 1);
  await produce(topic, [{ key: 'k', raw: value }]);
  const deadLettered: Array<{ reason: string; attempts: number; error: unknown }> = [];
  const consumer = createConsumer({
    kafkaBrokers: testBrokers(),
    groupId: uniqueName('enc-unknown'),
    topics: [topic],
    databaseUrl: db.databaseUrl,
    schema: db.schema,
    schemaRegistry: { url: registryUrl },
    maxAttempts: 3,
    retryBaseDelayMs: 10,
    retryMaxDelayMs: 20,
    handler: async () => assert.fail('an unknown schema id never reaches the handler'),
  });
  let retries = 0;
  consumer.on('retry', () => void retries++);
  consumer.on('deadLettered', (e) => void deadLettered.push({ reason: e.reason, attempts: e.attempts, error: e.error }));
  await consumer.start();
  try {
    await waitFor('the message dead-lettered', () => deadLettered.length === 1);
  } finally {
    await consumer.stop();
  }
  assert.equal(retries, 2, 'retried up to maxAttempts');
  assert.equal(deadLettered[0]!.reason, 'undecodable');
  assert.equal(deadLettered[0]!.attempts, 3);
  assert.match(String((deadLettered[0]!.error as Error).message), new RegExp(String(unknownId)));
});

test('integration: a registry down at start: the relay starts, rows needing it wait on the row (nothing dead-lettered); the consumer backs off a framed value without dead-lettering it', async () => {
  const topic = await createTopic(1, testBrokers(), 'enc-down');
  // Nothing listens on port 1: connection refused at once.
  const down = { url: 'http://127.0.0.1:1/apis/ccompat/v7', timeoutMs: 1_000 };
  const relay = createRelay(relayOptions({ schemaRegistry: down, rules: [{ topic, value: { format: 'avro', schema: { file: `${FIXTURES}order.avsc` } } }] }, { retryMaxDelayMs: 200 }));
  await relay.start();
  try {
    await writeCommitted(db, [{ topic, key: 'k', payload: order(1) }]);
    await waitFor('the row tried and left waiting for the registry', async () => {
      const { rows } = await db.pool.query<{ attempts: number; last_error: string | null }>(`SELECT attempts, last_error FROM "${db.schema}".outbox WHERE topic = $1`, [topic]);
      return rows[0]!.attempts >= 2 && /schema registry/.test(rows[0]!.last_error ?? '');
    });
    assert.equal(await sentCount(db, topic), 0);
    const { rows: dead } = await db.pool.query(`SELECT id FROM "${db.schema}".outbox_dead_letters WHERE topic = $1`, [topic]);
    assert.deepEqual(dead, []);
  } finally {
    await relay.stop();
  }

  const { produce } = await import('./helpers/consumer.js');
  const framed = Buffer.from([0, 0, 0, 0, 7, 2]);
  await produce(topic, [{ key: 'k', raw: framed }]);
  const errors: Array<{ during: string }> = [];
  let deadLettered = 0;
  const consumer = createConsumer({
    kafkaBrokers: testBrokers(),
    groupId: uniqueName('enc-down'),
    topics: [topic],
    databaseUrl: db.databaseUrl,
    schema: db.schema,
    schemaRegistry: down,
    maxAttempts: 1,
    retryBaseDelayMs: 10,
    retryMaxDelayMs: 50,
    handler: async () => assert.fail('nothing is decoded while the registry is down'),
  });
  consumer.on('error', (e) => void errors.push({ during: e.during }));
  consumer.on('deadLettered', () => void deadLettered++);
  await consumer.start();
  try {
    await waitFor('the partition backed off twice for the registry', () => errors.filter((e) => e.during === 'schema registry').length >= 2);
  } finally {
    await consumer.stop();
  }
  assert.equal(deadLettered, 0, 'not dead-lettered even with maxAttempts 1');
});

test('integration: a key encoding: the key goes out in Avro, read back by Apache Avro; the partition is still the entity key text\'s', async () => {
  const topic = await createTopic(4, testBrokers(), 'enc-key');
  const { partitionOf } = await import('../src/relay/partitioner.js');
  const { mkdtempSync, writeFileSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const keys = ['alpha', 'beta', 'gamma', 'delta', 'epsilon', 'zeta', 'eta', 'theta'];
  await writeCommitted(db, keys.map((key, i) => ({ topic, key, payload: order(i) })));
  const dir = mkdtempSync(`${tmpdir()}/enc-key-`);
  // Apicurio refuses a bare "string" as a JSON Schema, not as Avro: a string key schema.
  writeFileSync(`${dir}/key.avsc`, JSON.stringify('string'));
  const relay = createRelay(relayOptions({
    schemaRegistry: { url: registryUrl },
    rules: [{ topic, key: { format: 'avro', schema: { file: `${dir}/key.avsc` } }, value: { format: 'avro', schema: { file: `${FIXTURES}order.avsc` } } }],
  }));
  await relay.start();
  try {
    const read = await readTopic(topic, (m) => m.length >= keys.length);
    assert.equal(read.length, keys.length);
    const decodedKeys = await readWithJava(registryUrl, read.map((m) => m.keyBytes!));
    const partitions = new Set<number>();
    read.forEach((m, i) => {
      assert.equal(m.keyBytes![0], 0, 'the key is framed');
      const keyText = decodedKeys[i]!.value as string;
      assert.ok(keys.includes(keyText), `the Java reader decodes the key ${keyText}`);
      assert.equal(m.partition, partitionOf(keyText, 4), `${keyText}: the partition of its text, not of its encoded bytes`);
      partitions.add(m.partition);
    });
    assert.ok(partitions.size > 1, 'the keys spread over partitions');
  } finally {
    await relay.stop();
  }
});

test('integration: exactly-once delivery encodes too: each Avro row reaches a read_committed reader once, read by Apache Avro; a row that does not fit is dead-lettered alone', async () => {
  const topic = await createTopic(2, testBrokers(), 'enc-eos');
  const rows = Array.from({ length: 20 }, (_, i) => ({ topic, key: `k${i % 4}`, payload: order(i) }));
  const ids = await writeCommitted(db, [...rows.slice(0, 10), { topic, key: 'k-bad', payload: { ...order(99), amount: 'ninety-nine' } }, ...rows.slice(10)]);
  const badId = ids[10]!;
  const relay = createRelay(relayOptions(
    { schemaRegistry: { url: registryUrl }, rules: [{ topic, value: { format: 'avro', schema: { file: `${FIXTURES}order.avsc` } } }] },
    { delivery: 'exactly-once', transactionalIdPrefix: uniqueName('enc-eos'), batchSize: 8 },
  ));
  await relay.start();
  try {
    await waitFor('every good row sent', async () => (await sentCount(db, topic)) === 20);
    const { rows: dead } = await db.pool.query<{ id: string; error_name: string }>(`SELECT id, error_name FROM "${db.schema}".outbox_dead_letters WHERE topic = $1`, [topic]);
    assert.deepEqual(dead.map((d) => [Number(d.id), d.error_name]), [[badId, 'encoding:avro']]);
  } finally {
    await relay.stop();
  }
  const committed = await readCommittedWithKafka(topic);
  assert.deepEqual(committed.map((r) => r.outboxId!).sort((a, b) => a - b), ids.filter((id) => id !== badId), 'each good row once, the bad one never');
  const read = await readTopic(topic, (m) => m.length >= 20);
  const byId = new Map(read.map((m) => [Number(m.headers[HEADERS.outboxId]), m]));
  const inIdOrder = ids.filter((id) => id !== badId).map((id) => byId.get(id)!.value!);
  const decoded = await readWithJava(registryUrl, inIdOrder);
  assert.deepEqual(decoded.map((d) => d.value), rows.map((r) => r.payload));
});

test("integration: in a list of outboxes a rule's `outbox` is the outbox's name: one outbox's rows go out in Avro, another's on the same topic as JSON", async () => {
  const topic = await createTopic(2, testBrokers(), 'enc-group');
  const billing = await createTestSchema('encbilling');
  try {
    await writeCommitted(db, [{ topic, key: 'o1', payload: order(1) }]);
    await writeCommitted(billing, [{ topic, key: 'b1', payload: order(2) }]);
    const group = createRelayGroup({
      outboxes: [{ name: 'orders', databaseUrl: db.databaseUrl, schema: db.schema }, { name: 'billing', databaseUrl: billing.databaseUrl, schema: billing.schema }],
      kafkaBrokers: testBrokers(),
      producer: TEST_PRODUCER,
      encodings: { schemaRegistry: { url: registryUrl }, rules: [{ outbox: 'billing', topic, value: { format: 'avro', schema: { file: `${FIXTURES}order.avsc` } } }] },
    });
    await group.start();
    try {
      await waitFor('both rows sent', async () => (await sentCount(db, topic)) === 1 && (await sentCount(billing, topic)) === 1);
    } finally {
      await group.stop();
    }
    const read = await readTopic(topic, (m) => m.length >= 2);
    const [ordersRow, billingRow] = [read.find((m) => m.key === 'o1')!, read.find((m) => m.key === 'b1')!];
    assert.deepEqual(JSON.parse(ordersRow.value!.toString()), order(1), "orders' row as JSON");
    const [decoded] = await readWithJava(registryUrl, [billingRow.value!]);
    assert.deepEqual(decoded!.value, order(2), "billing's row in Avro");
  } finally {
    await billing.drop();
  }
});

test('integration: Avro decimals from numbers or decimal strings and bytes from base64, read back by Apache Avro; a decimal with more digits than its scale is dead-lettered alone', async () => {
  const topic = await createTopic(1, testBrokers(), 'enc-decimal');
  const rows = [
    { amount: '1234567890.12', fee: -1.5, signature: 'AQID/w==', cardHash: 'AAECAwQFBgc=' },
    { amount: -0.01, signature: '', cardHash: '//////////8=' },
  ];
  await writeCommitted(db, [
    { topic, key: 'p', payload: rows[0]! },
    { topic, key: 'p-bad', payload: { ...rows[1]!, amount: 12.345 } },
    { topic, key: 'p', payload: rows[1]! },
  ]);
  const relay = createRelay(relayOptions({ schemaRegistry: { url: registryUrl }, rules: [{ topic, value: { format: 'avro', schema: { file: `${FIXTURES}payment.avsc` } } }] }));
  await relay.start();
  try {
    await waitFor('two rows sent', async () => (await sentCount(db, topic)) === 2);
  } finally {
    await relay.stop();
  }
  const { rows: dead } = await db.pool.query<{ reason: string }>(`SELECT reason FROM "${db.schema}".outbox_dead_letters WHERE topic = $1`, [topic]);
  assert.equal(dead.length, 1);
  assert.match(dead[0]!.reason, /field amount: expected decimal \(precision 12, scale 2/);
  const read = await readTopic(topic, (m) => m.length >= 2);
  const decoded = await readWithJava(registryUrl, read.map((m) => m.value!));
  // Apache Avro's rendering: decimals as BigDecimal (JSON numbers), bytes as ISO-8859-1
  // text, fixed as its signed bytes.
  const latin1 = (base64: string) => Buffer.from(base64, 'base64').toString('latin1');
  const signed = (base64: string) => [...Buffer.from(base64, 'base64')].map((b) => (b > 127 ? b - 256 : b));
  assert.deepEqual(decoded.map((d) => d.value), rows.map((r) => ({ amount: Number(r.amount), fee: r.fee ?? null, signature: latin1(r.signature), cardHash: signed(r.cardHash) })));
});
