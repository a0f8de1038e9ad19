/**
 * Prometheus metrics of the relay and of the consumer runtime: the entry point of
 * src/metrics/, re-exporting its parts.
 *
 * Every instrumented instance gets a prom-client Registry of its own (not the global
 * one), so a process may run several and tests can read each one's values. Labels are
 * bounded: a topic, an error label (a short name derived from the error's type, see
 * {@link errorLabel}), the consumer's outcome, a partition for consumer lag. Never a key,
 * a message id or anything from a payload.
 *
 *   relayMetrics.ts      the relay's metrics and instrumentRelay (the relay's events)
 *   backlogSampler.ts    the relay's backlog, oldest pending age and ingress (SQL in sql/metrics.ts)
 *   readiness.ts         the relay's /readyz checks
 *   consumerMetrics.ts   the consumer's metrics, instrumentConsumer and instrumentHandler
 *   errorLabel.ts        the error_class label
 *   processMetrics.ts    Node.js process metrics
 *   definitions.ts       metric tables to prom-client objects, buckets
 *   server.ts            the /metrics, /healthz, /readyz server
 */
import { CONSUMER_METRICS } from './consumerMetrics.js';
import { errorLabel } from './errorLabel.js';
import { RELAY_METRICS } from './relayMetrics.js';

export { errorLabel } from './errorLabel.js';
export { addProcessMetrics } from './processMetrics.js';
export { BREAKER_STATE, RELAY_METRICS, instrumentRelay, relayMetrics } from './relayMetrics.js';
export type { InstrumentRelayOptions, RelayInstrumentation, RelayMetrics, RelaySample } from './relayMetrics.js';
export type { RelayStatusEvent, RelayStatusSource } from './relayStatusSource.js';
export { relayReadiness } from './readiness.js';
export type { Readiness, ReadinessCheck, RelayReadiness, RelayReadinessOptions } from './readiness.js';
export { CONSUMER_METRICS, CONSUMER_OUTCOMES, consumerMetrics, instrumentConsumer, instrumentHandler } from './consumerMetrics.js';
export type { ConsumerInstrumentation, ConsumerMetrics, InstrumentConsumerOptions } from './consumerMetrics.js';
export type { MetricDefinition, MetricTable } from './definitions.js';

/**
 * @deprecated the old name of {@link errorLabel} (an `ErrorClass` is the consumer's
 * transient/permanent verdict, not this label); kept until its last callers move.
 */
export const errorClass = errorLabel;

/** Names of every metric src/metrics/ defines (without the process metrics). */
export function metricNames(): string[] {
  return [...Object.values(RELAY_METRICS), ...Object.values(CONSUMER_METRICS)].map((definition) => definition.name);
}
