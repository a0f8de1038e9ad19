import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import kafkajs from 'kafkajs';
import { createRelay } from '../src/relay/relay.js';
import { enqueue, type OutboxMessage } from '../src/enqueue.js';
import { HEADERS } from '../src/shared/kafka.js';
import { createTestSchema, uniqueName, type TestSchema } from './helpers/db.js';
import { readTopic, testBrokers, testKafka } from './helpers/kafka.js';
import { spawnCli } from './helpers/processes.js';
import { waitFor } from './helpers/wait.js';
import { TEST_PRODUCER } from './helpers/producer.js';

// Dead letters end to end: a real relay parks a key, the CLI replays it once the cause is
// fixed. The commands alone, without a relay, are in deadLetters.integration.test.ts.

let db: TestSchema;
before(async () => {
  db = await createTestSchema('deadletterse2e');
});
after(async () => {
  await db.drop();
});

const T = (table: string): string => `"${db.schema}".${table}`;

async function parkedKeys(): Promise<Array<{ topic: string; key: string }>> {
  return (await db.pool.query(`SELECT topic, key FROM ${T('outbox_parked_keys')} ORDER BY topic, key`)).rows;
}

async function deadLetterIds(): Promise<number[]> {
  return (await db.pool.query(`SELECT id FROM ${T('outbox_dead_letters')} ORDER BY id`)).rows.map((r) => Number(r.id));
}

async function cli(args: string[]): Promise<{ code: number | string; stdout: string[]; all: string[] }> {
  const p = spawnCli(args, { DATABASE_URL: db.databaseUrl, OUTBOX_SCHEMA: db.schema, OUTBOX_LOG_LEVEL: 'silent' });
  let stdout = '';
  p.child.stdout?.on('data', (d: Buffer) => (stdout += d.toString()));
  const code = await p.exited;
  const lines = (t: string) => t.trim().split('\n').filter((l) => l !== '');
  return { code, stdout: lines(stdout), all: lines(p.output()) };
}

test('integration: a real relay parks a key on a record Kafka refuses; after the cause is fixed, a replay publishes it under its message id, then the key\'s waiting rows, in id order', async () => {
  // A topic that refuses records over 2000 bytes: the cause of the dead letter.
  const topic = uniqueName('replay_e2e');
  const admin = testKafka().admin();
  await admin.connect();
  try {
    await admin.createTopics({ topics: [{ topic, numPartitions: 2, configEntries: [{ name: 'max.message.bytes', value: '2000' }] }], waitForLeaders: true });
  } finally {
    await admin.disconnect();
  }
  const write = async (messages: OutboxMessage[]) => {
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      const r = await enqueue(client, messages, { schema: db.schema });
      await client.query('COMMIT');
      return r.map((x) => ({ id: x.id as number, messageId: x.messageId as string }));
    } finally {
      client.release();
    }
  };
  const rows = await write([
    { topic, key: 'a', payload: { n: 1 } },
    { topic, key: 'a', payload: { n: 2, pad: 'x'.repeat(3_000) } },
    { topic, key: 'a', payload: { n: 3 } },
    { topic, key: 'b', payload: { n: 1 } },
    { topic, key: 'a', payload: { n: 4 } },
  ]);
  const relay = createRelay({ producer: TEST_PRODUCER, databaseUrl: db.databaseUrl, kafkaBrokers: testBrokers(), schema: db.schema, deadLetterPolicy: 'park' });
  await relay.start();
  try {
    await waitFor('the big row to be dead-lettered and its key parked', async () => (await parkedKeys()).length === 1);
    assert.deepEqual(await deadLetterIds(), [rows[1]!.id]);
    await waitFor('b to be published past the parked key', async () => {
      const r = await db.pool.query(`SELECT sent_at FROM ${T('outbox')} WHERE id = $1`, [rows[3]!.id]);
      return r.rows[0]?.sent_at;
    });
    const stillWaiting = (await db.pool.query(`SELECT id FROM ${T('outbox')} WHERE key = 'a' AND sent_at IS NULL ORDER BY id`)).rows.map((r) => Number(r.id));
    assert.deepEqual(stillWaiting, [rows[2]!.id, rows[4]!.id], "a's later rows wait");

    // Fix the cause first, then replay, from the command line, slowly.
    const fix = testKafka().admin();
    await fix.connect();
    try {
      await fix.alterConfigs({ validateOnly: false, resources: [{ type: kafkajs.ConfigResourceTypes.TOPIC, name: topic, configEntries: [{ name: 'max.message.bytes', value: '1000000' }] }] });
    } finally {
      await fix.disconnect();
    }
    const replay = await cli(['dead-letters', 'replay', '--topic', topic, '--key', 'a', '--rate', '5', '--wait', '--wait-timeout', '60s']);
    assert.equal(replay.code, 0, replay.all.join('\n'));
    assert.match(replay.stdout.at(-2)!, /^queued 1 of 1 dead letters back into the outbox .*, not yet published; released 1 parked key$/);
    assert.equal(replay.stdout.at(-1), 'published 1, failed again 0', 'with --wait it says what became of the row');

    const messages = await readTopic(topic, (m) => m.filter((x) => x.key === 'a').length >= 4);
    const ofA = messages.filter((m) => m.key === 'a');
    assert.deepEqual(
      ofA.map((m) => Number(m.headers[HEADERS.outboxId])),
      [rows[0]!.id, rows[1]!.id, rows[2]!.id, rows[4]!.id],
      'the replayed row before the rows that waited for it, in id order',
    );
    assert.equal(ofA[1]!.headers[HEADERS.messageId], rows[1]!.messageId, 'the replayed row keeps its message id');
    assert.equal(JSON.parse(ofA[1]!.value!.toString()).n, 2);
    assert.deepEqual(await deadLetterIds(), []);
    assert.deepEqual(await parkedKeys(), []);
  } finally {
    await relay.stop();
  }
});

