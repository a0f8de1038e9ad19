// OpenTelemetry end to end, on real Postgres and Kafka, with the real SDK and its
// in-memory exporter: one trace from the writer's span through enqueue, the relay's
// PRODUCER span and the consumer's CONSUMER span to the handler's own span.
//
// The first test runs before anything is registered (OpenTelemetry's globals can be set
// once per process; node's runner gives each test file its own process).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { context, propagation, trace, SpanKind, SpanStatusCode, type Span } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { CompositePropagator, W3CBaggagePropagator, W3CTraceContextPropagator } from '@opentelemetry/core';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { createRelay, type Relay } from '../src/relay/relay.js';
import { createConsumer, type Consumer } from '../src/consumer/consumer.js';
import { enqueue } from '../src/enqueue.js';
import { HEADERS } from '../src/shared/kafka.js';
import { createTestSchema, uniqueName, type TestSchema } from './helpers/db.js';
import { createTopic, readTopic, testBrokers, testKafka } from './helpers/kafka.js';
import { waitFor } from './helpers/wait.js';

let db: TestSchema;
before(async () => {
  db = await createTestSchema('tracing');
});
after(async () => {
  await db.drop();
});

const stops: Array<() => Promise<void>> = [];
after(async () => {
  for (const stop of stops.reverse()) await stop();
});

function relay(): Relay {
  const r = createRelay({ databaseUrl: db.databaseUrl, kafkaBrokers: testBrokers(), schema: db.schema });
  stops.push(async () => void (await r.stop()));
  return r;
}

function consumer<V>(topic: string, handler: Parameters<typeof createConsumer<V>>[0]['handler'], extra: Partial<Parameters<typeof createConsumer<V>>[0]> = {}): Consumer<V> {
  const c = createConsumer<V>({
    kafka: testKafka(),
    groupId: uniqueName('group'),
    pool: db.pool,
    schema: db.schema,
    topics: topic,
    handler,
    sessionTimeoutMs: 10_000,
    heartbeatIntervalMs: 500,
    maxWaitTimeMs: 100,
    retryBaseDelayMs: 20,
    retryMaxDelayMs: 100,
    ...extra,
  });
  stops.push(async () => void (await c.stop()));
  return c;
}

async function rowHeaders(messageId: string): Promise<Record<string, string> | null> {
  const { rows } = await db.pool.query<{ headers: Record<string, string> | null }>(`SELECT headers FROM "${db.schema}".outbox WHERE message_id = $1`, [messageId]);
  return rows[0]?.headers ?? null;
}

test('integration: with no tracer provider or propagator registered, nothing is added to headers, and messages flow as before', async () => {
  const topic = await createTopic(1);
  const client = await db.pool.connect();
  let ids: string[];
  try {
    await client.query('BEGIN');
    const results = await enqueue(
      client,
      [
        { topic, key: 'k', payload: { n: 1 } },
        { topic, key: 'k', payload: { n: 2 }, headers: { 'x-user': 'mine' } },
      ],
      { schema: db.schema },
    );
    await client.query('COMMIT');
    ids = results.map((r) => r.messageId as string);
  } finally {
    client.release();
  }
  assert.equal(await rowHeaders(ids[0]!), null, 'no headers column for a row without headers');
  assert.deepEqual(await rowHeaders(ids[1]!), { 'x-user': 'mine' });

  const r = relay();
  await r.start();
  const seen: Array<Record<string, string>> = [];
  const c = consumer<{ n: number }>(topic, async (message) => {
    seen.push({ ...message.headers });
    assert.equal(trace.getActiveSpan(), undefined, 'no active span in the handler');
  });
  await c.start();
  await waitFor('both messages handled', () => c.stats().processed === 2);
  const messages = await readTopic(topic, (m) => m.length >= 2);
  for (const m of [...messages.map((x) => x.headers), ...seen]) {
    assert.deepEqual(
      Object.keys(m).filter((h) => ['traceparent', 'tracestate', 'baggage'].includes(h)),
      [],
      'no trace context headers',
    );
  }
  assert.equal(messages[1]?.headers['x-user'], 'mine');
});

