import { test } from 'node:test';
import assert from 'node:assert/strict';
import { publishBatch, PublishError, type DeadLetterPolicy } from '../../src/relay/publishBatch.js';
import { classifyPublishError } from '../../src/relay/publishErrors.js';
import { validateRow } from '../../src/relay/validation.js';
import { CircuitBreaker } from '../../src/relay/breaker.js';
import type { ClaimedRow } from '../../src/relay/sql/claim.js';

let nextId = 1;
function row(key: string, extra: Partial<ClaimedRow> = {}): ClaimedRow {
  return { id: nextId++, message_id: `m${nextId}`, topic: 't', key, payload: '{"a":1}', payload_bytes: null, headers: null, created_at: new Date(0), ...extra };
}

// A stand-in for kafkajs' protocol error, shaped as kafkajs throws it.
function kafkaError(type: string, retriable: boolean): Error {
  return Object.assign(new Error(`The broker said ${type}`), { name: 'KafkaJSProtocolError', type, retriable });
}

function options(policy: DeadLetterPolicy, send: (rows: ClaimedRow[]) => Promise<void>) {
  return { maxMessageBytes: 100, policyOf: () => policy, send };
}

test('invalid rows are dead-lettered without being sent; under park the key\'s later rows are held, other keys go', async () => {
  const rows = [row('a'), row(''), row('b'), row('c', { payload: JSON.stringify('x'.repeat(200)) }), row('c'), row('b')];
  const sent: number[] = [];
  const out = await publishBatch(rows, options('park', async (r) => void sent.push(...r.map((x) => x.id))));
  assert.deepEqual(out.deadLetters.map((d) => [d.row.id, d.errorName]), [
    [rows[1]!.id, 'validation:empty_key'],
    [rows[3]!.id, 'validation:too_large'],
  ]);
  assert.deepEqual(out.held.map((r) => r.id), [rows[4]!.id], 'c after its parked row waits');
  assert.deepEqual(sent, [rows[0]!.id, rows[2]!.id, rows[5]!.id]);
  assert.deepEqual(out.published.map((r) => r.id), sent);
});

test('under skip the key\'s later rows go on', async () => {
  const rows = [row('c', { payload: JSON.stringify('x'.repeat(200)) }), row('c')];
  const out = await publishBatch(rows, options('skip', async () => undefined));
  assert.equal(out.deadLetters.length, 1);
  assert.deepEqual(out.published.map((r) => r.id), [rows[1]!.id]);
  assert.deepEqual(out.held, []);
});

test('a permanent refusal isolates the refused rows one by one; the rest publish, in order', async () => {
  const rows = [row('a'), row('big'), row('a'), row('big'), row('z')];
  const calls: number[][] = [];
  const out = await publishBatch(
    rows,
    options('park', async (r) => {
      calls.push(r.map((x) => x.id));
      if (r.some((x) => x.key === 'big')) throw kafkaError('MESSAGE_TOO_LARGE', false);
    }),
  );
  assert.deepEqual(out.deadLetters.map((d) => [d.row.id, d.errorName]), [[rows[1]!.id, 'MESSAGE_TOO_LARGE']]);
  assert.deepEqual(out.published.map((r) => r.id), [rows[0]!.id, rows[2]!.id, rows[4]!.id]);
  assert.deepEqual(out.held.map((r) => r.id), [rows[3]!.id], 'the parked key\'s later row is not even tried');
  assert.deepEqual(calls.slice(1), [[rows[0]!.id], [rows[1]!.id], [rows[2]!.id], [rows[4]!.id]]);
});

test('a transient refusal throws PublishError and dead-letters nothing', async () => {
  const rows = [row('a'), row('b')];
  await assert.rejects(
    publishBatch(rows, options('park', async () => {
      throw Object.assign(new Error('retries exceeded'), { name: 'KafkaJSNumberOfRetriesExceeded', retriable: false, originalError: kafkaError('NOT_LEADER_FOR_PARTITION', true) });
    })),
    (e: PublishError) => e instanceof PublishError && e.retriable && e.kafkaError.name === 'NOT_LEADER_FOR_PARTITION',
  );
});

test('Kafka errors are classified by code through kafkajs\' wrappers', () => {
  assert.equal(classifyPublishError(kafkaError('MESSAGE_TOO_LARGE', false)).class, 'permanent');
  assert.equal(classifyPublishError(kafkaError('TOPIC_AUTHORIZATION_FAILED', false)).class, 'permanent');
  assert.equal(classifyPublishError(kafkaError('INVALID_TOPIC_EXCEPTION', false)).class, 'permanent');
  assert.equal(classifyPublishError(kafkaError('SASL_AUTHENTICATION_FAILED', false)).class, 'transient', 'configuration, not the row');
  assert.equal(classifyPublishError(kafkaError('REQUEST_TIMED_OUT', true)).class, 'transient');
  assert.equal(classifyPublishError(Object.assign(new Error('agg'), { errors: [kafkaError('LEADER_NOT_AVAILABLE', true), kafkaError('MESSAGE_TOO_LARGE', false)] })).class, 'permanent');
  assert.equal(classifyPublishError(Object.assign(new Error('Connection error: ECONNREFUSED'), { name: 'KafkaJSConnectionError', retriable: true })).class, 'transient');
});

test('validation: topic names by Kafka\'s rule, empty keys, size over the limit', () => {
  assert.equal(validateRow(row('k', { topic: 'orders.v1_x-y' }), 100), undefined);
  for (const topic of ['', '.', '..', 'has space', 'ü', 'x'.repeat(250), 'a/b']) {
    assert.equal(validateRow(row('k', { topic }), 100)?.name, 'validation:invalid_topic', topic);
  }
  assert.equal(validateRow(row(''), 100)?.name, 'validation:empty_key');
  assert.equal(validateRow(row('k', { payload: null, payload_bytes: Buffer.alloc(101) }), 100)?.name, 'validation:too_large');
  assert.equal(validateRow(row('k', { payload: null, payload_bytes: Buffer.alloc(90) }), 100), undefined);
});

test('the breaker opens after consecutive failures and, after a good probe, reopens at the first failure', () => {
  const b = new CircuitBreaker(3);
  assert.equal(b.failure(), false);
  b.success();
  b.failure();
  b.failure();
  assert.equal(b.isOpen, false);
  assert.equal(b.failure(), true);
  assert.equal(b.isOpen, true);
  b.probeSucceeded();
  assert.equal(b.isOpen, false);
  assert.equal(b.failure(), true, 'one failure short of opening');
});
