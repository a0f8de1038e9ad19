import { describeError } from '../shared/errors.js';
import { parseDuration } from '../shared/durations.js';
import { createPool } from '../shared/database.js';
import { guardPoolCalls } from '../shared/guardedPool.js';
import { LogEvery } from '../shared/logEvery.js';
import { isPartitioned, maintain } from './partitions.js';
import type { RelayRuntime } from './relayRuntime.js';

/** SQLSTATE insufficient_privilege: the relay role may not create or drop partitions. */
const NO_PRIVILEGE = '42501';

/**
 * The partition loop: on a partitioned outbox, one maintenance pass (partitions.ts) every
 * partitionMaintenanceIntervalMs, on a pool of two of its own (the pass and the
 * transaction holding the maintainers' lock), so a detach waiting for long transactions
 * never holds a connection the batches need. Every relay of an outbox runs it; the lock
 * lets one pass run at a time. A plain outbox is looked at again each interval (it may
 * be converted meanwhile). A role without the rights logs one warning naming the fix and
 * goes on relaying; failures are logged and tried again at the next interval.
 */
export async function runPartitionLoop(rt: RelayRuntime): Promise<void> {
  const o = rt.options;
  if (o.partitionMaintenanceIntervalMs === 0) return;
  const retentionMs = (parseDuration(o.partitionRetention) as { value: number }).value;
  const pool = guardPoolCalls(createPool(o.databaseUrl, `${rt.applicationName}:partitions`, 2, rt.logger));
  let warnedPrivilege = false;
  const warnings = new LogEvery(60_000);
  try {
    while (!rt.stopping) {
      try {
        if (await isPartitioned(pool, o.schema)) {
          const r = await maintain(pool, o.schema, { partitionsAhead: o.partitionsAhead, retentionMs });
          if (r.created.length || r.dropped.length) {
            rt.logger.info({ created: r.created, dropped: r.dropped, headroomIds: r.headroomIds }, 'maintained outbox partitions');
          }
          const waited = r.kept.filter((k) => k.reason === 'blocked').map((k) => k.partition);
          const heldBack = waited.length ? warnings.take('blocked') : undefined;
          if (heldBack !== undefined) {
            rt.logger.warn(
              { partitions: waited, blocker: r.blocker ?? { found: false }, headroomIds: r.headroomIds, blockedPassesSinceLastLine: heldBack },
              'partition detach gave up waiting for a transaction that uses the outbox (tried again next pass; creation goes on; one line a minute): end or cancel the blocker',
            );
          }
          const late = r.kept.filter((k) => k.reason === 'late commit').map((k) => k.partition);
          if (late.length) {
            rt.logger.warn({ partitions: late }, 'partitions held rows committed during their detach: attached again, claims rescan from the lowest id');
          }
        }
      } catch (error) {
        if ((error as { code?: string }).code === NO_PRIVILEGE || (error as { cause?: { code?: string } }).cause?.code === NO_PRIVILEGE) {
          if (!warnedPrivilege) {
            rt.logger.warn(
              { err: describeError(error), schema: o.schema },
              'cannot maintain the outbox partitions (the relay role may not create or drop them): run `outbox-relay maintain-partitions` from cron as the outbox owner, or set --partition-maintenance-interval-ms 0',
            );
            warnedPrivilege = true;
          }
        } else if (!rt.stopping) {
          rt.logger.warn({ err: describeError(error), schema: o.schema }, 'partition maintenance failed: tried again at the next interval');
        }
      }
      await rt.sleep(o.partitionMaintenanceIntervalMs);
    }
  } finally {
    await pool.end().catch(() => undefined);
  }
}
