/**
 * The consumer runtime's metrics: their definitions, {@link instrumentHandler} (handler
 * duration, time in queue, messages in flight) and {@link instrumentConsumer}, which
 * observes a consumer through its events (ConsumerEvents) and samples its lag.
 */
import { Registry, type Counter, type Gauge, type Histogram } from 'prom-client';
import type { Admin, Kafka } from 'kafkajs';
import type { Consumer } from '../consumer/consumer.js';
import type { ConsumerEvents, MessageHandler } from '../consumer/types.js';
import { createKafka } from '../shared/kafka.js';
import { describeError } from '../shared/errors.js';
import { silentLogger, type Logger } from '../shared/logger.js';
import { CALL_BUCKETS, LATENCY_BUCKETS, registerMetrics, type MetricTable } from '../shared/metricDefinitions.js';
import { errorLabel } from './errorLabel.js';
import { addProcessMetrics } from './processMetrics.js';
import { serialized } from './promises.js';

/** The consumer's metric objects, by field. Created by {@link consumerMetrics}. */
export interface ConsumerMetrics {
  messages: Counter<'topic' | 'outcome'>;
  handlerDuration: Histogram<'topic'>;
  timeInQueue: Histogram<'topic'>;
  inFlight: Gauge;
  lag: Gauge<'topic' | 'partition'>;
  deadLetters: Counter<'topic' | 'error_class'>;
  batchFallbacks: Counter<'topic'>;
  missingKey: Counter<'topic'>;
  transactions: Counter;
  errors: Counter<'error_class'>;
  lagSampleErrors: Counter<'error_class'>;
}

/** Every consumer metric: name, help, labels, buckets. */
export const CONSUMER_METRICS: MetricTable<ConsumerMetrics> = {
  messages: {
    type: 'counter',
    name: 'outbox_consumer_messages_total',
    help: 'Messages by outcome: processed (handler committed), duplicate (skipped by its idempotency key), stale (version gate), retried (transient error, retry scheduled), dead_lettered.',
    labelNames: ['topic', 'outcome'],
  },
  handlerDuration: {
    type: 'histogram',
    name: 'outbox_consumer_handler_duration_seconds',
    help: 'Time in the handler per message, successful or not.',
    labelNames: ['topic'],
    buckets: CALL_BUCKETS,
  },
  timeInQueue: {
    type: 'histogram',
    name: 'outbox_consumer_time_in_queue_seconds',
    help: "From the Kafka timestamp (for relayed messages: the outbox row's created_at) to the handler starting.",
    labelNames: ['topic'],
    buckets: LATENCY_BUCKETS,
  },
  inFlight: { type: 'gauge', name: 'outbox_consumer_messages_in_flight', help: 'Messages whose handler is running now.' },
  lag: {
    type: 'gauge',
    name: 'outbox_consumer_lag_messages',
    help: "Messages behind the partition's end (high watermark minus committed offset), for partitions assigned to this member.",
    labelNames: ['topic', 'partition'],
  },
  deadLetters: {
    type: 'counter',
    name: 'outbox_consumer_dead_letters_total',
    help: 'Messages sent to the dead-letter topic, by reason (undecodable, missing-key, permanent-error, retries-exhausted).',
    labelNames: ['topic', 'error_class'],
  },
  batchFallbacks: {
    type: 'counter',
    name: 'outbox_consumer_batch_fallbacks_total',
    help: 'handleBatch only: batches that failed and were redone one message at a time to find the culprit.',
    labelNames: ['topic'],
  },
  missingKey: {
    type: 'counter',
    name: 'outbox_consumer_missing_idempotency_key_total',
    help: 'Messages without a usable idempotency key.',
    labelNames: ['topic'],
  },
  transactions: { type: 'counter', name: 'outbox_consumer_transactions_total', help: 'Postgres transactions committed by the consumer.' },
  errors: {
    type: 'counter',
    name: 'outbox_consumer_errors_total',
    help: 'Failures outside handlers (Postgres, Kafka, dead-letter publish), by error class; retried.',
    labelNames: ['error_class'],
  },
  lagSampleErrors: {
    type: 'counter',
    name: 'outbox_consumer_lag_sample_errors_total',
    help: 'Failed lag samples, by error class.',
    labelNames: ['error_class'],
  },
};

/** Register the consumer's metrics on `registry` (or return the ones already there). */
export function consumerMetrics(registry: Registry): ConsumerMetrics {
  return registerMetrics(registry, CONSUMER_METRICS);
}

/**
 * Wrap a handler to measure it: handler duration, time in queue and messages in flight.
 * Pass the result as the consumer's `handler`.
 */
export function instrumentHandler<V>(handler: MessageHandler<V>, registry: Registry): MessageHandler<V> {
  const m = consumerMetrics(registry);
  return async (message, context) => {
    const topic = message.topic;
    m.timeInQueue.observe({ topic }, Math.max(0, Date.now() - message.timestamp.getTime()) / 1000);
    m.inFlight.inc();
    const end = m.handlerDuration.startTimer({ topic });
    try {
      await handler(message, context);
    } finally {
      end();
      m.inFlight.dec();
    }
  };
}

/** Options of {@link instrumentConsumer}. */
export interface InstrumentConsumerOptions {
  registry?: Registry;
  /** Also export Node.js process metrics (default true). */
  processMetrics?: boolean;
  /** How often to sample lag, in ms (default 15000). */
  lagSampleIntervalMs?: number;
  /** Kafka client for the lag sampler (default: the consumer's, else one from its brokers). */
  kafka?: Kafka;
  logger?: Logger;
}

