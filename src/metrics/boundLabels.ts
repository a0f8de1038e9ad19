/**
 * A metric with some labels fixed: every `inc`, `dec`, `set`, `observe` and `startTimer`
 * through it carries them, merged with the labels of the call. One process that relays
 * several outboxes registers each relay metric once, with an `outbox` label, and gives
 * each outbox's instrumentation a view bound to its own name; the code that records
 * values stays the same for one outbox or many.
 */
import type { Counter, Gauge, Histogram, LabelValues } from 'prom-client';

type AnyMetric = Counter<string> | Gauge<string> | Histogram<string>;

const RECORDING = new Set(['inc', 'dec', 'set', 'observe', 'startTimer']);

/** `metric` with `fixed` added to the labels of every value recorded through it. */
function withFixedLabels<M extends AnyMetric>(metric: M, fixed: LabelValues<string>): M {
  return new Proxy(metric, {
    get(target, property, receiver) {
      const value = Reflect.get(target, property, receiver) as unknown;
      if (typeof property !== 'string' || !RECORDING.has(property) || typeof value !== 'function') return value;
      return (...args: unknown[]) => {
        // (labels, value) or (labels) for startTimer, or (value) / () without labels.
        const first = args[0];
        const labels = typeof first === 'object' && first !== null ? { ...(first as LabelValues<string>), ...fixed } : { ...fixed };
        const rest = typeof first === 'object' && first !== null ? args.slice(1) : args;
        return (value as (...a: unknown[]) => unknown).call(target, labels, ...rest);
      };
    },
  });
}

/** Every metric of `metrics` bound to `fixed` (see {@link withFixedLabels}). */
export function bindAll<T extends Record<string, AnyMetric>>(metrics: T, fixed: LabelValues<string>): T {
  const out: Record<string, AnyMetric> = {};
  for (const [field, metric] of Object.entries(metrics)) out[field] = withFixedLabels(metric, fixed);
  return out as T;
}
