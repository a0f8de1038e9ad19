/**
 * Prometheus metrics of the relay and of the consumer runtime.
 *
 * Every instrumented instance gets a prom-client Registry of its own (not the global
 * one), so a process may run several and tests can read each one's values. Labels are
 * bounded: a topic, an error class (a short name derived from the error's type, see
 * {@link errorClass}), the consumer's outcome, a partition for consumer lag. Never a key,
 * a message id or anything from a payload.
 *
 * The relay is observed from the outside: its typed events (RelayEvents) and a periodic,
 * cheap SQL sampler (src/sql/metrics.ts) for the backlog, the oldest pending row's age
 * and the ingress rate.
 */
import type pg from 'pg';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics, type Metric } from 'prom-client';
import type { Admin, Kafka } from 'kafkajs';
import type { Relay, RelayEvents } from '../relay/relay.js';
import type { Consumer, MessageHandler } from '../consumer/consumer.js';
import { createPool } from '../shared/database.js';
import { quoteIdentifier } from '../shared/identifiers.js';
import { createKafka } from '../shared/kafka.js';
import { describeError } from '../shared/errors.js';
import { silentLogger, type Logger } from '../shared/logger.js';
import type { TypedEmitter } from '../shared/events.js';
import {
  backlogCountSql,
  backlogEstimateSql,
  oldestPendingSql,
  parkedKeysSql,
  sequenceLastValueSql,
  type OldestPendingRow,
} from './sql/metrics.js';

/** Number of shards rows are hashed into (sql/001_outbox.sql). */
const SHARDS = 256;

const LATENCY_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300];
const CALL_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];
const BATCH_SIZE_BUCKETS = [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000];

/** Breaker states as the value of outbox_relay_breaker_state. */
export const BREAKER_STATE = { closed: 0, halfOpen: 1, open: 2 } as const;

/**
 * A short, bounded label for an error: what kind of failure, never its message.
 *
 * - kafkajs protocol errors: `kafka_<type>` (e.g. `kafka_not_leader_or_follower`);
 *   other kafkajs errors: `kafka_<name>` (e.g. `kafka_connection_error`); a
 *   "retries exceeded" wrapper is classified by its cause.
 * - Postgres errors: `postgres_<SQLSTATE>` (e.g. `postgres_57p01`).
 * - Node.js socket errors: `network_<code>` (e.g. `network_econnrefused`).
 * - outbox-relay errors: their class name in snake case (e.g. `connection_error`).
 * - anything else: `other`.
 */
export function errorClass(error: unknown, depth = 0): string {
  if (!(error instanceof Error)) return 'other';
  const e = error as Error & { code?: unknown; type?: unknown; cause?: unknown };
  if (e.name === 'KafkaJSNumberOfRetriesExceeded' || e.name === 'KafkaJSNonRetriableError') {
    if (e.cause instanceof Error && depth < 3) return errorClass(e.cause, depth + 1);
  }
  if (e.name.startsWith('KafkaJS')) {
    if (typeof e.type === 'string' && /^[A-Z_]{1,60}$/.test(e.type)) return `kafka_${e.type.toLowerCase()}`;
    return `kafka_${snake(e.name.slice('KafkaJS'.length)) || 'error'}`;
  }
  if (typeof e.code === 'string') {
    if (/^[0-9A-Z]{5}$/.test(e.code)) return `postgres_${e.code.toLowerCase()}`;
    if (/^E[A-Z]{2,20}$/.test(e.code)) return `network_${e.code.toLowerCase()}`;
  }
  if (/^[A-Z][A-Za-z]{0,40}Error$/.test(e.name) && e.name !== 'Error') {
    // Our own errors (ConnectionError, OutboxError...) and the built-in ones (TypeError).
    // Wrappers are classified by what they wrap.
    if (e.cause instanceof Error && depth < 3 && WRAPPERS.has(e.name)) {
      const inner = errorClass(e.cause, depth + 1);
      if (inner !== 'other') return inner;
    }
    return snake(e.name);
  }
  return 'other';
}

