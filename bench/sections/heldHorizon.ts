/**
 * 18. Held horizon (issue 36): what a long transaction elsewhere in the database costs the
 * relay, beside what it costs a plain SKIP LOCKED queue (bench/plainQueue.ts: INSERT →
 * UPDATE → DELETE, publishing to the same broker), in the same run and database.
 *
 * A Postgres cluster of the section's own (scripts/localPostgres.ts) with PgQue's
 * autovacuum settings (autovacuum_vacuum_scale_factor 0.005, autovacuum_naptime 10 s; the
 * shared server of this machine runs with autovacuum off). The systems run one after
 * another (a hold holds the whole cluster's horizon): the relay in mark mode, in delete
 * mode, on a partitioned outbox (its own partition maintenance: partitions ahead, detach
 * and drop past a short retention), and the plain queue. Each runs the timeline of
 * bench/heldHorizonArm.ts under a steady offered load: clean, then each hold of
 * bench/horizonHolds.ts (a REPEATABLE READ reader of another table, one of the outbox, a
 * transaction holding a transaction id), each followed by a window after its release.
 *
 * Targets (issue 36's), for the relay in every mode: at least 0.97 of the offered rate
 * acknowledged while held, the hold's backlog gone within 60 s of its release; held by a
 * transaction id, commit → ack p99 at most 2 x the clean p99 (or 1 s) and at most one
 * warning a minute; on the partitioned outbox held by a reader of the outbox, headroom
 * never below half the clean phase's, and the blocker named (a detach gives up after 30 s,
 * so on holds of 45 s or more); in mark mode, the backends' CPU per row at most 1.3 x the
 * clean phase's.
 */
import pg from 'pg';
import { partitionOutbox } from '../../src/commands/partitions.js';
import { startLocalPostgres } from '../../scripts/localPostgres.js';
import { expectedPhases, runHeldArm, type HeldArmResult, type HeldProfile, type HeldSystem, type Phase } from '../heldHorizonArm.js';
import { HOLD_KINDS, HOLD_LABELS, prepareHolds, type HoldKind } from '../horizonHolds.js';
import { row, type Row, type SectionResult } from '../report.js';
import { fmt, log } from '../util.js';

const S = '18. held horizon';

export interface HeldHorizonOptions {
  rate: number;
  cleanSeconds: number;
  holdSeconds: number;
  afterSeconds: number;
  /** Ids per partition of the partitioned outbox, and how often the relay maintains them. */
  partitionSizeIds: number;
  partitionMaintenanceIntervalMs: number;
  partitionRetention: string;
  /** The systems to run, by key (all four by default). */
  systems?: Array<HeldSystem['key']>;
  /** The holds, in order (all three by default). */
  holds?: HoldKind[];
  /** The relays' Kafka client (default platformatic, the product's default; the tests' second pass runs kafkajs). */
  producer?: 'platformatic' | 'kafkajs';
}

export interface HeldHorizonData {
  profile: HeldProfile;
  settings: Record<string, string>;
  options: HeldHorizonOptions;
  arms: HeldArmResult[];
}

/** The cluster's settings: PgQue's autovacuum, and no parallel query (no worker processes coming and going). */
export const CLUSTER_SETTINGS = { autovacuum_vacuum_scale_factor: '0.005', autovacuum_naptime: '10s', max_parallel_workers_per_gather: '0' };

/** The systems section 18 can run, in the order it runs them. */
export const HELD_SYSTEM_KEYS = ['mark', 'delete', 'partition', 'queue'] as const;
export type HeldSystemKey = (typeof HELD_SYSTEM_KEYS)[number];

export function heldSystems(o: HeldHorizonOptions): HeldSystem[] {
  const producer = o.producer ?? 'platformatic';
  const all: HeldSystem[] = [
    { key: 'mark', label: `relay, mark mode (${producer === 'platformatic' ? 'defaults, ' : ''}${producer})`, relayOptions: { producer } },
    { key: 'delete', label: `relay, delete mode (${producer})`, relayOptions: { producer, onPublish: 'delete' } },
    {
      key: 'partition',
      label: `relay, partitioned outbox (${producer})`,
      relayOptions: { producer, partitionMaintenanceIntervalMs: o.partitionMaintenanceIntervalMs, partitionRetention: o.partitionRetention },
      setup: async ({ databaseUrl, schema }) => void (await partitionOutbox({ databaseUrl, schema, partitionSizeIds: o.partitionSizeIds })),
    },
    { key: 'queue', label: 'plain SKIP LOCKED queue (kafkajs)' },
  ];
  const wanted = o.systems ?? all.map((s) => s.key);
  return all.filter((s) => wanted.includes(s.key));
}

