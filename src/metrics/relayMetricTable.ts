/**
 * The relay's metrics: names, help, labels and buckets. A module of its own so that the
 * backlog sampler and the instrumentation (./relayMetrics.ts) both use them without
 * importing each other.
 */
import type { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { SHARD_COUNT } from '../relay/shards.js';
import { BATCH_SIZE_BUCKETS, CALL_BUCKETS, LATENCY_BUCKETS, registerMetrics, type MetricTable } from '../shared/metricDefinitions.js';

/** The relay's metric objects. Created by instrumentRelay (./relayMetrics.ts). */
export interface RelayMetrics {
  pendingRows: Gauge<'outbox'>;
  oldestPendingAge: Gauge<'outbox'>;
  enqueuedRows: Counter<'outbox'>;
  publishedRows: Counter<'topic' | 'outbox'>;
  batchSize: Histogram<'outbox'>;
  batchDuration: Histogram<'outbox'>;
  commitToAck: Histogram<'topic' | 'outbox'>;
  publishErrors: Counter<'error_class' | 'outbox'>;
  retries: Counter<'outbox'>;
  libraryErrors: Counter<'library' | 'outbox'>;
  consecutiveFailures: Gauge<'outbox'>;
  breakerState: Gauge<'outbox'>;
  deadLetters: Counter<'topic' | 'outbox'>;
  parkedKeys: Gauge<'outbox'>;
  shardsOwned: Gauge<'outbox'>;
  lastPublish: Gauge<'outbox'>;
  rowsAboveSequence: Gauge<'outbox'>;
  partitionHeadroom: Gauge<'outbox'>;
  horizonForced: Counter<'outbox'>;
  horizonWait: Gauge<'outbox'>;
  partitionsDetachPending: Gauge<'outbox'>;
  running: Gauge<'outbox'>;
  claimDuration: Histogram<'outbox'>;
  markSentDuration: Histogram<'outbox'>;
  kafkaSendDuration: Histogram<'outbox'>;
  samplerQueryDuration: Histogram<'outbox'>;
  samplerErrors: Counter<'error_class' | 'outbox'>;
  /** Of the relay group (relayGroup.ts): 1 while an outbox's relay runs, 0 while it cannot start (database unreachable, schema missing). */
  outboxUp: Gauge<'outbox'>;
}

/** Every relay metric: name, help, labels, buckets. */
export const RELAY_METRICS: MetricTable<RelayMetrics> = {
  pendingRows: {
    type: 'gauge',
    name: 'outbox_relay_pending_rows',
    help: 'Unsent outbox rows (the backlog). Exact up to the sampler cap, the planner estimate above it.',
    labelNames: ['outbox'],
  },
  oldestPendingAge: {
    type: 'gauge',
    name: 'outbox_relay_oldest_pending_age_seconds',
    help: 'Age of the oldest unsent outbox row by the database clock; 0 when none is pending.',
    labelNames: ['outbox'],
  },
  enqueuedRows: {
    type: 'counter',
    name: 'outbox_relay_enqueued_rows_total',
    help: 'Rows enqueued into the outbox (ingress), from the outbox id sequence, since this relay started. Database-wide: every relay on one outbox reports the same; aggregate with max().',
    labelNames: ['outbox'],
  },
  publishedRows: {
    type: 'counter',
    name: 'outbox_relay_published_rows_total',
    help: 'Rows acknowledged by Kafka and marked sent (egress).',
    labelNames: ['topic', 'outbox'],
  },
  batchSize: { type: 'histogram', name: 'outbox_relay_batch_size_rows', help: 'Rows per published batch.', buckets: BATCH_SIZE_BUCKETS, labelNames: ['outbox'] },
  batchDuration: {
    type: 'histogram',
    name: 'outbox_relay_batch_duration_seconds',
    help: 'Claim, publish, mark sent and commit of one batch.',
    buckets: CALL_BUCKETS,
    labelNames: ['outbox'],
  },
  commitToAck: {
    type: 'histogram',
    name: 'outbox_relay_commit_to_ack_seconds',
    help: "From a row's created_at (its transaction) to Kafka's acknowledgement, per row.",
    labelNames: ['topic', 'outbox'],
    buckets: LATENCY_BUCKETS,
  },
  publishErrors: {
    type: 'counter',
    name: 'outbox_relay_publish_errors_total',
    help: 'Failed batches (Kafka or Postgres), rolled back and retried, by error class.',
    labelNames: ['error_class', 'outbox'],
  },
  retries: { type: 'counter', name: 'outbox_relay_retries_total', help: 'Batch retries scheduled after a failure.', labelNames: ['outbox'] },
  libraryErrors: {
    type: 'counter',
    name: 'outbox_relay_library_errors_total',
    help: 'Throws of a client library (kafkajs, @platformatic/kafka, pg) from its own callbacks, outside any call: contained, the calls in flight into it retried as transient.',
    labelNames: ['library', 'outbox'],
  },
  consecutiveFailures: {
    type: 'gauge',
    name: 'outbox_relay_consecutive_failures',
    help: 'Failures in a row of the worst worker since its last successful batch.',
    labelNames: ['outbox'],
  },
  breakerState: { type: 'gauge', name: 'outbox_relay_breaker_state', help: 'Circuit breaker towards Kafka: 0 closed, 1 open.', labelNames: ['outbox'] },
  deadLetters: {
    type: 'counter',
    name: 'outbox_relay_dead_letters_total',
    help: 'Rows the relay gave up on and dead-lettered.',
    labelNames: ['topic', 'outbox'],
  },
  parkedKeys: { type: 'gauge', name: 'outbox_relay_parked_keys', help: 'Keys whose rows are held back behind a dead-lettered row.', labelNames: ['outbox'] },
  shardsOwned: { type: 'gauge', name: 'outbox_relay_shards_owned', help: `Shards (of ${SHARD_COUNT}) this relay holds a lease on.`, labelNames: ['outbox'] },
  lastPublish: {
    type: 'gauge',
    name: 'outbox_relay_last_publish_timestamp_seconds',
    help: 'Unix time of the last batch this relay published, or of its start when it published none yet. With rows pending, a value that stops moving means the relay is not publishing.',
    labelNames: ['outbox'],
  },
  partitionHeadroom: {
    type: 'gauge',
    name: 'outbox_relay_partition_headroom_ids',
    help: 'Partitioned outbox only: ids writers can still take before the last partition is full (inserts fail past it). Kept up by the relay or `outbox-relay maintain-partitions`.',
    labelNames: ['outbox'],
  },
  rowsAboveSequence: {
    type: 'gauge',
    name: 'outbox_relay_rows_above_sequence',
    help: 'Unsent rows whose id is above the outbox sequence (inserted with an explicit id), counted up to 1000: not claimed until the sequence passes them, and the sequence will hand out their ids again. Fix: docs/runbook.md.',
    labelNames: ['outbox'],
  },
  horizonForced: {
    type: 'counter',
    name: 'outbox_relay_horizon_forced_total',
    help: 'Times the visibility horizon was advanced past a transaction still open (after horizon-max-wait-ms).',
    labelNames: ['outbox'],
  },
  partitionsDetachPending: {
    type: 'gauge',
    name: 'outbox_relay_partitions_detach_pending',
    help: 'Partitioned outbox: partitions whose DETACH ... CONCURRENTLY is left pending (it gave up waiting for a transaction using the outbox, or crashed); finished by a later maintenance pass. Staying above 0: maintenance is blocked (docs/runbook.md).',
    labelNames: ['outbox'],
  },
  horizonWait: {
    type: 'gauge',
    name: 'outbox_relay_horizon_wait_seconds',
    help: 'How long the newest rows have waited for an open outbox writer before them (the visibility horizon held), at the last sample; 0 when nothing waits. Rises to horizon-max-wait-ms while a writer stays open.',
    labelNames: ['outbox'],
  },
  running: { type: 'gauge', name: 'outbox_relay_running', help: '1 while the relay runs, 0 once it stopped.', labelNames: ['outbox'] },
  claimDuration: {
    type: 'histogram',
    name: 'outbox_relay_claim_duration_seconds',
    help: 'Postgres: the claim query of a batch.',
    buckets: CALL_BUCKETS,
    labelNames: ['outbox'],
  },
  markSentDuration: {
    type: 'histogram',
    name: 'outbox_relay_mark_sent_duration_seconds',
    help: 'Postgres: marking a batch sent and committing.',
    buckets: CALL_BUCKETS,
    labelNames: ['outbox'],
  },
  kafkaSendDuration: {
    type: 'histogram',
    name: 'outbox_relay_kafka_send_duration_seconds',
    help: 'Kafka: one batch send until acks=all.',
    buckets: CALL_BUCKETS,
    labelNames: ['outbox'],
  },
  samplerQueryDuration: {
    type: 'histogram',
    name: 'outbox_relay_sampler_query_duration_seconds',
    help: 'Postgres: one metrics sample (backlog, oldest row, sequence).',
    buckets: CALL_BUCKETS,
    labelNames: ['outbox'],
  },
  outboxUp: {
    type: 'gauge',
    name: 'outbox_relay_outbox_up',
    help: 'Relay group: 1 while the outbox is relayed, 0 while its relay cannot start (database unreachable, schema missing); retried with backoff.',
    labelNames: ['outbox'],
  },
  samplerErrors: {
    type: 'counter',
    name: 'outbox_relay_sampler_errors_total',
    help: 'Failed metrics samples, by error class.',
    labelNames: ['error_class', 'outbox'],
  },
};

/** Register the relay's metrics on `registry` (or return the ones already there). */
export function relayMetrics(registry: Registry): RelayMetrics {
  return registerMetrics(registry, RELAY_METRICS);
}