test('integration: a replay of a dead letter whose cause was not fixed says queued, not published; with --wait it reports the row failed again and exits 1', async () => {
  // A topic that refuses records over 2000 bytes, and stays so: the cause is not fixed.
  const topic = uniqueName('replay_unfixed');
  const admin = testKafka().admin();
  await admin.connect();
  try {
    await admin.createTopics({ topics: [{ topic, numPartitions: 1, configEntries: [{ name: 'max.message.bytes', value: '2000' }] }], waitForLeaders: true });
  } finally {
    await admin.disconnect();
  }
  const client = await db.pool.connect();
  let big: number;
  try {
    const [r] = await enqueue(client, [{ topic, key: 'u', payload: { pad: 'x'.repeat(3_000) } }], { schema: db.schema });
    big = r!.id as number;
  } finally {
    client.release();
  }
  const deadLetterOf = async (id: number) => (await db.pool.query(`SELECT dead_lettered_at, error_name FROM ${T('outbox_dead_letters')} WHERE id = $1`, [id])).rows[0];
  const relay = createRelay({ producer: TEST_PRODUCER, databaseUrl: db.databaseUrl, kafkaBrokers: testBrokers(), schema: db.schema, deadLetterPolicy: 'park' });
  await relay.start();
  try {
    const first = await waitFor('the big row to be dead-lettered', () => deadLetterOf(big));
    assert.equal(first.error_name, 'MESSAGE_TOO_LARGE', 'precondition: Kafka refused it');

    // Without --wait: what is known is that it was queued, not that it was published.
    const queued = await cli(['dead-letters', 'replay', String(big), '--rate', '5']);
    assert.equal(queued.code, 0, queued.all.join('\n'));
    assert.match(queued.stdout.at(-1)!, /^queued 1 of 1 dead letters back into the outbox in .*, not yet published; released 1 parked key$/);
    assert.ok(!queued.stdout.some((l) => /replayed|published 1/.test(l)), queued.stdout.join('\n'));
    await waitFor('the row to fail again', async () => (await deadLetterOf(big))?.dead_lettered_at > first.dead_lettered_at || undefined);
    const second = await deadLetterOf(big);

    // With --wait: it fails again, and the command says so and exits 1.
    const waited = await cli(['dead-letters', 'replay', String(big), '--rate', '5', '--wait', '--wait-timeout', '60s']);
    assert.equal(waited.code, 1, waited.all.join('\n'));
    assert.match(waited.stdout.at(-1)!, new RegExp(`^published 0, failed again 1 \\(${big}: MESSAGE_TOO_LARGE: `));
    assert.ok(waited.all.some((l) => /1 of 1 failed again and are dead letters again \(ids \d+\): fix the cause first/.test(l)), waited.all.join('\n'));
    assert.ok((await deadLetterOf(big)).dead_lettered_at > second.dead_lettered_at, 'precondition: the relay really tried it again');
    assert.equal((await parkedKeys()).filter((p) => p.topic === topic).length, 1, 'its key is parked again');
  } finally {
    await relay.stop();
  }
});
