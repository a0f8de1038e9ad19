import { test } from 'node:test';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import assert from 'node:assert/strict';
import { AuthenticationError, MultipleErrors, NetworkError, ProtocolError, ResponseError, UserError } from '@platformatic/kafka';
import { Kafka } from 'kafkajs';
import { ConfigError } from '../../src/shared/errors.js';
import {
  assertPlatformaticInstalled,
  isPlatformaticUnknownTopic,
  PLATFORMATIC_PACKAGE,
  PlatformaticProducer,
  platformaticClientOptions,
  retryDelayMs,
  toPlatformatic,
  timestampRuns,
  MAX_TIMESTAMP_DELTA_MS,
} from '../../src/relay/platformaticProducer.js';
import { classifyPublishError, kafkaErrorType } from '../../src/relay/publishErrors.js';
import { createMessageProducer } from '../../src/relay/producer.js';
import { producer, resolveRelayOptions, RELAY_SETTINGS } from '../../src/relay/options.js';
import { readSetting } from '../../src/shared/settings.js';
import type { RelayMessage } from '../../src/relay/message.js';
import { testProducerFrom } from '../helpers/producer.js';

const base = { kafkaBrokers: ['127.0.0.1:1'], clientId: 'relay-x', compression: 'none' as const, kafkaSecurity: {} };

function message(extra: Partial<RelayMessage> = {}): RelayMessage {
  return { id: 1, message_id: 'm1', topic: 't', key: 'k', value: '{"a":1}', headers: { 'message-id': 'm1' }, timestampMs: 1_700_000_000_123, ...extra };
}

test('the producer setting: platformatic by default, kafkajs by flag or environment, or when a kafkajs client is passed in; anything else refused naming the setting', () => {
  assert.ok((RELAY_SETTINGS as readonly unknown[]).includes(producer));
  assert.equal(producer.flag, '--producer');
  assert.equal(producer.env, 'OUTBOX_PRODUCER');
  assert.equal(readSetting(producer, undefined, {}), 'platformatic');
  assert.equal(readSetting(producer, undefined, { OUTBOX_PRODUCER: 'KafkaJS' }), 'kafkajs');
  assert.equal(resolveRelayOptions({ databaseUrl: 'postgres://h/d', kafkaBrokers: ['b:1'] }).producer, 'platformatic');
  assert.equal(resolveRelayOptions({ databaseUrl: 'postgres://h/d', kafkaBrokers: ['b:1'], producer: 'kafkajs' }).producer, 'kafkajs');
  // The client a library caller passed publishes, unless producer says otherwise.
  const kafka = new Kafka({ brokers: ['b:1'] });
  assert.equal(resolveRelayOptions({ databaseUrl: 'postgres://h/d', kafkaBrokers: ['b:1'], kafka }).producer, 'kafkajs');
  assert.equal(resolveRelayOptions({ databaseUrl: 'postgres://h/d', kafkaBrokers: ['b:1'], kafka, producer: 'platformatic' }).producer, 'platformatic');
  assert.throws(
    () => resolveRelayOptions({ databaseUrl: 'postgres://h/d', kafkaBrokers: ['b:1'], producer: 'rdkafka' as never }),
    (e: unknown) => e instanceof ConfigError && e.setting === 'producer' && /kafkajs, platformatic/.test(e.message),
  );
});

test('a missing @platformatic/kafka is a ConfigError naming the setting and the package, at configuration and at first use', async () => {
  assert.doesNotThrow(() => assertPlatformaticInstalled(), 'installed here (a dependency)');
  const notThere = (): string => {
    throw Object.assign(new Error(`Cannot find module '${PLATFORMATIC_PACKAGE}'`), { code: 'MODULE_NOT_FOUND' });
  };
  assert.throws(
    () => assertPlatformaticInstalled(notThere),
    (e: unknown) => e instanceof ConfigError && e.setting === 'producer' && e.message.includes(PLATFORMATIC_PACKAGE) && e.message.includes('kafkajs'),
  );
  // If loading fails anyway, every message is refused with that error; send does not reject.
  const adapter = new PlatformaticProducer(base, () => {
    throw Object.assign(new Error(`Cannot find module '${PLATFORMATIC_PACKAGE}'`), { code: 'MODULE_NOT_FOUND' });
  });
  const results = await adapter.send([message(), message({ key: 'other' })]);
  assert.equal(results.length, 2);
  for (const r of results) {
    assert.equal(r.acknowledged, false);
    assert.ok(!r.acknowledged && r.error instanceof ConfigError && r.error.message.includes(PLATFORMATIC_PACKAGE));
  }
  await adapter.disconnect();
});

