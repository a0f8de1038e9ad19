import { duration, integer } from '../shared/settings.js';

// Settings of the partitioned outbox (docs/partitioning.md). The library functions check
// options with optionValue(), the CLI and the relay read the same objects, so all accept
// the same values.

export const partitionSizeIds = integer({
  option: 'partitionSizeIds',
  flag: '--partition-size-ids',
  env: 'OUTBOX_PARTITION_SIZE_IDS',
  description: 'Outbox ids per partition of a partitioned outbox (each partition holds that many consecutive ids).',
  defaultValue: 1_000_000,
  min: 1_000,
  max: 1_000_000_000_000,
});

export const partitionsAhead = integer({
  option: 'partitionsAhead',
  flag: '--partitions-ahead',
  env: 'OUTBOX_PARTITIONS_AHEAD',
  description: 'Whole partitions kept ready above the outbox sequence: writers fail once ids run past the last partition.',
  defaultValue: 2,
  min: 1,
  max: 1_000,
});

export const partitionRetention = duration({
  option: 'retention',
  flag: '--retention',
  env: 'OUTBOX_PARTITION_RETENTION',
  description: 'A partition whose rows are all sent is dropped once its newest sent_at is older than this (0s: as soon as all are sent).',
  defaultValue: '7d',
  minMs: 0,
  maxMs: 3_650 * 86_400_000,
});

// The relay's own partition maintenance (partitionLoop.ts): `outbox-relay run` flags.

export const partitionMaintenanceIntervalMs = integer({
  option: 'partitionMaintenanceIntervalMs',
  flag: '--partition-maintenance-interval-ms',
  env: 'OUTBOX_PARTITION_MAINTENANCE_INTERVAL_MS',
  description: 'On a partitioned outbox, how often the relay creates partitions ahead and drops old ones (0: never; then run maintain-partitions from cron).',
  defaultValue: 60_000,
  min: 0,
  max: 86_400_000,
});

export const relayPartitionRetention = duration({
  option: 'partitionRetention',
  flag: '--partition-retention',
  env: 'OUTBOX_PARTITION_RETENTION',
  description: partitionRetention.description,
  defaultValue: partitionRetention.defaultValue!,
  minMs: 0,
  maxMs: 3_650 * 86_400_000,
});