/** Errors of ours that wrap a Kafka or Postgres error with context. */
const WRAPPERS = new Set(['ConnectionError', 'PublishError']);

function snake(name: string): string {
  return name
    .replace(/([A-Z]+)([A-Z][a-z])/g, '$1_$2')
    .replace(/([a-z0-9])([A-Z])/g, '$1_$2')
    .toLowerCase()
    .replace(/[^a-z0-9_]/g, '');
}

function getOrCreate<M extends Metric>(registry: Registry, name: string, create: () => M): M {
  return (registry.getSingleMetric(name) as M | undefined) ?? create();
}

/** Node.js process metrics (CPU, memory, event loop lag, GC...) on `registry`, once. */
export function addProcessMetrics(registry: Registry): void {
  if (registry.getSingleMetric('process_cpu_seconds_total')) return;
  collectDefaultMetrics({ register: registry });
}

// ---------------------------------------------------------------------------------------
// Relay

/** The relay's metric objects. Created by {@link instrumentRelay}. */
export interface RelayMetrics {
  pendingRows: Gauge;
  oldestPendingAge: Gauge;
  enqueuedRows: Counter;
  publishedRows: Counter<'topic'>;
  batchSize: Histogram;
  batchDuration: Histogram;
  commitToAck: Histogram<'topic'>;
  publishErrors: Counter<'error_class'>;
  retries: Counter;
  consecutiveFailures: Gauge;
  breakerState: Gauge;
  deadLetters: Counter<'topic'>;
  parkedKeys: Gauge;
  shardsOwned: Gauge;
  horizonForced: Counter;
  running: Gauge;
  claimDuration: Histogram;
  markSentDuration: Histogram;
  kafkaSendDuration: Histogram;
  samplerQueryDuration: Histogram;
  samplerErrors: Counter<'error_class'>;
}

