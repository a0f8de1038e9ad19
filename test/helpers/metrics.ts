import type { Registry } from 'prom-client';

/**
 * Sum of a metric's samples whose labels include `labels`. For a histogram, name the
 * sample: `x_count`, `x_sum` or `x_bucket`.
 */
export async function metricValue(registry: Registry, name: string, labels: Record<string, string> = {}): Promise<number> {
  const base = name.replace(/_(count|sum|bucket)$/, '');
  const metric = registry.getSingleMetric(base) ?? registry.getSingleMetric(name);
  if (!metric) throw new Error(`no metric ${name}`);
  const { values } = await metric.get();
  let total = 0;
  for (const v of values) {
    const sampleName = (v as { metricName?: string }).metricName ?? base;
    if (sampleName !== name && !(sampleName === base && name === base)) continue;
    if (Object.entries(labels).every(([k, want]) => String((v.labels as Record<string, unknown>)[k]) === want)) total += v.value;
  }
  return total;
}
