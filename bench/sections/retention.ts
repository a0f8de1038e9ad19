/**
 * 12. Retention under sustained load (issue 20): the same offered load (pgbench writers,
 * 4 clients, Poisson arrivals, `rowsPerTransaction` rows per autocommit insert) for the
 * same time, in arms run one after another on a Postgres cluster of the section's own
 * (scripts/localPostgres.ts, so that its autovacuum workers work for the arm running and
 * for nothing else), each on a fresh outbox in a schema of its own:
 *
 * - no relay: the writers alone (the baseline of their tps);
 * - mark + cleanup: the relay at defaults (marks sent_at), `cleanupOutbox` every
 *   `maintainEveryMs` on a connection of its own with the retention below;
 * - delete mode: the relay with `onPublish: 'delete'`, nothing else;
 * - partition retention: the outbox converted by `partitionOutbox` (range partitions by
 *   id, `partitionSizeIds` each) before the load, the relay at defaults, and
 *   `maintainPartitions` (partitions ahead, and detach + drop of the fully sent ones past
 *   the retention) every `maintainEveryMs` on a connection of its own.
 *
 * Measured per arm (bench/retentionArm.ts): table + index size, dead tuples and autovacuum
 * runs over time, CPU-seconds of the relay process (/proc) and, exactly, of the cluster's
 * processes by kind: the relay's backends, the cleanup connection, the autovacuum workers
 * (bench/postmasterCpu.ts: what the postmaster reaped plus its live children); writers' tps
 * and latency, relay throughput, commit → Kafka ack of probe rows. The load is compressed
 * in time, so is autovacuum's wake-up: the cluster runs with autovacuum_naptime of
 * `naptime` (default 60 s, which a two-minute arm would barely see); every other
 * autovacuum setting is Postgres's default. The cluster has fsync off, as every private
 * cluster of the bench, and no parallel query (max_parallel_workers_per_gather 0), so
 * that no short-lived child but autovacuum workers comes and goes; the section's pool
 * keeps its connections open.
 *
 * "Cleanup CPU" of an arm is what Postgres spends getting rid of rows that are done, the
 * same parts in every arm: the connection that removes them (cleanupOutbox's DELETEs, or
 * maintainPartitions' detach, drop and create; none in delete mode) plus every autovacuum
 * worker of the arm; and, in delete mode, where the relay removes rows in its own
 * statement, its backends' CPU beyond what mark mode's backends spend per row (the
 * mark + cleanup arm's, same load; counted when positive); per 100,000 rows removed.
 */
import pg from 'pg';
import { cleanupOutbox } from '../../src/commands/cleanup.js';
import { maintainPartitions, partitionOutbox } from '../../src/commands/partitions.js';
import { startLocalPostgres } from '../../scripts/localPostgres.js';
import { runArm, type ArmResult, type ArmSpec, type Load } from '../retentionArm.js';
import { atFractions, growth } from '../retentionSampler.js';
import { row, type Row, type SectionResult } from '../report.js';
import { fmt, log } from '../util.js';

const S = '12. retention';

export interface RetentionOptions {
  /** Rows/s offered, and seconds of load per arm. */
  rate: number;
  seconds: number;
  quick: boolean;
}

export interface RetentionData {
  load: Load;
  retention: string;
  naptime: string;
  partitionSizeIds: number;
  /** Partitions maintainPartitions created and dropped in the partition arm. */
  partitions: { created: number; dropped: number };
  arms: ArmResult[];
}

/** CPU-seconds per 100,000 rows. */
const per100k = (cpu: number, rows: number): number => (rows > 0 ? (cpu * 100_000) / rows : NaN);

/** In delete mode, the relay backends' CPU-seconds beyond mark mode's per row (signed); 0 in the other arms. */
export function deleteExtra(arm: ArmResult, markReference: ArmResult | undefined): number {
  if (arm.key !== 'delete' || !markReference) return 0;
  return arm.cpu.relayBackends - (markReference.cpu.relayBackends / markReference.rowsAcked) * arm.rowsAcked;
}