/** Register the relay's metrics on `registry` (or return the ones already there). */
export function relayMetrics(registry: Registry): RelayMetrics {
  const r = [registry];
  return {
    pendingRows: getOrCreate(registry, 'outbox_relay_pending_rows', () => new Gauge({
      name: 'outbox_relay_pending_rows',
      help: 'Unsent outbox rows (the backlog). Exact up to the sampler cap, the planner estimate above it.',
      registers: r,
    })),
    oldestPendingAge: getOrCreate(registry, 'outbox_relay_oldest_pending_age_seconds', () => new Gauge({
      name: 'outbox_relay_oldest_pending_age_seconds',
      help: 'Age of the oldest unsent outbox row by the database clock; 0 when none is pending.',
      registers: r,
    })),
    enqueuedRows: getOrCreate(registry, 'outbox_relay_enqueued_rows_total', () => new Counter({
      name: 'outbox_relay_enqueued_rows_total',
      help: 'Rows enqueued into the outbox (ingress), from the outbox id sequence, since this relay started. Database-wide: every relay on one outbox reports the same; aggregate with max().',
      registers: r,
    })),
    publishedRows: getOrCreate(registry, 'outbox_relay_published_rows_total', () => new Counter({
      name: 'outbox_relay_published_rows_total',
      help: 'Rows acknowledged by Kafka and marked sent (egress).',
      labelNames: ['topic'] as const,
      registers: r,
    })),
    batchSize: getOrCreate(registry, 'outbox_relay_batch_size_rows', () => new Histogram({
      name: 'outbox_relay_batch_size_rows',
      help: 'Rows per published batch.',
      buckets: BATCH_SIZE_BUCKETS,
      registers: r,
    })),
    batchDuration: getOrCreate(registry, 'outbox_relay_batch_duration_seconds', () => new Histogram({
      name: 'outbox_relay_batch_duration_seconds',
      help: 'Claim, publish, mark sent and commit of one batch.',
      buckets: CALL_BUCKETS,
      registers: r,
    })),
    commitToAck: getOrCreate(registry, 'outbox_relay_commit_to_ack_seconds', () => new Histogram({
      name: 'outbox_relay_commit_to_ack_seconds',
      help: 'From a row\'s created_at (its transaction) to Kafka\'s acknowledgement, per row.',
      labelNames: ['topic'] as const,
      buckets: LATENCY_BUCKETS,
      registers: r,
    })),
    publishErrors: getOrCreate(registry, 'outbox_relay_publish_errors_total', () => new Counter({
      name: 'outbox_relay_publish_errors_total',
      help: 'Failed batches (Kafka or Postgres), rolled back and retried, by error class.',
      labelNames: ['error_class'] as const,
      registers: r,
    })),
    retries: getOrCreate(registry, 'outbox_relay_retries_total', () => new Counter({
      name: 'outbox_relay_retries_total',
      help: 'Batch retries scheduled after a failure.',
      registers: r,
    })),
    consecutiveFailures: getOrCreate(registry, 'outbox_relay_consecutive_failures', () => new Gauge({
      name: 'outbox_relay_consecutive_failures',
      help: 'Failures in a row of the worst worker since its last successful batch.',
      registers: r,
    })),
    breakerState: getOrCreate(registry, 'outbox_relay_breaker_state', () => new Gauge({
      name: 'outbox_relay_breaker_state',
      help: 'Circuit breaker towards Kafka: 0 closed, 1 half-open, 2 open.',
      registers: r,
    })),
    deadLetters: getOrCreate(registry, 'outbox_relay_dead_letters_total', () => new Counter({
      name: 'outbox_relay_dead_letters_total',
      help: 'Rows the relay gave up on and dead-lettered.',
      labelNames: ['topic'] as const,
      registers: r,
    })),
    parkedKeys: getOrCreate(registry, 'outbox_relay_parked_keys', () => new Gauge({
      name: 'outbox_relay_parked_keys',
      help: 'Keys whose rows are held back behind a dead-lettered row.',
      registers: r,
    })),
    shardsOwned: getOrCreate(registry, 'outbox_relay_shards_owned', () => new Gauge({
      name: 'outbox_relay_shards_owned',
      help: `Shards (of ${SHARDS}) this relay holds a lease on.`,
      registers: r,
    })),
    horizonForced: getOrCreate(registry, 'outbox_relay_horizon_forced_total', () => new Counter({
      name: 'outbox_relay_horizon_forced_total',
      help: 'Times the visibility horizon was advanced past a transaction still open (after horizon-max-wait-ms).',
      registers: r,
    })),
    running: getOrCreate(registry, 'outbox_relay_running', () => new Gauge({
      name: 'outbox_relay_running',
      help: '1 while the relay runs, 0 once it stopped.',
      registers: r,
    })),
    claimDuration: getOrCreate(registry, 'outbox_relay_claim_duration_seconds', () => new Histogram({
      name: 'outbox_relay_claim_duration_seconds',
      help: 'Postgres: the claim query of a batch.',
      buckets: CALL_BUCKETS,
      registers: r,
    })),
    markSentDuration: getOrCreate(registry, 'outbox_relay_mark_sent_duration_seconds', () => new Histogram({
      name: 'outbox_relay_mark_sent_duration_seconds',
      help: 'Postgres: marking a batch sent and committing.',
      buckets: CALL_BUCKETS,
      registers: r,
    })),
    kafkaSendDuration: getOrCreate(registry, 'outbox_relay_kafka_send_duration_seconds', () => new Histogram({
      name: 'outbox_relay_kafka_send_duration_seconds',
      help: 'Kafka: one batch send until acks=all.',
      buckets: CALL_BUCKETS,
      registers: r,
    })),
    samplerQueryDuration: getOrCreate(registry, 'outbox_relay_sampler_query_duration_seconds', () => new Histogram({
      name: 'outbox_relay_sampler_query_duration_seconds',
      help: 'Postgres: one metrics sample (backlog, oldest row, sequence).',
      buckets: CALL_BUCKETS,
      registers: r,
    })),
    samplerErrors: getOrCreate(registry, 'outbox_relay_sampler_errors_total', () => new Counter({
      name: 'outbox_relay_sampler_errors_total',
      help: 'Failed metrics samples, by error class.',
      labelNames: ['error_class'] as const,
      registers: r,
    })),
  };
}

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
  logger?: Logger;
}

