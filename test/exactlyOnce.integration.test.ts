import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import diagnosticsChannel from 'node:diagnostics_channel';
import { createRelay } from '../src/relay/relay.js';
import { resolveRelayOptions } from '../src/relay/options.js';
import { setUpExactlyOnce, exactlyOnceNames } from '../src/relay/exactlyOnceSetup.js';
import { KAFKA_COMMITTED_CHANNEL, PROGRESS_READ_CHANNEL } from '../src/relay/transactionalUnit.js';
import { innermost, kafkaErrorType } from '../src/relay/publishErrors.js';
import { HEADERS } from '../src/shared/kafka.js';
import { createTestSchema, uniqueName, type TestSchema } from './helpers/db.js';
import { createTopic, testBrokers, testKafka } from './helpers/kafka.js';
import { readCommittedWithKafka, type CommittedRecord } from './helpers/committedReader.js';
import { waitFor } from './helpers/wait.js';
import { sentCount, writeCommitted } from './helpers/outbox.js';
import { pino } from 'pino';
import { silentLogger } from '../src/shared/logger.js';
import { TEST_PRODUCER } from './helpers/producer.js';
import { fileURLToPath } from 'node:url';
import { registryProxy, schemaRegistryUrl } from './helpers/registry.js';

// Exactly-once delivery (docs/exactly-once.md) on a real broker: what a read_committed
// reader gets (Kafka's own consumer: test/helpers/committedReader.ts), across a relay stopped between Kafka's commit and Postgres' COMMIT, and
// Kafka's own fencing of a unit's previous producer, on the adapter under test (both, over
// CI's two passes).

let db: TestSchema;
before(async () => {
  db = await createTestSchema('eos');
});
after(async () => {
  await db.drop();
});

const relayOptions = (prefix: string, extra: Record<string, unknown> = {}) => ({
  producer: TEST_PRODUCER,
  delivery: 'exactly-once' as const,
  transactionalIdPrefix: prefix,
  databaseUrl: db.databaseUrl,
  kafkaBrokers: testBrokers(),
  schema: db.schema,
  batchSize: 50,
  ...extra,
});

/** Deliveries per outbox id, and whether each key's first deliveries come in id order. */
function tally(records: CommittedRecord[]): { count: Map<number, number>; outOfOrder: string[] } {
  const count = new Map<number, number>();
  const highest = new Map<string, number>();
  const outOfOrder: string[] = [];
  for (const m of records) {
    const id = m.outboxId!;
    count.set(id, (count.get(id) ?? 0) + 1);
    if (id < (highest.get(m.key!) ?? 0)) outOfOrder.push(`${m.key}: ${id} after ${highest.get(m.key!)}`);
    else highest.set(m.key!, id);
  }
  return { count, outOfOrder };
}

test('integration: exactly-once: every row reaches a read_committed reader once, each key in id order, and the units hold their progress in Kafka', async () => {
  const topic = await createTopic(3);
  const prefix = uniqueName('eos-e2e');
  const ids = await writeCommitted(db, Array.from({ length: 600 }, (_, i) => ({ topic, key: `k${i % 37}`, payload: { i } })));
  const relay = createRelay(relayOptions(prefix));
  await relay.start();
  try {
    await waitFor('every row sent', async () => (await sentCount(db, topic)) === ids.length);
  } finally {
    await relay.stop();
  }
  const { count, outOfOrder } = tally(await readCommittedWithKafka(topic));
  assert.deepEqual([...count.keys()].sort((a, b) => a - b), ids, 'every row delivered');
  assert.deepEqual([...count.values()].filter((n) => n > 1), [], 'none twice');
  assert.deepEqual(outOfOrder, [], 'each key in id order');

  const names = exactlyOnceNames(prefix, db.schema);
  const admin = testKafka().admin();
  await admin.connect();
  try {
    const [progress] = await admin.fetchOffsets({ groupId: names.progressGroup, topics: [names.progressTopic] });
    const committed = progress!.partitions.filter((p) => p.metadata);
    // 37 keys hash over the shards of every unit (2 by default).
    assert.equal(committed.length, resolveRelayOptions(relayOptions(prefix)).exactlyOnceUnits, `units with progress: ${committed.length}`);
  } finally {
    await admin.disconnect();
  }
});

