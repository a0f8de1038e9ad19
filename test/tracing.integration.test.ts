// OpenTelemetry end to end, on real Postgres and Kafka, with the real SDK and its
// in-memory exporter: one trace from the writer's span through enqueue, the relay's
// PRODUCER span and the consumer's CONSUMER span to the handler's own span.
//
// The first test runs before anything is registered (OpenTelemetry's globals can be set
// once per process; node's runner gives each test file its own process).
import { test, before, after } from 'node:test';
import { randomUUID } from 'node:crypto';
import assert from 'node:assert/strict';
import { context, propagation, trace, SpanKind, SpanStatusCode, type Span } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { CompositePropagator, W3CBaggagePropagator, W3CTraceContextPropagator } from '@opentelemetry/core';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { createRelay, type Relay } from '../src/relay/relay.js';
import type { RelayOptions } from '../src/relay/options.js';
import { partitionOf } from '../src/relay/partitioner.js';
import { createConsumer, type Consumer } from '../src/consumer/consumer.js';
import { enqueue } from '../src/enqueue.js';
import { HEADERS } from '../src/shared/kafka.js';
import { createTestSchema, uniqueName, type TestSchema } from './helpers/db.js';
import { createTopic, readTopic, testBrokers, testKafka, type ReadMessage } from './helpers/kafka.js';
import { waitFor } from './helpers/wait.js';
import { TEST_PRODUCER } from './helpers/producer.js';

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

function relay(extra: Partial<RelayOptions> = {}): Relay {
  const r = createRelay({ producer: TEST_PRODUCER, databaseUrl: db.databaseUrl, kafkaBrokers: testBrokers(), schema: db.schema, ...extra });
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

// The SDK, registered by the first test that needs it (after the test that runs without one).
const exporter = new InMemorySpanExporter();
let provider: BasicTracerProvider | undefined;
function registerSdk(): void {
  if (provider) return;
  provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  assert.ok(context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable()));
  assert.ok(propagation.setGlobalPropagator(new CompositePropagator({ propagators: [new W3CTraceContextPropagator(), new W3CBaggagePropagator()] })));
  assert.ok(trace.setGlobalTracerProvider(provider));
}
after(async () => {
  await provider?.shutdown();
});

test('integration: one trace from the writer through the relay to the handler, with retries, dead letters and dedup hits on the consumer spans', async () => {
  registerSdk();
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
  // And a message its handler never sees: not JSON, dead-lettered as it is decoded.
  const undecodableId = randomUUID();
  await producer.send({ topic, messages: [{ key: 'order-5', value: 'not json', headers: { [HEADERS.messageId]: undecodableId, [HEADERS.contentType]: 'application/json' } }] });
  await producer.disconnect();
  await waitFor('the duplicate seen', () => c.stats().duplicates === 1);
  await waitFor('the undecodable message dead-lettered', () => c.stats().deadLettered === 2);

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
  assert.equal(publish.attributes['messaging.operation.name'], 'publish');
  assert.equal(publish.attributes['messaging.kafka.message.key'], 'order-1');
  assert.equal(publish.attributes['outbox.id'], Number(okMessage.headers[HEADERS.outboxId]));
  assert.equal(publish.status.code, SpanStatusCode.UNSET);
  assert.equal(okMessage.headers.traceparent, `00-${traceId}-${publish.spanContext().spanId}-01`, 'the message carries the producer span');
  assert.equal(okMessage.headers.baggage, 'tenant=acme', 'baggage travels on');
  assert.equal(okMessage.headers['x-user'], 'mine');

  // The request: a CLIENT span `send`, linked to the messages' PRODUCER spans.
  const send = spans().find((s) => s.name === 'send' && s.links.some((l) => l.context.spanId === publish.spanContext().spanId));
  assert.ok(send, 'a send span linked to the publish span');
  assert.equal(send.kind, SpanKind.CLIENT);
  assert.equal(send.attributes['messaging.system'], 'kafka');
  assert.equal(send.attributes['messaging.operation.type'], 'send');
  assert.equal(send.attributes['messaging.operation.name'], 'send');
  assert.equal(send.attributes['messaging.batch.message_count'], send.links.length);
  // The relay chose the partition: on the publish span, and one request per partition.
  assert.equal(publish.attributes['messaging.destination.partition.id'], String(okMessage.partition));
  assert.equal(publish.attributes['messaging.kafka.destination.partition'], okMessage.partition);
  assert.equal(send.attributes['messaging.destination.partition.id'], String(okMessage.partition));
  assert.equal(send.attributes['messaging.destination.name'], topic);
  const linked = new Set(send.links.map((l) => l.context.spanId));
  for (const s of spans().filter((x) => linked.has(x.spanContext().spanId))) {
    assert.equal(s.attributes['messaging.destination.partition.id'], String(okMessage.partition), 'a send span carries one partition');
  }

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
  assert.equal(process.attributes['messaging.destination.partition.id'], String(okMessage.partition));
  assert.equal(process.attributes['messaging.operation.type'], 'process');
  assert.equal(process.attributes['messaging.kafka.consumer.group'], c.options.groupId);
  assert.equal(process.attributes['messaging.kafka.message.key'], 'order-1');
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

  // Dead-lettered before its handler ran: a span of its own, status ERROR, a dead_letter event.
  await waitFor('the undecodable message span', () => byMessage(`process ${topic}`, undecodableId).length > 0);
  const [undecodable] = byMessage(`process ${topic}`, undecodableId);
  assert.equal(undecodable?.status.code, SpanStatusCode.ERROR);
  assert.equal(undecodable?.events.find((e) => e.name === 'dead_letter')?.attributes?.['outbox.dead_letter.reason'], 'undecodable');

  // The caller's own traceparent: the relay's span continues that trace instead.
  const [foreignPublish] = byMessage(`publish ${topic}`, foreignId);
  assert.equal(foreignPublish?.spanContext().traceId, foreignTraceId);
  const foreignRuns = byMessage(`process ${topic}`, foreignId);
  assert.ok(foreignRuns.length >= 1);
  for (const run of foreignRuns) assert.equal(parentOf(run), foreignPublish?.spanContext().spanId);
});