/** Optional fields a relay's batch event may carry (see the report in docs/operations.md). */
interface BatchDetails {
  /** Rows per topic. */
  topics?: Record<string, number>;
  /** created_at of each row, ms since the epoch. */
  createdAtMs?: number[];
  /** When Kafka acknowledged the batch, ms since the epoch. */
  ackedAtMs?: number;
  claimMs?: number;
  publishMs?: number;
  markMs?: number;
}

/** A last sample's values, for readiness and tests. */
export interface RelaySample {
  pending: number;
  /** true when `pending` is the planner's estimate (above the cap). */
  estimated: boolean;
  oldestAgeSeconds: number;
  lastId: number;
  at: Date;
}

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
export function instrumentRelay(relay: Relay, options: InstrumentRelayOptions = {}): RelayInstrumentation {
  const registry = options.registry ?? new Registry();
  if (options.processMetrics ?? true) addProcessMetrics(registry);
  const m = relayMetrics(registry);
  const logger = (options.logger ?? silentLogger()).child({ component: 'metrics' });
  const quoted = quoteIdentifier(relay.options.schema, 'schema');
  const cap = options.backlogCountCap ?? 100_000;
  const intervalMs = options.sampleIntervalMs ?? 5_000;
  const ownPool = options.pool === undefined;
  const pool = options.pool ?? createPool(relay.options.databaseUrl, `${relay.options.clientId}:metrics`, 1, logger);

  m.breakerState.set(BREAKER_STATE.closed);
  m.parkedKeys.set(0);
  m.running.set(1);
  m.consecutiveFailures.set(0);
  const failures = new Map<number, number>();
  const updateFailures = (): void => m.consecutiveFailures.set(Math.max(0, ...failures.values()));

  const onBatch = (e: RelayEvents['batch'] & BatchDetails): void => {
    if (e.topics) for (const [topic, n] of Object.entries(e.topics)) m.publishedRows.inc({ topic }, n);
    else m.publishedRows.inc({ topic: '' }, e.count);
    m.batchSize.observe(e.count);
    m.batchDuration.observe(e.durationMs / 1000);
    if (e.claimMs !== undefined) m.claimDuration.observe(e.claimMs / 1000);
    if (e.publishMs !== undefined) m.kafkaSendDuration.observe(e.publishMs / 1000);
    if (e.markMs !== undefined) m.markSentDuration.observe(e.markMs / 1000);
    if (e.createdAtMs && e.ackedAtMs !== undefined) {
      // Without per-row topics, the batch's single topic when it has one.
      const topics = e.topics ? Object.keys(e.topics) : [];
      const topic = topics.length === 1 ? (topics[0] as string) : '';
      for (const created of e.createdAtMs) m.commitToAck.observe({ topic }, Math.max(0, e.ackedAtMs - created) / 1000);
    }
    failures.set(e.worker, 0);
    updateFailures();
  };
  const onBatchError = (e: RelayEvents['batchError']): void => {
    m.publishErrors.inc({ error_class: errorClass(e.error) });
    m.retries.inc();
    failures.set(e.worker, e.attempt);
    updateFailures();
  };
  const onHorizon = (e: RelayEvents['horizon']): void => {
    if (e.forced) m.horizonForced.inc();
  };
  const onShards = (e: { owned: number }): void => {
    m.shardsOwned.set(e.owned);
  };
  const onBreaker = (e: { state: string }): void => {
    m.breakerState.set(e.state === 'open' ? BREAKER_STATE.open : e.state === 'half-open' ? BREAKER_STATE.halfOpen : BREAKER_STATE.closed);
  };
  const onDeadLetter = (e: { topic: string }): void => {
    m.deadLetters.inc({ topic: e.topic });
  };
  let timer: NodeJS.Timeout | undefined;
  let closed = false;
  let stopped = false;
  const onStopped = (): void => {
    stopped = true;
    m.running.set(0);
    m.shardsOwned.set(0);
    if (timer) clearTimeout(timer);
    timer = undefined;
  };
  relay.on('batch', onBatch);
  relay.on('batchError', onBatchError);
  relay.on('horizon', onHorizon);
  relay.on('stopped', onStopped);
  // Listened to loosely: these events came with later features (leases, breaker, dead
  // letters), and a relay without them simply never emits them.
  const loose = relay as unknown as TypedEmitter<{ shards: { owned: number }; breaker: { state: string }; deadLetter: { topic: string } }>;
  loose.on('shards', onShards);
  loose.on('breaker', onBreaker);
  loose.on('deadLetter', onDeadLetter);

  const ownedShards = (): number => {
    const owned = (relay as unknown as { ownedShards?: unknown }).ownedShards;
    return Array.isArray(owned) ? owned.length : SHARDS;
  };

  let lastSample: RelaySample | undefined;
  let lastId: number | undefined;

  const timed = async <R extends pg.QueryResultRow>(sql: string, params: unknown[] = []): Promise<R[]> => {
    const end = m.samplerQueryDuration.startTimer();
    try {
      return (await pool.query<R>(sql, params)).rows;
    } finally {
      end();
    }
  };

  const doSample = async (): Promise<RelaySample> => {
    const [count] = await timed<{ pending: number }>(backlogCountSql(quoted), [cap]);
    let pending = count?.pending ?? 0;
    let estimated = false;
    if (pending >= cap) {
      const [plan] = await timed<{ 'QUERY PLAN': Array<{ Plan: { 'Plan Rows': number } }> }>(backlogEstimateSql(quoted));
      pending = Math.max(cap, Math.round(plan?.['QUERY PLAN'][0]?.Plan['Plan Rows'] ?? 0));
      estimated = true;
    }
    const [oldest] = await timed<OldestPendingRow>(oldestPendingSql(quoted));
    const [seq] = await timed<{ last_id: number }>(sequenceLastValueSql(quoted));
    const [parked] = await timed<{ parked: number }>(parkedKeysSql(quoted));
    m.parkedKeys.set(parked?.parked ?? 0);
    const id = Number(seq?.last_id ?? 0);
    if (lastId !== undefined && id > lastId) m.enqueuedRows.inc(id - lastId);
    lastId = id;
    const oldestAgeSeconds = oldest ? Math.max(0, oldest.age_seconds) : 0;
    m.pendingRows.set(pending);
    m.oldestPendingAge.set(oldestAgeSeconds);
    if (!stopped) m.shardsOwned.set(ownedShards());
    lastSample = { pending, estimated, oldestAgeSeconds, lastId: id, at: new Date() };
    return lastSample;
  };

  const sample = serialized(() =>
    doSample().catch((error: unknown) => {
      m.samplerErrors.inc({ error_class: errorClass(error) });
      logger.warn({ err: describeError(error) }, 'metrics sample failed');
      throw error;
    }),
  );

  const schedule = (): void => {
    if (closed || stopped) return;
    timer = setTimeout(() => {
      sample()
        .catch(() => undefined)
        .finally(schedule);
    }, intervalMs);
    timer.unref();
  };
  // The first sample sets the ingress baseline.
  void sample().catch(() => undefined).finally(schedule);

  return {
    registry,
    metrics: m,
    get lastSample() {
      return lastSample;
    },
    get stopped() {
      return stopped;
    },
    sample,
    async pingDatabase(timeoutMs = 2_000) {
      await withTimeout(pool.query('SELECT 1'), timeoutMs, 'database ping');
    },
    async close() {
      if (closed) return;
      closed = true;
      if (timer) clearTimeout(timer);
      relay.off('batch', onBatch);
      relay.off('batchError', onBatchError);
      relay.off('horizon', onHorizon);
      relay.off('stopped', onStopped);
      loose.off('shards', onShards);
      loose.off('breaker', onBreaker);
      loose.off('deadLetter', onDeadLetter);
      await sample.idle();
      if (ownPool) await pool.end().catch(() => undefined);
    },
  };
}