/**
 * A relay stopped hard right after its first Kafka commit, before the batch's Postgres
 * COMMIT (on the channel the unit announces each commit on, synchronously, inside the
 * batch), then a second relay on the same outbox. `plant` empties the ids the second
 * relay's units read from their progress: what the relay would do without the progress.
 */
async function crashAfterKafkaCommit(
  plant: boolean,
  extra: Record<string, unknown> = {},
): Promise<{ rows: number[]; count: Map<number, number>; outOfOrder: string[]; markedAtStart: number; firstCommitIds: number }> {
  const topic = await createTopic(2);
  const prefix = uniqueName('eos-crash');
  const rows = await writeCommitted(db, Array.from({ length: 200 }, (_, i) => ({ topic, key: `c${i % 11}`, payload: { i } })));
  // A short lease: the second relay takes the first one's units over when it expires.
  const first = createRelay(relayOptions(prefix, { leaseTtlMs: 1_500, ...extra }));
  let committedInKafka = 0;
  let firstCommitIds = 0;
  const onCommit = (message: unknown): void => {
    if (committedInKafka++ === 0) firstCommitIds = (message as { ids: number[] }).ids.length;
    void first.abort();
  };
  diagnosticsChannel.subscribe(KAFKA_COMMITTED_CHANNEL, onCommit);
  try {
    await first.start();
    await waitFor('a Kafka commit', () => committedInKafka > 0);
    await first.stop();
  } finally {
    diagnosticsChannel.unsubscribe(KAFKA_COMMITTED_CHANNEL, onCommit);
  }
  assert.equal(await sentCount(db, topic), 0, 'the first relay marked nothing sent: its batch rolled back after Kafka committed it');

  let markedAtStart = 0;
  const onProgress = (message: unknown): void => {
    const m = message as { ids: number[] };
    if (plant) m.ids = [];
  };
  diagnosticsChannel.subscribe(PROGRESS_READ_CHANNEL, onProgress);
  const second = createRelay(relayOptions(prefix, { leaseTtlMs: 1_500, ...extra, logger: countingLogger((n) => (markedAtStart += n)) }));
  try {
    await second.start();
    await waitFor('every row sent', async () => (await sentCount(db, topic)) === rows.length);
  } finally {
    diagnosticsChannel.unsubscribe(PROGRESS_READ_CHANNEL, onProgress);
    await second.stop();
  }
  return { rows, ...tally(await readCommittedWithKafka(topic)), markedAtStart, firstCommitIds };
}

test("integration: exactly-once: the same crash after a transaction of several claims (batch size 5, a 5 s interval): the rows of every claim in it are marked from the progress, none published again", async () => {
  const { rows, count, outOfOrder, markedAtStart, firstCommitIds } = await crashAfterKafkaCommit(false, { batchSize: 5, transactionIntervalMs: 5_000 });
  assert.ok(firstCommitIds > 5, `the Kafka transaction the relay died after held ${firstCommitIds} rows, more than one claim's 5`);
  assert.ok(markedAtStart >= firstCommitIds, `the second relay marked ${markedAtStart} rows from the progress`);
  assert.deepEqual([...count.keys()].sort((a, b) => a - b), rows, 'every row delivered');
  assert.deepEqual([...count.entries()].filter(([, n]) => n > 1), [], 'none twice');
  assert.deepEqual(outOfOrder, [], 'each key in id order');
});

/** Drain `rows` rows under `extra`; the rows each Kafka transaction committed, and the read_committed tally. */
async function drainCountingTransactions(
  rows: number,
  extra: Record<string, unknown>,
): Promise<{ ids: number[]; perTransaction: number[]; count: Map<number, number>; outOfOrder: string[]; ackedBeforeCommit: number[] }> {
  const topic = await createTopic(3);
  const ids = await writeCommitted(db, Array.from({ length: rows }, (_, i) => ({ topic, key: `t${i % 23}`, payload: { i } })));
  const perTransaction: number[] = [];
  const committedAtMs = new Map<number, number>();
  const onCommit = (message: unknown): void => {
    const { ids: inIt } = message as { ids: number[] };
    perTransaction.push(inIt.length);
    for (const id of inIt) committedAtMs.set(id, Date.now());
  };
  // A batch counts as acknowledged when its transaction committed, not at its last send.
  const ackedBeforeCommit: number[] = [];
  diagnosticsChannel.subscribe(KAFKA_COMMITTED_CHANNEL, onCommit);
  const relay = createRelay(relayOptions(uniqueName('eos-interval'), extra));
  relay.on('batch', (e) => {
    if (!(e.ackedAtMs >= (committedAtMs.get(e.firstId) ?? Infinity))) ackedBeforeCommit.push(e.firstId);
  });
  try {
    await relay.start();
    await waitFor('every row sent', async () => (await sentCount(db, topic)) === ids.length);
  } finally {
    diagnosticsChannel.unsubscribe(KAFKA_COMMITTED_CHANNEL, onCommit);
    await relay.stop();
  }
  return { ids, perTransaction, ...tally(await readCommittedWithKafka(topic)), ackedBeforeCommit };
}

