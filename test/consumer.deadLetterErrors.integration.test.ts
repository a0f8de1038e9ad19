import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createConsumer, type Consumer } from '../src/consumer/consumer.js';
import { DEAD_LETTER_HEADERS } from '../src/consumer/deadLetterTopic.js';
import { createTestSchema, uniqueName, type TestSchema } from './helpers/db.js';
import { createTopic, readTopic, testKafka } from './helpers/kafka.js';
import { produce } from './helpers/consumer.js';

// A handler may throw anything. The dead letter must still say what was thrown
// (issue 11, "to mend": a handler that threw undefined gave empty error headers).

let db: TestSchema;
before(async () => {
  db = await createTestSchema('dlterrors');
});
after(async () => {
  await db.drop();
});

let consumer: Consumer<{ i: number }> | undefined;
after(async () => {
  await consumer?.stop();
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
    kafka: testKafka(),
    groupId: uniqueName('group'),
    topics: topic,
    pool: db.pool,
    schema: db.schema,
    deadLetterTopic,
    sessionTimeoutMs: 10_000,
    heartbeatIntervalMs: 500,
    maxWaitTimeMs: 100,
    classifyError: () => 'permanent',
    handler: async (message) => {
      throw thrown[message.value.i];
    },
  });
  consumer = c;
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