/** Postgres CPU spent getting rid of rows, per 100,000 rows removed (see the header). */
export function cleanupCpu(arm: ArmResult, markReference: ArmResult | undefined): number {
  return per100k(arm.cpu.maintenance + arm.cpu.autovacuum + Math.max(0, deleteExtra(arm, markReference)), arm.rowsRemoved);
}

/** Throws unless every arm ran with the rows it should have: the section checks itself. */
function check(arms: ArmResult[], expected: string[], load: Load, partitions: RetentionData['partitions']): void {
  const problems: string[] = [];
  const ran = arms.map((a) => a.key);
  if (ran.join() !== expected.join()) problems.push(`arms run: ${ran.join(', ')}; expected ${expected.join(', ')}`);
  for (const a of arms) {
    const offered = load.rate * load.seconds;
    if (a.writerRows < 0.5 * offered) problems.push(`${a.key}: the writers committed ${a.writerRows} rows of ${offered} offered`);
    if (a.key !== 'baseline' && a.rowsAcked < a.rowsInserted) problems.push(`${a.key}: ${a.rowsAcked} of ${a.rowsInserted} rows acknowledged`);
    if (a.key !== 'baseline' && a.probes < 10) problems.push(`${a.key}: only ${a.probes} probe rows`);
  }
  const arm = (key: string): ArmResult | undefined => arms.find((a) => a.key === key);
  const baseline = arm('baseline');
  if (baseline && baseline.rowsRemoved !== 0) problems.push(`baseline: ${baseline.rowsRemoved} rows removed without a relay or cleanup`);
  const cleanup = arm('cleanup');
  if (cleanup && (cleanup.maintenanceRuns < 2 || cleanup.rowsRemoved <= 0)) problems.push(`cleanup: ${cleanup.maintenanceRuns} runs removed ${cleanup.rowsRemoved} rows`);
  const del = arm('delete');
  if (del && del.rowsRemoved !== del.rowsInserted) problems.push(`delete: ${del.rowsRemoved} of ${del.rowsInserted} rows gone from the table`);
  const part = arm('partitions');
  if (part && (partitions.dropped < 2 || part.rowsRemoved <= 0)) problems.push(`partitions: ${partitions.dropped} partitions dropped, ${part.rowsRemoved} rows removed`);
  if (problems.length > 0) throw new Error(`${S}: the section did not run as its profile says: ${problems.join('; ')}`);
}

const mib = (bytes: number): string => fmt(bytes / 2 ** 20, 1);

