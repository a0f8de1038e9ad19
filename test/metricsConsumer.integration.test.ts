import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { Registry } from 'prom-client';
import { createConsumer, type Consumer } from '../src/consumer/consumer.js';
import { OutboxError } from '../src/shared/errors.js';
import { instrumentConsumer, instrumentHandler } from '../src/metrics/consumerMetrics.js';
import { createTestSchema, uniqueName, type TestSchema } from './helpers/db.js';
import { createTopic, testKafka } from './helpers/kafka.js';
import { produce, type TestEvent } from './helpers/consumer.js';
import { metricValue } from './helpers/metrics.js';
import { waitFor } from './helpers/wait.js';

let db: TestSchema;
before(async () => {
  db = await createTestSchema('cmetrics');
});
const cleanups: Array<() => Promise<unknown>> = [];
after(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => undefined);
  await db.drop();
});

type Kind = 'ok' | 'stale' | 'flaky' | 'poison';

test('integration: consumer metrics count every outcome, time handlers and queueing, and report lag', async () => {
  const topic = await createTopic(1);
  const registry = new Registry();
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  let first = true;
  const handler = instrumentHandler<{ kind: Kind } | null>(async (message, context) => {
    if (first) {
      first = false;
      await gate; // held until the lag was sampled with everything still unconsumed
    }
    const kind = message.value?.kind;
    if (kind === 'stale') context.markStale();
    if (kind === 'flaky' && context.attempt === 1) throw new Error('transient, once');
    if (kind === 'poison') throw new OutboxError('never succeeds', { retriable: false });
  }, registry);
  const consumer: Consumer<{ kind: Kind } | null> = createConsumer({
    kafka: testKafka(),
    groupId: uniqueName('group'),
    topics: topic,
    pool: db.pool,
    schema: db.schema,
    handler,
    sessionTimeoutMs: 10_000,
    heartbeatIntervalMs: 500,
    maxWaitTimeMs: 100,
    retryBaseDelayMs: 20,
    retryMaxDelayMs: 100,
    // One message per transaction: no handler reruns after a neighbour fails, so the counts are exact.
    messagesPerTransaction: 1,
  });
  cleanups.push(() => consumer.stop());
  const inst = instrumentConsumer(consumer, { registry, lagSampleIntervalMs: 60_000 });
  cleanups.push(() => inst.close());

  const oks: TestEvent[] = Array.from({ length: 10 }, (_, i) => ({ key: `k${i}`, value: { kind: 'ok' } }));
  const sent = await produce(topic, [
    ...oks,
    { key: 's', value: { kind: 'stale' } },
    { key: 'f', value: { kind: 'flaky' } },
    { key: 'p', value: { kind: 'poison' } },
  ]);
  const assigned = new Promise<void>((resolve) => consumer.once('assigned', () => resolve()));
  await consumer.start();
  await assigned;
  await waitFor('first handler running', async () => (await metricValue(registry, 'outbox_consumer_messages_in_flight')) === 1);
  await inst.sampleLag();
  assert.equal(await metricValue(registry, 'outbox_consumer_lag_messages', { topic, partition: '0' }), 13, 'nothing committed yet: 13 behind');
  release();

  const outcome = (o: string): Promise<number> => metricValue(registry, 'outbox_consumer_messages_total', { topic, outcome: o });
  await waitFor('all 13 handled', async () => (await outcome('processed')) + (await outcome('stale')) + (await outcome('dead_lettered')) === 13);
  // The same ten again: a relay that published twice.
  await produce(topic, sent.slice(0, 10));
  await waitFor('ten duplicates', async () => (await outcome('duplicate')) === 10);

  assert.equal(await outcome('processed'), 11, 'ten ok and the flaky one; stale is counted apart');
  assert.equal(await outcome('stale'), 1);
  assert.equal(await outcome('retried'), 1);
  assert.equal(await outcome('dead_lettered'), 1);
  assert.equal(await metricValue(registry, 'outbox_consumer_dead_letters_total', { topic, error_class: 'permanent-error' }), 1);
  // Handler runs: 10 ok + stale + flaky twice + poison = 14; duplicates never reach it.
  assert.equal(await metricValue(registry, 'outbox_consumer_handler_duration_seconds_count', { topic }), 14);
  assert.equal(await metricValue(registry, 'outbox_consumer_time_in_queue_seconds_count', { topic }), 14);
  assert.ok((await metricValue(registry, 'outbox_consumer_time_in_queue_seconds_sum', { topic })) > 0);
  assert.equal(await metricValue(registry, 'outbox_consumer_messages_in_flight'), 0);
  assert.equal(consumer.stats().processed, 12, 'stats count stale as processed; the metric does not');

  await waitFor('lag back to 0', async () => {
    await inst.sampleLag();
    return (await metricValue(registry, 'outbox_consumer_lag_messages', { topic, partition: '0' })) === 0;
  });
  const text = await registry.metrics();
  for (const e of sent) assert.ok(!text.includes(e.messageId as string), 'no message id in /metrics');
  assert.match(text, /^process_cpu_seconds_total /m, 'process metrics too');

  await consumer.stop();
  assert.ok(!(await registry.metrics()).includes('outbox_consumer_lag_messages{'), 'lag series removed once stopped');
});
