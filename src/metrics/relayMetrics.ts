/**
 * The relay's metrics: their definitions, and {@link instrumentRelay}, which observes a
 * relay from the outside through its typed events (RelayEvents) and the backlog sampler
 * (./backlogSampler.ts) for the backlog, the oldest pending row's age and the ingress rate.
 */
import type pg from 'pg';
import { Registry, type Counter, type Gauge, type Histogram } from 'prom-client';
import type { RelayEvents } from '../relay/relay.js';
import type { BreakerState } from '../relay/breaker.js';
import { SHARD_COUNT } from '../relay/shards.js';
import { createPool } from '../shared/database.js';
import { quoteIdentifier } from '../shared/identifiers.js';
import { silentLogger, type Logger } from '../shared/logger.js';
import { BATCH_SIZE_BUCKETS, CALL_BUCKETS, LATENCY_BUCKETS, registerMetrics, type MetricTable } from './definitions.js';
import { errorLabel } from './errorLabel.js';
import { addProcessMetrics } from './processMetrics.js';
import { bindAll } from './boundLabels.js';
import { withDeadline } from './promises.js';
import { startBacklogSampler, type RelaySample } from './backlogSampler.js';
import type { RelayStatusEvent, RelayStatusSource } from './relayStatusSource.js';


/** The `outbox` label of a relay instrumented without a name (one outbox per process). */
export const DEFAULT_OUTBOX_LABEL = 'default';

/** Breaker states as the value of outbox_relay_breaker_state. */
export const BREAKER_STATE = { closed: 0, open: 1 } as const satisfies Record<BreakerState, number>;

/** The relay's metric objects. Created by {@link instrumentRelay}. */
export interface RelayMetrics {
  pendingRows: Gauge<'outbox'>;
  oldestPendingAge: Gauge<'outbox'>;
  enqueuedRows: Counter<'outbox'>;
  publishedRows: Counter<'topic' | 'outbox'>;
  batchSize: Histogram<'outbox'>;
  batchDuration: Histogram<'outbox'>;
  commitToAck: Histogram<'topic' | 'outbox'>;
  publishErrors: Counter<'error_class' | 'outbox'>;
  retries: Counter<'outbox'>;
  consecutiveFailures: Gauge<'outbox'>;
  breakerState: Gauge<'outbox'>;
  deadLetters: Counter<'topic' | 'outbox'>;
  parkedKeys: Gauge<'outbox'>;
  shardsOwned: Gauge<'outbox'>;
  horizonForced: Counter<'outbox'>;
  running: Gauge<'outbox'>;
  claimDuration: Histogram<'outbox'>;
  markSentDuration: Histogram<'outbox'>;
  kafkaSendDuration: Histogram<'outbox'>;
  samplerQueryDuration: Histogram<'outbox'>;
  samplerErrors: Counter<'error_class' | 'outbox'>;
  /** Of the relay group (relayGroup.ts): 1 while an outbox's relay runs, 0 while it cannot start (database unreachable, schema missing). */
  outboxUp: Gauge<'outbox'>;
}

