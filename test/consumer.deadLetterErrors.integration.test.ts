import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createConsumer, type Consumer } from '../src/consumer/consumer.js';
import { DEAD_LETTER_HEADERS } from '../src/consumer/deadLetterTopic.js';
import { createTestSchema, type TestSchema } from './helpers/db.js';
import { createTopic, readTopic } from './helpers/kafka.js';
import { produce, testConsumerOptions } from './helpers/consumer.js';

// A handler may throw anything. The dead letter must still say what was thrown
// (issue 11, "to mend": a handler that threw undefined gave empty error headers), and a
// Postgres error its SQLSTATE and constraint (issue 19: every one said `error`).

let db: TestSchema;
before(async () => {
  db = await createTestSchema('dlterrors');
});
after(async () => {
  await db.drop();
});

const running: Consumer<any>[] = []; // eslint-disable-line @typescript-eslint/no-explicit-any
after(async () => {
  await Promise.all(running.map((c) => c.stop()));
});

test('integration: a dead letter names what the handler threw when it is not an Error (undefined, null, a string, a number, an object, an error-like object, an Error without message)', async () => {
  const topic = await createTopic(1);
  const deadLetterTopic = await createTopic(1, undefined, 'dlt');
  const circular: Record<string, unknown> = { code: 'E_LOOP' };
  circular.self = circular;
  const thrown: unknown[] = [
    undefined,
    null,
    'boom',
    42,
    { code: 7, detail: 'no message here' },
    { name: 'RemoteFailure', message: 'the remote said no' },
    new Error(''),
    circular,
  ];
  const expected: Array<[name: string, message: RegExp]> = [
    ['NonErrorThrown', /^non-error thrown: undefined$/],
    ['NonErrorThrown', /^non-error thrown: null$/],
    ['NonErrorThrown', /^non-error thrown: string "boom"$/],
    ['NonErrorThrown', /^non-error thrown: number 42$/],
    ['NonErrorThrown', /^non-error thrown: object \{"code":7,"detail":"no message here"\}$/],
    ['RemoteFailure', /^the remote said no$/],
    ['Error', /^Error \(no message\)$/],
    ['NonErrorThrown', /^non-error thrown: object \[object Object\]$/],
  ];
  const c = createConsumer<{ i: number }>({
    ...testConsumerOptions(db),
    topics: topic,
    deadLetterTopic,
    classifyError: () => 'permanent',
    handler: async (message) => {
      throw thrown[message.value.i];
    },
  });
  running.push(c);
  await produce(topic, thrown.map((_, i) => ({ key: 'x', value: { i } })));
  await c.start();
  const dead = await readTopic(deadLetterTopic, (m) => m.length >= thrown.length);
  assert.equal(dead.length, thrown.length);
  for (const m of dead) {
    const i = Number(m.headers[DEAD_LETTER_HEADERS.offset]);
    const [name, message] = expected[i] as [string, RegExp];
    assert.equal(m.headers[DEAD_LETTER_HEADERS.errorName], name, `error name of case ${i}`);
    assert.match(m.headers[DEAD_LETTER_HEADERS.error] ?? '', message, `error of case ${i}`);
    assert.equal(m.headers[DEAD_LETTER_HEADERS.reason], 'permanent-error');
  }
});

test('integration: a dead letter from a Postgres error carries its SQLSTATE and constraint (dead-letter-error-code, -constraint) and is named DatabaseError', async () => {
  const topic = await createTopic(1);
  const deadLetterTopic = await createTopic(1, undefined, 'dlt');
  await db.pool.query(`CREATE TABLE "${db.schema}".accounts (id int CONSTRAINT accounts_id_key UNIQUE, balance int CONSTRAINT balance_not_negative CHECK (balance >= 0))`);
  await db.pool.query(`INSERT INTO "${db.schema}".accounts VALUES (1, 0)`);
  const statements = [
    `INSERT INTO "${db.schema}".accounts VALUES (1, 5)`, // 23505 accounts_id_key
    `INSERT INTO "${db.schema}".accounts VALUES (2, -5)`, // 23514 balance_not_negative
    `SELECT 'not a number'::int`, // 22P02, no constraint
  ];
  const c = createConsumer<{ i: number }>({
    ...testConsumerOptions(db),
    topics: topic,
    deadLetterTopic,
    handler: async (message, { client }) => {
      await client.query(statements[message.value.i] as string);
    },
  });
  running.push(c);
  await produce(topic, statements.map((_, i) => ({ key: 'pg', value: { i } })));
  await c.start();
  const dead = await readTopic(deadLetterTopic, (m) => m.length >= statements.length);
  const got = dead.map((m) => [m.headers[DEAD_LETTER_HEADERS.errorName], m.headers[DEAD_LETTER_HEADERS.errorCode], m.headers[DEAD_LETTER_HEADERS.errorConstraint]]);
  assert.deepEqual(got, [
    ['DatabaseError', '23505', 'accounts_id_key'],
    ['DatabaseError', '23514', 'balance_not_negative'],
    ['DatabaseError', '22P02', undefined],
  ]);
  assert.ok(dead.every((m) => m.headers[DEAD_LETTER_HEADERS.reason] === 'permanent-error'));
});

test('integration: a message whose message-id header is present but empty is dead-lettered as an empty key, not as a missing header', async () => {
  const topic = await createTopic(1);
  const deadLetterTopic = await createTopic(1, undefined, 'dlt');
  const c = createConsumer<unknown>({ ...testConsumerOptions(db), topics: topic, deadLetterTopic, handler: async () => undefined });
  running.push(c);
  await produce(topic, [{ key: 'k', value: { a: 1 }, messageId: '' }, { key: 'k', value: { a: 2 }, messageId: null }]);
  await c.start();
  const dead = await readTopic(deadLetterTopic, (m) => m.length >= 2);
  assert.deepEqual(dead.map((m) => m.headers[DEAD_LETTER_HEADERS.reason]), ['missing-key', 'missing-key']);
  assert.match(dead[0]?.headers[DEAD_LETTER_HEADERS.error] ?? '', /empty idempotency key \(the message-id header is present but empty\)/);
  assert.match(dead[1]?.headers[DEAD_LETTER_HEADERS.error] ?? '', /no idempotency key \(no message-id header\)/);
});