/** What {@link instrumentConsumer} returns: the registry, the metrics, lag on demand, close. */
export interface ConsumerInstrumentation {
  readonly registry: Registry;
  readonly metrics: ConsumerMetrics;
  /** Sample lag now (the timer also does). */
  sampleLag(): Promise<void>;
  close(): Promise<void>;
}

/** The consumer events the metrics listen to. */
type ObservedEvent = 'committed' | 'duplicate' | 'stale' | 'retry' | 'deadLettered' | 'missingKey' | 'batchFallback' | 'error' | 'assigned' | 'stopped';

/**
 * Observe a consumer through its events, and sample its lag. Wrap its handler with
 * {@link instrumentHandler} on the same registry for handler duration, time in queue and
 * in-flight messages.
 */
export function instrumentConsumer<V>(consumer: Consumer<V>, options: InstrumentConsumerOptions = {}): ConsumerInstrumentation {
  const registry = options.registry ?? new Registry();
  if (options.processMetrics ?? true) addProcessMetrics(registry);
  const m = consumerMetrics(registry);
  const logger = (options.logger ?? silentLogger()).child({ component: 'metrics' });
  const intervalMs = options.lagSampleIntervalMs ?? 15_000;
  m.inFlight.set(0);

  // Stale messages are reported before the 'committed' that counts them as processed.
  const staleByPartition = new Map<string, number>();
  let assigned: Array<{ topic: string; partition: number }> = [];

  const listeners: { [K in ObservedEvent]: (e: ConsumerEvents[K]) => void } = {
    committed: (e) => {
      const key = `${e.topic}:${e.partition}`;
      const stale = staleByPartition.get(key) ?? 0;
      staleByPartition.delete(key);
      m.messages.inc({ topic: e.topic, outcome: 'processed' }, Math.max(0, e.processed - stale));
      m.transactions.inc();
    },
    duplicate: (e) => m.messages.inc({ topic: e.topic, outcome: 'duplicate' }),
    stale: (e) => {
      const key = `${e.topic}:${e.partition}`;
      staleByPartition.set(key, (staleByPartition.get(key) ?? 0) + 1);
      m.messages.inc({ topic: e.topic, outcome: 'stale' });
    },
    retry: (e) => m.messages.inc({ topic: e.topic, outcome: 'retried' }),
    deadLettered: (e) => {
      m.messages.inc({ topic: e.topic, outcome: 'dead_lettered' });
      m.deadLetters.inc({ topic: e.topic, error_class: e.reason });
    },
    missingKey: (e) => m.missingKey.inc({ topic: e.topic }),
    batchFallback: (e) => m.batchFallbacks.inc({ topic: e.topic }),
    error: (e) => {
      const inner = (e.error as { cause?: unknown } | null)?.cause;
      m.errors.inc({ error_class: errorLabel(inner instanceof Error ? inner : e.error) });
    },
    assigned: (e) => {
      const now = new Set(e.partitions.map((p) => `${p.topic}:${p.partition}`));
      for (const p of assigned) if (!now.has(`${p.topic}:${p.partition}`)) m.lag.remove({ topic: p.topic, partition: String(p.partition) });
      assigned = e.partitions;
      void sampleLag().catch(() => undefined);
    },
    stopped: () => {
      stopTimer();
      for (const p of assigned) m.lag.remove({ topic: p.topic, partition: String(p.partition) });
      assigned = [];
    },
  };
  const subscribe = (on: boolean): void => {
    for (const event of Object.keys(listeners) as ObservedEvent[]) {
      const listener = listeners[event] as (e: ConsumerEvents[typeof event]) => void;
      if (on) consumer.on(event, listener);
      else consumer.off(event, listener);
    }
  };
  subscribe(true);

  let kafka = options.kafka;
  let admin: Admin | undefined;
  const groupId = consumer.options.groupId;

  const doSampleLag = async (): Promise<void> => {
    if (assigned.length === 0) return;
    kafka ??=
      consumer.options.kafka ??
      createKafka({ brokers: consumer.options.kafkaBrokers ?? [], clientId: `${consumer.options.clientId}-lag`, logger });
    admin ??= kafka.admin({ retry: { retries: 1 } });
    await admin.connect();
    const topics = [...new Set(assigned.map((p) => p.topic))];
    const committed = new Map<string, string>();
    for (const entry of await admin.fetchOffsets({ groupId, topics })) {
      for (const p of entry.partitions) committed.set(`${entry.topic}:${p.partition}`, p.offset);
    }
    for (const topic of topics) {
      for (const p of await admin.fetchTopicOffsets(topic)) {
        const key = `${topic}:${p.partition}`;
        if (!assigned.some((a) => a.topic === topic && a.partition === p.partition)) continue;
        const at = committed.get(key);
        // No committed offset yet: the group starts at the oldest message still there.
        const from = at === undefined || Number(at) < 0 ? Number(p.low) : Number(at);
        m.lag.set({ topic, partition: String(p.partition) }, Math.max(0, Number(p.high) - from));
      }
    }
  };
  const sampleLag = serialized(() =>
    doSampleLag().catch(async (error: unknown) => {
      m.lagSampleErrors.inc({ error_class: errorLabel(error) });
      logger.warn({ err: describeError(error) }, 'consumer lag sample failed');
      await admin?.disconnect().catch(() => undefined);
      admin = undefined;
      throw error;
    }),
  );
  const timer = setInterval(() => void sampleLag().catch(() => undefined), intervalMs);
  timer.unref();
  const stopTimer = (): void => clearInterval(timer);

  return {
    registry,
    metrics: m,
    sampleLag,
    async close() {
      stopTimer();
      subscribe(false);
      await sampleLag.idle();
      await admin?.disconnect().catch(() => undefined);
      admin = undefined;
    },
  };
}