/** Every relay metric: name, help, labels, buckets. */
export const RELAY_METRICS: MetricTable<RelayMetrics> = {
  pendingRows: {
    type: 'gauge',
    name: 'outbox_relay_pending_rows',
    help: 'Unsent outbox rows (the backlog). Exact up to the sampler cap, the planner estimate above it.',
    labelNames: ['outbox'],
  },
  oldestPendingAge: {
    type: 'gauge',
    name: 'outbox_relay_oldest_pending_age_seconds',
    help: 'Age of the oldest unsent outbox row by the database clock; 0 when none is pending.',
    labelNames: ['outbox'],
  },
  enqueuedRows: {
    type: 'counter',
    name: 'outbox_relay_enqueued_rows_total',
    help: 'Rows enqueued into the outbox (ingress), from the outbox id sequence, since this relay started. Database-wide: every relay on one outbox reports the same; aggregate with max().',
    labelNames: ['outbox'],
  },
  publishedRows: {
    type: 'counter',
    name: 'outbox_relay_published_rows_total',
    help: 'Rows acknowledged by Kafka and marked sent (egress).',
    labelNames: ['topic', 'outbox'],
  },
  batchSize: { type: 'histogram', name: 'outbox_relay_batch_size_rows', help: 'Rows per published batch.', buckets: BATCH_SIZE_BUCKETS, labelNames: ['outbox'] },
  batchDuration: {
    type: 'histogram',
    name: 'outbox_relay_batch_duration_seconds',
    help: 'Claim, publish, mark sent and commit of one batch.',
    buckets: CALL_BUCKETS,
    labelNames: ['outbox'],
  },
  commitToAck: {
    type: 'histogram',
    name: 'outbox_relay_commit_to_ack_seconds',
    help: "From a row's created_at (its transaction) to Kafka's acknowledgement, per row.",
    labelNames: ['topic', 'outbox'],
    buckets: LATENCY_BUCKETS,
  },
  publishErrors: {
    type: 'counter',
    name: 'outbox_relay_publish_errors_total',
    help: 'Failed batches (Kafka or Postgres), rolled back and retried, by error class.',
    labelNames: ['error_class', 'outbox'],
  },
  retries: { type: 'counter', name: 'outbox_relay_retries_total', help: 'Batch retries scheduled after a failure.', labelNames: ['outbox'] },
  consecutiveFailures: {
    type: 'gauge',
    name: 'outbox_relay_consecutive_failures',
    help: 'Failures in a row of the worst worker since its last successful batch.',
    labelNames: ['outbox'],
  },
  breakerState: { type: 'gauge', name: 'outbox_relay_breaker_state', help: 'Circuit breaker towards Kafka: 0 closed, 1 open.', labelNames: ['outbox'] },
  deadLetters: {
    type: 'counter',
    name: 'outbox_relay_dead_letters_total',
    help: 'Rows the relay gave up on and dead-lettered.',
    labelNames: ['topic', 'outbox'],
  },
  parkedKeys: { type: 'gauge', name: 'outbox_relay_parked_keys', help: 'Keys whose rows are held back behind a dead-lettered row.', labelNames: ['outbox'] },
  shardsOwned: { type: 'gauge', name: 'outbox_relay_shards_owned', help: `Shards (of ${SHARD_COUNT}) this relay holds a lease on.`, labelNames: ['outbox'] },
  horizonForced: {
    type: 'counter',
    name: 'outbox_relay_horizon_forced_total',
    help: 'Times the visibility horizon was advanced past a transaction still open (after horizon-max-wait-ms).',
    labelNames: ['outbox'],
  },
  running: { type: 'gauge', name: 'outbox_relay_running', help: '1 while the relay runs, 0 once it stopped.', labelNames: ['outbox'] },
  claimDuration: {
    type: 'histogram',
    name: 'outbox_relay_claim_duration_seconds',
    help: 'Postgres: the claim query of a batch.',
    buckets: CALL_BUCKETS,
    labelNames: ['outbox'],
  },
  markSentDuration: {
    type: 'histogram',
    name: 'outbox_relay_mark_sent_duration_seconds',
    help: 'Postgres: marking a batch sent and committing.',
    buckets: CALL_BUCKETS,
    labelNames: ['outbox'],
  },
  kafkaSendDuration: {
    type: 'histogram',
    name: 'outbox_relay_kafka_send_duration_seconds',
    help: 'Kafka: one batch send until acks=all.',
    buckets: CALL_BUCKETS,
    labelNames: ['outbox'],
  },
  samplerQueryDuration: {
    type: 'histogram',
    name: 'outbox_relay_sampler_query_duration_seconds',
    help: 'Postgres: one metrics sample (backlog, oldest row, sequence).',
    buckets: CALL_BUCKETS,
    labelNames: ['outbox'],
  },
  outboxUp: {
    type: 'gauge',
    name: 'outbox_relay_outbox_up',
    help: 'Relay group: 1 while the outbox is relayed, 0 while its relay cannot start (database unreachable, schema missing); retried with backoff.',
    labelNames: ['outbox'],
  },
  samplerErrors: {
    type: 'counter',
    name: 'outbox_relay_sampler_errors_total',
    help: 'Failed metrics samples, by error class.',
    labelNames: ['error_class', 'outbox'],
  },
};

/** Register the relay's metrics on `registry` (or return the ones already there). */
export function relayMetrics(registry: Registry): RelayMetrics {
  return registerMetrics(registry, RELAY_METRICS);
}

/** Options of {@link instrumentRelay}. */
export interface InstrumentRelayOptions {
  /** Registry to register on (default: a new one). */
  registry?: Registry;
  /** Also export Node.js process metrics (default true). */
  processMetrics?: boolean;
  /** How often the sampler queries the outbox, in ms (default 5000). */
  sampleIntervalMs?: number;
  /** Unsent rows are counted exactly up to this many (default 100000). */
  backlogCountCap?: number;
  /** Pool for the sampler and the readiness ping (default: one connection of its own). */
  pool?: pg.Pool;
  /**
   * Value of the `outbox` label on every relay metric (default `default`): a process that
   * relays several outboxes (createRelayGroup) instruments each on one registry under its name.
   */
  outbox?: string;
  logger?: Logger;
}

