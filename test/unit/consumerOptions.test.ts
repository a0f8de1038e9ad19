import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Kafka } from 'kafkajs';
import pg from 'pg';
import { createConsumer } from '../../src/consumer/consumer.js';
import { resolveConsumerOptions, type ConsumerOptions } from '../../src/consumer/options.js';
import { classifyError } from '../../src/consumer/classifyError.js';
import { DecodeError, decodeValue } from '../../src/consumer/decode.js';
import { deadLetterMessage } from '../../src/consumer/deadLetterTopic.js';
import { ConfigError, OutboxError } from '../../src/shared/errors.js';

const kafka = new Kafka({ brokers: ['127.0.0.1:1'] });
const pool = new pg.Pool();
const base: ConsumerOptions = { kafka, pool, groupId: 'g', topics: 't', handler: async () => undefined };

function rejects(options: Partial<ConsumerOptions> & Record<string, unknown>, setting: string): void {
  assert.throws(
    () => createConsumer({ ...base, ...options } as ConsumerOptions),
    (e: unknown) => e instanceof ConfigError && e.setting === setting,
    setting,
  );
}

test('createConsumer validates its options up front, naming the bad one', () => {
  rejects({ kafka: undefined }, 'kafka');
  rejects({ pool: undefined }, 'pool');
  rejects({ groupId: '' }, 'groupId');
  rejects({ topics: [] }, 'topics');
  rejects({ handler: 'nope' as never }, 'handler');
  rejects({ decode: 'xml' as never }, 'decode');
  rejects({ onMissingKey: 'skip' as never }, 'onMissingKey');
  rejects({ maxAttempts: 0 }, 'maxAttempts');
  rejects({ messagesPerTransaction: 1001 }, 'messagesPerTransaction');
  rejects({ savepoints: 'sometimes' as never }, 'savepoints');
  rejects({ batchesInFlight: 1.5 }, 'batchesInFlight');
  rejects({ shutdownTimeoutMs: -1 }, 'shutdownTimeoutMs');
  rejects({ topics: ['orders', '..'] }, 'topics');
  rejects({ topics: 'a b' }, 'topics');
  rejects({ deadLetterTopic: '.' }, 'deadLetterTopic');
  rejects({ retryBaseDelayMs: 5_000, retryMaxDelayMs: 1_000 }, 'retryBaseDelayMs');
  rejects({ heartbeatIntervalMs: 30_000 }, 'heartbeatIntervalMs');
  rejects({ deadLetterTopic: 't' }, 'deadLetterTopic');
  rejects({ schema: 'bad-schema' }, 'schema');
  rejects({ kafkaBrokers: ['nohost'] }, 'kafkaBrokers');
  // A deadLetterTopic function is held to the rules of a name given as a string, on what it returns.
  for (const returned of ['t', 'bad name', '', undefined]) {
    const resolved = resolveConsumerOptions({ ...base, deadLetterTopic: () => returned as string });
    assert.throws(() => resolved.deadLetterTopic('t'), (e: unknown) => e instanceof ConfigError && e.setting === 'deadLetterTopic', `returned ${String(returned)}`);
  }
  assert.equal(resolveConsumerOptions({ ...base, deadLetterTopic: (t) => `${t}.dlq` }).deadLetterTopic('t'), 't.dlq');
  rejects({ afterCommitTimeoutMs: 0 }, 'afterCommitTimeoutMs');
  rejects({ afterCommitTimeoutMs: 600_001 }, 'afterCommitTimeoutMs');
  rejects({ handlerTimeoutMs: 0 }, 'handlerTimeoutMs');
  rejects({ handlerTimeoutMs: 3_600_001 }, 'handlerTimeoutMs');
  rejects({ handlerTimeoutMs: 1.5 }, 'handlerTimeoutMs');
  rejects({ handlerTimeoutMS: 1_000 }, 'handlerTimeoutMS');
  rejects({ missingTopicTimeoutMs: -1 }, 'missingTopicTimeoutMs');
  rejects({ missingTopicTimeoutMs: 3_600_001 }, 'missingTopicTimeoutMs');
  // A typo is refused, not ignored (the default would stay in force without a word).
  rejects({ shutdownTimeoutMS: 1_000 }, 'shutdownTimeoutMS');
  rejects({ messagesPerTransation: 10 }, 'messagesPerTransation');
  assert.throws(() => createConsumer({ ...base, messagesPerTransation: 10 } as ConsumerOptions), /did you mean messagesPerTransaction\?/);
  assert.throws(() => createConsumer({ ...base, handlr: async () => undefined } as ConsumerOptions), /handlr: is not an option of createConsumer \(did you mean handler\?\)/);
  const o = resolveConsumerOptions(base);
  assert.equal(o.maxAttempts, 5);
  assert.equal(o.messagesPerTransaction, 100);
  assert.equal(o.savepoints, 'on-failure');
  assert.equal(o.deadLetterTopic('orders'), 'orders.dead-letter');
  assert.deepEqual(o.topics, ['t']);
  assert.equal(o.batchesInFlight, 4);
  assert.equal(o.shutdownTimeoutMs, 15_000);
  assert.equal(o.afterCommitTimeoutMs, 5_000);
  assert.equal(o.handlerTimeoutMs, 60_000);
  assert.equal(resolveConsumerOptions({ ...base, handlerTimeoutMs: 1 }).handlerTimeoutMs, 1);
  assert.equal(o.missingTopicTimeoutMs, 60_000);
  assert.equal(resolveConsumerOptions({ ...base, missingTopicTimeoutMs: 0 }).missingTopicTimeoutMs, 0, '0: do not wait');
});

