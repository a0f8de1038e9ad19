/**
 * The cache's metrics (prom-client), on the registry given to createCache, as the rest of
 * outbox-relay does it: names prefixed `outbox_cache_`, bounded labels only (`cache`, the
 * cache's name; a result or an operation from a fixed list), never a key or a value.
 * Without a registry every recording is a no-op.
 */
import { Counter, Histogram, type Registry } from 'prom-client';

/** Results of outbox_cache_requests_total. */
const CACHE_REQUEST_RESULTS = ['hit', 'miss', 'stale'] as const;
/** Operations of outbox_cache_errors_total. */
const CACHE_ERROR_OPERATIONS = ['read', 'write', 'lock', 'unlock', 'invalidate', 'loader', 'version', 'keys'] as const;
/** Outcomes of outbox_cache_prewarm_keys_total: what a prewarm pass did with a key (prewarm.ts). */
export const PREWARM_OUTCOMES = ['refreshed', 'fresh', 'busy', 'superseded', 'absent', 'failed', 'unfinished'] as const;
/** What a prewarm pass did with one key. */
export type PrewarmOutcome = (typeof PREWARM_OUTCOMES)[number];

type Table = Record<string, { type: 'counter' | 'histogram'; name: string; help: string; labelNames: string[]; buckets?: number[] }>;

/** Every cache metric: name, help, labels. */
const CACHE_METRICS = {
  requests: {
    type: 'counter',
    name: 'outbox_cache_requests_total',
    help: 'getOrLoad calls by result: hit (fresh value), stale (served in its stale window while one caller rebuilds), miss (no value: loaded, waited for or joined).',
    labelNames: ['cache', 'result'],
  },
  rebuilds: {
    type: 'counter',
    name: 'outbox_cache_rebuilds_total',
    help: 'Loader calls by outcome: ok, error (the loader threw), timeout (it overran loadTimeoutMs), aborted (a prewarm was stopped while it ran).',
    labelNames: ['cache', 'outcome'],
  },
  rebuildDuration: {
    type: 'histogram',
    name: 'outbox_cache_rebuild_duration_seconds',
    help: 'Time in the loader per rebuild.',
    labelNames: ['cache'],
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
  },
  lockWaits: {
    type: 'counter',
    name: 'outbox_cache_lock_waits_total',
    help: "Waits for another process's rebuild of a missing key, by outcome: value (its value arrived), took_over (its lock went and this caller rebuilt), timeout (waitMs passed).",
    labelNames: ['cache', 'outcome'],
  },
  writes: {
    type: 'counter',
    name: 'outbox_cache_writes_total',
    help: 'Versioned writes (set: setIfNewer, fill: getOrLoad, prewarm: a prewarm pass) and invalidations by result: written, or skipped because a newer version is held.',
    labelNames: ['cache', 'operation', 'result'],
  },
  errors: {
    type: 'counter',
    name: 'outbox_cache_errors_total',
    help: "Failures by operation: Redis read, write, lock, unlock, invalidate (an error, or no reply within redisTimeoutMs); loader (threw or timed out); version (versionOf threw or gave no version); keys (a prewarmer's keys function threw or gave no list of keys).",
    labelNames: ['cache', 'operation'],
  },
  prewarmKeys: {
    type: 'counter',
    name: 'outbox_cache_prewarm_keys_total',
    help: 'Keys of prewarm passes by outcome: refreshed (loaded and written), fresh (not in its refresh window), busy (another caller was rebuilding it, or had just done so), superseded (loaded, but the cache held a newer version), absent (the loader returned undefined), failed (loader, versionOf or Redis failed), unfinished (the pass stopped first: stopped, or Redis away).',
    labelNames: ['cache', 'outcome'],
  },
  prewarmPassDuration: {
    type: 'histogram',
    name: 'outbox_cache_prewarm_pass_duration_seconds',
    help: 'Time of a prewarm pass over its keys (keep it below refreshAheadMs minus intervalMs).',
    labelNames: ['cache'],
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120],
  },
} satisfies Table;

/** Names of every cache metric, for alerts and dashboards. */
export function cacheMetricNames(): string[] {
  return Object.values(CACHE_METRICS).map((m) => m.name);
}

/** What the cache records; bound to one cache's name. */
export interface CacheRecorder {
  request(result: (typeof CACHE_REQUEST_RESULTS)[number]): void;
  rebuild(outcome: 'ok' | 'error' | 'timeout' | 'aborted', seconds: number): void;
  lockWait(outcome: 'value' | 'took_over' | 'timeout'): void;
  write(operation: 'set' | 'fill' | 'prewarm' | 'invalidate', written: boolean): void;
  error(operation: (typeof CACHE_ERROR_OPERATIONS)[number]): void;
  prewarmKey(outcome: PrewarmOutcome, count?: number): void;
  prewarmPass(seconds: number): void;
}

const NOOP: CacheRecorder = { request() {}, rebuild() {}, lockWait() {}, write() {}, error() {}, prewarmKey() {}, prewarmPass() {} };

function metric(registry: Registry, d: Table[string]): Counter<string> | Histogram<string> {
  const existing = registry.getSingleMetric(d.name);
  if (existing) return existing as Counter<string> | Histogram<string>;
  const common = { name: d.name, help: d.help, labelNames: d.labelNames, registers: [registry] };
  return d.type === 'histogram' ? new Histogram({ ...common, buckets: d.buckets ?? [] }) : new Counter(common);
}

/** The recorder of cache `name` on `registry` (no-op without one). Several caches may share a registry. */
export function cacheRecorder(registry: Registry | undefined, name: string): CacheRecorder {
  if (!registry) return NOOP;
  const requests = metric(registry, CACHE_METRICS.requests) as Counter<string>;
  const rebuilds = metric(registry, CACHE_METRICS.rebuilds) as Counter<string>;
  const rebuildDuration = metric(registry, CACHE_METRICS.rebuildDuration) as Histogram<string>;
  const lockWaits = metric(registry, CACHE_METRICS.lockWaits) as Counter<string>;
  const writes = metric(registry, CACHE_METRICS.writes) as Counter<string>;
  const errors = metric(registry, CACHE_METRICS.errors) as Counter<string>;
  const prewarmKeys = metric(registry, CACHE_METRICS.prewarmKeys) as Counter<string>;
  const prewarmPassDuration = metric(registry, CACHE_METRICS.prewarmPassDuration) as Histogram<string>;
  return {
    request: (result) => requests.inc({ cache: name, result }),
    rebuild: (outcome, seconds) => {
      rebuilds.inc({ cache: name, outcome });
      rebuildDuration.observe({ cache: name }, seconds);
    },
    lockWait: (outcome) => lockWaits.inc({ cache: name, outcome }),
    write: (operation, written) => writes.inc({ cache: name, operation, result: written ? 'written' : 'skipped' }),
    error: (operation) => errors.inc({ cache: name, operation }),
    prewarmKey: (outcome, count = 1) => prewarmKeys.inc({ cache: name, outcome }, count),
    prewarmPass: (seconds) => prewarmPassDuration.observe({ cache: name }, seconds),
  };
}
