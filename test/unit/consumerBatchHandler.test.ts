import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Kafka } from 'kafkajs';
import pg from 'pg';
import { createConsumer } from '../../src/consumer/consumer.js';
import { checkHandlers, type ConsumerOptions } from '../../src/consumer/options.js';
import { ConfigError } from '../../src/shared/errors.js';

// handler or handleBatch: exactly one, a function; checked at creation, no server needed.

const kafka = new Kafka({ brokers: ['127.0.0.1:1'] });
const pool = new pg.Pool();
const base = { kafka, pool, groupId: 'g', topics: 't' };
const handler = async (): Promise<void> => undefined;
const handleBatch = async (): Promise<void> => undefined;

function rejects(options: Record<string, unknown>, setting: string, text: RegExp): void {
  assert.throws(
    () => createConsumer({ ...base, ...options } as unknown as ConsumerOptions),
    (e: unknown) => e instanceof ConfigError && e.setting === setting && text.test(e.message),
    `${JSON.stringify(Object.keys(options))} -> ${setting}`,
  );
}

test('createConsumer takes exactly one of handler and handleBatch, a function', () => {
  rejects({}, 'handler', /required.*handleBatch/);
  rejects({ handler, handleBatch }, 'handleBatch', /not both/);
  rejects({ handleBatch: 'nope' }, 'handleBatch', /function/);
  rejects({ handleBatch: {} }, 'handleBatch', /function/);
  rejects({ handler: 42 }, 'handler', /function/);
  rejects({ handler: 'nope', handleBatch }, 'handleBatch', /not both/);
  assert.equal(createConsumer({ ...base, handler }).options.handleBatch, undefined);
  const batch = createConsumer({ ...base, handleBatch });
  assert.equal(batch.options.handleBatch, handleBatch);
  assert.equal(batch.options.handler, undefined);
});

test("handleBatch refuses savepoints: 'always' (a failed batch is redone, so handlers can run twice)", () => {
  rejects({ handleBatch, savepoints: 'always' }, 'savepoints', /handleBatch/);
  assert.equal(createConsumer({ ...base, handleBatch, savepoints: 'on-failure' }).options.savepoints, 'on-failure');
  assert.equal(createConsumer({ ...base, handler, savepoints: 'always' }).options.savepoints, 'always');
});

test('checkHandlers alone: the same rules on a plain object', () => {
  assert.doesNotThrow(() => checkHandlers({ handler }));
  assert.doesNotThrow(() => checkHandlers({ handleBatch }));
  assert.throws(() => checkHandlers({}), ConfigError);
  assert.throws(() => checkHandlers({ handler, handleBatch }), ConfigError);
});

test('messagesPerTransaction defaults to 500 with handleBatch, 100 with handler; an explicit value wins', () => {
  assert.equal(createConsumer({ ...base, handleBatch }).options.messagesPerTransaction, 500);
  assert.equal(createConsumer({ ...base, handler }).options.messagesPerTransaction, 100);
  assert.equal(createConsumer({ ...base, handleBatch, messagesPerTransaction: 10 }).options.messagesPerTransaction, 10);
});