test('integration: exactly-once: a backlog goes out in transactions of several full claims while the interval lasts (batch size 10, 400 rows, 5 s), in one claim each at --transaction-interval-ms 0; every row once and in order either way, each batch acknowledged at its commit', async () => {
  for (const transactionIntervalMs of [5_000, 0]) {
    const { ids, perTransaction, count, outOfOrder, ackedBeforeCommit } = await drainCountingTransactions(400, { batchSize: 10, transactionIntervalMs });
    assert.deepEqual(ackedBeforeCommit, [], "no batch event's ackedAtMs before its transaction's commit");
    assert.equal(perTransaction.reduce((a, b) => a + b, 0), ids.length, `interval ${transactionIntervalMs}: the transactions committed each row once`);
    const largest = Math.max(...perTransaction);
    if (transactionIntervalMs > 0) assert.ok(largest > 10, `interval ${transactionIntervalMs}: the largest transaction held ${largest} rows, more than one claim`);
    else assert.ok(largest <= 10, `interval 0: the largest transaction held ${largest} rows, one claim at most`);
    assert.deepEqual([...count.keys()].sort((a, b) => a - b), ids, 'every row delivered');
    assert.deepEqual([...count.values()].filter((n) => n > 1), [], 'none twice');
    assert.deepEqual(outOfOrder, [], 'each key in id order');
  }
});

/** A logger that passes on the markedSent counts of its "exactly-once unit started" lines. */
function countingLogger(marked: (n: number) => void) {
  return pino({ level: 'info' }, {
    write(line: string) {
      const n = (JSON.parse(line) as { markedSent?: number }).markedSent;
      if (typeof n === 'number') marked(n);
    },
  });
}

test("integration: exactly-once: a relay stopped between Kafka's commit and Postgres' COMMIT; the next relay marks those rows sent from the unit's progress and publishes none of them again", async () => {
  const { rows, count, outOfOrder, markedAtStart } = await crashAfterKafkaCommit(false);
  assert.ok(markedAtStart > 0, 'the second relay found rows in its progress that Kafka had and Postgres had not marked');
  assert.deepEqual([...count.keys()].sort((a, b) => a - b), rows, 'every row delivered');
  assert.deepEqual([...count.entries()].filter(([, n]) => n > 1), [], 'none twice');
  assert.deepEqual(outOfOrder, [], 'each key in id order');
});

test('integration: exactly-once: without the progress (planted: its ids emptied) the same crash publishes the committed batch again, so the check above can fail', async () => {
  const { rows, count } = await crashAfterKafkaCommit(true);
  assert.deepEqual([...count.keys()].sort((a, b) => a - b), rows, 'every row delivered');
  const twice = [...count.values()].filter((n) => n > 1).length;
  assert.ok(twice > 0, 'the batch Kafka had committed went out a second time');
});

