import type { Command } from 'commander';
import { createLogger, type LogLevel } from '../shared/logger.js';
import { databaseUrl, logLevel, schema } from '../shared/commonSettings.js';
import { maintainPartitions, partitionOutbox } from '../commands/partitions.js';
import { partitionRetention, partitionSizeIds, partitionsAhead } from '../relay/partitionSettings.js';
import { addSettings, resolve } from './settings.js';
import { scopeOf, withOutboxFlags } from './outboxScope.js';

// partition-outbox and maintain-partitions (docs/partitioning.md).

const PARTITION_SETTINGS = [databaseUrl, schema, partitionSizeIds, logLevel] as const;
const MAINTAIN_SETTINGS = [databaseUrl, schema, partitionsAhead, partitionRetention, logLevel] as const;

export function addPartitionCommands(program: Command): void {
  addSettings(
    withOutboxFlags(
      program
        .command('partition-outbox')
        .description('Turn the plain outbox table into one range-partitioned by id, with writers and relays running (no row moved; a short swap under a lock timeout). Does nothing on a partitioned outbox.'),
    ),
    PARTITION_SETTINGS,
  ).action(async (flags: Record<string, unknown>) => {
    const o = resolve(PARTITION_SETTINGS, flags, scopeOf(flags).one());
    const logger = createLogger(o.logLevel as LogLevel);
    const r = await partitionOutbox({ databaseUrl: o.databaseUrl as string, schema: o.schema as string, partitionSizeIds: o.partitionSizeIds as number, logger });
    logger.flush();
    process.stdout.write(
      r.converted
        ? `outbox partitioned: ids below ${r.firstBoundId} in ${r.firstPartition}, then ${r.partitionSizeIds} ids per partition (lock retries: ${r.lockRetries})\n`
        : `outbox already partitioned (${r.partitionSizeIds} ids per partition): nothing to do\n`,
    );
  });

  addSettings(
    withOutboxFlags(
      program
        .command('maintain-partitions')
        .description('Create partitions ahead of the outbox sequence and drop old partitions whose rows are all sent, past the retention. The relay does this itself when its role may; run this from cron as the outbox owner otherwise.'),
    ),
    MAINTAIN_SETTINGS,
  ).action(async (flags: Record<string, unknown>) => {
    const o = resolve(MAINTAIN_SETTINGS, flags, scopeOf(flags).one());
    const logger = createLogger(o.logLevel as LogLevel);
    const r = await maintainPartitions({
      databaseUrl: o.databaseUrl as string,
      schema: o.schema as string,
      partitionsAhead: o.partitionsAhead as number,
      retention: o.retention as string,
      logger,
    });
    logger.flush();
    const kept = r.kept.map((k) => `${k.partition} (${k.reason})`).join(', ');
    process.stdout.write(
      `created ${r.created.length ? r.created.join(', ') : 'none'}; dropped ${r.dropped.length ? r.dropped.join(', ') : 'none'}; kept ${kept || 'none'}; headroom ${r.headroomIds} ids\n`,
    );
  });
}
