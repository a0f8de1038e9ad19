import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Partitioners } from 'kafkajs';
import type { ConsumedMessage } from '../src/consumer/types.js';
import { ConfigError } from '../src/shared/errors.js';
import { createConsumer } from '../src/consumer/consumer.js';
import { createTestSchema, uniqueName, type TestSchema } from './helpers/db.js';
import { createTopic, testKafka } from './helpers/kafka.js';
import { waitFor } from './helpers/wait.js';
import { produce, testConsumerOptions, testConsumers } from './helpers/consumer.js';

// The consumer's isolationLevel against a real transactional producer: an aborted Kafka
// transaction's records reach a read_committed consumer (the default) never, and a
// read_uncommitted one like any other record.

let db: TestSchema;
before(async () => {
  db = await createTestSchema('isolation');
});
after(async () => {
  await db.drop();
});

const consumer = testConsumers(() => db);

/** On one partition: two records of an aborted transaction, one of a committed one, then one outside any. */
async function writeTransactions(topic: string): Promise<void> {
  const producer = testKafka().producer({
    createPartitioner: Partitioners.DefaultPartitioner,
    transactionalId: uniqueName('isolation-tx'),
    idempotent: true,
    maxInFlightRequests: 1,
  });
  await producer.connect();
  try {
    const message = (key: string) => ({ key, value: JSON.stringify({ key }), headers: { 'message-id': uniqueName(key), 'content-type': 'application/json' } });
    const aborted = await producer.transaction();
    await aborted.send({ topic, acks: -1, messages: [message('aborted-1'), message('aborted-2')] });
    await aborted.abort();
    const committed = await producer.transaction();
    await committed.send({ topic, acks: -1, messages: [message('committed')] });
    await committed.commit();
  } finally {
    await producer.disconnect();
  }
  await produce(topic, [{ key: 'plain', value: { key: 'plain' } }]);
}

async function keysSeen(topic: string, isolationLevel?: 'read_committed' | 'read_uncommitted'): Promise<string[]> {
  const keys: string[] = [];
  const c = consumer({
    topics: topic,
    ...(isolationLevel ? { isolationLevel } : {}),
    handler: async (m: ConsumedMessage<unknown>) => void keys.push(m.key as string),
  });
  await c.start();
  // 'plain' is the partition's last record: every record before it has been handled or skipped.
  await waitFor(`the ${isolationLevel ?? 'default'} consumer at the last record`, () => keys.includes('plain'));
  await c.stop();
  return keys;
}

test('integration: by default (read_committed) an aborted Kafka transaction is never handed to the handler; read_uncommitted hands it over', async () => {
  const topic = await createTopic(1);
  await writeTransactions(topic);
  assert.deepEqual(await keysSeen(topic), ['committed', 'plain']);
  assert.deepEqual(await keysSeen(topic, 'read_committed'), ['committed', 'plain']);
  assert.deepEqual(await keysSeen(topic, 'read_uncommitted'), ['aborted-1', 'aborted-2', 'committed', 'plain']);
});

test('isolationLevel other than read_committed or read_uncommitted is a ConfigError naming it', () => {
  const options = { ...testConsumerOptions(db), topics: 'x', handler: async () => undefined };
  for (const bad of ['READ_COMMITTED', 'committed', 1, null]) {
    assert.throws(
      () => createConsumer({ ...options, isolationLevel: bad as never }),
      (e: unknown) => e instanceof ConfigError && /isolationLevel/.test(e.message),
      String(bad),
    );
  }
});
