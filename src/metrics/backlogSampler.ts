/**
 * The relay's backlog sampler: every few seconds, on a pool of its own, the cheap queries
 * of ./sql/metrics.ts give the backlog, the oldest pending row's age, the ingress rate
 * (growth of the outbox id sequence), the parked keys and the rows above the sequence.
 */
import type pg from 'pg';
import { describeError } from '../shared/errors.js';
import type { Logger } from '../shared/logger.js';
import { idsAboveSequenceSql } from '../relay/idAudit.js';
import { partitionHeadroomSql } from '../relay/partitions.js';
import { errorLabel } from './errorLabel.js';
import { serialized } from './promises.js';
import type { RelayMetrics } from './relayMetricTable.js';
import {
  backlogEstimateSql,
  oldestPendingSql,
  parkedKeyCountSql,
  sampledBacklogCountSql,
  sequenceLastValueSql,
  type OldestPendingRow,
  type SampledBacklogCountRow,
} from './sql/metrics.js';

/** A last sample's values, for readiness and tests. */
export interface RelaySample {
  pending: number;
  /** true when `pending` is the planner's estimate (above the cap). */
  estimated: boolean;
  oldestAgeSeconds: number;
  lastId: number;
  /** Keys held back behind a parked dead letter: their rows are pending on purpose. */
  parkedKeys: number;
  /** Unsent rows with ids above the outbox sequence (set by hand), counted up to 1000: never claimed until the sequence passes them. */
  rowsAboveSequence: number;
  at: Date;
}

/** What {@link startBacklogSampler} samples, where to, and how often. */
export interface BacklogSamplerOptions {
  pool: pg.Pool;
  /** The outbox's schema, quoted (quoteIdentifier). */
  quotedSchema: string;
  /** Where the samples go: pending rows, oldest age, enqueued rows, parked keys, and the sampler's own query durations and errors. */
  metrics: Pick<RelayMetrics, 'pendingRows' | 'oldestPendingAge' | 'enqueuedRows' | 'parkedKeys' | 'rowsAboveSequence' | 'partitionHeadroom' | 'partitionsDetachPending' | 'samplerQueryDuration' | 'samplerErrors'>;
  intervalMs: number;
  /** Unsent rows are counted exactly up to this many, estimated above. */
  countCap: number;
  logger: Logger;
  /** Runs after each successful sample, before its result is returned. */
  afterSample?: () => void;
  /**
   * Highest outbox id at or below which every row is known final (committed or rolled
   * back): the relay's horizon (`Relay.settledId`). A sample's walk never starts
   * above it. Without it every sample walks from the lowest id.
   */
  settledId?: () => number;
}

/** A running sampler: its last sample, a sample on demand, and stopping it. */
export interface BacklogSampler {
  /** The last successful sample, if any. */
  readonly lastSample: RelaySample | undefined;
  /** Take a sample that starts no earlier than this call (the timer also takes them). */
  sample(): Promise<RelaySample>;
  /** Stop the timer; `sample()` still works. */
  stop(): void;
  /** Stop the timer and wait for a sample in flight. */
  close(): Promise<void>;
}

/**
 * Where a sample's count and oldest-pending queries start. Both walk the unsent-row index
 * in id order, and each entry of a row published since the oldest open snapshot is still
 * there (vacuum may not remove it): a handful normally, but under a held horizon (a long
 * report, a pg_dump) every row published since, 3.6 million after 30 minutes at 2,000
 * rows/s, walked twice per sample. So a sample starts above the id below the last oldest
 * pending row (or, when nothing was pending, the sequence's last value read before it),
 * but never above the relay's settled id read before the walk (every row at or below it
 * is committed or rolled back): ids handed to transactions still open, below the oldest
 * pending row or the sequence's value, are never skipped (a sample taken while a writer's
 * transaction was open used to start above its rows, and counted them only at the next
 * full walk). The relay's horizon does not wait for transactions that never wrote the
 * outbox, so the settled id keeps up under a held horizon.
 *
 * Rows come back below where a walk starts only with a bump of outbox_claim_floors'
 * generation (a dead letter replayed under its old id, a key released, a partition
 * attached again), so each walk starts there only under the generation the last count
 * read, checked in its own snapshot, and from 0 under another: the first sample after
 * such a change counts them. (A walk from 0 every few minutes did that before, and under
 * a 30-minute hold each one stepped over millions of entries.)
 */