test('deprecated option names: partitionsConcurrency and stopTimeoutMs still work, checked like the new names', () => {
  // The old name alone: taken, under the new name.
  const old = resolveConsumerOptions({ ...base, partitionsConcurrency: 2, stopTimeoutMs: 5_000 });
  assert.equal(old.batchesInFlight, 2);
  assert.equal(old.shutdownTimeoutMs, 5_000);
  assert.ok(!('partitionsConcurrency' in old) && !('stopTimeoutMs' in old), 'resolved options carry only the new names');
  // The new name alone.
  const current = resolveConsumerOptions({ ...base, batchesInFlight: 8, shutdownTimeoutMs: 1_000 });
  assert.equal(current.batchesInFlight, 8);
  assert.equal(current.shutdownTimeoutMs, 1_000);
  // Both, agreeing: fine.
  const both = resolveConsumerOptions({ ...base, batchesInFlight: 3, partitionsConcurrency: 3, shutdownTimeoutMs: 0, stopTimeoutMs: 0 });
  assert.equal(both.batchesInFlight, 3);
  assert.equal(both.shutdownTimeoutMs, 0);
  // Both, differing: a ConfigError naming the old name, and saying which to keep.
  assert.throws(
    () => resolveConsumerOptions({ ...base, batchesInFlight: 3, partitionsConcurrency: 4 }),
    (e: unknown) => e instanceof ConfigError && e.setting === 'partitionsConcurrency' && /give only batchesInFlight/.test(e.message),
  );
  assert.throws(
    () => resolveConsumerOptions({ ...base, shutdownTimeoutMs: 1_000, stopTimeoutMs: 2_000 }),
    (e: unknown) => e instanceof ConfigError && e.setting === 'stopTimeoutMs' && /give only shutdownTimeoutMs/.test(e.message),
  );
  // An old name's bad value is named as the user wrote it, with the new name's range.
  rejects({ partitionsConcurrency: 0 }, 'partitionsConcurrency');
  rejects({ partitionsConcurrency: 257 }, 'partitionsConcurrency');
  rejects({ stopTimeoutMs: 600_001 }, 'stopTimeoutMs');
  // A bad new value next to a good old one is still refused, under the new name.
  rejects({ batchesInFlight: 0, partitionsConcurrency: 2 }, 'batchesInFlight');
});

test('classifyError: invalid payloads and non-retriable errors are permanent, the unknown is transient', () => {
  assert.equal(classifyError(new DecodeError('x')), 'permanent');
  assert.equal(classifyError(new SyntaxError('Unexpected token')), 'permanent');
  assert.equal(classifyError(new OutboxError('x', { retriable: false })), 'permanent');
  assert.equal(classifyError(new OutboxError('x', { retriable: true })), 'transient');
  assert.equal(classifyError(Object.assign(new Error('dup'), { code: '23505' })), 'permanent');
  assert.equal(classifyError(Object.assign(new Error('deadlock'), { code: '40P01' })), 'transient');
  assert.equal(classifyError(Object.assign(new Error('lock'), { code: '55P03' })), 'transient');
  assert.equal(classifyError(Object.assign(new Error('reset'), { code: 'ECONNRESET' })), 'transient');
  assert.equal(classifyError(new Error('who knows')), 'transient');
});

test('decodeValue: auto follows content-type, json insists, tombstones are null', () => {
  const json = { 'content-type': 'application/json' };
  assert.deepEqual(decodeValue(Buffer.from('{"a":1}'), json, 'auto'), { a: 1 });
  assert.ok(Buffer.isBuffer(decodeValue(Buffer.from('{"a":1}'), {}, 'auto')));
  assert.equal(decodeValue(null, json, 'json'), null);
  assert.throws(() => decodeValue(Buffer.from('nope'), {}, 'json'), (e: unknown) => e instanceof DecodeError && /not JSON/.test(e.message));
  assert.throws(() => decodeValue(Buffer.from('x'), {}, () => { throw new Error('bad avro'); }), /decoder failed: bad avro/);
});

test('deadLetterMessage keeps key, value and headers, replaces earlier dead-letter headers', () => {
  const m = deadLetterMessage({
    topic: 'orders',
    partition: 2,
    message: {
      key: Buffer.from('k'),
      value: Buffer.from([1, 2, 3]),
      headers: { 'message-id': Buffer.from('id-1'), 'dead-letter-reason': Buffer.from('old') },
      offset: '41',
      timestamp: '1700000000000',
      attributes: 0,
    },
    reason: 'retries-exhausted',
    error: new TypeError('x'.repeat(2_000)),
    attempts: 5,
    consumerGroup: 'g',
  });
  assert.deepEqual(m.key, Buffer.from('k'));
  assert.deepEqual(m.value, Buffer.from([1, 2, 3]));
  assert.deepEqual(m.headers['message-id'], Buffer.from('id-1'));
  assert.equal(m.headers['dead-letter-reason'], 'retries-exhausted');
  assert.equal(m.headers['dead-letter-error-name'], 'TypeError');
  assert.equal((m.headers['dead-letter-error'] as string).length, 1_003);
  assert.equal(m.headers['dead-letter-original-offset'], '41');
  assert.equal(m.headers['dead-letter-original-partition'], '2');
});