/** What {@link instrumentRelay} returns: the registry, the metrics, samples, the database ping, close. */
export interface RelayInstrumentation {
  readonly registry: Registry;
  readonly metrics: RelayMetrics;
  /** The last successful sample, if any. */
  readonly lastSample: RelaySample | undefined;
  /** Whether the relay runs: false once it emitted 'stopped'. */
  readonly stopped: boolean;
  /** Take a sample that starts no earlier than this call (the timer also takes them). */
  sample(): Promise<RelaySample>;
  /** `SELECT 1` on the sampler's pool. */
  pingDatabase(timeoutMs?: number): Promise<void>;
  /** Stop the sampler, unsubscribe, close the sampler's own pool. Idempotent. */
  close(): Promise<void>;
}

/**
 * Observe a relay: subscribe to its events and sample the outbox every
 * `sampleIntervalMs`. Call before or after `relay.start()`; `close()` when done.
 */
export function instrumentRelay(relay: RelayStatusSource, options: InstrumentRelayOptions = {}): RelayInstrumentation {
  const registry = options.registry ?? new Registry();
  if (options.processMetrics ?? true) addProcessMetrics(registry);
  const outbox = options.outbox ?? DEFAULT_OUTBOX_LABEL;
  // The metrics of this outbox: every value recorded through them carries its label.
  const m = bindAll(relayMetrics(registry) as unknown as Record<string, never>, { outbox }) as unknown as RelayMetrics;
  const logger = (options.logger ?? silentLogger()).child({ component: 'metrics' });
  const quotedSchema = quoteIdentifier(relay.options.schema, 'schema');
  const ownPool = options.pool === undefined;
  const pool = options.pool ?? createPool(relay.options.databaseUrl, `${relay.options.clientId}:metrics`, 1, logger);

  m.breakerState.set(BREAKER_STATE.closed);
  m.parkedKeys.set(0);
  m.running.set(1);
  m.consecutiveFailures.set(0);
  const failures = new Map<number, number>();
  const updateFailures = (): void => m.consecutiveFailures.set(Math.max(0, ...failures.values()));

  let stopped = false;
  const sampler = startBacklogSampler({
    pool,
    quotedSchema,
    metrics: m,
    intervalMs: options.sampleIntervalMs ?? 5_000,
    countCap: options.backlogCountCap ?? 100_000,
    logger,
    afterSample: () => {
      if (!stopped) m.shardsOwned.set(relay.ownedShards.length);
    },
  });

  const listeners: { [K in RelayStatusEvent]: (e: RelayEvents[K]) => void } = {
    batch: (e) => {
      for (const [topic, n] of Object.entries(e.topics)) m.publishedRows.inc({ topic }, n);
      m.batchSize.observe(e.count);
      m.batchDuration.observe(e.durationMs / 1000);
      m.claimDuration.observe(e.claimMs / 1000);
      m.kafkaSendDuration.observe(e.publishMs / 1000);
      m.markSentDuration.observe(e.markMs / 1000);
      // createdAtMs carries no topic per row: a batch of one topic is labelled with it, a
      // batch of several with ''.
      const topics = Object.keys(e.topics);
      const topic = topics.length === 1 ? (topics[0] as string) : '';
      for (const created of e.createdAtMs) m.commitToAck.observe({ topic }, Math.max(0, e.ackedAtMs - created) / 1000);
      failures.set(e.worker, 0);
      updateFailures();
    },
    batchError: (e) => {
      m.publishErrors.inc({ error_class: errorLabel(e.error) });
      m.retries.inc();
      failures.set(e.worker, e.attempt);
      updateFailures();
    },
    horizon: (e) => {
      if (e.forced) m.horizonForced.inc();
    },
    shards: (e) => m.shardsOwned.set(e.owned),
    breaker: (e) => m.breakerState.set(BREAKER_STATE[e.state]),
    deadLetter: (e) => m.deadLetters.inc({ topic: e.topic }),
    stopped: () => {
      stopped = true;
      m.running.set(0);
      m.shardsOwned.set(0);
      sampler.stop();
    },
  };
  const subscribe = (on: boolean): void => {
    for (const event of Object.keys(listeners) as RelayStatusEvent[]) {
      const listener = listeners[event] as (e: RelayEvents[typeof event]) => void;
      if (on) relay.on(event, listener);
      else relay.off(event, listener);
    }
  };
  subscribe(true);

  let closed = false;
  return {
    registry,
    metrics: m,
    get lastSample() {
      return sampler.lastSample;
    },
    get stopped() {
      return stopped;
    },
    sample: sampler.sample,
    async pingDatabase(timeoutMs = 2_000) {
      await withDeadline(pool.query('SELECT 1'), timeoutMs, 'database ping');
    },
    async close() {
      if (closed) return;
      closed = true;
      subscribe(false);
      await sampler.close();
      if (ownPool) await pool.end().catch(() => undefined);
    },
  };
}
