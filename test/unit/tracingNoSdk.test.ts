// With @opentelemetry/api installed but no SDK and no propagator registered (this file
// registers none), a batch's messages go out as they came, and nothing is left to do per
// message: src/shared/tracing.ts skips the no-op spans after the first. With an SDK
// registered: test/tracing.integration.test.ts.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { INVALID_SPAN_CONTEXT, trace, type Tracer, type TracerProvider } from '@opentelemetry/api';
import { loadTracingApi, startPublishSpans, traceRequest } from '../../src/shared/tracing.js';

test('no SDK registered: the publish spans leave every message as it was, the same object, and a request runs as given', async () => {
  assert.ok(await loadTracingApi(), 'the API loads when installed');
  const messages = [
    { id: 1, message_id: 'a', topic: 't', key: 'k1', headers: { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' } },
    { id: 2, message_id: 'b', topic: 't', key: null, headers: null },
    { id: 3, message_id: 'c', topic: 'u', key: 'k3', headers: { 'x-tenant': 'acme' } },
  ];
  const spans = await startPublishSpans(messages);
  assert.equal(spans.messages.length, messages.length);
  spans.messages.forEach((m, i) => assert.equal(m, messages[i], `message ${i} is the object it was`));
  assert.deepEqual(messages[0]!.headers, { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' }, 'its headers untouched');
  assert.equal(await traceRequest(spans.messages, 't', 0, async () => 'sent'), 'sent');
  spans.acknowledged(0);
  spans.deadLettered(1, 'E', 'reason');
  spans.notPublished(2, 'later');
  spans.failed(new Error('x'));
  assert.equal((await startPublishSpans([])).messages.length, 0);
});

test('no SDK and no propagator: one no-op span a batch, not one a message', async () => {
  // A provider whose spans are the no-op kind (invalid context, not recording), counting them.
  let started = 0;
  const tracer = { startSpan: () => (started++, trace.wrapSpanContext(INVALID_SPAN_CONTEXT)) } as unknown as Tracer;
  assert.ok(trace.setGlobalTracerProvider({ getTracer: () => tracer } satisfies TracerProvider));
  const messages = Array.from({ length: 5 }, (_, i) => ({ id: i, message_id: `m${i}`, topic: 't', key: `k${i}`, headers: null }));
  const spans = await startPublishSpans(messages);
  spans.messages.forEach((m, i) => assert.equal(m, messages[i]));
  assert.equal(started, 1, 'the first message shows there is nothing to trace');
});
