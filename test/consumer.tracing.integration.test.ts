// The consumer's spans when a run of a handler is rolled back and redone: with
// savepoints 'on-failure', a failing message rolls its whole transaction back and the
// messages before it run again. The rolled-back runs' spans say so (rolled_back, status
// ERROR); the redo's spans carry outbox.consumer.run=2 and redone=true (docs/operations.md,
// Tracing). With the real SDK and its in-memory exporter.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { context, propagation, trace, SpanStatusCode } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { createTestSchema, type TestSchema } from './helpers/db.js';
import { createTopic } from './helpers/kafka.js';
import { waitFor } from './helpers/wait.js';
import { applyBatchEffect, applyEffect, committedOffset, createEffectTables, produce, testConsumers } from './helpers/consumer.js';

const exporter = new InMemorySpanExporter();
let db: TestSchema;
before(async () => {
  db = await createTestSchema('constracing');
  await createEffectTables(db.pool, db.schema);
  assert.ok(context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable()));
  assert.ok(propagation.setGlobalPropagator(new W3CTraceContextPropagator()));
  assert.ok(trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] })));
});
after(async () => {
  await db.drop();
});

type Value = { amount: number; poison?: boolean };

const consumer = testConsumers(() => db);

function poisonError(): Error {
  return Object.assign(new Error('amount out of range'), { name: 'ValidationError' });
}

/** The `process <topic>` spans of one offset, in the order they ended. */
function spansOf(topic: string, offset: number): ReadableSpan[] {
  return exporter.getFinishedSpans().filter((s) => s.name === `process ${topic}` && s.attributes['messaging.kafka.message.offset'] === offset);
}

test('integration: with savepoints on failure, the runs rolled back with their transaction end rolled_back (status ERROR) and the redo is marked outbox.consumer.run=2, redone=true', async () => {
  const topic = await createTopic(1);
  await produce(topic, Array.from({ length: 5 }, (_, i) => ({ key: 'k', value: { amount: 1, poison: i === 3 } })));
  const c = consumer<Value>({
    topics: topic,
    messagesPerTransaction: 5,
    handler: async (message, ctx) => {
      await applyEffect(db.schema, message, ctx);
      if (message.value.poison) throw poisonError();
    },
  });
  await c.start();
  await waitFor('offset at the end', async () => (await committedOffset(c.options.groupId, topic)) === '5');
  for (const offset of [0, 1, 2]) {
    const [first, redo, ...more] = spansOf(topic, offset);
    assert.ok(first && redo && more.length === 0, `two runs of offset ${offset}: ${spansOf(topic, offset).length}`);
    assert.equal(first.attributes['outbox.consumer.rolled_back'], true, `offset ${offset}: the first run is marked rolled back`);
    assert.equal(first.status.code, SpanStatusCode.ERROR);
    assert.ok(first.events.some((e) => e.name === 'rolled_back'));
    assert.equal(first.attributes['outbox.consumer.run'], undefined);
    assert.equal(redo.attributes['outbox.consumer.run'], 2, `offset ${offset}: the redo is run 2`);
    assert.equal(redo.attributes['outbox.consumer.redone'], true);
    assert.equal(redo.attributes['outbox.consumer.rolled_back'], undefined);
    assert.equal(redo.status.code, SpanStatusCode.UNSET, `offset ${offset}: the redo committed`);
    assert.equal(redo.attributes['outbox.consumer.attempt'], 1, 'a redo is not a retry');
  }
  const [poison, ...others] = spansOf(topic, 3);
  assert.ok(poison && others.length === 0, 'the failing message ran once');
  assert.equal(poison.status.code, SpanStatusCode.ERROR);
  assert.ok(poison.events.some((e) => e.name === 'dead_letter'));
  assert.equal(poison.attributes['outbox.consumer.rolled_back'], undefined);
  const [last, ...again] = spansOf(topic, 4);
  assert.ok(last && again.length === 0);
  assert.equal(last.attributes['outbox.consumer.run'], undefined, 'the next transaction is a first run');
  assert.equal(last.status.code, SpanStatusCode.UNSET);
});

test('integration: a failed batch redone one message per call: those spans are marked redone (run 2)', async () => {
  const topic = await createTopic(1);
  await produce(topic, Array.from({ length: 6 }, (_, i) => ({ key: 'b', value: { amount: 1, poison: i === 2 } })));
  const c = consumer<Value>({
    topics: topic,
    messagesPerTransaction: 6,
    handleBatch: async (messages, ctx) => {
      await applyBatchEffect(db.schema, messages, ctx);
      if (messages.some((m) => m.value.poison)) throw poisonError();
    },
  });
  await c.start();
  await waitFor('offset at the end', async () => (await committedOffset(c.options.groupId, topic)) === '6');
  for (const offset of [0, 1]) {
    const spans = spansOf(topic, offset);
    assert.equal(spans.length, 1, `the batch call has no span; the one-message call has: offset ${offset}`);
    assert.equal(spans[0]?.attributes['outbox.consumer.redone'], true);
    assert.equal(spans[0]?.attributes['outbox.consumer.run'], 2);
  }
  assert.equal(spansOf(topic, 2)[0]?.status.code, SpanStatusCode.ERROR);
});
