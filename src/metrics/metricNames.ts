import { CONSUMER_METRICS } from './consumerMetrics.js';
import { RELAY_METRICS } from './relayMetrics.js';

// src/metrics/, one concept per file:
//   relayMetrics.ts      the relay's metrics and instrumentRelay (the relay's events)
//   backlogSampler.ts    the relay's backlog, oldest pending age and ingress (SQL in sql/metrics.ts)
//   readiness.ts         the relay's /readyz checks
//   consumerMetrics.ts   the consumer's metrics, instrumentConsumer and instrumentHandler
//   errorLabel.ts        the error_class label
//   processMetrics.ts    Node.js process metrics
//   (src/shared/metricDefinitions.ts: metric tables to prom-client objects, buckets; the effect guard uses it too)
//   server.ts            the /metrics, /healthz, /readyz server
// Every instrumented instance gets a prom-client Registry of its own; labels are bounded
// (topic, error label, outcome, partition), never a key, a message id or a payload.

/** Names of every metric src/metrics/ defines (without the process metrics): what alerts and dashboards may use. */
export function metricNames(): string[] {
  return [...Object.values(RELAY_METRICS), ...Object.values(CONSUMER_METRICS)].map((definition) => definition.name);
}
