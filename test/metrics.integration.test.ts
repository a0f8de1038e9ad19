import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { Kafka, logLevel } from 'kafkajs';
import { Registry } from 'prom-client';
import { createRelay, type Relay } from '../src/relay/relay.js';
import { enqueue } from '../src/enqueue.js';
import { BREAKER_STATE, instrumentRelay, relayMetrics, type RelayInstrumentation } from '../src/metrics/relayMetrics.js';
import { consumerMetrics } from '../src/metrics/consumerMetrics.js';
import { errorLabel } from '../src/metrics/errorLabel.js';
import { metricNames } from '../src/metrics/metricNames.js';
import { createTestSchema, type TestSchema } from './helpers/db.js';
import { createTopic, readTopic, testBrokers, testKafka } from './helpers/kafka.js';
import { metricValue } from './helpers/metrics.js';
import { waitFor } from './helpers/wait.js';
import { replayDeadLetters } from '../src/commands/deadLetters.js';
import { TEST_PRODUCER } from './helpers/producer.js';

let db: TestSchema;
before(async () => {
  db = await createTestSchema('metrics');
});
const cleanups: Array<() => Promise<unknown>> = [];
after(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => undefined);
  await db.drop();
});

function relayWith(kafka: Kafka | undefined, schema = db.schema, kafkaBrokers = testBrokers()): Relay {
  const relay = createRelay({
    producer: TEST_PRODUCER,
    // Other tests' transactions share this database: do not wait a minute behind one.
    horizonMaxWaitMs: 1_000,
    databaseUrl: db.databaseUrl,
    kafkaBrokers,
    schema,
    kafka,
    batchSize: 40,
    retryMaxDelayMs: 50,
    shutdownTimeoutMs: 5_000,
  });
  cleanups.push(() => relay.stop());
  return relay;
}

function instrument(relay: Relay): RelayInstrumentation {
  const inst = instrumentRelay(relay, { registry: new Registry(), sampleIntervalMs: 50 });
  cleanups.push(() => inst.close());
  return inst;
}

async function insertRows(schema: string, topic: string, count: number, ageSeconds: number, marker = 'payload'): Promise<void> {
  const client = await db.pool.connect();
  try {
    await client.query('BEGIN');
    await enqueue(
      client,
      Array.from({ length: count }, (_, i) => ({ topic, key: `key-${marker}-${i % 7}`, payload: { marker, i } })),
      { schema },
    );
    // Backdate them: the oldest pending age is then at least ageSeconds.
    await client.query(`UPDATE "${schema}".outbox SET created_at = now() - make_interval(secs => $1) WHERE sent_at IS NULL`, [ageSeconds]);
    await client.query('COMMIT');
  } finally {
    client.release();
  }
}