test('integration: one trace from the writer through the relay to the handler, with retries, dead letters and dedup hits on the consumer spans', async () => {
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  assert.ok(context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable()));
  assert.ok(propagation.setGlobalPropagator(new CompositePropagator({ propagators: [new W3CTraceContextPropagator(), new W3CBaggagePropagator()] })));
  assert.ok(trace.setGlobalTracerProvider(provider));
  const tracer = trace.getTracer('test-app');

  const topic = await createTopic(2);
  const deadLetterTopic = await createTopic(1, undefined, 'dlt');
  // A traceparent of some other system, set by the caller: it must be kept as it is.
  const foreignTraceId = '4bf92f3577b34da6a3ce929d0e0e4736';
  const foreign = `00-${foreignTraceId}-00f067aa0ba902b7-01`;

  // 1. The writer: a span of its own, with baggage, around the transaction.
  let writer!: Span;
  const ids = await context.with(propagation.setBaggage(context.active(), propagation.createBaggage({ tenant: { value: 'acme' } })), () =>
    tracer.startActiveSpan('place order', async (span) => {
      writer = span;
      const client = await db.pool.connect();
      try {
        await client.query('BEGIN');
        const results = await enqueue(
          client,
          [
            { topic, key: 'order-1', payload: { kind: 'ok' }, headers: { 'x-user': 'mine' } },
            { topic, key: 'order-2', payload: { kind: 'flaky' } },
            { topic, key: 'order-3', payload: { kind: 'poison' } },
            { topic, key: 'order-4', payload: { kind: 'ok' }, headers: { traceparent: foreign } },
          ],
          { schema: db.schema },
        );
        await client.query('COMMIT');
        return results.map((r) => r.messageId as string);
      } finally {
        client.release();
        span.end();
      }
    }),
  );
  const [okId, flakyId, poisonId, foreignId] = ids as [string, string, string, string];
  const traceId = writer.spanContext().traceId;

  // enqueue wrote the writer's context, and left the caller's headers alone.
  const okRow = await rowHeaders(okId);
  assert.equal(okRow?.['x-user'], 'mine');
  assert.equal(okRow?.traceparent, `00-${traceId}-${writer.spanContext().spanId}-01`);
  assert.equal(okRow?.baggage, 'tenant=acme');
  assert.equal((await rowHeaders(foreignId))?.traceparent, foreign, 'a traceparent the caller set is kept');

  // 2. The relay and 3. the consumer.
  const r = relay();
  await r.start();
  const handled: Array<{ id: string; handlerSpan: string; baggage: string | undefined }> = [];
  let flakyFailures = 0;
  const c = consumer<{ kind: string }>(
    topic,
    async (message) => {
      await tracer.startActiveSpan('handler work', async (span) => {
        try {
          if (message.value.kind === 'flaky' && flakyFailures++ === 0) throw Object.assign(new Error('downstream timed out'), { retriable: true });
          if (message.value.kind === 'poison') throw Object.assign(new Error('order has no lines'), { retriable: false });
          handled.push({
            id: message.messageId as string,
            handlerSpan: span.spanContext().spanId,
            baggage: propagation.getBaggage(context.active())?.getEntry('tenant')?.value,
          });
        } finally {
          span.end();
        }
      });
    },
    { deadLetterTopic, maxAttempts: 3 },
  );
  await c.start();
  await waitFor('three messages handled and one dead-lettered', () => c.stats().processed === 3 && c.stats().deadLettered === 1);

  // A relay that published again: the same message once more, a dedup hit.
  const published = await readTopic(topic, (m) => m.length >= 4);
  const okMessage = published.find((m) => m.headers[HEADERS.messageId] === okId)!;
  const producer = testKafka().producer();
  await producer.connect();
  await producer.send({ topic, messages: [{ key: okMessage.key, value: okMessage.value, headers: okMessage.headers, partition: okMessage.partition }] });
  await producer.disconnect();
  await waitFor('the duplicate seen', () => c.stats().duplicates === 1);

  const spans = (): ReadableSpan[] => exporter.getFinishedSpans();
  const byMessage = (name: string, id: string): ReadableSpan[] => spans().filter((s) => s.name === name && s.attributes['messaging.message.id'] === id);
  await waitFor('the duplicate span', () => spans().some((s) => s.events.some((e) => e.name === 'duplicate')));
  const parentOf = (s: ReadableSpan): string | undefined => s.parentSpanContext?.spanId;

  // The relay's PRODUCER span: child of the writer's, its context in the message headers.
  const [publish] = byMessage(`publish ${topic}`, okId);
  assert.ok(publish, 'a publish span for the message');
  assert.equal(publish.kind, SpanKind.PRODUCER);
  assert.equal(publish.spanContext().traceId, traceId, 'same trace as the writer');
  assert.equal(parentOf(publish), writer.spanContext().spanId, 'child of the writer span');
  assert.equal(publish.instrumentationScope.name, 'outbox-relay');
  assert.equal(publish.attributes['messaging.system'], 'kafka');
  assert.equal(publish.attributes['messaging.destination.name'], topic);
  assert.equal(publish.attributes['messaging.operation.type'], 'send');
  assert.equal(publish.status.code, SpanStatusCode.UNSET);
  assert.equal(okMessage.headers.traceparent, `00-${traceId}-${publish.spanContext().spanId}-01`, 'the message carries the producer span');
  assert.equal(okMessage.headers.baggage, 'tenant=acme', 'baggage travels on');
  assert.equal(okMessage.headers['x-user'], 'mine');

  // The request: a CLIENT span `send`, linked to the messages' PRODUCER spans.
  const send = spans().find((s) => s.name === 'send' && s.links.some((l) => l.context.spanId === publish.spanContext().spanId));
  assert.ok(send, 'a send span linked to the publish span');
  assert.equal(send.kind, SpanKind.CLIENT);
  assert.equal(send.attributes['messaging.system'], 'kafka');
  assert.equal(send.attributes['messaging.batch.message_count'], send.links.length);

  // The consumer's span: child of the producer's; the handler's own span inside it. (A
  // handler can run more than once: with savepoints 'on-failure' a later message's
  // failure in the same transaction reruns it. Each run has its own span.)
  const work = handled.find((h) => h.id === okId)!;
  const workSpan = spans().find((s) => s.spanContext().spanId === work.handlerSpan)!;
  const process = byMessage(`process ${topic}`, okId).find((s) => s.spanContext().spanId === parentOf(workSpan));
  const duplicate = byMessage(`process ${topic}`, okId).find((s) => s.events.some((e) => e.name === 'duplicate'));
  assert.ok(process && duplicate, 'a process span for the handler run and one for the dedup hit');
  assert.equal(process.kind, SpanKind.CONSUMER);
  assert.equal(process.spanContext().traceId, traceId, 'one trace from writer to handler');
  assert.equal(parentOf(process), publish.spanContext().spanId, 'child of the producer span');
  assert.equal(process.attributes['messaging.system'], 'kafka');
  assert.equal(process.attributes['messaging.destination.name'], topic);
  assert.equal(process.attributes['messaging.kafka.destination.partition'], okMessage.partition);
  assert.equal(process.attributes['messaging.kafka.message.offset'], Number(okMessage.offset));
  assert.equal(process.attributes['messaging.consumer.group.name'], c.options.groupId);
  assert.equal(process.attributes['outbox.consumer.attempt'], 1);
  assert.equal(parentOf(workSpan), process.spanContext().spanId, "the handler's spans nest under the consumer span");
  assert.equal(workSpan.spanContext().traceId, traceId);
  assert.equal(work.baggage, 'acme', 'the handler sees the writer baggage');

  // The dedup hit: a span of its own, child of the same producer span, with an event.
  assert.equal(parentOf(duplicate), publish.spanContext().spanId);
  assert.equal(duplicate.status.code, SpanStatusCode.UNSET);
  assert.equal(duplicate.attributes['outbox.consumer.duplicate'], true);

  // The retried message: a failed run (status ERROR, exception, `retry` event), then a
  // second run, attempt 2, both children of its producer span.
  const [flakyPublish] = byMessage(`publish ${topic}`, flakyId);
  const flakyRuns = byMessage(`process ${topic}`, flakyId);
  for (const run of flakyRuns) assert.equal(parentOf(run), flakyPublish?.spanContext().spanId);
  // (A run rolled back with its transaction for another message's failure is ERROR too,
  // marked rolled_back: test/consumer.tracing.integration.test.ts.)
  const failedRuns = flakyRuns.filter((s) => s.status.code === SpanStatusCode.ERROR && s.attributes['outbox.consumer.rolled_back'] !== true);
  assert.equal(failedRuns.length, 1, 'one failed run');
  const [failedRun] = failedRuns as [ReadableSpan];
  assert.equal(failedRun.attributes['outbox.consumer.attempt'], 1);
  assert.ok(failedRun.events.some((e) => e.name === 'exception'));
  assert.deepEqual(failedRun.events.find((e) => e.name === 'retry')?.attributes, { 'outbox.consumer.attempt': 1, 'outbox.consumer.next_attempt': 2 });
  const retriedRuns = flakyRuns.filter((s) => s.attributes['outbox.consumer.attempt'] === 2);
  assert.ok(retriedRuns.length >= 1, 'a second attempt');
  for (const run of retriedRuns) {
    assert.equal(run.status.code, run.attributes['outbox.consumer.rolled_back'] === true ? SpanStatusCode.ERROR : SpanStatusCode.UNSET);
    assert.ok(run.events.some((e) => e.name === 'retry'), 'marked as a retry');
  }

  // The poison message: status ERROR and a `dead_letter` event.
  const poisonRun = byMessage(`process ${topic}`, poisonId).find((s) => s.status.code === SpanStatusCode.ERROR);
  assert.equal(poisonRun?.status.code, SpanStatusCode.ERROR);
  assert.equal(poisonRun?.events.find((e) => e.name === 'dead_letter')?.attributes?.['outbox.dead_letter.reason'], 'permanent-error');
  assert.equal(poisonRun?.spanContext().traceId, traceId);

  // The caller's own traceparent: the relay's span continues that trace instead.
  const [foreignPublish] = byMessage(`publish ${topic}`, foreignId);
  assert.equal(foreignPublish?.spanContext().traceId, foreignTraceId);
  const foreignRuns = byMessage(`process ${topic}`, foreignId);
  assert.ok(foreignRuns.length >= 1);
  for (const run of foreignRuns) assert.equal(parentOf(run), foreignPublish?.spanContext().spanId);

  await provider.shutdown();
});
