/**
 * Metric definitions as data: each instrumented component lists its metrics in a table
 * (name, help, labels, buckets) and {@link registerMetrics} makes the prom-client objects,
 * so a definition reads as one line of a table rather than a constructor call.
 */
import { Counter, Gauge, Histogram, type Metric, type Registry } from 'prom-client';

/** Latencies from a commit or a Kafka timestamp: milliseconds to minutes. */
export const LATENCY_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300];
/** One call to Postgres or Kafka, or one handler run: sub-millisecond to half a minute. */
export const CALL_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];
/** Rows per batch, up to the largest batch size allowed. */
export const BATCH_SIZE_BUCKETS = [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000];

type AnyMetric = Counter<string> | Gauge<string> | Histogram<string>;

/** The prom-client type of a metric object (Histogram first: it is the most specific). */
type TypeOf<M> = M extends Histogram<string> ? 'histogram' : M extends Gauge<string> ? 'gauge' : 'counter';
type LabelsOf<M> = M extends Counter<infer L> | Gauge<infer L> | Histogram<infer L> ? L : never;

/** One metric: what Prometheus shows of it. */
export interface MetricDefinition<M extends AnyMetric = AnyMetric> {
  type: TypeOf<M>;
  name: string;
  help: string;
  /** Omitted: no labels. */
  labelNames?: readonly LabelsOf<M>[];
  /** Histograms only. */
  buckets?: readonly number[];
}

/** A table of definitions for the metric objects of `T` (an interface of Counter/Gauge/Histogram fields). */
export type MetricTable<T> = { readonly [K in keyof T]: T[K] extends AnyMetric ? MetricDefinition<T[K]> : never };

/**
 * Register the metrics of `table` on `registry` and return them by field. A metric already
 * on the registry (instrumented twice on one registry) is returned as it is.
 */
export function registerMetrics<T>(registry: Registry, table: MetricTable<T>): T {
  const metrics: Record<string, Metric> = {};
  for (const [field, definition] of Object.entries(table) as Array<[string, MetricDefinition]>) {
    metrics[field] = registry.getSingleMetric(definition.name) ?? create(registry, definition);
  }
  return metrics as T;
}

function create(registry: Registry, definition: MetricDefinition): AnyMetric {
  const common = {
    name: definition.name,
    help: definition.help,
    ...(definition.labelNames ? { labelNames: [...definition.labelNames] } : {}),
    registers: [registry],
  };
  switch (definition.type) {
    case 'counter':
      return new Counter(common);
    case 'gauge':
      return new Gauge(common);
    case 'histogram':
      return new Histogram({ ...common, ...(definition.buckets ? { buckets: [...definition.buckets] } : {}) });
  }
}