/** A topic whose broker-side max.message.bytes is small: Kafka itself refuses bigger records. */
async function smallTopic(partitions: number): Promise<string> {
  const topic = uniqueName('small');
  const admin = testKafka().admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic, numPartitions: partitions, configEntries: [{ name: 'max.message.bytes', value: '2000' }] }], waitForLeaders: true });
  await admin.disconnect();
  return topic;
}

/** A key that lands on `partition` of a topic of `count` partitions. */
function keyOn(partition: number, count: number, prefix: string): string {
  for (let i = 0; ; i++) if (partitionOf(`${prefix}${i}`, count) === partition) return `${prefix}${i}`;
}

test('integration: a message Kafka refuses ends its one publish span with ERROR and a dead_letter event; each produce request is one send span of one partition, ERROR with outbox.refused_message_count when refused', async () => {
  registerSdk();
  // The earlier tests' relays stop first: this one owns every shard, so the rows are one batch.
  for (const stop of stops.splice(0).reverse()) await stop();
  const tracer = trace.getTracer('test-app');
  const topic = await smallTopic(2);
  const k = keyOn(0, 2, 'k'); // three rows on partition 0: ok, too big for the broker, ok
  const m = keyOn(1, 2, 'm'); // one row on partition 1
  let writer!: Span;
  const ids = await tracer.startActiveSpan('write', async (span) => {
    writer = span;
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      const written = await enqueue(
        client,
        [
          { topic, key: k, payload: { n: 1 } },
          { topic, key: k, payload: { pad: 'x'.repeat(5_000) } },
          { topic, key: k, payload: { n: 3 } },
          { topic, key: m, payload: { n: 1 } },
        ],
        { schema: db.schema },
      );
      // A row that cannot be a message at all (empty key): dead-lettered before it is sent.
      const carrier: Record<string, string> = {};
      propagation.inject(context.active(), carrier);
      const { rows } = await client.query<{ message_id: string }>(
        `INSERT INTO "${db.schema}".outbox (topic, key, payload, headers) VALUES ($1, '', '{}', $2) RETURNING message_id`,
        [topic, carrier],
      );
      await client.query('COMMIT');
      return [...written.map((r) => r.messageId as string), rows[0]!.message_id];
    } finally {
      client.release();
      span.end();
    }
  });
  const [okId, bigId, heldId, otherId, emptyKeyId] = ids as [string, string, string, string, string];

  // One worker: the five rows are one batch, two partitions, so two requests at first.
  const r = relay({ batchesInFlight: 1, deadLetterPolicy: 'park' });
  await r.start();
  const messages: ReadMessage[] = await readTopic(topic, (x) => x.length >= 2);
  await waitFor('the dead letters', async () => {
    const { rows } = await db.pool.query(`SELECT count(*)::int AS n FROM "${db.schema}".outbox_dead_letters WHERE topic = $1`, [topic]);
    return rows[0].n === 2;
  });
  const ours = (): ReadableSpan[] => exporter.getFinishedSpans().filter((s) => s.attributes['messaging.destination.name'] === topic);
  const publishOf = (id: string): ReadableSpan[] => ours().filter((s) => s.name === `publish ${topic}` && s.attributes['messaging.message.id'] === id);
  await waitFor('a span per row', () => ids.every((id) => publishOf(id).length > 0));
  for (const id of ids) assert.equal(publishOf(id).length, 1, `one publish span for each row (${id === okId ? 'the one sent twice' : id})`);
  const [ok, big, held, other, emptyKey] = ids.map((id) => publishOf(id)[0]!) as [ReadableSpan, ReadableSpan, ReadableSpan, ReadableSpan, ReadableSpan];
  for (const s of [ok, big, held, other, emptyKey]) {
    assert.equal(s.spanContext().traceId, writer.spanContext().traceId);
    assert.equal(s.parentSpanContext?.spanId, writer.spanContext().spanId);
  }

  // Acknowledged: status unset, the partition the relay chose, its context in the message.
  assert.deepEqual(messages.map((x) => x.headers[HEADERS.messageId]).sort(), [okId, otherId].sort());
  for (const [span, id] of [[ok, okId], [other, otherId]] as const) {
    const message = messages.find((x) => x.headers[HEADERS.messageId] === id)!;
    assert.equal(span.status.code, SpanStatusCode.UNSET);
    assert.equal(span.attributes['messaging.destination.partition.id'], String(message.partition));
    assert.equal(span.attributes['messaging.kafka.destination.partition'], message.partition);
    assert.equal(message.headers.traceparent, `00-${span.spanContext().traceId}-${span.spanContext().spanId}-01`);
  }
  assert.equal(ok.attributes['messaging.destination.partition.id'], '0');
  assert.equal(other.attributes['messaging.destination.partition.id'], '1');

  // Refused by Kafka: ERROR, the exception, a dead_letter event naming Kafka's error.
  assert.equal(big.status.code, SpanStatusCode.ERROR);
  assert.match(big.status.message ?? '', /MESSAGE_TOO_LARGE/);
  assert.ok(big.events.some((e) => e.name === 'exception'), 'the exception is recorded');
  assert.equal(big.events.find((e) => e.name === 'dead_letter')?.attributes?.['outbox.dead_letter.error_name'], 'MESSAGE_TOO_LARGE');
  // Held behind the parked key: not published, so not a success.
  assert.equal(held.status.code, SpanStatusCode.ERROR);
  assert.match(held.status.message ?? '', /parked the key/);
  assert.equal(held.events.some((e) => e.name === 'dead_letter'), false);
  // Dead-lettered before it was sent: a span of its own, no request.
  assert.equal(emptyKey.status.code, SpanStatusCode.ERROR);
  assert.equal(emptyKey.events.find((e) => e.name === 'dead_letter')?.attributes?.['outbox.dead_letter.error_name'], 'validation:empty_key');

  // The requests: partition 0's three rows (refused as a whole), partition 1's row, then
  // partition 0's rows again one at a time up to the refused one.
  const sends = ours().filter((s) => s.name === 'send');
  const describe = (s: ReadableSpan): string => {
    const linked = s.links.map((l) => [ok, big, held, other].find((p) => p.spanContext().spanId === l.context.spanId));
    const names = linked.map((p) => (p === ok ? 'ok' : p === big ? 'big' : p === held ? 'held' : p === other ? 'other' : '?'));
    return `${s.attributes['messaging.destination.partition.id']}:${names.join('+')}:${s.status.code === SpanStatusCode.ERROR ? 'error' : 'ok'}`;
  };
  assert.deepEqual(sends.map(describe).sort(), ['0:big:error', '0:ok+big+held:error', '0:ok:ok', '1:other:ok']);
  for (const s of sends) {
    assert.equal(s.kind, SpanKind.CLIENT);
    assert.equal(s.attributes['messaging.batch.message_count'], s.links.length);
    assert.equal(s.attributes['messaging.kafka.destination.partition'], Number(s.attributes['messaging.destination.partition.id']));
    const refused = s.status.code === SpanStatusCode.ERROR;
    assert.equal(s.attributes['outbox.refused_message_count'], refused ? s.links.length : undefined);
    assert.equal(s.events.some((e) => e.name === 'exception'), refused);
  }
});
