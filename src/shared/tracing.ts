// OpenTelemetry trace propagation, optional and zero-cost when absent.
//
// `@opentelemetry/api` is an optional peer dependency: it is imported lazily, once (the
// result, module or nothing, is cached), and every function here does nothing beyond
// its callback when the package is not installed. With the package installed but no SDK
// registered, the API's no-op tracer and propagator make these functions add no headers
// and record nothing.
//
// The trace shape (docs/operations.md, "Tracing"):
//   writer's span ─ enqueue writes traceparent/tracestate/baggage into the row's headers
//     └─ publish <topic>   PRODUCER, one per message, child of the row's context; its own
//        │                 context replaces traceparent in the Kafka message's headers
//        └─ process <topic> CONSUMER, one per handler run, child of the producer span
//   send                   CLIENT, one per Kafka request, linked to each publish span
//
// Why a PRODUCER span per message rather than one per batch: a batch mixes rows of
// different writers, hence of different traces. A span per message can be the child of
// its own writer's span and the parent of its own consumer's span, so one trace runs
// unbroken from the writer to the handler; the batch (one Kafka request) is the `send`
// span, linked to its messages, with messaging.batch.message_count.
import type * as Otel from '@opentelemetry/api';

type Api = typeof Otel;

/**
 * What the relay's spans read of a message it publishes: a claimed outbox row, or the
 * message made of it (the message id from `message_id` or the `message-id` header, the
 * partition when the relay chose it).
 */
export interface TracedRow {
  topic: string;
  key: string | null;
  headers: Record<string, unknown> | null;
  message_id?: string;
  id?: number;
  partition?: number;
}

/** What the consumer's spans read of a consumed message. */
export interface TracedMessage {
  topic: string;
  partition: number;
  offset: string;
  key: string | null;
  headers: Readonly<Record<string, string>>;
  messageId?: string | undefined;
}

/** Instrumentation scope of every span this package records. */
export const TRACER_NAME = 'outbox-relay';

let loading: Promise<Api | undefined> | undefined;
let loaded: Api | undefined;

/** The OpenTelemetry API if installed, imported on first use only; undefined otherwise. */
export function loadTracingApi(): Promise<Api | undefined> {
  loading ??= import('@opentelemetry/api').then(
    (m) => {
      // An ESM namespace, or a CommonJS module seen through `default`.
      const api = ((m as unknown as { propagation?: unknown }).propagation ? m : (m as unknown as { default?: Api }).default) as Api | undefined;
      loaded = api;
      return api;
    },
    () => undefined,
  );
  return loading;
}

async function api(): Promise<Api | undefined> {
  return loaded ?? (await loadTracingApi());
}

function tracer(otel: Api): Otel.Tracer {
  return otel.trace.getTracer(TRACER_NAME);
}

// ---------------------------------------------------------------------------------------
// enqueue

/**
 * The active trace context as headers (`traceparent`, `tracestate`, `baggage`), through
 * the globally registered propagator; undefined when there is none to write.
 */
export async function activeContextHeaders(): Promise<Record<string, string> | undefined> {
  const otel = await api();
  if (!otel) return undefined;
  const carrier: Record<string, string> = {};
  otel.propagation.inject(otel.context.active(), carrier);
  return Object.keys(carrier).length > 0 ? carrier : undefined;
}

/**
 * A row's headers: the user's, plus the trace context headers the user did not set
 * (compared case-insensitively; the user's always win).
 */
export function withContextHeaders(
  user: Record<string, string> | undefined,
  trace: Record<string, string> | undefined,
): Record<string, string> | undefined {
  if (!trace) return user;
  if (!user) return { ...trace };
  const taken = new Set(Object.keys(user).map((k) => k.toLowerCase()));
  const out = { ...user };
  for (const [name, value] of Object.entries(trace)) if (!taken.has(name.toLowerCase())) out[name] = value;
  return out;
}

// ---------------------------------------------------------------------------------------
// relay

function rowCarrier(headers: Record<string, unknown> | null): Record<string, string> {
  const out: Record<string, string> = {};
  if (headers) for (const [k, v] of Object.entries(headers)) if (typeof v === 'string') out[k] = v;
  return out;
}

/** A per-message send result that says Kafka refused the message (`acknowledged: false`). */
function refusal(result: unknown): { error: unknown } | undefined {
  const r = result as { acknowledged?: unknown; error?: unknown } | null | undefined;
  return r && typeof r === 'object' && r.acknowledged === false ? { error: r.error } : undefined;
}

function fail(otel: Api, span: Otel.Span, error: unknown): void {
  span.recordException(error instanceof Error ? error : String(error));
  span.setStatus({ code: otel.SpanStatusCode.ERROR, message: error instanceof Error ? error.message : String(error) });
}

