/** Node.js process metrics (`process_*`, `nodejs_*`) beside the outbox metrics. */
import { collectDefaultMetrics, type Registry } from 'prom-client';

/** Node.js process metrics (CPU, memory, event loop lag, GC...) on `registry`, once. */
export function addProcessMetrics(registry: Registry): void {
  if (registry.getSingleMetric('process_cpu_seconds_total')) return;
  collectDefaultMetrics({ register: registry });
}
