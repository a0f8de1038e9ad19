// The header side of src/shared/tracing.ts, without servers: what enqueue adds, and that
// it adds nothing until an SDK is registered. (End to end: test/tracing.integration.test.ts.)
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { context, propagation, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { BasicTracerProvider } from '@opentelemetry/sdk-trace-base';
import { activeContextHeaders, loadTracingApi, withContextHeaders } from '../../src/shared/tracing.js';

test('withContextHeaders: adds the trace headers, never over a header the caller set (any case)', () => {
  const trace = { traceparent: '00-aaaa-bbbb-01', baggage: 'tenant=acme' };
  assert.equal(withContextHeaders(undefined, undefined), undefined);
  assert.deepEqual(withContextHeaders({ a: '1' }, undefined), { a: '1' });
  assert.deepEqual(withContextHeaders(undefined, trace), trace);
  assert.deepEqual(withContextHeaders({ Traceparent: 'mine', a: '1' }, trace), { Traceparent: 'mine', a: '1', baggage: 'tenant=acme' });
  const user = { a: '1' };
  withContextHeaders(user, trace);
  assert.deepEqual(user, { a: '1' }, 'the caller object is not changed');
});

test('activeContextHeaders: nothing before an SDK is registered, the active span once one is', async () => {
  assert.ok(await loadTracingApi(), 'the API loads when installed');
  assert.equal(await activeContextHeaders(), undefined, 'no propagator, no headers');

  assert.ok(context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable()));
  assert.ok(propagation.setGlobalPropagator(new W3CTraceContextPropagator()));
  assert.ok(trace.setGlobalTracerProvider(new BasicTracerProvider()));
  assert.equal(await activeContextHeaders(), undefined, 'no active span, no headers');
  const headers = await trace.getTracer('t').startActiveSpan('writer', async (span) => {
    try {
      return await activeContextHeaders();
    } finally {
      span.end();
    }
  });
  assert.match(headers?.traceparent ?? '', /^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
});
