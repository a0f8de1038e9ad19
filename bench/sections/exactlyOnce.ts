/**
 * 16. Exactly-once: what `delivery: 'exactly-once'` costs against at-least-once, three arms
 * side by side in one run, their order rotating round by round: exactly-once (kafkajs, the
 * only adapter it runs on; 8 workers, one per unit of shards, each batch one Kafka
 * transaction), at-least-once on kafkajs (the same client: the mode's own cost) and
 * at-least-once at the defaults (platformatic: what a deployment gives up by switching).
 *
 * - Drain: a committed, vacuumed backlog drained by a relay process (bench/relayDrain.ts,
 *   as the drain section): rows/s and the relay process's CPU-seconds per 100,000 rows,
 *   medians over the rounds.
 * - Latency: pgbench writers at a steady offered rate (bench/sections/latency.ts), commit →
 *   ack per row, the rounds' rows pooled; beside each relay a bare read_committed reader
 *   (bench/child.ts) for commit → visible to a reader.
 *
 * Targets (the issue's): exactly-once drains at least 0.7 x at-least-once's rows/s, and its
 * commit → ack p99 is at most 2 x at-least-once's; each checked against both at-least-once
 * arms, since the issue names neither adapter.
 */
import type pg from 'pg';
import { name } from '../common.js';
import { relayDrain } from '../relayDrain.js';
import { row, type Row, type SectionResult } from '../report.js';
import type { Series } from '../svg.js';
import { fmt, median, percentileSeries, percentiles, type Percentiles } from '../util.js';
import { latencyAt } from './latency.js';

const SECTION = '16. exactly-once';

export interface ExactlyOnceOptions {
  /** Backlog rows per drain. */
  rows: number;
  /** Rounds of every arm, drains and latency runs; the arms' order rotates each round. */
  rounds: number;
  /** Offered rows/s and seconds of it per arm and round, for the latency runs. */
  rate: number;
  latencySeconds: number;
}

type ArmKey = 'exactlyOnce' | 'kafkajs' | 'default';

interface Arm {
  key: ArmKey;
  label: string;
  /** How bench/child.ts must have recorded every acknowledgement of this arm (its ackedVia). */
  via: 'kafkajs transaction' | 'kafkajs' | 'platformatic';
  /** Relay options for one run: exactly-once takes a fresh transactional-id prefix each time. */
  options(): Record<string, unknown>;
}

const ARMS: Arm[] = [
  {
    key: 'exactlyOnce',
    label: 'exactly-once (kafkajs)',
    via: 'kafkajs transaction',
    // Fresh each run, as the mode asks one prefix per outbox database: no arm shares
    // even the progress topic of another.
    options: () => ({ producer: 'kafkajs', delivery: 'exactly-once', transactionalIdPrefix: name('bench-eos') }),
  },
  { key: 'kafkajs', label: 'at-least-once (kafkajs)', via: 'kafkajs', options: () => ({ producer: 'kafkajs' }) },
  // Named: bench/child.ts hands the relay a kafkajs client, which would otherwise publish.
  { key: 'default', label: 'at-least-once (default, platformatic)', via: 'platformatic', options: () => ({ producer: 'platformatic' }) },
];

/**
 * The arm ran as labelled: every row acknowledged through its client and mode and none
 * through another (a relay handed a kafkajs client and no producer publishes through it;
 * exactly-once rows count at their transaction's commit only).
 */
function checkVia(arm: Arm, ackedVia: Record<string, number>, what: string): void {
  const other = Object.entries(ackedVia).filter(([via, n]) => via !== arm.via && n > 0);
  if (!(ackedVia[arm.via]! > 0) || other.length > 0) throw new Error(`${what}: ${arm.label} acknowledged ${JSON.stringify(ackedVia)}, expected ${arm.via} only`);
}

/** Round r's order: the arms rotated by r, so that each comes first and last in turn. */
function order(r: number): Arm[] {
  return ARMS.map((_, i) => ARMS[(i + r) % ARMS.length]!);
}

export interface ArmDrain {
  rowsPerSecond: number;
  processCpuPer100k: number;
  rounds: Array<{ rowsPerSecond: number; processCpuPer100k: number; sendShare: number; batches: number; peakRss: number }>;
}

export interface ArmLatency {
  rows: number;
  achieved: number[];
  /** Commit → Kafka ack (exactly-once: the transaction's commit answered). */
  ack: Percentiles;
  /** Commit → fetched by the read_committed reader. */
  reader: Percentiles;
}

export interface ExactlyOnceData {
  rows: number;
  rounds: number;
  rate: number;
  drain: Record<ArmKey, ArmDrain>;
  latency: Record<ArmKey, ArmLatency>;
}

const f = (x: Percentiles): string => `p50 ${fmt(x.p50, 1)} / p95 ${fmt(x.p95, 1)} / p99 ${fmt(x.p99, 1)} ms`;