/**
 * One run of `fn` at a time, so a slow server never piles them up. A call while a run is
 * in flight gets the next run, which starts after it: its result is never older than the
 * call. Concurrent callers share that next run.
 */
function serialized<T>(fn: () => Promise<T>): (() => Promise<T>) & { idle(): Promise<void> } {
  let running: Promise<T> | undefined;
  let queued: Promise<T> | undefined;
  const start = (): Promise<T> => {
    const run = fn().finally(() => {
      if (running === run) running = undefined;
    });
    running = run;
    return run;
  };
  const call = (): Promise<T> => {
    if (!running) return start();
    queued ??= running
      .catch(() => undefined)
      .then(() => {
        queued = undefined;
        return start();
      });
    return queued;
  };
  return Object.assign(call, {
    async idle() {
      await queued?.catch(() => undefined);
      await running?.catch(() => undefined);
    },
  });
}

async function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} timed out after ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

// ---------------------------------------------------------------------------------------
// Readiness

/** One check of /readyz. */
export interface ReadinessCheck {
  ok: boolean;
  detail: string;
}

export interface Readiness {
  ready: boolean;
  checks: Record<string, ReadinessCheck>;
}

export interface RelayReadinessOptions {
  /** Kafka client to probe with (default: relay.options.kafka, else one from its brokers). */
  kafka?: Kafka;
  /** Per check, in ms (default 2000). */
  timeoutMs?: number;
  /** Reuse a Kafka probe's answer this long, in ms (default 5000). */
  kafkaCacheMs?: number;
  logger?: Logger;
}

