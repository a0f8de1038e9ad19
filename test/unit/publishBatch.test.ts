import { test } from 'node:test';
import assert from 'node:assert/strict';
import { publishBatch, PublishError, type DeadLetterPolicy } from '../../src/relay/publishBatch.js';
import { classifyPublishError } from '../../src/relay/publishErrors.js';
import { validateRow } from '../../src/relay/validation.js';
import { CircuitBreaker } from '../../src/relay/breaker.js';
import { TopicMissingError } from '../../src/relay/topicMetadata.js';
import { CREATED_AT_HEADER, type RelayMessage } from '../../src/relay/message.js';
import type { SendResult } from '../../src/relay/producer.js';
import type { ClaimedRow } from '../../src/relay/sql/claim.js';

let nextId = 1;
function row(key: string, extra: Partial<ClaimedRow> = {}): ClaimedRow {
  return { id: nextId++, message_id: `m${nextId}`, topic: 't', key, payload: '{"a":1}', payload_bytes: null, headers: null, created_at: new Date(0), ...extra };
}

// A stand-in for kafkajs' protocol error, shaped as kafkajs throws it.
function kafkaError(type: string, retriable: boolean): Error {
  return Object.assign(new Error(`The broker said ${type}`), { name: 'KafkaJSProtocolError', type, retriable });
}

/** A producer answering per message: `fn` rejects a whole send (all refused) or resolves (all acknowledged). */
function allOrNothing(fn: (messages: RelayMessage[]) => Promise<void>) {
  return async (messages: RelayMessage[]): Promise<SendResult[]> => {
    try {
      await fn(messages);
      return messages.map(() => ({ acknowledged: true }));
    } catch (error) {
      return messages.map(() => ({ acknowledged: false, error }));
    }
  };
}

function options(policy: DeadLetterPolicy, send: (messages: RelayMessage[]) => Promise<void>, extra: { missingTopicTimeoutMs?: number; now?: () => number } = {}) {
  return { maxMessageBytes: 100, missingTopicTimeoutMs: 30_000, policyOf: () => policy, send: allOrNothing(send), ...extra };
}

/**
 * A producer like the kafkajs adapter: one request per "partition" (here the key's first
 * letter), each acknowledged or refused as a whole; `refuse` says which partition's
 * request is refused with what. Records every message Kafka acknowledged.
 */
function partitioned(refuse: (messages: RelayMessage[]) => Error | undefined) {
  const acknowledged: number[] = [];
  const requests: number[][] = [];
  const send = async (messages: RelayMessage[]): Promise<SendResult[]> => {
    const byPartition = new Map<string, number[]>();
    messages.forEach((m, i) => {
      const p = m.key.slice(0, 1);
      byPartition.set(p, [...(byPartition.get(p) ?? []), i]);
    });
    const results: SendResult[] = new Array(messages.length);
    for (const indexes of byPartition.values()) {
      const batch = indexes.map((i) => messages[i]!);
      requests.push(batch.map((m) => m.id));
      const error = refuse(batch);
      for (const i of indexes) results[i] = error ? { acknowledged: false, error } : { acknowledged: true };
      if (!error) acknowledged.push(...batch.map((m) => m.id));
    }
    return results;
  };
  return { send, acknowledged, requests };
}