test('createMessageProducer picks the adapter by the producer setting and exposes its name', async () => {
  const kafka = new Kafka({ brokers: ['127.0.0.1:1'] });
  const kafkajs = createMessageProducer(kafka, { compression: 'none' });
  assert.equal(kafkajs.adapter, 'kafkajs');
  const platformatic = createMessageProducer(kafka, { ...base, producer: 'platformatic' });
  assert.equal(platformatic.adapter, 'platformatic');
  assert.ok(platformatic instanceof PlatformaticProducer);
  await Promise.all([kafkajs.disconnect(), platformatic.disconnect()]);
});

test('client options: acks=all, not idempotent, no auto-creation on send, compression and client id, TLS and SASL mapped', () => {
  const plain = platformaticClientOptions({ ...base, compression: 'gzip' });
  assert.equal(plain.acks, -1);
  assert.equal(plain.idempotent, false);
  assert.equal(plain.autocreateTopics, false);
  assert.equal(plain.compression, 'gzip');
  assert.equal(plain.clientId, 'relay-x');
  assert.deepEqual(plain.bootstrapBrokers, ['127.0.0.1:1']);
  assert.equal(plain.tls, undefined);
  assert.equal(plain.sasl, undefined);

  const tlsOn = platformaticClientOptions({ ...base, kafkaSecurity: { ssl: true } });
  assert.deepEqual(tlsOn.tls, {});
  assert.equal(tlsOn.tlsServerName, true, 'SNI is the broker host, as kafkajs sends it');
  const ca = platformaticClientOptions({ ...base, kafkaSecurity: { ssl: { ca: ['PEM'] } } });
  assert.deepEqual(ca.tls, { ca: ['PEM'] });

  for (const [ours, theirs] of [
    ['plain', 'PLAIN'],
    ['scram-sha-256', 'SCRAM-SHA-256'],
    ['scram-sha-512', 'SCRAM-SHA-512'],
  ] as const) {
    const o = platformaticClientOptions({ ...base, kafkaSecurity: { sasl: { mechanism: ours, username: 'u', password: 'p' } as never } });
    assert.deepEqual(o.sasl, { mechanism: theirs, username: 'u', password: 'p' });
  }
});

test('messages become bytes: UTF-8 key, value and headers (not characters), a tombstone stays null, the timestamp in ms as a bigint', () => {
  const m = toPlatformatic(message({ key: 'clé', value: 'é€', headers: { 'h-ü': 'v€' } }), 3);
  assert.equal(m.partition, 3);
  assert.equal(m.topic, 't');
  assert.deepEqual(m.key, Buffer.from('clé'));
  assert.equal(m.value!.length, Buffer.byteLength('é€'));
  assert.deepEqual([...(m.headers as Map<Buffer, Buffer>).entries()].map(([k, v]) => [String(k), String(v)]), [['h-ü', 'v€']]);
  assert.equal(m.timestamp, 1_700_000_000_123n);
  assert.equal(toPlatformatic(message({ value: null }), 0).value, null);
  const bytes = Buffer.from([0, 255, 1]);
  assert.equal(toPlatformatic(message({ value: bytes }), 0).value, bytes);
});

test("platformatic's errors classify as kafkajs' do: Kafka's name through its wrappers; record and topic errors permanent, the rest transient", () => {
  const tooLarge = new ProtocolError('MESSAGE_TOO_LARGE');
  assert.equal(kafkaErrorType(tooLarge), 'MESSAGE_TOO_LARGE');
  const response = new ResponseError(0, 11, { '/responses/0/partition_responses/0': [10, null] }, {});
  const wrapped = new MultipleErrors('Producing messages failed.', [response]);
  assert.deepEqual([classifyPublishError(wrapped).class, classifyPublishError(wrapped).name], ['permanent', 'MESSAGE_TOO_LARGE']);
  for (const permanent of ['TOPIC_AUTHORIZATION_FAILED', 'INVALID_TOPIC_EXCEPTION', 'RECORD_LIST_TOO_LARGE', 'INVALID_RECORD', 'CORRUPT_MESSAGE']) {
    assert.equal(classifyPublishError(new MultipleErrors('produce failed 4 times.', [new ProtocolError(permanent)])).class, 'permanent', permanent);
  }
  for (const transient of ['NOT_LEADER_OR_FOLLOWER', 'LEADER_NOT_AVAILABLE', 'NOT_ENOUGH_REPLICAS', 'REQUEST_TIMED_OUT', 'UNKNOWN_TOPIC_OR_PARTITION']) {
    const c = classifyPublishError(new MultipleErrors('produce failed 4 times.', [new ProtocolError(transient)]));
    assert.deepEqual([c.class, c.name], ['transient', transient]);
  }
  const network = classifyPublishError(new MultipleErrors('metadata failed 4 times.', [new NetworkError('Connection to 127.0.0.1:1 failed.')]));
  assert.deepEqual([network.class, network.name], ['transient', 'PLT_KFK_NETWORK']);
  // Authentication is the relay's configuration, not a row's fault: transient, as with kafkajs.
  const auth = new AuthenticationError('SASL authentication failed.', { cause: new ResponseError(36, 2, { '': [58, 'bad'] }, {}) });
  assert.equal(classifyPublishError(auth).class, 'transient');
  assert.equal(classifyPublishError(new UserError('Unknown topic t.')).class, 'transient');
});