/** The relay's /readyz: database reachable, Kafka reachable, running (owning shards or waiting for them). */
export interface RelayReadiness {
  check(): Promise<Readiness>;
  close(): Promise<void>;
}

export function relayReadiness(
  relay: Relay,
  instrumentation: RelayInstrumentation,
  options: RelayReadinessOptions = {},
): RelayReadiness {
  const timeoutMs = options.timeoutMs ?? 2_000;
  const cacheMs = options.kafkaCacheMs ?? 5_000;
  const logger = options.logger ?? silentLogger();
  const kafka =
    options.kafka ??
    relay.options.kafka ??
    createKafka({ brokers: relay.options.kafkaBrokers, clientId: `${relay.options.clientId}-readiness`, logger });
  let admin: Admin | undefined;
  let cached: { at: number; result: ReadinessCheck } | undefined;

  const probeKafka = async (): Promise<ReadinessCheck> => {
    if (cached && Date.now() - cached.at < cacheMs) return cached.result;
    let result: ReadinessCheck;
    try {
      admin ??= kafka.admin({ retry: { retries: 0 } });
      const a = admin;
      const cluster = await withTimeout(
        (async () => {
          await a.connect();
          return a.describeCluster();
        })(),
        timeoutMs,
        'Kafka metadata request',
      );
      result = { ok: true, detail: `${cluster.brokers.length} broker(s)` };
    } catch (error) {
      await admin?.disconnect().catch(() => undefined);
      admin = undefined;
      result = { ok: false, detail: errorClass(error) };
    }
    cached = { at: Date.now(), result };
    return result;
  };

  const probeDatabase = async (): Promise<ReadinessCheck> => {
    try {
      await instrumentation.pingDatabase(timeoutMs);
      return { ok: true, detail: 'reachable' };
    } catch (error) {
      return { ok: false, detail: errorClass(error) };
    }
  };

  return {
    async check() {
      const [database, kafkaCheck] = await Promise.all([probeDatabase(), probeKafka()]);
      const owned = (relay as unknown as { ownedShards?: unknown }).ownedShards;
      const count = Array.isArray(owned) ? owned.length : SHARDS;
      const shards: ReadinessCheck = instrumentation.stopped
        ? { ok: false, detail: 'relay stopped' }
        : { ok: true, detail: count > 0 ? `owns ${count} shard(s)` : 'waiting for shards' };
      const checks = { database, kafka: kafkaCheck, shards };
      return { ready: database.ok && kafkaCheck.ok && shards.ok, checks };
    },
    async close() {
      await admin?.disconnect().catch(() => undefined);
      admin = undefined;
    },
  };
}