test('invalid rows are dead-lettered without being sent; under park the key\'s later rows are held, other keys go', async () => {
  const rows = [row('a'), row(''), row('b'), row('c', { payload: JSON.stringify('x'.repeat(200)) }), row('c'), row('b')];
  const sent: number[] = [];
  const out = await publishBatch(rows, options('park', async (r) => void sent.push(...r.map((x) => x.id as number))));
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

test('a transient refusal of the whole send leaves every row unsent, with the error, and dead-letters nothing', async () => {
  const rows = [row('a'), row('b')];
  const out = await publishBatch(rows, options('park', async () => {
    throw Object.assign(new Error('retries exceeded'), { name: 'KafkaJSNumberOfRetriesExceeded', retriable: false, originalError: kafkaError('NOT_LEADER_FOR_PARTITION', true) });
  }));
  assert.deepEqual(out.unsent.map((r) => r.id), rows.map((r) => r.id));
  assert.ok(out.unsentError instanceof PublishError && out.unsentError.retriable && out.unsentError.kafkaError.name === 'NOT_LEADER_FOR_PARTITION');
  assert.deepEqual([out.published, out.deadLetters, out.held], [[], [], []]);
});

test('rows that cannot be a message (headers not an object; anything that throws) are dead-lettered alone, the rest publish', async () => {
  const bad = [
    row('h1', { headers: ['x'] as unknown as Record<string, unknown> }),
    row('h2', { headers: 'text' as unknown as Record<string, unknown> }),
    row('x1', { headers: { big: 10n } }),
  ];
  const good = [row('ok1'), row('ok2', { created_at: new Date('2026-01-01T00:00:00Z') })];
  const sent: RelayMessage[] = [];
  const out = await publishBatch([bad[0]!, good[0]!, ...bad.slice(1), good[1]!], options('skip', async (m) => void sent.push(...m)));
  assert.deepEqual(
    out.deadLetters.map((d) => [d.row.key, d.errorName]),
    [
      ['h1', 'validation:invalid_headers'],
      ['h2', 'validation:invalid_headers'],
      ['x1', 'validation:unencodable'],
    ],
  );
  assert.match(out.deadLetters[0]!.reason, /headers must be a JSON object of strings, not an array/);
  assert.match(out.deadLetters[2]!.reason, /cannot be turned into a Kafka message: .*BigInt/);
  assert.deepEqual(out.published.map((r) => r.key), ['ok1', 'ok2']);
  assert.deepEqual(sent.map((m) => m.timestampMs), [0, Date.parse('2026-01-01T00:00:00Z')]);
  assert.ok(sent.every((m) => m.headers[CREATED_AT_HEADER] === undefined), 'no created_at header when the timestamp holds it');
});

test('a created_at no Kafka timestamp can hold (before 1970, past year 275760, ±infinity) publishes, in its key\'s order, without a timestamp and with the original in outbox-created-at', async () => {
  const rows = [
    row('k', { created_at: new Date('2026-01-01T00:00:00Z') }),
    row('k', { created_at: new Date('1969-07-20T20:17:40.500Z'), created_at_text: '1969-07-20 20:17:40.5' }),
    row('k', { created_at: new Date(Number.NaN), created_at_text: '280000-01-01 00:00:00' }),
    row('k', { created_at: Infinity as unknown as Date, created_at_text: 'infinity' }),
    row('k', { created_at: -Infinity as unknown as Date, created_at_text: '-infinity' }),
    row('k', { created_at: new Date('-000043-03-15T12:00:00Z'), created_at_text: '0044-03-15 12:00:00 BC' }),
    row('k', { created_at: new Date(0) }),
    // Not from the claim (no text): what the value still says.
    row('k', { created_at: new Date('1960-01-01T00:00:00Z') }),
    row('k', { created_at: Infinity as unknown as Date }),
  ];
  const sent: RelayMessage[] = [];
  const out = await publishBatch(rows, options('park', async (m) => void sent.push(...m)));
  assert.deepEqual(out.deadLetters, []);
  assert.deepEqual(out.published.map((r) => r.id), rows.map((r) => r.id), 'all published, in id order');
  assert.deepEqual(sent.map((m) => m.id), rows.map((r) => r.id), 'sent in id order, in one send');
  assert.deepEqual(
    sent.map((m) => [m.timestampMs, m.headers[CREATED_AT_HEADER]]),
    [
      [Date.parse('2026-01-01T00:00:00Z'), undefined],
      [undefined, '1969-07-20 20:17:40.5+00'],
      [undefined, '280000-01-01 00:00:00+00'],
      [undefined, 'infinity'],
      [undefined, '-infinity'],
      [undefined, '0044-03-15 12:00:00+00 BC'],
      [0, undefined],
      [undefined, '1960-01-01T00:00:00.000Z'],
      [undefined, 'infinity'],
    ],
  );
  assert.ok(sent.every((m) => !('timestampMs' in m) || Number.isInteger(m.timestampMs)), 'no NaN or negative timestamp reaches a client');
});

test('a partition refused for good is re-sent one row at a time, and nothing Kafka acknowledged is sent again', async () => {
  const rows = [row('a1'), row('b1'), row('a2'), row('bx', { payload: '"big"' }), row('a3'), row('b2'), row('b3')];
  const kafka = partitioned((batch) => (batch.some((m) => m.key === 'bx') ? kafkaError('MESSAGE_TOO_LARGE', false) : undefined));
  const out = await publishBatch(rows, { ...options('skip', async () => undefined), send: kafka.send });
  assert.deepEqual(out.deadLetters.map((d) => [d.row.key, d.errorName]), [['bx', 'MESSAGE_TOO_LARGE']]);
  assert.deepEqual(out.published.map((r) => r.key), ['a1', 'b1', 'a2', 'a3', 'b2', 'b3']);
  const once = [...kafka.acknowledged].sort((x, y) => x - y);
  assert.deepEqual(once, out.published.map((r) => r.id), 'every published row acknowledged exactly once');
  // The first send, then partition b's rows one at a time; partition a never again.
  assert.deepEqual(kafka.requests.slice(2), [[rows[1]!.id], [rows[3]!.id], [rows[5]!.id], [rows[6]!.id]]);
});

test("a partition refused for now leaves its rows unsent; the other partitions' rows publish", async () => {
  const rows = [row('a1'), row('b1'), row('a2'), row('b2')];
  const kafka = partitioned((batch) => (batch[0]!.key.startsWith('b') ? kafkaError('NOT_ENOUGH_REPLICAS', true) : undefined));
  const out = await publishBatch(rows, { ...options('park', async () => undefined), send: kafka.send });
  assert.deepEqual(out.published.map((r) => r.key), ['a1', 'a2']);
  assert.deepEqual(out.unsent.map((r) => r.key), ['b1', 'b2']);
  assert.equal((out.unsentError as PublishError).kafkaError.name, 'NOT_ENOUGH_REPLICAS');
  assert.deepEqual(out.deadLetters, []);
});

test('a missing topic holds its rows unsent for missingTopicTimeoutMs while other topics publish, then dead-letters them per policy with the reason', async () => {
  const now = 1_000_000;
  const rows = [row('k1', { topic: 'gone' }), row('k1', { topic: 'here' }), row('k2', { topic: 'gone' }), row('k1', { topic: 'gone' })];
  const missingSince = (since: number) => async (messages: RelayMessage[]): Promise<SendResult[]> =>
    messages.map((m) => (m.topic === 'gone' ? { acknowledged: false, error: new TopicMissingError('gone', since, undefined) } : { acknowledged: true }));
  const waiting = await publishBatch(rows, { ...options('park', async () => undefined, { now: () => now }), send: missingSince(now - 29_999) });
  assert.deepEqual(waiting.published.map((r) => r.topic), ['here']);
  assert.deepEqual(waiting.unsent.map((r) => r.id), [rows[0]!.id, rows[2]!.id, rows[3]!.id]);
  assert.match(String(waiting.unsentError?.message), /"gone" does not exist.*at most 30000 ms/);
  assert.deepEqual(waiting.deadLetters, []);

  const expired = await publishBatch(rows, { ...options('park', async () => undefined, { now: () => now }), send: missingSince(now - 30_000) });
  assert.deepEqual(expired.deadLetters.map((d) => [d.row.id, d.errorName, d.policy]), [
    [rows[0]!.id, 'UNKNOWN_TOPIC_OR_PARTITION', 'park'],
    [rows[2]!.id, 'UNKNOWN_TOPIC_OR_PARTITION', 'park'],
  ]);
  assert.match(expired.deadLetters[0]!.reason, /topic "gone" does not exist .* within 30000 ms \(--missing-topic-timeout-ms\).*auto\.create\.topics\.enable=false/);
  assert.deepEqual(expired.held.map((r) => r.id), [rows[3]!.id], "the parked key's later row waits behind it");
  assert.deepEqual(expired.unsent, []);
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

test('a row Kafka refuses for its timestamp (INVALID_TIMESTAMP: outside the topic\'s before/after bounds) is sent again stamped at send time, its created_at in outbox-created-at; its key\'s order holds', async () => {
  const limitMs = Date.parse('2030-01-01T00:00:00Z');
  const rows = [
    row('k1', { created_at: new Date('2026-01-01T00:00:00Z') }),
    row('k2', { created_at: new Date('2100-01-01T00:00:00.500Z') }),
    row('k3', { created_at: new Date('2026-01-01T00:00:01Z') }),
    row('k4', { created_at: new Date(Date.UTC(12026, 1, 3, 4, 5, 6, 120)) }),
  ];
  const kafka = partitioned((batch) => (batch.some((m) => m.timestampMs !== undefined && m.timestampMs > limitMs) ? kafkaError('INVALID_TIMESTAMP', false) : undefined));
  const last = new Map<number, RelayMessage>();
  const send = async (messages: RelayMessage[]): Promise<SendResult[]> => {
    for (const m of messages) last.set(m.id, { ...m, headers: { ...m.headers } });
    return kafka.send(messages);
  };
  const out = await publishBatch(rows, { ...options('park', async () => undefined), send });
  assert.deepEqual(out.deadLetters, []);
  assert.deepEqual(out.published.map((r) => r.key), ['k1', 'k2', 'k3', 'k4']);
  assert.deepEqual(
    rows.map((r) => [last.get(r.id)!.timestampMs, last.get(r.id)!.headers[CREATED_AT_HEADER]]),
    [
      [Date.parse('2026-01-01T00:00:00Z'), undefined],
      [undefined, '2100-01-01 00:00:00.5+00'],
      [Date.parse('2026-01-01T00:00:01Z'), undefined],
      [undefined, '12026-02-03 04:05:06.12+00'],
    ],
  );
  assert.deepEqual(kafka.acknowledged, rows.map((r) => r.id), 'each acknowledged once, in id order');
  assert.deepEqual(kafka.requests, [rows.map((r) => r.id), [rows[0]!.id], [rows[1]!.id], [rows[1]!.id], [rows[2]!.id], [rows[3]!.id], [rows[3]!.id]]);
  assert.equal(classifyPublishError(kafkaError('INVALID_TIMESTAMP', false)).class, 'permanent');
});