/**
 * Send messages in one Kafka request inside the spans of the trace shape above: a
 * PRODUCER span `publish <topic>` per message, child of the context in its headers (the
 * writer's), whose own context replaces it in the headers sent; and a CLIENT span `send`
 * for the request, linked to them. A rejected send, or a per-message result with
 * `acknowledged: false`, ends the spans concerned with status ERROR.
 */
export async function tracePublish<M extends TracedRow, R>(messages: M[], send: (messages: M[]) => Promise<R>): Promise<R> {
  const otel = await api();
  if (!otel) return send(messages);
  const t = tracer(otel);
  const spans: Otel.Span[] = [];
  const traced = messages.map((m) => {
    const carrierIn = rowCarrier(m.headers);
    const parent = otel.propagation.extract(otel.ROOT_CONTEXT, carrierIn);
    const messageId = m.message_id ?? carrierIn['message-id'];
    const outboxId = m.id ?? (carrierIn['outbox-id'] !== undefined ? Number(carrierIn['outbox-id']) : undefined);
    const span = t.startSpan(
      `publish ${m.topic}`,
      {
        kind: otel.SpanKind.PRODUCER,
        attributes: {
          'messaging.system': 'kafka',
          'messaging.operation.type': 'send',
          'messaging.operation.name': 'publish',
          'messaging.destination.name': m.topic,
          ...(messageId !== undefined ? { 'messaging.message.id': messageId } : {}),
          ...(m.key !== null ? { 'messaging.kafka.message.key': m.key } : {}),
          ...(typeof m.partition === 'number' ? { 'messaging.kafka.destination.partition': m.partition, 'messaging.destination.partition.id': String(m.partition) } : {}),
          ...(outboxId !== undefined ? { 'outbox.id': outboxId } : {}),
        },
      },
      parent,
    );
    spans.push(span);
    const carrier: Record<string, string> = {};
    otel.propagation.inject(otel.trace.setSpan(parent, span), carrier);
    return Object.keys(carrier).length > 0 ? { ...m, headers: { ...(m.headers ?? {}), ...carrier } } : m;
  });
  const topics = new Set(messages.map((m) => m.topic));
  const recording = spans.filter((s) => s.isRecording());
  const request = t.startSpan('send', {
    kind: otel.SpanKind.CLIENT,
    links: recording.map((s) => ({ context: s.spanContext() })),
    attributes: {
      'messaging.system': 'kafka',
      'messaging.operation.type': 'send',
      'messaging.operation.name': 'send',
      'messaging.batch.message_count': messages.length,
      ...(topics.size === 1 ? { 'messaging.destination.name': messages[0]!.topic } : {}),
    },
  });
  let result: R;
  try {
    result = await send(traced);
  } catch (error) {
    for (const span of [...spans, request]) {
      fail(otel, span, error);
      span.end();
    }
    throw error;
  }
  let refused = 0;
  spans.forEach((span, i) => {
    const r = Array.isArray(result) ? refusal(result[i]) : undefined;
    if (r) {
      refused++;
      fail(otel, span, r.error);
    }
    span.end();
  });
  if (refused > 0) request.setAttribute('outbox.refused_message_count', refused);
  request.end();
  return result;
}

// ---------------------------------------------------------------------------------------
// consumer

/** What became of a failed handler run, for the span's event. */
export interface HandlerFailureOutcome {
  /** `retry`: the message is tried again; `dead_letter`: it goes to the dead-letter topic. */
  event: 'retry' | 'dead_letter';
  attributes?: Record<string, string | number | boolean>;
}

function consumerAttributes(message: TracedMessage, groupId: string, attempt: number): Otel.Attributes {
  return {
    'messaging.system': 'kafka',
    'messaging.operation.type': 'process',
    'messaging.operation.name': 'process',
    'messaging.destination.name': message.topic,
    'messaging.destination.partition.id': String(message.partition),
    'messaging.kafka.destination.partition': message.partition,
    'messaging.kafka.message.offset': Number(message.offset),
    'messaging.consumer.group.name': groupId,
    'messaging.kafka.consumer.group': groupId,
    ...(message.messageId ? { 'messaging.message.id': message.messageId } : {}),
    ...(message.key !== null ? { 'messaging.kafka.message.key': message.key } : {}),
    'outbox.consumer.attempt': attempt,
  };
}