const phaseOf = (arm: HeldArmResult, name: string): Phase => {
  const p = arm.phases.find((x) => x.name === name);
  if (!p) throw new Error(`${S}: ${arm.key} has no phase ${name}`);
  return p;
};
const kept = (p: Phase): number => p.acked / Math.max(1, p.inserted);
const mib = (bytes: number): string => fmt(bytes / 2 ** 20, 1);

/** Throws unless every arm ran its profile: systems, phases, holds in force, rows through. */
export function checkHeldHorizon(arms: HeldArmResult[], systems: HeldSystem[], profile: HeldProfile, producer: string): void {
  const problems: string[] = [];
  const ran = arms.map((a) => a.key).join();
  if (ran !== systems.map((s) => s.key).join()) problems.push(`systems run: ${ran}; expected ${systems.map((s) => s.key).join()}`);
  for (const a of arms) {
    const phases = a.phases.map((p) => p.name).join();
    if (phases !== expectedPhases(profile).join()) problems.push(`${a.key}: phases ${phases}; expected ${expectedPhases(profile).join()}`);
    for (const kind of profile.holds) if (!a.phases.find((p) => p.name === kind)?.holder) problems.push(`${a.key}: no holder recorded for ${kind}`);
    for (const p of a.phases) if (p.probes < 3) problems.push(`${a.key}, ${p.name}: ${p.probes} probe rows`);
    if (a.rowsAcked < a.rowsInserted) problems.push(`${a.key}: ${a.rowsAcked} of ${a.rowsInserted} rows acknowledged`);
    const client = a.key === 'queue' ? 'kafkajs' : producer;
    if (a.ran.client !== client) problems.push(`${a.key}: ran on ${a.ran.client}, labelled ${client}`);
  }
  if (problems.length > 0) throw new Error(`${S}: the section did not run as its profile says: ${problems.join('; ')}`);
}

export async function heldHorizon(_pool: pg.Pool | undefined, o: HeldHorizonOptions): Promise<SectionResult<HeldHorizonData>> {
  const profile: HeldProfile = {
    rate: o.rate,
    rowsPerTransaction: 10,
    cleanSeconds: o.cleanSeconds,
    holdSeconds: o.holdSeconds,
    afterSeconds: o.afterSeconds,
    holds: o.holds ?? HOLD_KINDS,
    sampleEveryMs: 1_000,
    probeEveryMs: 50,
  };
  const systems = heldSystems(o);
  const db = await startLocalPostgres({ settings: CLUSTER_SETTINGS });
  const pool = new pg.Pool({ connectionString: db.url, max: 4, application_name: 'bench-held-admin' });
  const arms: HeldArmResult[] = [];
  let settings: Record<string, string> = {};
  try {
    const { rows } = await pool.query<{ name: string; setting: string }>(
      `SELECT name, setting FROM pg_settings WHERE name IN ('autovacuum', 'autovacuum_vacuum_scale_factor', 'autovacuum_naptime', 'server_version')`,
    );
    settings = Object.fromEntries(rows.map((r) => [r.name, r.setting]));
    if (settings.autovacuum !== 'on' || settings.autovacuum_vacuum_scale_factor !== '0.005' || settings.autovacuum_naptime !== '10') {
      throw new Error(`${S}: the cluster does not run with PgQue's autovacuum settings: ${JSON.stringify(settings)}`);
    }
    await prepareHolds(pool);
    for (const [i, system] of systems.entries()) {
      log(`${S}: arm ${i + 1} of ${systems.length}, ${system.label}`);
      arms.push(await runHeldArm(pool, db.url, system, profile, i));
    }
  } finally {
    await pool.end();
    await db.destroy();
  }
  const rows = heldHorizonRows(arms, profile);
  checkHeldHorizon(arms, systems, profile, o.producer ?? 'platformatic');
  return { data: { profile, settings, options: o, arms }, rows };
}