export async function exactlyOnce(pool: pg.Pool, o: ExactlyOnceOptions): Promise<SectionResult<ExactlyOnceData>> {
  const rounds = (): Record<ArmKey, ArmDrain['rounds']> => ({ exactlyOnce: [], kafkajs: [], default: [] });
  const drains = rounds();
  for (let r = 0; r < o.rounds; r++) {
    for (const arm of order(r)) {
      const what = `exactly-once section, drain round ${r + 1}, ${arm.label}`;
      const d = await relayDrain(pool, o.rows, what, arm.options());
      checkVia(arm, d.ackedVia, what);
      // A row acknowledged twice would end the drain's wait before the last row went out.
      if (d.distinctAcked !== o.rows) throw new Error(`${what}: ${d.distinctAcked} distinct rows acknowledged of ${o.rows}`);
      drains[arm.key].push({ rowsPerSecond: d.rowsPerSecond, processCpuPer100k: d.processCpuPer100k, sendShare: d.sendShare, batches: d.batches, peakRss: d.peakRss });
    }
  }
  const drain = Object.fromEntries(
    ARMS.map((a) => [a.key, { rowsPerSecond: median(drains[a.key].map((x) => x.rowsPerSecond)), processCpuPer100k: median(drains[a.key].map((x) => x.processCpuPer100k)), rounds: drains[a.key] }]),
  ) as Record<ArmKey, ArmDrain>;

  const acks: Record<ArmKey, number[]> = { exactlyOnce: [], kafkajs: [], default: [] };
  const reads: Record<ArmKey, number[]> = { exactlyOnce: [], kafkajs: [], default: [] };
  const achieved: Record<ArmKey, number[]> = { exactlyOnce: [], kafkajs: [], default: [] };
  for (let r = 0; r < o.rounds; r++) {
    // Rotated the other way from the drains, so that no arm always runs right after the same one.
    for (const arm of order(o.rounds - r).reverse()) {
      const l = await latencyAt(pool, o.rate, o.latencySeconds, true, arm.options(), 'reader');
      checkVia(arm, l.ackedVia(), `exactly-once section, latency round ${r + 1}`);
      acks[arm.key].push(...l.ackSorted);
      reads[arm.key].push(...l.handlerSorted);
      achieved[arm.key].push(l.achieved);
    }
  }
  const latency = Object.fromEntries(
    ARMS.map((a) => {
      const ack = acks[a.key].sort((x, y) => x - y);
      const read = reads[a.key].sort((x, y) => x - y);
      return [a.key, { rows: ack.length, achieved: achieved[a.key], ack: percentiles(ack), reader: percentiles(read) }];
    }),
  ) as Record<ArmKey, ArmLatency>;

  const each = o.rounds > 1 ? `, median of ${o.rounds}` : '';
  const rows: Row[] = [];
  for (const a of ARMS) {
    const d = drain[a.key];
    rows.push(row(SECTION, `drain ${fmt(o.rows)} rows, ${a.label}${each}`, `${fmt(d.rowsPerSecond)} rows/s; relay process CPU-s per 100k rows ${fmt(d.processCpuPer100k, 2)}`));
  }
  const eos = drain.exactlyOnce;
  for (const base of ['kafkajs', 'default'] as const) {
    const ratio = eos.rowsPerSecond / drain[base].rowsPerSecond;
    const label = ARMS.find((a) => a.key === base)!.label;
    rows.push(row(SECTION, `drain, exactly-once / ${label}: rows/s; relay process CPU-s per row`, `${fmt(ratio, 2)}; ${fmt(eos.processCpuPer100k / drain[base].processCpuPer100k, 2)}`, '≥ 0.7', ratio >= 0.7));
  }

  // Exactly-once's ack is the transaction's commit answered (bench/child.ts records it
  // there), not the records' produce: a read_committed reader sees nothing of a
  // transaction before it commits, so this is the earliest a reader could see the row.
  // Not the moment it does: Kafka answers the commit once the coordinator has logged it,
  // and writes the commit markers that let read_committed fetches past the records
  // after that. The reader rows measure what a reader sees, the fetch's own wait included.
  const achievedOf = (k: ArmKey): string => latency[k].achieved.map((x) => fmt(x)).join(', ');
  for (const a of ARMS) {
    const l = latency[a.key];
    rows.push(
      row(SECTION, `${fmt(o.rate)} rows/s offered (${achievedOf(a.key)} achieved; ${fmt(l.rows)} rows), ${a.label}: commit → Kafka ack${a.key === 'exactlyOnce' ? ' (transaction committed)' : ''}`, f(l.ack)),
      row(SECTION, `${fmt(o.rate)} rows/s offered, ${a.label}: commit → fetched by a read_committed reader`, f(l.reader)),
    );
  }
  for (const base of ['kafkajs', 'default'] as const) {
    const label = ARMS.find((a) => a.key === base)!.label;
    const ratio = latency.exactlyOnce.ack.p99 / latency[base].ack.p99;
    rows.push(
      row(SECTION, `commit → ack p99, exactly-once / ${label}`, fmt(ratio, 2), '≤ 2', ratio <= 2),
      row(SECTION, `commit → read_committed reader p99, exactly-once / ${label}`, fmt(latency.exactlyOnce.reader.p99 / latency[base].reader.p99, 2)),
    );
  }

  const series: Series[] = ARMS.flatMap((a) => [
    { name: `${a.label}: commit → ack`, points: percentileSeries(acks[a.key]) },
    { name: `${a.label}: commit → reader`, points: percentileSeries(reads[a.key]) },
  ]);
  return {
    data: { rows: o.rows, rounds: o.rounds, rate: o.rate, drain, latency },
    rows,
    plots: [{ file: 'exactly-once-latency.svg', chart: { title: `Exactly-once against at-least-once at ${fmt(o.rate)} rows/s offered`, xLabel: 'percentile', yLabel: 'ms', series } }],
  };
}
