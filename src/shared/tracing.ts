// OpenTelemetry trace propagation, optional and zero-cost when absent.
//
// `@opentelemetry/api` is an optional peer dependency, in practice always installed
// (prom-client depends on it and requires it when it is loaded): it is imported here
// lazily, at the first traced operation, once (the result, module or nothing, is cached),
// and every function here does nothing beyond its callback when the package cannot be
// imported. With no SDK registered, the API's no-op tracer and propagator make these
// functions add no headers and record nothing (test/unit/tracingLoad.test.ts).
//
// The trace shape (docs/operations.md, "Tracing"):
//   writer's span ─ enqueue writes traceparent/tracestate/baggage into the row's headers
//     └─ publish <topic>   PRODUCER, one per message, child of the row's context; its own
//        │                 context replaces traceparent in the Kafka message's headers
//        └─ process <topic> CONSUMER, one per handler run, child of the producer span
//   send                   CLIENT, one per produce request (one topic partition's messages),
//                          linked to the publish spans of the messages it carries
//
// Why a PRODUCER span per message rather than one per batch: a batch mixes rows of
// different writers, hence of different traces. A span per message can be the child of
// its own writer's span and the parent of its own consumer's span, so one trace runs
// unbroken from the writer to the handler. The adapters send a batch as one request per
// partition (src/relay/producer.ts), each the `send` span, linked to its messages, with
// messaging.batch.message_count; a message sent again alone (its partition was refused)
// keeps its publish span, linked from both requests.
import type * as Otel from '@opentelemetry/api';

type Api = typeof Otel;

/**
 * What the relay's spans read of a message it publishes: a claimed outbox row, or the
 * message made of it (the message id from `message_id` or the `message-id` header).
 */
export interface TracedRow {
  topic: string;
  key: string | null;
  headers: Record<string, unknown> | null;
  message_id?: string;
  id?: number;
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
const TRACER_NAME = 'outbox-relay';

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

function fail(otel: Api, span: Otel.Span, error: unknown, message?: string): void {
  if (error !== undefined) span.recordException(error instanceof Error ? error : String(error));
  span.setStatus({ code: otel.SpanStatusCode.ERROR, message: message ?? (error instanceof Error ? error.message : String(error)) });
}

/** Each sent message's publish span, for the `send` span of the request that carries it. */
const publishSpanOf = new WeakMap<object, Otel.Span>();

function startPublishSpan(otel: Api, m: TracedRow): { span: Otel.Span; parent: Otel.Context } {
  const carrierIn = rowCarrier(m.headers);
  const parent = otel.propagation.extract(otel.ROOT_CONTEXT, carrierIn);
  const messageId = m.message_id ?? carrierIn['message-id'];
  const outboxId = m.id ?? (carrierIn['outbox-id'] !== undefined ? Number(carrierIn['outbox-id']) : undefined);
  const span = tracer(otel).startSpan(
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
        ...(outboxId !== undefined ? { 'outbox.id': outboxId } : {}),
      },
    },
    parent,
  );
  return { span, parent };
}

/**
 * The PRODUCER spans of one batch's messages, one per message: each ends when the
 * batch knows what became of its message, however many requests that took (a message
 * whose partition was refused is sent again alone, under the same span).
 */
export interface PublishSpans<M> {
  /** The messages to send, each with its span's context in its headers (same order). */
  readonly messages: M[];
  /** Kafka acknowledged message `index`: its span ends, status unset. */
  acknowledged(index: number): void;
  /** Message `index` goes to the dead letters: status ERROR, the error, a `dead_letter` event. */
  deadLettered(index: number, errorName: string, reason: string, error?: unknown): void;
  /** Message `index` is not published by this batch (a later one sends it, in a new span): status ERROR. */
  notPublished(index: number, reason: string, error?: unknown): void;
  /** The send failed as a whole: every span not ended yet ends with status ERROR and the error. */
  failed(error: unknown): void;
}

function noSpans<M>(messages: M[]): PublishSpans<M> {
  const nothing = (): void => undefined;
  return { messages, acknowledged: nothing, deadLettered: nothing, notPublished: nothing, failed: nothing };
}

/**
 * Start the PRODUCER span `publish <topic>` of each message, child of the context in
 * its headers (the writer's); its own context replaces that one in the headers the
 * message is sent with. The `send` spans of the requests are the adapters' ({@link traceRequest}).
 */