function heldHorizonRows(arms: HeldArmResult[], profile: HeldProfile): Row[] {
  const rows: Row[] = [];
  const load = `${fmt(profile.rate)} rows/s offered`;
  for (const a of arms) {
    const relay = a.key !== 'queue';
    const clean = phaseOf(a, 'clean');
    const describe = (p: Phase): string =>
      `${fmt(kept(p), 3)} of the offered rate; commit → ack p50 ${fmt(p.ack.p50, 1)} / p99 ${fmt(p.ack.p99, 1)} ms; backends ${fmt(p.backendsPer100k, 2)} CPU-s per 100k rows, process ${fmt(p.processPer100k, 2)}; dead tuples peak ${fmt(p.deadTuplesPeak)}; table ${mib(p.bytesAtStart)} → ${mib(p.bytesAtEnd)} MiB` +
      (p.headroomMin !== undefined ? `; headroom min ${fmt(p.headroomMin)} ids` : '') +
      `; ${fmt(p.warnings.length)} warnings`;
    rows.push(row(S, `${a.label}: clean, ${load} for ${fmt(clean.seconds)} s`, describe(clean), undefined, undefined, [a.ran]));
    for (const kind of profile.holds) {
      const held = phaseOf(a, kind);
      const after = phaseOf(a, `after ${kind}`);
      const what = `${a.label}: held by ${HOLD_LABELS[kind]} for ${fmt(held.seconds)} s`;
      rows.push(row(S, what, describe(held), undefined, undefined, [a.ran]));
      const cpu = held.backendsPer100k / clean.backendsPer100k;
      rows.push(row(S, `${what}: backends' CPU per row, held / clean`, fmt(cpu, 2), a.key === 'mark' ? '≤ 1.3' : undefined, a.key === 'mark' ? cpu <= 1.3 : undefined, [a.ran]));
      if (!relay) {
        rows.push(row(S, `${what}: seconds from the release until the hold's last probe row was acknowledged`, fmt(after.recoverySeconds ?? NaN, 1), undefined, undefined, [a.ran]));
        continue;
      }
      rows.push(row(S, `${what}: share of the offered rate acknowledged while held`, fmt(kept(held), 3), '≥ 0.97', kept(held) >= 0.97, [a.ran]));
      const recovery = after.recoverySeconds ?? NaN;
      rows.push(row(S, `${what}: seconds from the release until the hold's last probe row was acknowledged`, Number.isNaN(recovery) ? `not within the ${fmt(after.seconds)} s after` : fmt(recovery, 1), '≤ 60', recovery <= 60, [a.ran]));
      if (kind === 'xid') {
        const bound = Math.max(2 * clean.ack.p99, 1_000);
        rows.push(row(S, `${what}: commit → ack p99 held, against 2 x the clean p99 (${fmt(clean.ack.p99, 1)} ms) or 1 s`, `${fmt(held.ack.p99, 1)} ms`, `≤ ${fmt(bound, 1)} ms`, held.ack.p99 <= bound, [a.ran]));
        const allowed = Math.max(1, Math.ceil(held.seconds / 60));
        rows.push(row(S, `${what}: warnings logged while held`, fmt(held.warnings.length), `≤ ${fmt(allowed)} (one a minute)`, held.warnings.length <= allowed, [a.ran]));
      }
      if (a.key === 'partition' && kind === 'reader-outbox') {
        const half = (clean.headroomMin ?? NaN) / 2;
        rows.push(row(S, `${what}: fewest ids of headroom while held, against half the clean phase's`, fmt(held.headroomMin ?? NaN), `≥ ${fmt(half)}`, (held.headroomMin ?? NaN) >= half, [a.ran]));
        const named = held.warnings.some((w) => w.blockerPid === held.holder?.pid);
        // A detach gives up after 30 s (src/relay/partitionDetach.ts): a shorter hold never reaches the warning.
        const due = held.seconds >= 45;
        rows.push(row(S, `${what}: a warning named the blocker (pid ${held.holder?.pid})`, named ? 'yes' : 'no', due ? 'yes' : undefined, due ? named : undefined, [a.ran]));
      }
    }
  }
  const queue = arms.find((a) => a.key === 'queue');
  for (const a of arms.filter((x) => x.key !== 'queue')) {
    if (!queue) break;
    for (const kind of profile.holds) {
      const q = phaseOf(queue, kind);
      const r = phaseOf(a, kind);
      rows.push(
        row(
          S,
          `held by ${HOLD_LABELS[kind]}: ${a.label} against the plain queue (kafkajs): dead tuples peak; table growth while held, MiB`,
          `${fmt(r.deadTuplesPeak)} against ${fmt(q.deadTuplesPeak)}; ${mib(r.bytesAtEnd - r.bytesAtStart)} against ${mib(q.bytesAtEnd - q.bytesAtStart)}`,
          undefined,
          undefined,
          [a.ran, queue.ran],
        ),
      );
    }
  }
  return rows;
}
