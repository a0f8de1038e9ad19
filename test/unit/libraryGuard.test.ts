import { test } from 'node:test';
import assert from 'node:assert/strict';
import { guardLibraryCall, libraryOf } from '../../src/shared/libraryGuard.js';
import { spawnTs } from '../helpers/processes.js';

// Which uncaught errors the library guard (src/shared/libraryGuard.ts) takes for a client
// library's, and that it contains those and nothing else. No servers needed.

const stack = (...frames: string[]): Error => Object.assign(new TypeError('x'), { stack: ['TypeError: x', ...frames.map((f) => `    at ${f}`)].join('\n') });

test('an error whose top frame is in a client library is that library\'s; Node\'s own frames are looked through', () => {
  assert.equal(
    libraryOf(stack('ConnectionPool.#get (/app/node_modules/@platformatic/kafka/dist/network/connection-pool.js:98:31)', 'ConnectionPool.get (/app/node_modules/@platformatic/kafka/dist/network/connection-pool.js:44:36)')),
    '@platformatic/kafka',
  );
  assert.equal(libraryOf(stack('TracingChannel.traceCallback (node:diagnostics_channel:336:14)', 'ConnectionPool.get (file:///app/node_modules/@platformatic/kafka/dist/network/connection-pool.js:44:36)')), '@platformatic/kafka');
  assert.equal(libraryOf(stack('Decoder.readInt32 (/app/node_modules/kafkajs/src/protocol/decoder.js:52:31)')), 'kafkajs');
  assert.equal(libraryOf(stack('Object.parse (/app/node_modules/pg-protocol/dist/serializer.js:45:24)')), 'pg');
  assert.equal(libraryOf(stack('Client._handleErrorMessage (C:\\app\\node_modules\\pg\\lib\\client.js:1:1)')), 'pg');
});

test('an error thrown by our code, even from a library\'s callback, is not a library\'s', () => {
  assert.equal(libraryOf(stack('onSend (/app/src/relay/producer.ts:80:11)', 'Connection.onData (/app/node_modules/kafkajs/src/network/connection.js:1:1)')), undefined);
  assert.equal(libraryOf(stack('x (/app/node_modules/pgx/index.js:1:1)')), undefined, 'a package whose name only starts like one');
  assert.equal(libraryOf(new Error('no frames')), undefined);
  assert.equal(libraryOf('a string'), undefined);
});

test('a synchronous throw of a guarded call becomes its rejection', async () => {
  await assert.rejects(
    guardLibraryCall('pg', 'client.query', () => {
      throw new Error('sync');
    }),
    /sync/,
  );
  assert.equal(await guardLibraryCall('pg', 'client.query', async () => 7), 7);
});

test('with the guard installed, a library\'s throw from its callback fails the call in flight as retriable and the process goes on', async () => {
  const child = spawnTs('test/fixtures/libraryGuardChild.ts', [], { CHILD_THROW: 'library' });
  assert.equal(await child.exited, 0, child.output());
  const line = JSON.parse(child.output().split('\n').find((l) => l.startsWith('{'))!) as { outcome: string; heard: string[] };
  assert.deepEqual(line, { outcome: 'LibraryError kafkajs', heard: ['kafkajs:1'] });
});

test('with the guard installed, our own uncaught error still ends the process, as Node would', async () => {
  const child = spawnTs('test/fixtures/libraryGuardChild.ts', [], { CHILD_THROW: 'ours' });
  assert.equal(await child.exited, 1);
  assert.match(child.output(), /Uncaught exception: Error: a bug of ours/);
});
