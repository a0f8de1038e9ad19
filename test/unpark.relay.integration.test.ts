import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { createRelay } from '../src/relay/relay.js';
import { KeyNotParkedError, unparkKey } from '../src/commands/parkedKeys.js';
import { replayDeadLetters } from '../src/commands/deadLetters.js';
import { HEADERS } from '../src/shared/kafka.js';
import { createTestSchema, uniqueName, type TestSchema } from './helpers/db.js';
import { readTopic, testBrokers, testKafka } from './helpers/kafka.js';
import { writeCommitted } from './helpers/outbox.js';
import { spawnCli } from './helpers/processes.js';
import { waitFor } from './helpers/wait.js';
import { TEST_PRODUCER } from './helpers/producer.js';

// `dead-letters unpark` with a real relay: the key's waiting rows are published, in order,
// without the dead letter, which stays (as under the skip policy) and can be replayed later.

let db: TestSchema;
before(async () => {
  db = await createTestSchema('unpark');
});
after(async () => {
  await db.drop();
});

/** A topic whose broker-side max.message.bytes is small: bigger records are refused by Kafka itself. */
async function smallTopic(): Promise<string> {
  const topic = uniqueName('unpark');
  const admin = testKafka().admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic, numPartitions: 1, configEntries: [{ name: 'max.message.bytes', value: '2000' }] }], waitForLeaders: true });
  await admin.disconnect();
  return topic;
}

test('integration: unpark releases a parked key: the relay publishes its waiting rows in order without the dead letter, which stays (policy skip); a second unpark says the key is not parked', async () => {
  const topic = await smallTopic();
  const ids = await writeCommitted(db, [
    { topic, key: 'a', payload: { n: 1 } },
    { topic, key: 'a', payload: { pad: 'x'.repeat(5_000) } },
    { topic, key: 'a', payload: { n: 3 } },
    { topic, key: 'b', payload: { n: 1 } },
  ]);
  const relay = createRelay({ producer: TEST_PRODUCER, databaseUrl: db.databaseUrl, kafkaBrokers: testBrokers(), kafka: testKafka(), schema: db.schema, leaseTtlMs: 1_000 });
  await relay.start();
  try {
    await readTopic(topic, (m) => m.length >= 2);
    const parked = async (): Promise<number> => (await db.pool.query(`SELECT count(*)::int AS n FROM "${db.schema}".outbox_parked_keys WHERE topic = $1 AND key = 'a'`, [topic])).rows[0].n;
    await waitFor('key a parked', async () => (await parked()) === 1);
    const more = await writeCommitted(db, [{ topic, key: 'a', payload: { n: 4 } }]);
    // b flows past, a waits: the state unpark is for.
    const unsentA = async (): Promise<number[]> =>
      (await db.pool.query(`SELECT id FROM "${db.schema}".outbox WHERE topic = $1 AND key = 'a' AND sent_at IS NULL ORDER BY id`, [topic])).rows.map((r) => Number(r.id));
    assert.deepEqual(await unsentA(), [ids[2], more[0]]);

    const r = await unparkKey({ pool: db.pool, schema: db.schema, topic, key: 'a' });
    assert.equal(r.deadLetterId, ids[1]);
    assert.deepEqual(r.skippedDeadLetterIds, [ids[1]]);
    assert.ok(r.parkedAt instanceof Date);
    assert.ok(r.waiting <= 2 && !r.waitingCapped, 'the two waiting rows, unless the relay was quicker');

    const messages = await readTopic(topic, (m) => m.length >= 4);
    assert.deepEqual(
      messages.filter((m) => m.key === 'a').map((m) => Number(m.headers[HEADERS.outboxId])),
      [ids[0], ids[2], more[0]],
      "a's later rows in order, without the dead letter",
    );
    await waitFor('nothing of a left unsent', async () => (await unsentA()).length === 0);
    const dead = (await db.pool.query(`SELECT id, policy FROM "${db.schema}".outbox_dead_letters WHERE topic = $1`, [topic])).rows;
    assert.deepEqual(dead.map((d) => [Number(d.id), d.policy]), [[ids[1], 'skip']], 'the dead letter stays, as under the skip policy');
    assert.equal(await parked(), 0);

    await assert.rejects(unparkKey({ pool: db.pool, schema: db.schema, topic, key: 'a' }), (e: unknown) => e instanceof KeyNotParkedError && e.retriable === false && /is not parked; nothing was changed/.test(e.message));
    const cli = spawnCli(['dead-letters', 'unpark', '--topic', topic, '--key', 'a'], { DATABASE_URL: db.databaseUrl, OUTBOX_SCHEMA: db.schema });
    assert.equal(await cli.exited, 1, cli.output());
    assert.equal(cli.output().trim(), `outbox-relay: key "a" of topic "${topic}" is not parked; nothing was changed`);

    // A later replay publishes it after the key's later events (it is still too big here,
    // so it comes back as a dead letter of policy park: the key parks again behind it).
    const replay = await replayDeadLetters({ pool: db.pool, schema: db.schema, ids: [ids[1]!], rate: 100 });
    assert.equal(replay.replayed, 1);
  } finally {
    await relay.stop();
  }
});

test('integration: dead-letters unpark from the CLI names what it released; a missing --key is a usage error', async () => {
  const topic = uniqueName('cli_unpark');
  await db.pool.query(
    `INSERT INTO "${db.schema}".outbox_dead_letters (id, message_id, topic, key, created_at, attempts, reason, error_name, policy)
     VALUES (900001, gen_random_uuid(), $1, 'k', now(), 1, 'too big', 'MESSAGE_TOO_LARGE', 'park')`,
    [topic],
  );
  await db.pool.query(`INSERT INTO "${db.schema}".outbox_parked_keys (topic, key, dead_letter_id) VALUES ($1, 'k', 900001)`, [topic]);
  const cli = spawnCli(['dead-letters', 'unpark', '--topic', topic, '--key', 'k'], { DATABASE_URL: db.databaseUrl, OUTBOX_SCHEMA: db.schema });
  assert.equal(await cli.exited, 0, cli.output());
  assert.match(cli.output(), new RegExp(`^unparked key "k" of topic "${topic}" \\(parked since \\S+ behind dead letter 900001\\); 0 waiting rows are published next, without it\\. Dead letter 900001 stays \\(policy skip\\)`));
  const usage = spawnCli(['dead-letters', 'unpark', '--topic', topic], { DATABASE_URL: db.databaseUrl, OUTBOX_SCHEMA: db.schema });
  assert.equal(await usage.exited, 2, usage.output());
  assert.match(usage.output(), /--key/);
});