function startConsumerSpan(otel: Api, message: TracedMessage, groupId: string, attempt: number): { span: Otel.Span; context: Otel.Context } {
  const parent = otel.propagation.extract(otel.ROOT_CONTEXT, message.headers);
  const span = tracer(otel).startSpan(
    `process ${message.topic}`,
    { kind: otel.SpanKind.CONSUMER, attributes: consumerAttributes(message, groupId, attempt) },
    parent,
  );
  if (attempt > 1) span.addEvent('retry', { 'outbox.consumer.attempt': attempt });
  return { span, context: otel.trace.setSpan(parent, span) };
}

/**
 * Run a message's handler inside a CONSUMER span `process <topic>`, child of the context
 * in the message's headers (the relay's PRODUCER span), and active while the handler
 * runs so its own spans nest under it. A failure is recorded on the span (exception,
 * status ERROR) with what comes of it, from `outcomeOf` (asked only when recording).
 */
export async function traceHandler<T>(
  message: TracedMessage,
  groupId: string,
  attempt: number,
  run: () => Promise<T>,
  outcomeOf: (error: unknown) => HandlerFailureOutcome,
): Promise<T> {
  const otel = await api();
  if (!otel) return run();
  const { span, context } = startConsumerSpan(otel, message, groupId, attempt);
  try {
    const result = await otel.context.with(context, run);
    span.end();
    return result;
  } catch (error) {
    if (span.isRecording()) {
      span.recordException(error instanceof Error ? error : String(error));
      span.setStatus({ code: otel.SpanStatusCode.ERROR, message: error instanceof Error ? error.message : String(error) });
      try {
        const outcome = outcomeOf(error);
        span.addEvent(outcome.event, outcome.attributes);
      } catch {
        // The outcome is informational; a classifier that throws changes nothing here.
      }
    }
    span.end();
    throw error;
  }
}

/**
 * A message its handler does not see: a dedup hit (`duplicate`, status unset) or one
 * that goes straight to the dead-letter topic (`dead_letter`, status ERROR), as a
 * CONSUMER span of its own, child of the producer's, with that event.
 */
export async function traceSkipped(
  message: TracedMessage,
  groupId: string,
  attempt: number,
  event: 'duplicate' | 'dead_letter',
  attributes: Record<string, string | number | boolean> = {},
): Promise<void> {
  const otel = await api();
  if (!otel) return;
  const { span } = startConsumerSpan(otel, message, groupId, attempt);
  if (!span.isRecording()) return void span.end();
  span.addEvent(event, attributes);
  if (event === 'duplicate') span.setAttribute('outbox.consumer.duplicate', true);
  else span.setStatus({ code: otel.SpanStatusCode.ERROR, message: String(attributes['outbox.dead_letter.reason'] ?? 'dead letter') });
  span.end();
}

/** Ends the span of a handler run that returned, once its transaction is decided. */
export type SettleHandlerRun = (rolledBack: boolean) => void;

/**
 * As {@link traceHandler}, for a run whose transaction may still be rolled back after the
 * handler returned (a later message of the group fails, and this one runs again): the span
 * stays open until `settle` says what became of it. Rolled back, the span gets
 * `outbox.consumer.rolled_back=true`, a `rolled_back` event and status ERROR. `run` counts
 * the runs of the message's group for this attempt; from 2 on (a redo after a roll back),
 * the span has `outbox.consumer.run` and `outbox.consumer.redone=true`.
 */
export async function traceHandlerRun<T>(
  message: TracedMessage,
  groupId: string,
  attempt: number,
  run: number,
  work: () => Promise<T>,
  outcomeOf: (error: unknown) => HandlerFailureOutcome,
): Promise<{ result: T; settle: SettleHandlerRun }> {
  const otel = await api();
  if (!otel) return { result: await work(), settle: () => undefined };
  const { span, context } = startConsumerSpan(otel, message, groupId, attempt);
  if (run > 1) span.setAttributes({ 'outbox.consumer.run': run, 'outbox.consumer.redone': true });
  let result: T;
  try {
    result = await otel.context.with(context, work);
  } catch (error) {
    if (span.isRecording()) {
      span.recordException(error instanceof Error ? error : String(error));
      span.setStatus({ code: otel.SpanStatusCode.ERROR, message: error instanceof Error ? error.message : String(error) });
      try {
        const outcome = outcomeOf(error);
        span.addEvent(outcome.event, outcome.attributes);
      } catch {
        // The outcome is informational; a classifier that throws changes nothing here.
      }
    }
    span.end();
    throw error;
  }
  let settled = false;
  return {
    result,
    settle: (rolledBack) => {
      if (settled) return;
      settled = true;
      if (rolledBack && span.isRecording()) {
        span.setAttribute('outbox.consumer.rolled_back', true);
        span.addEvent('rolled_back');
        span.setStatus({ code: otel.SpanStatusCode.ERROR, message: 'rolled back with its transaction; the message runs again' });
      }
      span.end();
    },
  };
}
