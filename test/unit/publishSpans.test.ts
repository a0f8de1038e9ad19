// The relay's publish spans for each fate of a message in a batch (src/shared/tracing.ts,
// src/relay/publishBatch.ts), with the real SDK and a producer standing in for Kafka. On a
// real broker: test/tracing.integration.test.ts.
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import { propagation, trace, SpanStatusCode } from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { publishBatch, PublishError } from '../../src/relay/publishBatch.js';
import { TopicMissingError } from '../../src/relay/topicMetadata.js';
import type { RelayMessage } from '../../src/relay/message.js';
import type { SendResult } from '../../src/relay/producer.js';
import type { ClaimedRow } from '../../src/relay/sql/claim.js';

const exporter = new InMemorySpanExporter();
before(() => {
  assert.ok(propagation.setGlobalPropagator(new W3CTraceContextPropagator()));
  assert.ok(trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] })));
});

let nextId = 1;
function row(topic: string, key: string): ClaimedRow {
  const id = nextId++;
  return { id, message_id: `m${id}`, topic, key, payload: '{}', payload_bytes: null, headers: null, created_at: new Date(0) };
}

const spanOf = (r: ClaimedRow): ReadableSpan[] => exporter.getFinishedSpans().filter((s) => s.attributes['messaging.message.id'] === r.message_id);
const transient = (): Error => Object.assign(new Error('The broker said NOT_ENOUGH_REPLICAS'), { name: 'KafkaJSProtocolError', type: 'NOT_ENOUGH_REPLICAS', retriable: true });

test('a message refused for a reason that may pass, or waiting for its topic, ends its span with ERROR and the exception; one acknowledged beside it, unset', async () => {
  const [ok, flaky, waiting, gone] = [row('t', 'a'), row('t', 'b'), row('new', 'c'), row('old', 'd')];
  const now = 1_000_000;
  const out = await publishBatch([ok, flaky, waiting, gone], {
    maxMessageBytes: 1_000,
    missingTopicTimeoutMs: 30_000,
    policyOf: () => 'skip',
    now: () => now,
    send: async (messages: RelayMessage[]): Promise<SendResult[]> =>
      messages.map((m) => {
        if (m.key === 'b') return { acknowledged: false, error: transient() };
        if (m.topic === 'new') return { acknowledged: false, error: new TopicMissingError('new', now - 1_000, undefined) };
        if (m.topic === 'old') return { acknowledged: false, error: new TopicMissingError('old', now - 60_000, undefined) };
        return { acknowledged: true };
      }),
  });
  assert.deepEqual([out.published, out.unsent, out.deadLetters.map((d) => d.row)], [[ok], [flaky, waiting], [gone]]);
  for (const r of [ok, flaky, waiting, gone]) assert.equal(spanOf(r).length, 1, 'one span per message');
  const [okSpan, flakySpan, waitingSpan, goneSpan] = [ok, flaky, waiting, gone].map((r) => spanOf(r)[0]!) as [ReadableSpan, ReadableSpan, ReadableSpan, ReadableSpan];
  assert.equal(okSpan.status.code, SpanStatusCode.UNSET);
  assert.equal(flakySpan.status.code, SpanStatusCode.ERROR);
  assert.match(flakySpan.status.message ?? '', /a later one sends it again: .*NOT_ENOUGH_REPLICAS/);
  assert.equal(flakySpan.events.find((e) => e.name === 'exception')?.attributes?.['exception.message'], 'The broker said NOT_ENOUGH_REPLICAS');
  assert.equal(waitingSpan.status.code, SpanStatusCode.ERROR);
  assert.match(waitingSpan.status.message ?? '', /"new" does not exist .*--missing-topic-timeout-ms/);
  assert.ok(waitingSpan.events.some((e) => e.name === 'exception'));
  assert.equal(goneSpan.status.code, SpanStatusCode.ERROR);
  assert.equal(goneSpan.events.find((e) => e.name === 'dead_letter')?.attributes?.['outbox.dead_letter.error_name'], 'UNKNOWN_TOPIC_OR_PARTITION');
  for (const s of [okSpan, flakySpan, waitingSpan, goneSpan]) assert.equal(s.attributes['messaging.destination.partition.id'], undefined, 'no request, no partition');
});

test('a producer that fails as a whole ends every span of the batch with ERROR and the exception', async () => {
  const rows = [row('t', 'a'), row('t', 'b')];
  await assert.rejects(
    publishBatch(rows, {
      maxMessageBytes: 1_000,
      missingTopicTimeoutMs: 30_000,
      policyOf: () => 'park',
      send: async () => {
        throw new Error('the producer is gone');
      },
    }),
    PublishError,
  );
  for (const r of rows) {
    const [span, more] = spanOf(r);
    assert.equal(more, undefined);
    assert.equal(span?.status.code, SpanStatusCode.ERROR);
    assert.equal(span?.status.message, 'the producer is gone');
    assert.ok(span?.events.some((e) => e.name === 'exception'));
  }
});

test('the messages sent carry their publish span as traceparent, and an error-free batch records no status', async () => {
  const r = row('t', 'a');
  const sent: RelayMessage[] = [];
  await publishBatch([r], {
    maxMessageBytes: 1_000,
    missingTopicTimeoutMs: 30_000,
    policyOf: () => 'park',
    send: async (messages) => {
      sent.push(...messages);
      return messages.map(() => ({ acknowledged: true }));
    },
  });
  const [span] = spanOf(r);
  assert.equal(sent[0]?.headers.traceparent, `00-${span!.spanContext().traceId}-${span!.spanContext().spanId}-01`);
  assert.equal(span!.status.code, SpanStatusCode.UNSET);
});
