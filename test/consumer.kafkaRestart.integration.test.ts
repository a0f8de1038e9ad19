import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { AssignerProtocol, type Consumer, type PartitionAssigner } from 'kafkajs';
import { createTestSchema, type TestSchema } from './helpers/db.js';
import { createTopic, testKafka } from './helpers/kafka.js';
import type { ConsumedMessage, HandlerContext } from '../src/consumer/types.js';
import { waitFor } from './helpers/wait.js';
import { applyEffect, collect, createEffectTables, effectCounts, produce, testConsumers } from './helpers/consumer.js';

// kafkajs restarts its consumer by itself only after errors it deems retriable; after any
// other it disconnects and stays down while the process lives on. CI's fault suite saw it
// after a broker restart (KafkaJSGroupCoordinatorNotFound): a consumer that consumed
// nothing more until Postgres restarted and its process ran out of work and exited. The
// runtime now starts the Kafka consumer again itself (src/consumer/kafkaRestart.ts).
//
// The give-up is injected with a real broker: a group whose members speak another
// assignment protocol refuses our member's JoinGroup with INCONSISTENT_GROUP_PROTOCOL,
// which kafkajs does not retry; once that member leaves, a new start joins.

let db: TestSchema;
before(async () => {
  db = await createTestSchema('kafkarestart');
  await createEffectTables(db.pool, db.schema);
});
after(async () => {
  await db.drop();
});

const consumer = testConsumers(() => db, () => ({ handler: (message: ConsumedMessage<unknown>, context: HandlerContext) => applyEffect(db.schema, message, context) }));

/** An assigner under a protocol name no kafkajs default uses: it assigns nothing. */
const otherProtocol: PartitionAssigner = () => ({
  name: 'OtherProtocol',
  version: 1,
  protocol: ({ topics }) => ({ name: 'OtherProtocol', metadata: AssignerProtocol.MemberMetadata.encode({ version: 1, topics, userData: Buffer.alloc(0) }) }),
  assign: async ({ members }) =>
    members.map((m) => ({ memberId: m.memberId, memberAssignment: AssignerProtocol.MemberAssignment.encode({ version: 1, assignment: {}, userData: Buffer.alloc(0) }) })),
});

/** A raw kafkajs member of `groupId` under {@link otherProtocol}, once it is in the group. */
async function joinWithOtherProtocol(groupId: string, topic: string): Promise<Consumer> {
  const foreign = testKafka().consumer({ groupId, partitionAssigners: [otherProtocol], sessionTimeout: 10_000, heartbeatInterval: 500 });
  let joined = false;
  foreign.on(foreign.events.GROUP_JOIN, () => {
    joined = true;
  });
  await foreign.connect();
  await foreign.subscribe({ topics: [topic] });
  await foreign.run({ eachMessage: async () => undefined });
  await waitFor('the foreign member in the group', () => joined);
  return foreign;
}

test('integration: after kafkajs gives up on the Kafka consumer (an error it does not retry), the runtime starts it again and the messages are handled once', async () => {
  const topic = await createTopic(2);
  const c = consumer({ topics: topic });
  const foreign = await joinWithOtherProtocol(c.options.groupId, topic);
  try {
    const restarts = collect(c, 'restarting');
    const errors = collect(c, 'error');
    await c.start();
    await waitFor('kafkajs giving up and the runtime scheduling a start', () => restarts.length > 0);
    assert.ok(errors.some((e) => e.during === 'kafka consumer'), 'the give-up is reported as an error event too');
    assert.match(String((restarts[0]?.error as Error)?.message), /protocol/i, 'the error kafkajs gave up on');
    assert.ok((restarts[0]?.delayMs ?? -1) >= 0 && restarts[0]?.attempt === 1);
    // While the foreign member stays, each start fails the same way: attempts count up.
    await waitFor('a second give-up', () => restarts.length >= 2);
    assert.equal(restarts[1]?.attempt, 2);
  } finally {
    await foreign.disconnect();
  }
  const sent = await produce(topic, Array.from({ length: 20 }, (_, i) => ({ key: `k${i % 4}`, value: { amount: 1 } })));
  await waitFor('every message handled after the start that joined', () => c.stats().processed === sent.length, { timeoutMs: 60_000 });
  const counts = await effectCounts(db.pool, db.schema, topic);
  assert.deepEqual(sent.map((e) => counts.get(e.messageId as string)), sent.map(() => 1));
});

test('integration: stop() while a start waits out a minute of backoff returns, soft, without waiting for it (that no start follows: test/unit/kafkaRestart.test.ts)', async () => {
  const topic = await createTopic(1);
  const c = consumer({ topics: topic, retryBaseDelayMs: 60_000, retryMaxDelayMs: 60_000 });
  const foreign = await joinWithOtherProtocol(c.options.groupId, topic);
  try {
    const restarts = collect(c, 'restarting');
    await c.start();
    await waitFor('a start scheduled a minute out', () => restarts.length === 1);
    const stopped = await c.stop();
    assert.equal(stopped.hard, false);
    assert.equal(restarts.length, 1);
  } finally {
    await foreign.disconnect();
  }
});