test("integration: exactly-once: a unit started by another relay fences this one in Kafka: its next transaction fails and a read_committed reader sees none of it", async () => {
  const topic = await createTopic(1);
  const prefix = uniqueName('eos-fence');
  const options = resolveRelayOptions(relayOptions(prefix));
  const a = await setUpExactlyOnce(testKafka(), options, 'relayaaaaaaa', silentLogger());
  const b = await setUpExactlyOnce(testKafka(), options, 'relaybbbbbbb', silentLogger());
  const message = (id: number) => ({ id, message_id: `m${id}`, topic, key: 'k', value: `{"id":${id}}`, headers: { [HEADERS.outboxId]: String(id) } });
  try {
    const stale = a.units[1]!;
    await stale.start();
    stale.beginBatch();
    assert.deepEqual(await stale.send([message(1)]), [{ acknowledged: true }], 'the first owner publishes');
    await stale.commit();
    // The unit moves: its new owner starts the producer under the same transactional id.
    const fresh = b.units[1]!;
    assert.deepEqual(await fresh.start(), [1], "the new owner reads the old owner's progress");
    stale.beginBatch();
    // Kafka's error inside either client's wrapper (kafkajs: the error's type; platformatic: an AggregateError's inner ones).
    const fenced = (error: unknown): boolean =>
      [error, ...innermost(error)].some((e) => /fenced|epoch|PRODUCER_FENCED|INVALID_PRODUCER_EPOCH/i.test(`${(e as Error)?.message} ${kafkaErrorType(e) ?? ''}`));
    await assert.rejects(
      (async () => {
        await stale.send([message(2)]);
        await stale.commit();
      })(),
      fenced,
      'the fenced producer cannot commit',
    );
    fresh.beginBatch();
    assert.deepEqual(await fresh.send([message(3)]), [{ acknowledged: true }], 'the new owner publishes');
    await fresh.commit();
  } finally {
    await a.close();
    await b.close();
  }
  const ids = (await readCommittedWithKafka(topic)).map((m) => m.outboxId);
  assert.deepEqual(ids, [1, 3], "the fenced relay's message is not among the committed ones");
});

test('integration: exactly-once: a relay refuses to start on a progress topic of another size (another unit count), naming the setting that fits it, and starts with it; and refuses a transaction timeout above the brokers\' transaction.max.timeout.ms', async () => {
  const prefix = uniqueName('eos-refuse');
  const admin = testKafka().admin();
  await admin.connect();
  try {
    await admin.createTopics({ topics: [{ topic: exactlyOnceNames(prefix, db.schema).progressTopic, numPartitions: 3 }], waitForLeaders: true });
  } finally {
    await admin.disconnect();
  }
  await assert.rejects(createRelay(relayOptions(prefix)).start(), /progress topic .* has 3 partitions, one per unit of shards .* --exactly-once-units is 2: .* Set --exactly-once-units 3;/);
  const topic = await createTopic(2);
  const ids = await writeCommitted(db, Array.from({ length: 30 }, (_, i) => ({ topic, key: `u${i}`, payload: { i } })));
  const relay = createRelay(relayOptions(prefix, { exactlyOnceUnits: 3 }));
  await relay.start();
  try {
    await waitFor('every row sent by the three units', async () => (await sentCount(db, topic)) === ids.length);
  } finally {
    await relay.stop();
  }
  await assert.rejects(
    createRelay(relayOptions(uniqueName('eos-timeout'), { transactionTimeoutMs: 1_000_000 })).start(),
    /--transaction-timeout-ms 1000000 is above the brokers' transaction.max.timeout.ms \(900000\)/,
  );
});

test('integration: exactly-once: a row Kafka refuses for good (bigger than its topic allows) is dead-lettered alone; the rest of its batch reaches a read_committed reader once', async () => {
  const topic = await createTopic(2);
  const admin = testKafka().admin();
  await admin.connect();
  try {
    await admin.alterConfigs({ validateOnly: false, resources: [{ type: 2 /* TOPIC */, name: topic, configEntries: [{ name: 'max.message.bytes', value: '2000' }] }] });
  } finally {
    await admin.disconnect();
  }
  const rows = await writeCommitted(db, [
    ...Array.from({ length: 6 }, (_, i) => ({ topic, key: `p${i % 3}`, payload: { i } })),
    { topic, key: 'poison', payload: { blob: 'x'.repeat(5_000) } },
    ...Array.from({ length: 6 }, (_, i) => ({ topic, key: `p${i % 3}`, payload: { i: 6 + i } })),
  ]);
  const poison = rows[6]!;
  const relay = createRelay(relayOptions(uniqueName('eos-poison')));
  await relay.start();
  const deadLetters = async (): Promise<{ id: number; error_name: string }[]> =>
    (await db.pool.query<{ id: number; error_name: string }>(`SELECT id::int, error_name FROM "${db.schema}".outbox_dead_letters WHERE topic = $1`, [topic])).rows;
  try {
    await waitFor('every other row sent and the big one dead-lettered', async () => (await sentCount(db, topic)) === rows.length - 1 && (await deadLetters()).length === 1);
  } finally {
    await relay.stop();
  }
  assert.deepEqual(await deadLetters(), [{ id: poison, error_name: 'MESSAGE_TOO_LARGE' }]);
  const { count, outOfOrder } = tally(await readCommittedWithKafka(topic));
  assert.deepEqual([...count.keys()].sort((a, b) => a - b), rows.filter((id) => id !== poison), 'every other row delivered, the big one not');
  assert.deepEqual([...count.values()].filter((n) => n > 1), [], 'none twice');
  assert.deepEqual(outOfOrder, [], 'each key in id order');
});