test("platformatic's unknown-topic answer is recognised; retries back off like kafkajs', metadata ones sooner", () => {
  assert.ok(isPlatformaticUnknownTopic(new UserError('Unknown topic orders.')));
  assert.ok(!isPlatformaticUnknownTopic(new UserError('Failed to serialize a message.')));
  assert.ok(!isPlatformaticUnknownTopic(new Error('Unknown topic orders.')));
  assert.deepEqual([1, 2, 3, 4, 5].map((a) => retryDelayMs(undefined, 'produce', a)), [200, 400, 800, 1_600, 2_000]);
  assert.deepEqual([1, 2, 3].map((a) => retryDelayMs(undefined, 'metadata', a)), [100, 200, 400]);
});

test('OUTBOX_TEST_PRODUCER: the product default (platformatic) when unset, either adapter by name, anything else throws', () => {
  assert.equal(testProducerFrom(undefined), 'platformatic');
  assert.equal(testProducerFrom(''), 'platformatic');
  assert.equal(testProducerFrom('kafkajs'), 'kafkajs');
  assert.equal(testProducerFrom('platformatic'), 'platformatic');
  assert.throws(() => testProducerFrom('rdkafka'), /OUTBOX_TEST_PRODUCER="rdkafka" is not one of kafkajs, platformatic/);
});

test('timestampRuns: a partition goes as one request unless a timestamp is more than 2^31 - 1 ms from its request\'s first, which the client would encode wrong', () => {
  const day = 86_400_000n;
  assert.deepEqual(timestampRuns([]), []);
  assert.deepEqual(timestampRuns([5n, 1n, 9n]), [[0, 1, 2]]);
  const t = 1_796_000_000_000n;
  assert.deepEqual(timestampRuns([t, t - MAX_TIMESTAMP_DELTA_MS, t + MAX_TIMESTAMP_DELTA_MS]), [[0, 1, 2]], 'the bound itself is encoded right');
  assert.deepEqual(timestampRuns([t, 0n, 1n, t, t + 1n]), [[0], [1, 2], [3, 4]], 'a 1970 row between two of now');
  assert.deepEqual(timestampRuns([t, t + 30n * day, t + 31n * day]), [[0], [1, 2]]);
  assert.deepEqual(timestampRuns([t, t - MAX_TIMESTAMP_DELTA_MS - 1n]), [[0], [1]]);
});

test('the reason for timestampRuns: @platformatic/kafka\'s record encoding still gets a timestamp delta beyond ±2^31 - 1 ms wrong (when this fails, the client was fixed and the runs can go)', async () => {
  const dist = dirname(createRequire(import.meta.url).resolve('@platformatic/kafka'));
  const { Writer } = (await import(pathToFileURL(join(dist, 'protocol', 'writer.js')).href)) as { Writer: { create(): { appendVarInt64(v: bigint): unknown } } };
  const { Reader } = (await import(pathToFileURL(join(dist, 'protocol', 'reader.js')).href)) as { Reader: { from(w: unknown): { readVarInt64(): bigint } } };
  const roundTrip = (delta: bigint): bigint => Reader.from(Writer.create().appendVarInt64(delta)).readVarInt64();
  assert.equal(roundTrip(MAX_TIMESTAMP_DELTA_MS), MAX_TIMESTAMP_DELTA_MS, 'the bound itself is right');
  assert.equal(roundTrip(-MAX_TIMESTAMP_DELTA_MS), -MAX_TIMESTAMP_DELTA_MS, 'the bound itself is right');
  assert.notEqual(roundTrip(MAX_TIMESTAMP_DELTA_MS + 6n), MAX_TIMESTAMP_DELTA_MS + 6n, 'beyond it, wrong');
  assert.notEqual(roundTrip(-1_796_000_000_000n), -1_796_000_000_000n, 'a 1970 row behind one of now, wrong');
});

test('toPlatformatic: a message without a timestamp (created_at no Kafka timestamp can hold) is stamped with the send time', () => {
  const before = BigInt(Date.now());
  const { timestampMs: _omitted, ...rest } = message();
  const m = toPlatformatic(rest, 0);
  assert.ok(m.timestamp! >= before && m.timestamp! <= BigInt(Date.now()));
  assert.equal(toPlatformatic(message(), 0).timestamp, 1_700_000_000_123n);
});