/** Start sampling now (the first sample sets the ingress baseline), then every `intervalMs`. */
export function startBacklogSampler(options: BacklogSamplerOptions): BacklogSampler {
  const { pool, metrics: m, countCap: cap, intervalMs, logger } = options;
  const quoted = options.quotedSchema;
  let lastSample: RelaySample | undefined;
  let lastId: number | undefined;
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;

  const timed = async <R extends pg.QueryResultRow>(sql: string, params: unknown[] = []): Promise<R[]> => {
    const end = m.samplerQueryDuration.startTimer();
    try {
      return (await pool.query<R>(sql, params)).rows;
    } finally {
      end();
    }
  };

  // Where the count and the oldest pending row start, and the generation they start there under (see above).
  let walkFrom = 0;
  let walkGeneration = '-1';

  const doSample = async (): Promise<RelaySample> => {
    const settled = options.settledId?.() ?? 0;
    const [seq] = await timed<{ last_id: number }>(sequenceLastValueSql(quoted));
    const from = Math.min(walkFrom, settled);
    const [count] = await timed<SampledBacklogCountRow>(sampledBacklogCountSql(quoted), [cap, from, walkGeneration]);
    let pending = count?.pending ?? 0;
    let estimated = false;
    if (pending >= cap) {
      const [plan] = await timed<{ 'QUERY PLAN': Array<{ Plan: { 'Plan Rows': number } }> }>(backlogEstimateSql(quoted));
      pending = Math.max(cap, Math.round(plan?.['QUERY PLAN'][0]?.Plan['Plan Rows'] ?? 0));
      estimated = true;
    }
    const [oldest] = await timed<OldestPendingRow>(oldestPendingSql(quoted), [from, walkGeneration]);
    // The count's snapshot is the older one: a bump after it is seen by the next count.
    const countedFrom = count?.generation === walkGeneration ? from : 0;
    walkGeneration = count?.generation ?? '-1';
    // Nothing pending: every row up to the sequence read before the walk was sent or not
    // yet committed. Only those at or below the settled id (final before the walk) are
    // behind us for good: one committed later must be counted by a later walk, also once
    // the horizon has settled it (the next walk starts at min(walkFrom, settled)).
    walkFrom = oldest ? Number(oldest.id) - 1 : Math.max(countedFrom, Math.min(Number(seq?.last_id ?? 0), settled));
    const [parked] = await timed<{ parked: number }>(parkedKeyCountSql(quoted));
    const parkedKeys = parked?.parked ?? 0;
    m.parkedKeys.set(parkedKeys);
    const [above] = await timed<{ rows_above: number }>(idsAboveSequenceSql(quoted));
    const rowsAboveSequence = Number(above?.rows_above ?? 0);
    m.rowsAboveSequence.set(rowsAboveSequence);
    // A row only for a partitioned outbox; a plain one has no such limit and no series.
    const [headroom] = await timed<{ headroom: string; detach_pending: number }>(partitionHeadroomSql(quoted));
    if (headroom) {
      m.partitionHeadroom.set(Number(headroom.headroom));
      m.partitionsDetachPending.set(headroom.detach_pending);
    }
    const id = Number(seq?.last_id ?? 0);
    if (lastId !== undefined && id > lastId) m.enqueuedRows.inc(id - lastId);
    lastId = id;
    const oldestAgeSeconds = oldest ? Math.max(0, oldest.age_seconds) : 0;
    m.pendingRows.set(pending);
    m.oldestPendingAge.set(oldestAgeSeconds);
    options.afterSample?.();
    lastSample = { pending, estimated, oldestAgeSeconds, lastId: id, parkedKeys, rowsAboveSequence, at: new Date() };
    return lastSample;
  };

  const sample = serialized(() =>
    doSample().catch((error: unknown) => {
      m.samplerErrors.inc({ error_class: errorLabel(error) });
      logger.warn({ err: describeError(error) }, 'metrics sample failed');
      throw error;
    }),
  );

  const stop = (): void => {
    stopped = true;
    if (timer) clearTimeout(timer);
    timer = undefined;
  };
  const schedule = (): void => {
    if (stopped) return;
    timer = setTimeout(() => {
      sample()
        .catch(() => undefined)
        .finally(schedule);
    }, intervalMs);
    timer.unref();
  };
  void sample().catch(() => undefined).finally(schedule);

  return {
    get lastSample() {
      return lastSample;
    },
    sample,
    stop,
    async close() {
      stop();
      await sample.idle();
    },
  };
}