test('integration: backlog, oldest age, ingress and egress follow real traffic through a relay', async () => {
  const topicA = await createTopic(2);
  const topicB = await createTopic(1);
  const relay = relayWith(testKafka());
  const inst = instrument(relay);
  const r = inst.registry;

  const first = await inst.sample(); // sets the ingress baseline
  assert.equal(first.pending, 0);
  assert.equal(first.oldestAgeSeconds, 0);

  await insertRows(db.schema, topicA, 120, 30, 'secret-payload-marker');
  await insertRows(db.schema, topicB, 80, 30, 'other-marker');
  const waiting = await inst.sample();
  assert.equal(waiting.pending, 200);
  assert.equal(waiting.estimated, false);
  assert.ok(waiting.oldestAgeSeconds >= 30, `oldest age ${waiting.oldestAgeSeconds} >= 30 s while the backlog waits`);
  assert.equal(await metricValue(r, 'outbox_relay_pending_rows'), 200);
  assert.ok((await metricValue(r, 'outbox_relay_oldest_pending_age_seconds')) >= 30);
  assert.equal(await metricValue(r, 'outbox_relay_enqueued_rows_total'), 200, 'ingress counts the 200 enqueued rows');
  assert.equal(await metricValue(r, 'outbox_relay_published_rows_total'), 0);

  const batches: number[] = [];
  relay.on('batch', (b) => batches.push(b.count));
  await relay.start();
  await waitFor('200 rows published', async () => (await metricValue(r, 'outbox_relay_published_rows_total')) === 200);
  // The sampler runs by itself every 50 ms: the backlog drains to 0 and the age with it.
  await waitFor('backlog gauge at 0', async () => (await metricValue(r, 'outbox_relay_pending_rows')) === 0 && (await metricValue(r, 'outbox_relay_oldest_pending_age_seconds')) === 0);

  assert.equal(await metricValue(r, 'outbox_relay_batch_size_rows_sum'), 200);
  assert.equal(await metricValue(r, 'outbox_relay_batch_size_rows_count'), batches.length);
  assert.ok(batches.length >= 5, 'batch size 40: at least 5 batches');
  assert.equal(await metricValue(r, 'outbox_relay_batch_duration_seconds_count'), batches.length);
  assert.equal(await metricValue(r, 'outbox_relay_publish_errors_total'), 0);
  assert.equal(await metricValue(r, 'outbox_relay_running'), 1);
  await waitFor('shards owned reported', async () => relay.ownedShards.length > 0 && (await metricValue(r, 'outbox_relay_shards_owned')) === relay.ownedShards.length);

  // The messages really are on Kafka.
  const onA = await readTopic(topicA, (m) => m.length >= 120);
  assert.equal(new Set(onA.map((m) => m.headers['message-id'])).size, 120);

  // More traffic while it runs: ingress and egress both advance by 30.
  await insertRows(db.schema, topicB, 30, 0, 'late');
  await waitFor('230 published', async () => (await metricValue(r, 'outbox_relay_published_rows_total')) === 230);
  await waitFor('ingress 230', async () => (await metricValue(r, 'outbox_relay_enqueued_rows_total')) === 230);

  // No payloads, keys or message ids in the exposition; only bounded labels.
  const text = await r.metrics();
  assert.ok(!text.includes('secret-payload-marker') && !text.includes('key-'), 'no payload or key in /metrics');
  const labelNames = new Set([...text.matchAll(/^outbox_[a-z_]+\{([^}]*)\}/gm)].flatMap((m) => [...(m[1] as string).matchAll(/([a-z_]+)="/g)].map((x) => x[1])));
  for (const name of labelNames) assert.ok(['topic', 'error_class', 'le', 'outcome', 'partition', 'outbox'].includes(name as string), `label ${name}`);
  // One outbox per process: every relay metric is labelled outbox="default".
  assert.match(text, /^outbox_relay_running\{outbox="default"\} 1$/m);

  await relay.stop();
  assert.equal(await metricValue(r, 'outbox_relay_running'), 0);
  assert.equal(await metricValue(r, 'outbox_relay_shards_owned'), 0);
});

test('integration: a broker that refuses connections shows up as publish errors by class, retries and an open breaker', async () => {
  const other = await createTestSchema('metrics_err');
  cleanups.push(() => other.drop());
  // Nothing listens on port 1: every batch fails to connect.
  const dead = new Kafka({ clientId: 'dead', brokers: ['127.0.0.1:1'], logLevel: logLevel.NOTHING, retry: { retries: 0 }, connectionTimeout: 200 });
  const relay = relayWith(dead, other.schema, ['127.0.0.1:1']);
  const inst = instrument(relay);
  const r = inst.registry;
  await insertRows(other.schema, 'never-published', 5, 10);
  await relay.start();
  // Failures open the circuit breaker (it pauses claiming); each failure counts first.
  await waitFor('breaker open', async () => (await metricValue(r, 'outbox_relay_breaker_state')) === BREAKER_STATE.open);
  assert.equal(BREAKER_STATE.open, 1, 'the gauge is 0 closed, 1 open: the breaker has no other state');
  const text = await r.metrics();
  const classes = [...text.matchAll(/^outbox_relay_publish_errors_total\{error_class="([^"]+)",outbox="default"\} (\d+)/gm)].map((m) => m[1]);
  assert.ok(classes.length > 0, text);
  for (const c of classes) assert.match(c as string, /^(kafka|network)_[a-z_]+$/, 'a Kafka or network error class');
  assert.ok((await metricValue(r, 'outbox_relay_publish_errors_total')) >= 3);
  assert.ok((await metricValue(r, 'outbox_relay_retries_total')) >= 3, 'each failure schedules a retry');
  assert.ok((await metricValue(r, 'outbox_relay_consecutive_failures')) >= 1, 'failures in a row');
  assert.equal(await metricValue(r, 'outbox_relay_published_rows_total'), 0);
  await waitFor('backlog of 5 reported', async () => (await metricValue(r, 'outbox_relay_pending_rows')) === 5);
  await relay.abort();
});

test('integration: a row too large for Kafka is counted as a dead letter and its key as parked', async () => {
  const other = await createTestSchema('metrics_dl');
  cleanups.push(() => other.drop());
  const topic = await createTopic(1);
  const relay = createRelay({
    producer: TEST_PRODUCER,
    databaseUrl: db.databaseUrl,
    kafkaBrokers: testBrokers(),
    schema: other.schema,
    kafka: testKafka(),
    horizonMaxWaitMs: 1_000,
    maxMessageBytes: 1_024,
    deadLetterPolicy: 'park',
  });
  cleanups.push(() => relay.stop());
  const inst = instrument(relay);
  const r = inst.registry;
  const client = await other.pool.connect();
  try {
    await client.query('BEGIN');
    await enqueue(client, [{ topic, key: 'big', payload: { blob: 'x'.repeat(4_000) } }, { topic, key: 'big', payload: { small: true } }], { schema: other.schema });
    await enqueue(client, Array.from({ length: 5 }, (_, i) => ({ topic, key: `ok-${i}`, payload: { i } })), { schema: other.schema });
    await client.query('COMMIT');
  } finally {
    client.release();
  }
  await relay.start();
  await waitFor('one dead letter', async () => (await metricValue(r, 'outbox_relay_dead_letters_total', { topic })) === 1);
  await waitFor('5 published', async () => (await metricValue(r, 'outbox_relay_published_rows_total')) === 5);
  await waitFor('the key parked, its later row pending', async () => (await metricValue(r, 'outbox_relay_parked_keys')) === 1 && (await metricValue(r, 'outbox_relay_pending_rows')) === 1);
  assert.equal(await metricValue(r, 'outbox_relay_breaker_state'), BREAKER_STATE.closed, 'a dead letter is not a broker failure');
  assert.ok(!(await r.metrics()).includes('xxxxxxxx'), 'no payload in /metrics');
  await relay.stop();
});

test('integration: above the exact-count cap the backlog is the planner estimate, never below the cap', async () => {
  const other = await createTestSchema('metrics_cap');
  cleanups.push(() => other.drop());
  const relay = relayWith(testKafka(), other.schema); // never started: only sampled
  const inst = instrumentRelay(relay, { registry: new Registry(), sampleIntervalMs: 60_000, backlogCountCap: 50 });
  cleanups.push(() => inst.close());
  await insertRows(other.schema, 'capped', 400, 1);
  await other.pool.query(`ANALYZE "${other.schema}".outbox`);
  const s = await inst.sample();
  assert.equal(s.estimated, true);
  assert.ok(s.pending >= 50, `estimate ${s.pending} at least the cap`);
  assert.ok(s.pending > 200 && s.pending < 800, `estimate ${s.pending} near 400 after ANALYZE`);
  await insertRows(other.schema, 'capped', 20, 1);
  const exact = instrumentRelay(relay, { registry: new Registry(), sampleIntervalMs: 60_000, backlogCountCap: 1_000, processMetrics: false });
  cleanups.push(() => exact.close());
  const below = await exact.sample();
  assert.equal(below.pending, 420);
  assert.equal(below.estimated, false);
});

test('errorLabel: bounded names from error types, never from messages', () => {
  const pgError = Object.assign(new Error('terminating connection due to administrator command'), { code: '57P01' });
  assert.equal(errorLabel(pgError), 'postgres_57p01');
  assert.equal(errorLabel(Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' })), 'network_econnrefused');
  const protocol = Object.assign(new Error('not leader'), { name: 'KafkaJSProtocolError', type: 'NOT_LEADER_OR_FOLLOWER' });
  assert.equal(errorLabel(protocol), 'kafka_not_leader_or_follower');
  const wrapped = Object.assign(new Error('retries exceeded'), { name: 'KafkaJSNumberOfRetriesExceeded', cause: protocol });
  assert.equal(errorLabel(wrapped), 'kafka_not_leader_or_follower');
  assert.equal(errorLabel(Object.assign(new Error('x'), { name: 'KafkaJSConnectionError' })), 'kafka_connection_error');
  assert.equal(errorLabel(new TypeError('key-123 payload')), 'type_error');
  assert.equal(errorLabel(new Error('anything with key-123')), 'other');
  assert.equal(errorLabel('a string'), 'other');
});

test('metric names follow Prometheus conventions', () => {
  for (const name of metricNames()) {
    assert.match(name, /^outbox_(relay|consumer)_[a-z0-9_]+$/);
    if (name.endsWith('_total')) continue;
    assert.ok(!/_count$|_sum$|_bucket$/.test(name), name);
  }
  assert.ok(metricNames().includes('outbox_relay_oldest_pending_age_seconds'));
  // The names come from the definition tables: the same as what registers.
  const registry = new Registry();
  relayMetrics(registry);
  consumerMetrics(registry);
  const registered = registry.getMetricsAsArray().map((metric) => (metric as unknown as { name: string }).name);
  assert.deepEqual([...metricNames()].sort(), registered.sort());
  assert.equal(new Set(metricNames()).size, metricNames().length, 'no name defined twice');
});

test("integration: under a held snapshot the backlog sample steps over the rows published since (its walk starts at the last oldest pending row, never above the relay's settled id), a writer's rows still uncommitted at one sample are counted at the next (also once the horizon has settled them), and a dead letter replayed below it is counted by the next sample, with no walk from 0 in between", async () => {
  const other = await createTestSchema('metrics_held');
  cleanups.push(() => other.drop());
  await insertRows(other.schema, 'held', 20_000, 1);
  // A report's snapshot, taken before the rows are published: vacuum may remove none of their index entries.
  const report = await other.pool.connect();
  await report.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
  await report.query('SELECT count(*) FROM pg_class');
  cleanups.push(async () => {
    await report.query('ROLLBACK');
    report.release();
  });
  const { rows: ids } = await other.pool.query<{ id: string }>(`SELECT id FROM "${other.schema}".outbox ORDER BY id`);
  const firstUnsent = Number(ids[19_990]!.id);
  await other.pool.query(`UPDATE "${other.schema}".outbox SET sent_at = now() WHERE id < $1`, [firstUnsent]);
  // Vacuum can remove none of the published rows' entries while the report runs.
  await other.pool.query(`VACUUM "${other.schema}".outbox`);
  // The sampler's own pool, its queries recorded.
  const pool = new (await import('pg')).default.Pool({ connectionString: other.databaseUrl, max: 1 });
  cleanups.push(() => pool.end());
  const walks: number[] = [];
  const query = pool.query.bind(pool) as (text: string, params?: unknown[]) => Promise<unknown>;
  (pool as unknown as { query: typeof query }).query = (text: string, params?: unknown[]) => {
    if (/ORDER BY id\s+LIMIT 1/.test(text)) walks.push(Number(params?.[0]));
    return query(text, params);
  };
  const relay = relayWith(testKafka(), other.schema); // never started: only sampled
  // Its horizon, as a running relay's would report it: every row written so far is final.
  let settledId = Number(ids.at(-1)!.id);
  const source = new Proxy(relay, { get: (target, p) => (p === 'settledId' ? settledId : Reflect.get(target, p, target)) });
  const inst = instrumentRelay(source, { registry: new Registry(), sampleIntervalMs: 60_000, pool, processMetrics: false });
  cleanups.push(() => inst.close());
  assert.equal((await inst.sample()).pending, 10);
  await waitFor('a sample that starts above 0', async () => (await inst.sample()) && walks.at(-1)! > 0, { timeoutMs: 30_000 });
  assert.equal(walks.at(-1), firstUnsent - 1, 'it starts just below the oldest pending row');
  assert.equal((await inst.sample()).pending, 10);
  // What stepping over saves: the same query from 0 reads every entry the snapshot keeps.
  const buffers = async (from: number): Promise<number> => {
    const { rows } = await other.pool.query<{ 'QUERY PLAN': Array<{ Plan: { 'Shared Hit Blocks': number; 'Shared Read Blocks': number } }> }>(
      `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT id FROM "${other.schema}".outbox WHERE sent_at IS NULL AND id > $1 ORDER BY id LIMIT 1`,
      [from],
    );
    const plan = rows[0]!['QUERY PLAN'][0]!.Plan;
    return plan['Shared Hit Blocks'] + plan['Shared Read Blocks'];
  };
  const [fromZero, fromOldest] = [await buffers(0), await buffers(firstUnsent - 1)];
  assert.ok(fromZero > 20 * fromOldest, `buffers from 0: ${fromZero}, from the oldest pending row: ${fromOldest}`);
  // A dead letter replayed under its old id, below where the samples start: the replay
  // bumps the claim floors' generation, so the next sample's walks start from 0 (in SQL:
  // the parameter stays) and count it.
  const poison = Number(ids[5]!.id);
  await other.pool.query(`WITH gone AS (DELETE FROM "${other.schema}".outbox WHERE id = $1 RETURNING *)
    INSERT INTO "${other.schema}".outbox_dead_letters (id, message_id, topic, key, payload, payload_bytes, headers, created_at, dedup_key, attempts, reason, error_name, policy)
    SELECT id, message_id, topic, key, payload, payload_bytes, headers, created_at, dedup_key, 1, 'test', 'test', 'skip' FROM gone`, [poison]);
  assert.equal((await inst.sample()).pending, 10, 'the dead letter is not pending');
  const replay = await replayDeadLetters({ databaseUrl: other.databaseUrl, schema: other.schema, ids: [poison], rate: 1000 });
  assert.deepEqual(replay.replayedIds, [poison]);
  const afterReplay = await inst.sample();
  assert.equal(afterReplay.pending, 11, 'the replayed row is counted by the first sample after the replay');
  assert.equal(walks.indexOf(0), 0, 'only the first sample was asked to walk from 0');
  assert.ok(walks.slice(1).every((from) => from > 0), `samples after the first start above 0: ${walks.join(', ')}`);
  // Nothing pending, and a writer's transaction open across a sample: its ids are at or
  // below the sequence's value that sample reads, above the relay's settled id; the next
  // sample's walk starts at the settled id, so their commit is counted at once, not at the
  // next full walk.
  await other.pool.query(`UPDATE "${other.schema}".outbox SET sent_at = now() WHERE sent_at IS NULL`);
  assert.equal((await inst.sample()).pending, 0);
  const writer = await other.pool.connect();
  try {
    await writer.query('BEGIN');
    await writer.query(`INSERT INTO "${other.schema}".outbox (topic, key, payload) SELECT 'held', 'w' || g, '{}' FROM generate_series(1, 5) AS g`);
    const during = await waitFor('an incremental sample with the writer open', async () => {
      const sample = await inst.sample();
      return walks.at(-1)! > 0 ? sample : undefined;
    }, { timeoutMs: 30_000 });
    assert.equal(during.pending, 0, 'the open transaction is not counted yet');
    await writer.query('COMMIT');
  } finally {
    writer.release();
  }
  // The relay's horizon settles the committed rows before the next sample (it probes every
  // 10 ms, the sampler every few seconds): that sample must still count them. It once
  // started its walk at the sequence's value the sample above had read, above these rows,
  // and a relay that could not publish them looked idle (/readyz's publishing check never
  // failed: test/readiness.relay.integration.test.ts, once in CI).
  settledId = Number((await other.pool.query<{ id: string }>(`SELECT max(id)::text AS id FROM "${other.schema}".outbox`)).rows[0]!.id);
  const incremental = await waitFor('an incremental sample after the commit', async () => {
    const sample = await inst.sample();
    return walks.at(-1)! > 0 ? sample : undefined;
  }, { timeoutMs: 30_000 });
  assert.equal(incremental.pending, 5, 'the committed rows are counted by the next sample, not the next full walk');
});