// ---------------------------------------------------------------------------------------
// Consumer

/** Outcomes of outbox_consumer_messages_total. `processed` excludes `stale`. */
export const CONSUMER_OUTCOMES = ['processed', 'duplicate', 'stale', 'retried', 'dead_lettered'] as const;

export interface ConsumerMetrics {
  messages: Counter<'topic' | 'outcome'>;
  handlerDuration: Histogram<'topic'>;
  timeInQueue: Histogram<'topic'>;
  inFlight: Gauge;
  lag: Gauge<'topic' | 'partition'>;
  deadLetters: Counter<'topic' | 'error_class'>;
  missingKey: Counter<'topic'>;
  transactions: Counter;
  errors: Counter<'error_class'>;
  lagSampleErrors: Counter<'error_class'>;
}

/** Register the consumer's metrics on `registry` (or return the ones already there). */
export function consumerMetrics(registry: Registry): ConsumerMetrics {
  const r = [registry];
  return {
    messages: getOrCreate(registry, 'outbox_consumer_messages_total', () => new Counter({
      name: 'outbox_consumer_messages_total',
      help: 'Messages by outcome: processed (handler committed), duplicate (skipped by its idempotency key), stale (version gate), retried (transient error, retry scheduled), dead_lettered.',
      labelNames: ['topic', 'outcome'] as const,
      registers: r,
    })),
    handlerDuration: getOrCreate(registry, 'outbox_consumer_handler_duration_seconds', () => new Histogram({
      name: 'outbox_consumer_handler_duration_seconds',
      help: 'Time in the handler per message, successful or not.',
      labelNames: ['topic'] as const,
      buckets: CALL_BUCKETS,
      registers: r,
    })),
    timeInQueue: getOrCreate(registry, 'outbox_consumer_time_in_queue_seconds', () => new Histogram({
      name: 'outbox_consumer_time_in_queue_seconds',
      help: 'From the Kafka timestamp (for relayed messages: the outbox row\'s created_at) to the handler starting.',
      labelNames: ['topic'] as const,
      buckets: LATENCY_BUCKETS,
      registers: r,
    })),
    inFlight: getOrCreate(registry, 'outbox_consumer_messages_in_flight', () => new Gauge({
      name: 'outbox_consumer_messages_in_flight',
      help: 'Messages whose handler is running now.',
      registers: r,
    })),
    lag: getOrCreate(registry, 'outbox_consumer_lag_messages', () => new Gauge({
      name: 'outbox_consumer_lag_messages',
      help: 'Messages behind the partition\'s end (high watermark minus committed offset), for partitions assigned to this member.',
      labelNames: ['topic', 'partition'] as const,
      registers: r,
    })),
    deadLetters: getOrCreate(registry, 'outbox_consumer_dead_letters_total', () => new Counter({
      name: 'outbox_consumer_dead_letters_total',
      help: 'Messages sent to the dead-letter topic, by reason (undecodable, missing-key, permanent-error, retries-exhausted).',
      labelNames: ['topic', 'error_class'] as const,
      registers: r,
    })),
    missingKey: getOrCreate(registry, 'outbox_consumer_missing_idempotency_key_total', () => new Counter({
      name: 'outbox_consumer_missing_idempotency_key_total',
      help: 'Messages without a usable idempotency key.',
      labelNames: ['topic'] as const,
      registers: r,
    })),
    transactions: getOrCreate(registry, 'outbox_consumer_transactions_total', () => new Counter({
      name: 'outbox_consumer_transactions_total',
      help: 'Postgres transactions committed by the consumer.',
      registers: r,
    })),
    errors: getOrCreate(registry, 'outbox_consumer_errors_total', () => new Counter({
      name: 'outbox_consumer_errors_total',
      help: 'Failures outside handlers (Postgres, Kafka, dead-letter publish), by error class; retried.',
      labelNames: ['error_class'] as const,
      registers: r,
    })),
    lagSampleErrors: getOrCreate(registry, 'outbox_consumer_lag_sample_errors_total', () => new Counter({
      name: 'outbox_consumer_lag_sample_errors_total',
      help: 'Failed lag samples, by error class.',
      labelNames: ['error_class'] as const,
      registers: r,
    })),
  };
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

export interface ConsumerInstrumentation {
  readonly registry: Registry;
  readonly metrics: ConsumerMetrics;
  /** Sample lag now (the timer also does). */
  sampleLag(): Promise<void>;
  close(): Promise<void>;
}

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

  const listeners = {
    committed: (e: { topic: string; partition: number; processed: number }) => {
      const key = `${e.topic}:${e.partition}`;
      const stale = staleByPartition.get(key) ?? 0;
      staleByPartition.delete(key);
      m.messages.inc({ topic: e.topic, outcome: 'processed' }, Math.max(0, e.processed - stale));
      m.transactions.inc();
    },
    duplicate: (e: { topic: string }) => m.messages.inc({ topic: e.topic, outcome: 'duplicate' }),
    stale: (e: { topic: string; partition: number }) => {
      const key = `${e.topic}:${e.partition}`;
      staleByPartition.set(key, (staleByPartition.get(key) ?? 0) + 1);
      m.messages.inc({ topic: e.topic, outcome: 'stale' });
    },
    retry: (e: { topic: string }) => m.messages.inc({ topic: e.topic, outcome: 'retried' }),
    deadLettered: (e: { topic: string; reason: string }) => {
      m.messages.inc({ topic: e.topic, outcome: 'dead_lettered' });
      m.deadLetters.inc({ topic: e.topic, error_class: e.reason });
    },
    missingKey: (e: { topic: string }) => m.missingKey.inc({ topic: e.topic }),
    error: (e: { error: unknown }) => {
      const inner = (e.error as { cause?: unknown } | null)?.cause;
      m.errors.inc({ error_class: errorClass(inner instanceof Error ? inner : e.error) });
    },
    assigned: (e: { partitions: Array<{ topic: string; partition: number }> }) => {
      const now = new Set(e.partitions.map((p) => `${p.topic}:${p.partition}`));
      for (const p of assigned) if (!now.has(`${p.topic}:${p.partition}`)) m.lag.remove({ topic: p.topic, partition: String(p.partition) });
      assigned = e.partitions;
      void sampleLag().catch(() => undefined);
    },
    stopped: () => {
      closedTimer();
      for (const p of assigned) m.lag.remove({ topic: p.topic, partition: String(p.partition) });
      assigned = [];
    },
  };
  const emitter = consumer as unknown as TypedEmitter<Record<string, unknown>>;
  for (const [event, listener] of Object.entries(listeners)) emitter.on(event, listener as (payload: unknown) => void);

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
      m.lagSampleErrors.inc({ error_class: errorClass(error) });
      logger.warn({ err: describeError(error) }, 'consumer lag sample failed');
      await admin?.disconnect().catch(() => undefined);
      admin = undefined;
      throw error;
    }),
  );
  const timer = setInterval(() => void sampleLag().catch(() => undefined), intervalMs);
  timer.unref();
  const closedTimer = (): void => clearInterval(timer);

  return {
    registry,
    metrics: m,
    sampleLag,
    async close() {
      closedTimer();
      for (const [event, listener] of Object.entries(listeners)) emitter.off(event, listener as (payload: unknown) => void);
      await sampleLag.idle();
      await admin?.disconnect().catch(() => undefined);
      admin = undefined;
    },
  };
}

/** Names of every metric this module defines (without the process metrics). */
export function metricNames(): string[] {
  const registry = new Registry();
  relayMetrics(registry);
  consumerMetrics(registry);
  return registry.getMetricsAsArray().map((metric) => (metric as unknown as { name: string }).name);
}