export async function startPublishSpans<M extends TracedRow>(messages: M[]): Promise<PublishSpans<M>> {
  const otel = await api();
  if (!otel) return noSpans(messages);
  const spans: Array<Otel.Span | undefined> = [];
  const trace = (m: M): M => {
    const { span, parent } = startPublishSpan(otel, m);
    spans.push(span);
    const carrier: Record<string, string> = {};
    otel.propagation.inject(otel.trace.setSpan(parent, span), carrier);
    const out = Object.keys(carrier).length > 0 ? { ...m, headers: { ...(m.headers ?? {}), ...carrier } } : m;
    publishSpanOf.set(out, span);
    return out;
  };
  let traced: M[];
  const first = messages[0];
  if (first !== undefined && otel.propagation.fields().length === 0) {
    // The API installed (a dependency of some other package, say) but no SDK and no
    // propagator registered: every span is the no-op tracer's, with an invalid context and
    // nothing to inject, and every message goes out as it came. Known from the first
    // message, which then spares the others the per-row work (about 3 % of a draining
    // relay's CPU profile).
    const out = trace(first);
    if (!otel.trace.isSpanContextValid(spans[0]!.spanContext()) && out === first) {
      spans[0]!.end();
      publishSpanOf.delete(first);
      return noSpans(messages);
    }
    traced = [out, ...messages.slice(1).map(trace)];
  } else traced = messages.map(trace);
  const end = (index: number, mark?: (span: Otel.Span) => void): void => {
    const span = spans[index];
    if (!span) return;
    spans[index] = undefined;
    mark?.(span);
    span.end();
  };
  return {
    messages: traced,
    acknowledged: (index) => end(index),
    deadLettered: (index, errorName, reason, error) =>
      end(index, (span) => {
        fail(otel, span, error, reason);
        span.addEvent('dead_letter', { 'outbox.dead_letter.error_name': errorName, 'outbox.dead_letter.reason': reason });
      }),
    notPublished: (index, reason, error) => end(index, (span) => fail(otel, span, error, reason)),
    failed: (error) => spans.forEach((_, i) => end(i, (span) => fail(otel, span, error))),
  };
}

/**
 * A row that goes to the dead letters before it is sent (it cannot be a message): a
 * PRODUCER span `publish <topic>` of its own, child of the writer's context, ended at
 * once with status ERROR and a `dead_letter` event.
 */
export async function traceRejectedRow(row: TracedRow, errorName: string, reason: string): Promise<void> {
  const otel = await api();
  if (!otel) return;
  const { span } = startPublishSpan(otel, row);
  fail(otel, span, undefined, reason);
  span.addEvent('dead_letter', { 'outbox.dead_letter.error_name': errorName, 'outbox.dead_letter.reason': reason });
  span.end();
}

/**
 * One produce request of a producer adapter (one topic partition's messages) inside a
 * CLIENT span `send`, linked to the messages' publish spans, which learn their partition
 * here. A request that rejects ends `send` with status ERROR, the error and
 * `outbox.refused_message_count`; the publish spans end when the batch knows what
 * becomes of their messages ({@link startPublishSpans}).
 */
export async function traceRequest<T>(messages: readonly object[], topic: string, partition: number, send: () => Promise<T>): Promise<T> {
  const otel = loaded ?? (await api());
  if (!otel) return send();
  const links: Otel.Link[] = [];
  for (const m of messages) {
    const publish = publishSpanOf.get(m);
    if (!publish?.isRecording()) continue;
    publish.setAttributes({ 'messaging.destination.partition.id': String(partition), 'messaging.kafka.destination.partition': partition });
    links.push({ context: publish.spanContext() });
  }
  const request = tracer(otel).startSpan('send', {
    kind: otel.SpanKind.CLIENT,
    links,
    attributes: {
      'messaging.system': 'kafka',
      'messaging.operation.type': 'send',
      'messaging.operation.name': 'send',
      'messaging.batch.message_count': messages.length,
      'messaging.destination.name': topic,
      'messaging.destination.partition.id': String(partition),
      'messaging.kafka.destination.partition': partition,
    },
  });
  try {
    const result = await send();
    request.end();
    return result;
  } catch (error) {
    fail(otel, request, error);
    request.setAttribute('outbox.refused_message_count', messages.length);
    request.end();
    throw error;
  }
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
    // A message dead-lettered as it is decoded has no messageId yet: its header's, then.
    ...((message.messageId ?? message.headers['message-id']) ? { 'messaging.message.id': message.messageId ?? message.headers['message-id'] } : {}),
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
 * Run a message's handler inside a CONSUMER span `process <topic>`, child of the context
 * in the message's headers (the relay's PRODUCER span), and active while the handler
 * runs so its own spans nest under it. A failure is recorded on the span (exception,
 * status ERROR) with what comes of it, from `outcomeOf` (asked only when recording).
 * Since the run's transaction may still be rolled back after the handler returned (a
 * later message of the group fails, and this one runs again), the span stays open until
 * `settle` says what became of it. Rolled back, the span gets
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
