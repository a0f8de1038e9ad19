/**
 * The effect guard's metrics (prom-client), on the registry given to createEffectGuard,
 * as the cache's are: names prefixed `outbox_effect_`, bounded labels only (`guard`, the
 * guard's name; an outcome from a fixed list), never a key. Without a registry every
 * recording is a no-op.
 */
import type { Counter, Histogram, Registry } from 'prom-client';
import { CALL_BUCKETS, registerMetrics, type MetricTable } from '../shared/metricDefinitions.js';

interface EffectMetrics {
  runs: Counter<'guard' | 'outcome'>;
  skips: Counter<'guard' | 'reason'>;
  reservations: Counter<'guard' | 'result'>;
  waits: Counter<'guard' | 'outcome'>;
  storeErrors: Counter<'guard' | 'operation'>;
  duration: Histogram<'guard'>;
}

/** Every effect guard metric: name, help, labels. */
const EFFECT_METRICS: MetricTable<EffectMetrics> = {
  runs: {
    type: 'counter',
    name: 'outbox_effect_runs_total',
    help: 'Effects run by the guard, by outcome: confirmed (done and recorded), failed (the effect threw; its reservation was released, a retry runs it), unconfirmed (done, but the store did not record it: a later attempt may run it again).',
    labelNames: ['guard', 'outcome'],
  },
  skips: {
    type: 'counter',
    name: 'outbox_effect_skips_total',
    help: 'Duplicates skipped, by reason: done (the effect was confirmed before), in_progress (another attempt holds it and onBusy is skip).',
    labelNames: ['guard', 'reason'],
  },
  reservations: {
    type: 'counter',
    name: 'outbox_effect_reservations_total',
    help: 'Reservations, by result: new (the key was free), taken_over (an earlier attempt crashed or stalled and its reservation expired unconfirmed: taken over, the effect is retried), in_doubt (such a reservation left alone, inDoubt is fail), lost (this attempt lost its reservation while its effect ran: its signal was aborted).',
    labelNames: ['guard', 'result'],
  },
  waits: {
    type: 'counter',
    name: 'outbox_effect_waits_total',
    help: 'Waits for another attempt holding the key, by how they ended: done (it confirmed: skipped), free (it released, or its reservation expired: this attempt reserved), timeout (waitMs passed: EffectBusyError).',
    labelNames: ['guard', 'outcome'],
  },
  storeErrors: {
    type: 'counter',
    name: 'outbox_effect_store_errors_total',
    help: 'Store failures (an error, or no reply within the store timeoutMs), by operation: reserve, renew, confirm, release.',
    labelNames: ['guard', 'operation'],
  },
  duration: {
    type: 'histogram',
    name: 'outbox_effect_duration_seconds',
    help: 'Time in the effect, per run.',
    labelNames: ['guard'],
    buckets: CALL_BUCKETS,
  },
};

/** Names of every effect guard metric, for alerts and dashboards. */
export function effectMetricNames(): string[] {
  return Object.values(EFFECT_METRICS).map((m) => m.name);
}

/** What the guard records; bound to one guard's name. */
export interface EffectRecorder {
  run(outcome: 'confirmed' | 'failed' | 'unconfirmed', seconds: number): void;
  skip(reason: 'done' | 'in_progress'): void;
  reservation(result: 'new' | 'taken_over' | 'in_doubt' | 'lost'): void;
  wait(outcome: 'done' | 'free' | 'timeout'): void;
  storeError(operation: 'reserve' | 'renew' | 'confirm' | 'release'): void;
}

const NOOP: EffectRecorder = { run() {}, skip() {}, reservation() {}, wait() {}, storeError() {} };

/** The recorder of guard `name` on `registry` (no-op without one). Several guards may share a registry. */
export function effectRecorder(registry: Registry | undefined, name: string): EffectRecorder {
  if (!registry) return NOOP;
  const m = registerMetrics<EffectMetrics>(registry, EFFECT_METRICS);
  return {
    run: (outcome, seconds) => {
      m.runs.inc({ guard: name, outcome });
      m.duration.observe({ guard: name }, seconds);
    },
    skip: (reason) => m.skips.inc({ guard: name, reason }),
    reservation: (result) => m.reservations.inc({ guard: name, result }),
    wait: (outcome) => m.waits.inc({ guard: name, outcome }),
    storeError: (operation) => m.storeErrors.inc({ guard: name, operation }),
  };
}
