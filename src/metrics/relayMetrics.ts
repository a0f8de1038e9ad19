/**
 * The relay's metrics: their definitions, and {@link instrumentRelay}, which observes a
 * relay from the outside through its typed events (RelayEvents) and the backlog sampler
 * (./backlogSampler.ts) for the backlog, the oldest pending row's age and the ingress rate.
 */
import type pg from 'pg';
import { Registry } from 'prom-client';
import type { RelayEvents } from '../relay/relay.js';
import type { BreakerState } from '../relay/breaker.js';
import { createPool } from '../shared/database.js';
import { quoteIdentifier } from '../shared/identifiers.js';
import { silentLogger, type Logger } from '../shared/logger.js';
import { relayMetrics, type RelayMetrics } from './relayMetricTable.js';
import { errorLabel } from './errorLabel.js';
import { addProcessMetrics } from './processMetrics.js';
import { bindAll } from './boundLabels.js';
import { withDeadline } from './promises.js';
import { startBacklogSampler, type RelaySample } from './backlogSampler.js';
import type { RelayStatusEvent, RelayStatusSource } from './relayStatusSource.js';

/** The `outbox` label of a relay instrumented without a name (one outbox per process). */
const DEFAULT_OUTBOX_LABEL = 'default';

/** Breaker states as the value of outbox_relay_breaker_state. */
export const BREAKER_STATE = { closed: 0, open: 1 } as const satisfies Record<BreakerState, number>;

export { RELAY_METRICS, relayMetrics, type RelayMetrics } from './relayMetricTable.js';

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
  /** When the relay last published a batch (ms since epoch), or when it was instrumented. */
  readonly lastPublishAtMs: number;
  /** The most batches in a row any worker failed, with the last error of that worker (undefined: none failed since its last success). */
  readonly failingBatches: { inARow: number; error: Error } | undefined;
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
  m.rowsAboveSequence.set(0);
  m.running.set(1);
  m.consecutiveFailures.set(0);
  let lastPublishAtMs = Date.now();
  m.lastPublish.set(lastPublishAtMs / 1000);
  const failures = new Map<number, number>();
  const lastErrors = new Map<number, Error>();
  const updateFailures = (): void => m.consecutiveFailures.set(Math.max(0, ...failures.values()));

  let stopped = false;
  const sampler = startBacklogSampler({
    pool,
    quotedSchema,
    metrics: m,
    intervalMs: options.sampleIntervalMs ?? 5_000,
    countCap: options.backlogCountCap ?? 100_000,
    logger,
    settledId: () => relay.settledId ?? 0,
    afterSample: () => {
      if (!stopped) {
        m.shardsOwned.set(relay.ownedShards.length);
        m.horizonWait.set((relay.horizonWaitMs ?? 0) / 1000);
      }
    },
  });

  const listeners: { [K in RelayStatusEvent]: (e: RelayEvents[K]) => void } = {
    batch: (e) => {
      lastPublishAtMs = e.ackedAtMs;
      m.lastPublish.set(e.ackedAtMs / 1000);
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
      lastErrors.delete(e.worker);
      updateFailures();
    },
    batchError: (e) => {
      m.publishErrors.inc({ error_class: errorLabel(e.error) });
      m.retries.inc();
      failures.set(e.worker, e.attempt);
      lastErrors.set(e.worker, e.error);
      updateFailures();
    },
    libraryError: (e) => m.libraryErrors.inc({ library: e.library }),
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
    get lastPublishAtMs() {
      return lastPublishAtMs;
    },
    get failingBatches() {
      let worst: { inARow: number; error: Error } | undefined;
      for (const [worker, inARow] of failures) {
        const error = lastErrors.get(worker);
        if (inARow > 0 && error && (!worst || inARow > worst.inARow)) worst = { inARow, error };
      }
      return worst;
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