export async function retention(_pool: pg.Pool, o: RetentionOptions): Promise<SectionResult<RetentionData>> {
  const load: Load = o.quick
    ? { rate: o.rate, rowsPerTransaction: 10, seconds: o.seconds, sampleEveryMs: 1_000, maintainEveryMs: 2_000, probeEveryMs: 50 }
    : { rate: o.rate, rowsPerTransaction: 10, seconds: o.seconds, sampleEveryMs: 2_000, maintainEveryMs: 5_000, probeEveryMs: 50 };
  const retentionText = o.quick ? '5s' : '20s';
  const naptime = o.quick ? '5s' : '10s';
  // Several partitions' worth of ids per arm: about 5 s (quick) or 10 s of the offered load each.
  const partitionSizeIds = o.quick ? 5_000 : 40_000;
  const partitions = { created: 0, dropped: 0 };
  const specs: ArmSpec[] = [
    { key: 'baseline', label: 'no relay (baseline)' },
    {
      key: 'cleanup',
      label: 'mark + cleanup',
      relayOptions: {},
      maintain: async ({ client, schema }) => void (await cleanupOutbox({ client, schema, retention: retentionText })),
    },
    { key: 'delete', label: 'delete mode', relayOptions: { onPublish: 'delete' } },
    {
      key: 'partitions',
      label: 'partition retention',
      relayOptions: {},
      setup: async ({ databaseUrl, schema }) => void (await partitionOutbox({ databaseUrl, schema, partitionSizeIds })),
      maintain: async ({ client, schema }) => {
        const r = await maintainPartitions({ client, schema, retention: retentionText, partitionsAhead: 2 });
        partitions.created += r.created.length;
        partitions.dropped += r.dropped.length;
      },
    },
  ];
  const db = await startLocalPostgres({ settings: { autovacuum_naptime: naptime, max_parallel_workers_per_gather: 0 } });
  // Idle connections kept (idleTimeoutMillis 0): a backend that exits is CPU the postmaster meter must tell apart from autovacuum's.
  const pool = new pg.Pool({ connectionString: db.url, max: 4, application_name: 'bench-retention-admin', idleTimeoutMillis: 0 });
  const arms: ArmResult[] = [];
  try {
    for (const [i, spec] of specs.entries()) {
      log(`${S}: arm ${i + 1} of ${specs.length}, ${spec.label}`);
      arms.push(await runArm(pool, db.url, spec, load, i));
    }
  } finally {
    await pool.end();
    await db.destroy();
  }
  const rows: Row[] = [];
  const byKey = (key: string): ArmResult | undefined => arms.find((a) => a.key === key);
  const baseline = byKey('baseline')!;
  const mark = byKey('cleanup');
  const fractions = [0.25, 0.5, 0.75, 1];
  for (const a of arms) {
    const relayed = a.key !== 'baseline';
    rows.push(
      row(
        S,
        `${a.label}: writers (${fmt(load.rate)} rows/s offered for ${load.seconds} s, ${load.rowsPerTransaction} rows per transaction)${relayed ? '; relay; commit → ack' : ''}`,
        `${fmt(a.writersTps)} tps (${fmt(a.writersRowsPerSecond)} rows/s), latency avg ${fmt(a.writersLatencyMs, 2)} ms` +
          (relayed ? `; relay ${fmt(a.relayRowsPerSecond)} rows/s during the load, drained ${fmt(a.drainOutSeconds, 1)} s after it; p50 ${fmt(a.ack.p50, 1)} / p99 ${fmt(a.ack.p99, 1)} ms (${fmt(a.probes)} probes)` : ''),
      ),
    );
    const at = atFractions(a.samples, load.seconds, fractions);
    rows.push(
      row(
        S,
        `${a.label}: table + indexes, MiB at 25 / 50 / 75 / 100 % of the load; growth (peak of the last quarter / of the second)`,
        `${at.map((s) => mib(s.bytes)).join(' / ')}; ${fmt(growth(a.samples, load.seconds), 2)}`,
      ),
    );
    rows.push(row(S, `${a.label}: dead tuples at 25 / 50 / 75 / 100 % of the load; peak`, `${at.map((s) => fmt(s.deadTuples)).join(' / ')}; ${fmt(Math.max(...a.samples.map((s) => s.deadTuples)))}`));
    const c = a.cpu;
    const postgresAll = per100k(c.relayBackends + c.maintenance + c.autovacuum, a.rowsInserted);
    const workers = (a.postgres.exits.autovacuum ?? 0) + (a.postgres.exits.untitled ?? 0);
    const known = new Set(['autovacuum', 'untitled', 'pgbench', 'relay', 'maintenance']);
    const others = Object.entries(a.postgres.exits).filter(([k]) => !known.has(k));
    const shared = (others.length > 0 ? `; other children exited: ${others.map(([k, n]) => `${k} ${fmt(n)}`).join(', ')}` : '') + (a.postgres.mixed > 0 ? ` (${fmt(a.postgres.mixed)} polls where children of different kinds exited together, split by their last ticks)` : '');
    rows.push(
      row(
        S,
        `${a.label}: autovacuum: CPU-s (exact: reaped + running workers), workers exited; runs on the outbox's tables (autovacuum_count); dead tuples at the end`,
        `${fmt(c.autovacuum, 2)} s, ${fmt(workers)} workers${shared}; ${fmt(a.autovacuums)} runs; ${fmt(a.deadTuplesAtEnd)}`,
      ),
    );
    rows.push(
      row(
        S,
        `${a.label}: CPU-s per 100k rows written: relay process, relay backends, cleanup connection, autovacuum; Postgres in all (backends + cleanup + autovacuum)`,
        `${[c.relayProcess, c.relayBackends, c.maintenance, c.autovacuum].map((x) => fmt(per100k(x, a.rowsInserted), 2)).join(', ')}; ${fmt(postgresAll, 2)}`,
      ),
    );
    if (relayed) {
      const extra = a.key === 'delete' ? `, relay backends beyond mark mode's ${fmt(per100k(deleteExtra(a, mark), a.rowsRemoved), 2)} (counted when positive)` : '';
      rows.push(
        row(
          S,
          `${a.label}: cleanup CPU-s per 100k rows removed (${fmt(a.rowsRemoved)} removed): removing connection, autovacuum${a.key === 'delete' ? ', relay backends beyond mark mode' : ''}; in all`,
          `${fmt(per100k(c.maintenance, a.rowsRemoved), 2)}, ${fmt(per100k(c.autovacuum, a.rowsRemoved), 2)}${extra}; ${fmt(cleanupCpu(a, mark), 2)}`,
        ),
      );
    }
  }
  for (const a of arms.filter((x) => x.key !== 'baseline')) {
    const ratio = a.writersTps / baseline.writersTps;
    rows.push(row(S, `writers' tps, ${a.label} / no relay`, fmt(ratio, 2), '≥ 0.95', ratio >= 0.95));
  }
  const del = byKey('delete')!;
  const part = byKey('partitions')!;
  const flat = growth(part.samples, load.seconds);
  rows.push(row(S, `partition retention: table + indexes flat (growth; ${fmt(partitions.dropped)} partitions of ${fmt(partitionSizeIds)} ids dropped, ${fmt(partitions.created)} created)`, fmt(flat, 2), '≤ 1.10', flat <= 1.1));
  const delCleanup = cleanupCpu(del, mark);
  const ratio = cleanupCpu(part, mark) / delCleanup;
  // When delete mode's cleanup costs nothing measurable, the ratio has no finite value: say so rather than fail the run.
  rows.push(row(S, 'cleanup CPU per row, partition retention / delete mode', delCleanup > 0 ? fmt(ratio, 2) : `delete mode's is 0, partition retention's ${fmt(cleanupCpu(part, mark), 2)}`, '≤ 0.2', delCleanup > 0 && ratio <= 0.2));
  const postgresAll = (a: ArmResult): number => per100k(a.cpu.relayBackends + a.cpu.maintenance + a.cpu.autovacuum, a.rowsInserted);
  rows.push(
    row(S, 'Postgres CPU per row in all (relay backends + cleanup connection + autovacuum), partition retention / delete mode; mark + cleanup / delete mode', `${fmt(postgresAll(part) / postgresAll(del), 2)}; ${fmt(postgresAll(mark!) / postgresAll(del), 2)}`),
  );
  rows.push(row(S, 'cleanup CPU per row, mark + cleanup / delete mode', delCleanup > 0 ? fmt(cleanupCpu(mark!, mark) / delCleanup, 2) : `delete mode's is 0, mark + cleanup's ${fmt(cleanupCpu(mark!, mark), 2)}`));
  // After the rows (logged as they are made, for a reader of a failed run): the self-check.
  check(arms, specs.map((s) => s.key), load, partitions);
  return { data: { load, retention: retentionText, naptime, partitionSizeIds, partitions, arms }, rows, plots: plots(arms, load) };
}

function plots(arms: ArmResult[], load: Load): SectionResult['plots'] {
  return [
    {
      file: 'retention-size.svg',
      chart: {
        title: `Outbox table + indexes at ${fmt(load.rate)} rows/s offered`,
        xLabel: 'seconds since the load began',
        yLabel: 'MiB',
        series: arms.map((a) => ({ name: a.label, points: a.samples.map((s) => [s.t, s.bytes / 2 ** 20] as [number, number]) })),
      },
    },
    {
      file: 'retention-dead-tuples.svg',
      chart: {
        title: `Dead tuples at ${fmt(load.rate)} rows/s offered`,
        xLabel: 'seconds since the load began',
        yLabel: 'n_dead_tup',
        series: arms.map((a) => ({ name: a.label, points: a.samples.map((s) => [s.t, s.deadTuples] as [number, number]) })),
      },
    },
  ];
}