test('integration: exactly-once: under a steady trickle (5 rows every 10 ms, 300 commits) no batch fails, and a transaction whose claim was not full commits at once: many transactions, not one per unit per 10 s interval', async () => {
  const topic = await createTopic(6);
  const relay = createRelay(relayOptions(uniqueName('eos-trickle'), { batchSize: 500, transactionIntervalMs: 10_000 }));
  // Kafka refuses a progress commit sent beside the records for a few ms while it adds their
  // partitions to the transaction; the unit retries it (src/relay/progressCommit.ts), so
  // no batch fails for it.
  const batchErrors: string[] = [];
  relay.on('batchError', (e) => batchErrors.push(e.error.message));
  const perTransaction: number[] = [];
  const onCommit = (message: unknown): void => {
    perTransaction.push((message as { ids: number[] }).ids.length);
  };
  diagnosticsChannel.subscribe(KAFKA_COMMITTED_CHANNEL, onCommit);
  const ids: number[] = [];
  await relay.start();
  try {
    for (let i = 0; i < 300; i++) {
      ids.push(...(await writeCommitted(db, Array.from({ length: 5 }, (_, k) => ({ topic, key: `s${(i * 5 + k) % 41}`, payload: { i, k } })))));
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    await waitFor('every row sent', async () => (await sentCount(db, topic)) === ids.length);
  } finally {
    diagnosticsChannel.unsubscribe(KAFKA_COMMITTED_CHANNEL, onCommit);
    await relay.stop();
  }
  assert.deepEqual(batchErrors, [], 'no batch failed');
  // Transactions held open for the interval would number about one per unit per 10 s (2 to 4 here, at the default 2 units).
  assert.ok(perTransaction.length > 50, `${perTransaction.length} transactions committed ${ids.length} rows`);
  const { count, outOfOrder } = tally(await readCommittedWithKafka(topic));
  assert.deepEqual([...count.keys()].sort((a, b) => a - b), ids, 'every row delivered');
  assert.deepEqual([...count.values()].filter((n) => n > 1), [], 'none twice');
  assert.deepEqual(outOfOrder, [], 'each key in id order');
});

test('integration: exactly-once: a relay starts at once beside a transaction a killed relay left open on unit 0 (its progress commit pending), not after the transaction timeout, and publishes every row once, the dead transaction none', async () => {
  const topic = await createTopic(2);
  const prefix = uniqueName('eos-open');
  const extra = { transactionTimeoutMs: 60_000 };
  const dead = await setUpExactlyOnce(testKafka(), resolveRelayOptions(relayOptions(prefix, extra)), 'relaydeadxxx', silentLogger());
  const ghost = 2_000_000_000;
  const unit = dead.units[0]!;
  await unit.start();
  unit.beginBatch();
  // The transaction opens with this send (and, on the default client, the progress commit beside it).
  assert.deepEqual(await unit.send([{ id: ghost, message_id: `m${ghost}`, topic, key: 'k', value: '{}', headers: { [HEADERS.outboxId]: String(ghost) } }]), [{ acknowledged: true }]);
  // The relay dies here: no commit, no abort; its producer is left as it is.
  const ids = await writeCommitted(db, Array.from({ length: 40 }, (_, i) => ({ topic, key: `o${i}`, payload: { i } })));
  const relay = createRelay(relayOptions(prefix, extra));
  const before = Date.now();
  await relay.start();
  const startMs = Date.now() - before;
  try {
    await waitFor('every row sent', async () => (await sentCount(db, topic)) === ids.length);
  } finally {
    await relay.stop();
    await dead.close();
  }
  // Before the start-up check read the progress group without require_stable, it waited for the open transaction's 60 s timeout.
  assert.ok(startMs < 15_000, `the relay took ${startMs} ms to start`);
  const { count, outOfOrder } = tally(await readCommittedWithKafka(topic));
  assert.deepEqual([...count.keys()].sort((a, b) => a - b), ids, "every row delivered, the dead transaction's message not");
  assert.deepEqual([...count.values()].filter((n) => n > 1), [], 'none twice');
  assert.deepEqual(outOfOrder, [], 'each key in id order');
});

test('integration: exactly-once with encodings, the schema registry down mid-stream: cached topics go on, a new topic\'s rows wait (none dead-lettered), and a read_committed reader gets every row once, each key in order', async () => {
  const registry = await registryProxy(await schemaRegistryUrl());
  const [cached, fresh] = [await createTopic(2, testBrokers(), 'eosenc'), await createTopic(2, testBrokers(), 'eosenc')];
  const order = (n: number) => ({ orderId: n, customer: `c${n}`, amount: n + 0.5, express: false, note: null, items: [] });
  const rows = (topic: string, from: number) => Array.from({ length: 12 }, (_, i) => ({ topic, key: `k${i % 3}`, payload: order(from + i) }));
  const relay = createRelay(relayOptions(uniqueName('eos-enc'), {
    retryMaxDelayMs: 300,
    encodings: {
      schemaRegistry: { url: registry.url, timeoutMs: 2_000 },
      // A pattern: each topic's schema is registered at its first row, so a new topic needs the registry.
      rules: [{ topic: '/eosenc_.*/', value: { format: 'avro', schema: { file: fileURLToPath(new URL('./fixtures/encodings/order.avsc', import.meta.url)) } } }],
    },
  }));
  const written: number[] = [];
  const freshIds: number[] = [];
  // Batches published while the registry was down: the ones that must have left rows waiting.
  const batchesWhileDown: Array<{ firstId: number; lastId: number; cached: number }> = [];
  relay.on('batch', (b) => registry.down && batchesWhileDown.push({ firstId: b.firstId, lastId: b.lastId, cached: b.topics[cached!] ?? 0 }));
  await relay.start();
  try {
    written.push(...(await writeCommitted(db, rows(cached!, 0))));
    await waitFor('the first rows sent', async () => (await sentCount(db, cached!)) === 12);
    registry.down = true;
    // One transaction, both topics interleaved: batches hold rows that go out and rows that wait.
    const later = rows(cached!, 12).flatMap((row, i) => [row, rows(fresh!, 100)[i]!]);
    const laterIds = await writeCommitted(db, later);
    written.push(...laterIds);
    freshIds.push(...laterIds.filter((_, i) => i % 2 === 1));
    await waitFor("the cached topic's rows sent with the registry down", async () => (await sentCount(db, cached!)) === 24);
    await waitFor("the new topic's rows tried and left waiting", async () => {
      const { rows: waiting } = await db.pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM "${db.schema}".outbox WHERE topic = $1 AND sent_at IS NULL AND attempts > 0 AND last_error LIKE '%schema registry%'`,
        [fresh!],
      );
      return waiting[0]!.n === 12;
    });
    // The situation under test: a batch that published the cached topic's rows around the new topic's waiting ones.
    assert.ok(
      batchesWhileDown.some((b) => b.cached > 0 && freshIds.some((id) => id > b.firstId && id < b.lastId)),
      `a batch mixed rows that went out and rows that waited: ${JSON.stringify(batchesWhileDown)}`,
    );
    registry.down = false;
    await waitFor("the new topic's rows sent once the registry answers", async () => (await sentCount(db, fresh!)) === 12);
  } finally {
    await relay.stop();
    await registry.close();
  }
  const { rows: dead } = await db.pool.query(`SELECT id FROM "${db.schema}".outbox_dead_letters WHERE topic = ANY($1)`, [[cached!, fresh!]]);
  assert.deepEqual(dead, [], 'nothing dead-lettered for the outage');
  // Per topic: the two topics' keys have the same names.
  const tallies = [tally(await readCommittedWithKafka(cached!)), tally(await readCommittedWithKafka(fresh!))];
  const counts = tallies.flatMap((t) => [...t.count]);
  assert.deepEqual(counts.map(([id]) => id).sort((x, y) => x - y), written.sort((x, y) => x - y), 'every row on the wire');
  assert.deepEqual(counts.filter(([, n]) => n !== 1), [], 'each once');
  assert.deepEqual(tallies.flatMap((t) => t.outOfOrder), []);
});
